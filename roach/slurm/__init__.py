"""roach.slurm: run Python functions as Slurm jobs, one rank per GPU, from a pushed commit.

Reference for what a job does, the clone protocol and the read-only rule: ``roach/slurm/README.md``.

A lazy facade (PEP 562): each name below is imported from its module the first time it is used, so
importing ``roach.slurm`` loads nothing else. That keeps a rank (``python -m roach.slurm.run``, which imports
this package first) to the runtime layer, ``roach/runtime/``, the only roach code shipped to the cluster.
"""

from __future__ import annotations

import importlib
import sys
import types

# Public name -> the module that defines it.
_EXPORTS = {
    "Capabilities": "roach.slurm.capabilities",
    "Cluster": "roach.slurm.cluster", "get_cluster": "roach.slurm.cluster", "known_clusters": "roach.slurm.cluster",
    "Run": "roach.runtime.context",
    "Holder": "roach.slurm.hold", "hold": "roach.slurm.hold",
    "Job": "roach.slurm.job",
    "Resources": "roach.slurm.resources",
    "NotCompletedError": "roach.slurm.results", "ResultMissingError": "roach.slurm.results",
    "SweepNotCompletedError": "roach.slurm.results",
    "SlurmClient": "roach.slurm.slurmcli",
    "JobState": "roach.model.job_state", "PendingReason": "roach.slurm.states",
    "resume": "roach.slurm.submit", "submit": "roach.slurm.submit",
    "Sweep": "roach.slurm.sweep", "sweep": "roach.slurm.sweep",
    "LocalTransport": "roach.slurm.transport", "Result": "roach.slurm.transport", "Transport": "roach.slurm.transport",
}

__all__ = [
    "Capabilities", "Cluster", "Holder", "Job", "JobState", "LocalTransport", "NotCompletedError", "PendingReason",
    "Resources", "Result", "ResultMissingError", "Run", "SlurmClient", "Sweep", "SweepNotCompletedError", "Transport",
    "get_cluster", "hold", "known_clusters", "resume", "submit", "sweep",
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


class _Facade(types.ModuleType):
    """Keeps ``roach.slurm.submit`` (and ``.sweep``, ``.hold``) the function, as the eager package had it.

    Importing the submodule ``roach.slurm.submit`` binds it as the package's attribute ``submit``, which would
    hide the function of the same name from ``from roach.slurm import submit``. The import system's binding of
    a submodule over an exported name is dropped here; the submodule stays in ``sys.modules``."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade
