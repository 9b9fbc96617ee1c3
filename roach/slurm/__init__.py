"""roach.slurm: run Python functions as Slurm jobs (public API; grows with the submit issue)."""

from roach.slurm.capabilities import Capabilities
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.states import JobState, PendingReason
from roach.slurm.transport import LocalTransport, Result, Transport

__all__ = ["Capabilities", "JobState", "LocalTransport", "PendingReason", "Result", "SlurmClient", "Transport"]
