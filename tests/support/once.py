"""A value the suite's workers compute once between them: the first to claim it computes it, the rest wait.

The value is a JSON file in the run's temporary directory, which pytest-xdist's workers share (the parent of each
worker's basetemp); a flock beside it says who is computing it."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import IO, Any

import pytest

from roach._fs import atomic_write


class Once:
    """One named value of this run: ``claim()`` it to compute it yourself, ``value()`` to get it either way."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, name: str):
        base = tmp_path_factory.getbasetemp()  # a worker's is popen-gwN inside the run's; a serial run's is the run's
        run_dir = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        self.path = run_dir / f"once-{name}.json"
        self._lock_path = self.path.with_suffix(".lock")
        self._held: IO[str] | None = None

    def claim(self) -> bool:
        """True when no one else is computing the value nor has it: this process computes it, holding the lock."""
        f = open(self._lock_path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        if self.path.exists():
            f.close()
            return False
        self._held = f
        return True

    def value(self, compute: Callable[[], Any]) -> Any:
        """The value: computed here when claimed (or when its claimer gave up without it), else read once ready."""
        if self._held is None:
            with open(self._lock_path, "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                if self.path.exists():
                    return json.loads(self.path.read_text())
                return self._publish(compute())
        try:
            return self._publish(compute())
        finally:
            self.release()

    def release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    def _publish(self, value: Any) -> Any:
        atomic_write(self.path, json.dumps(value))
        return value
