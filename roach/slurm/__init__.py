"""roach.slurm: run Python functions as Slurm jobs, one rank per GPU, from a pushed commit.

Reference for what a job does, the clone protocol and the read-only rule: ``roach/slurm/README.md``.
"""

from roach.slurm.capabilities import Capabilities
from roach.slurm.cluster import Cluster, get_cluster, known_clusters
from roach.slurm.context import Run
from roach.slurm.hold import Holder, hold
from roach.slurm.job import Job
from roach.slurm.resources import Resources
from roach.slurm.results import NotCompletedError, ResultMissingError, SweepNotCompletedError
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.states import JobState, PendingReason
from roach.slurm.submit import resume, submit
from roach.slurm.sweep import Sweep, sweep
from roach.slurm.transport import LocalTransport, Result, Transport

__all__ = [
    "Capabilities", "Cluster", "Holder", "Job", "JobState", "LocalTransport", "NotCompletedError", "PendingReason",
    "Resources", "Result", "ResultMissingError", "Run", "SlurmClient", "Sweep", "SweepNotCompletedError", "Transport",
    "get_cluster", "hold", "known_clusters", "resume", "submit", "sweep",
]
