"""The lab cluster: a real Slurm on this machine for demos and tests (`roach lab up`).

A lazy facade (PEP 562), like :mod:`roach.slurm`: each name below is imported from its module the first time
it is used, so the lab's site module, which reads only :mod:`roach.lab.saved`, does not load the daemons and
the lab's life cycle (``roach ls`` and ``status`` reach the lab through it). ``roach.lab.overview`` is the module
:mod:`roach.lab.overview` (the lab's state is its function ``status``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names' types, for checkers and editors; at run time each is imported when first used
    from roach.lab.config import LabConfig, LabLayout, PreemptSignalSetting
    from roach.lab.lab import down, up
    from roach.lab.overview import LabStatus, env_lines
    from roach.lab.saved import default_state_dir

# Public name -> the module that defines it.
_EXPORTS = {
    "LabConfig": "roach.lab.config",
    "LabLayout": "roach.lab.config",
    "PreemptSignalSetting": "roach.lab.config",
    "default_state_dir": "roach.lab.saved",
    "down": "roach.lab.lab",
    "up": "roach.lab.lab",
    "LabStatus": "roach.lab.overview",
    "env_lines": "roach.lab.overview",
}

__all__ = [
    "LabConfig",
    "LabLayout",
    "LabStatus",
    "PreemptSignalSetting",
    "default_state_dir",
    "down",
    "env_lines",
    "up",
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
