"""Slurm reads that change only when an administrator reconfigures the cluster (its nodes and partitions),
kept in a local file for a few minutes, so that a submit's guardrail asks for them once per
:data:`MAX_AGE_S` and not every time.

One JSON file per cluster and way of reaching it (``~/.cache/roach/site/``, ``$XDG_CACHE_HOME`` if set):
``{key: [unix time, the command's output]}``. A missing, unreadable or old entry is read from Slurm again;
writes are atomic (temp file, rename), and a failure to write is ignored: the cache only saves calls.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roach._fs import atomic_write

MAX_AGE_S = 600.0


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "roach" / "site"


@dataclass
class SiteCache:
    """The cached reads of one cluster, as one user reaches it (``where`` names it: cluster, alias, SLURM_CONF)."""

    where: str
    max_age_s: float = MAX_AGE_S
    directory: Path = field(default_factory=cache_dir)
    clock: Callable[[], float] = time.time

    @property
    def path(self) -> Path:
        # a name, not a secret: two wheres that shared one would only take turns (a file names its where)
        where = self.where.encode()
        digest = f"{zlib.crc32(where):08x}{zlib.adler32(where):08x}"
        return self.directory / f"{digest}.json"

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("where") == self.where else {}

    def get(self, key: str) -> str | None:
        entry = self._load().get(key)
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)):
            return None
        at, text = entry
        return text if 0 <= self.clock() - float(at) <= self.max_age_s else None

    def put(self, key: str, text: str) -> None:
        data = self._load() or {"where": self.where}
        data[key] = [self.clock(), text]
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data))
        except OSError:
            pass  # a read-only home: every submit asks Slurm, as without a cache
