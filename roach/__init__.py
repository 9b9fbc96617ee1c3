"""roach: run Python functions as resumable Slurm jobs on named clusters, and watch them."""

__version__ = "0.1.0"
