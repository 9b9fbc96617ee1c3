"""roach.slurm: run Python functions as Slurm jobs, one rank per GPU, from a pushed commit.

Reference for what a job does, the clone protocol and the read-only rule: ``roach/slurm/README.md``.

A lazy facade (PEP 562): each name below is imported from its module the first time it is used, so
importing ``roach.slurm`` loads nothing else. That keeps a rank (``python -m roach.slurm.run``, which imports
this package first) to the runtime layer, ``roach/runtime/``, the only roach code shipped to the cluster.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names' types, for checkers and editors; at run time each is imported when first used
    from roach.fleet.cluster import Cluster, known_clusters
    from roach.fleet.userconfig import get_cluster
    from roach.launch.hold.holder import Holder, InsideJob
    from roach.launch.hold.start import hold
    from roach.launch.job import Job
    from roach.launch.options import Options, SubmitFields
    from roach.launch.submit import resume, submit
    from roach.launch.sweep import Sweep, sweep
    from roach.model.job_state import JobState
    from roach.model.resources import Resources
    from roach.model.states import PendingReason
    from roach.ops.report import Report, report
    from roach.records.results import NotCompletedError, ResultMissingError, SweepNotCompletedError
    from roach.runtime.context import Run
    from roach.scheduler.capabilities import Capabilities
    from roach.scheduler.client import SlurmClient
    from roach.scheduler.mock_transport import MockTransport
    from roach.scheduler.transport import LocalTransport, Result, Transport

# Public name -> the module that defines it.
_EXPORTS = {
    "Capabilities": "roach.scheduler.capabilities",
    "Cluster": "roach.fleet.cluster",
    "known_clusters": "roach.fleet.cluster",
    "get_cluster": "roach.fleet.userconfig",
    "Run": "roach.runtime.context",
    "Holder": "roach.launch.hold.holder",
    "hold": "roach.launch.hold.start",
    "Job": "roach.launch.job",
    "InsideJob": "roach.launch.hold.holder",
    "Options": "roach.launch.options",
    "SubmitFields": "roach.launch.options",
    "Resources": "roach.model.resources",
    "NotCompletedError": "roach.records.results",
    "ResultMissingError": "roach.records.results",
    "SweepNotCompletedError": "roach.records.results",
    "SlurmClient": "roach.scheduler.client",
    "JobState": "roach.model.job_state",
    "PendingReason": "roach.model.states",
    "Report": "roach.ops.report",
    "report": "roach.ops.report",
    "resume": "roach.launch.submit",
    "submit": "roach.launch.submit",
    "Sweep": "roach.launch.sweep",
    "sweep": "roach.launch.sweep",
    "LocalTransport": "roach.scheduler.transport",
    "Result": "roach.scheduler.transport",
    "Transport": "roach.scheduler.transport",
    "MockTransport": "roach.scheduler.mock_transport",
}

__all__ = [
    "Capabilities",
    "Cluster",
    "Holder",
    "InsideJob",
    "Job",
    "JobState",
    "LocalTransport",
    "MockTransport",
    "NotCompletedError",
    "Options",
    "PendingReason",
    "Report",
    "Resources",
    "Result",
    "ResultMissingError",
    "Run",
    "SlurmClient",
    "SubmitFields",
    "Sweep",
    "SweepNotCompletedError",
    "Transport",
    "get_cluster",
    "hold",
    "known_clusters",
    "report",
    "resume",
    "submit",
    "sweep",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
