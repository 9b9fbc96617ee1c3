"""roach's benchmark suite: roach beside raw ``sbatch`` and submitit on the lab cluster.

Run it with ``python -m bench`` (``--help`` lists the benchmarks and their sizes). Nothing here runs at
import time; the job functions the benchmarks submit live in :mod:`bench.jobfns`.
"""
