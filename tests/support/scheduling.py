"""How `make test` hands the suite to its xdist workers (``--dist loadscope``, scheduled by :class:`SlowFirst`).

A unit of work goes to one worker whole: a module's tests, so its module fixtures are made once; but a test marked
``slow`` is a unit of its own (or of its ``xdist_group``, for slow tests that share a module fixture), so the
longest waits overlap on different labs. The workers sort the collection slow tests first, then the lab modules,
then the rest; units are handed out in that order as workers free up.

Which unit a test belongs to is known only where the tests are collected: the first worker writes it to a file
the controller names (``workerinput``), and the scheduler reads it once every worker has collected.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

SCOPES_KEY = "roach_scopes_file"


def unit_of(item: pytest.Item) -> str:
    """The unit ``item`` is scheduled in: its xdist_group, itself if slow, else its module."""
    group = item.get_closest_marker("xdist_group")
    if group is not None:
        return f"group:{group.args[0] if group.args else group.kwargs.get('name', 'default')}"
    if item.get_closest_marker("slow"):
        return item.nodeid
    return item.nodeid.split("::")[0]


def order(items: list[pytest.Item]) -> None:
    """Slow tests first, then the lab modules' tests, then the rest (a stable sort: module order stays)."""
    lab_modules = {i.nodeid.split("::")[0] for i in items if i.get_closest_marker("lab")}

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.nodeid.split("::")[0] in lab_modules else 2

    items.sort(key=rank)


def scheduled(config: pytest.Config) -> bool:
    """Is this a worker of a run that :class:`SlowFirst` schedules?"""
    return SCOPES_KEY in getattr(config, "workerinput", {})


def write_units(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the first worker: every test's unit, to the file the controller named."""
    workerinput = getattr(config, "workerinput", {})
    if SCOPES_KEY not in workerinput or workerinput.get("workerid") != "gw0":
        return
    path = Path(workerinput[SCOPES_KEY])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({i.nodeid: unit_of(i) for i in items}))
    os.replace(tmp, path)


class SlowFirst(LoadScopeScheduling):
    """LoadScope with the units :func:`unit_of` gives, in the workers' collection order."""

    def __init__(self, config: pytest.Config, log=None, scopes_file: Path | None = None) -> None:
        super().__init__(config, log)
        self.scopes_file = scopes_file
        self._units: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._units is None and self.scopes_file is not None and self.scopes_file.exists():
            self._units = json.loads(self.scopes_file.read_text())
        return (self._units or {}).get(nodeid) or nodeid.split("::")[0]


def scopes_file() -> Path:
    """A fresh file path for one run's units."""
    return Path(tempfile.mkdtemp(prefix="roach-xdist-")) / "units.json"
