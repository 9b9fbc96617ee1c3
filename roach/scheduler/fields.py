"""Slurm's scalar field forms, parsed: durations, minutes, times, integers, exit codes, memory, TRES and GRES strings."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime

from roach.errors import ParseError

# -- scalar fields ----------------------------------------------------------------------------------
NULLS = {"", "(null)", "N/A", "None", "Unknown", "NONE", "n/a"}


@functools.lru_cache(maxsize=4096)  # immutable results; a queue repeats the same texts
def parse_duration(text: str) -> int | None:
    """Slurm's ``[D-]HH:MM:SS``, ``MM:SS``, ``M`` (minutes) to seconds; ``UNLIMITED`` and nulls to None."""
    t = text.strip()
    if t in NULLS or t.upper() in {"UNLIMITED", "INFINITE", "INVALID", "NOT_SET", "PARTITION_LIMIT"}:
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?(?:\.\d+)?", t)
    if not m:
        raise ParseError(f"cannot read a Slurm duration from {text!r}", hint="expected [D-]HH:MM:SS")
    days, a, b, c = m.groups()
    if c is not None:
        h, mi, s = int(a), int(b), int(c)
    elif b is not None:
        h, mi, s = (int(a), int(b), 0) if days else (0, int(a), int(b))
    else:
        h, mi, s = (int(a), 0, 0) if days else (0, int(a), 0)
    return int(days or 0) * 86400 + h * 3600 + mi * 60 + s


def parse_minutes(text: str) -> int | None:
    """A raw minute count (``TimelimitRaw``) to seconds."""
    t = text.strip()
    if t in NULLS or t.upper() in {"UNLIMITED", "INFINITE", "PARTITION_LIMIT"}:
        return None
    if not t.isdigit():
        raise ParseError(f"cannot read a minute count from {text!r}")
    return int(t) * 60


@functools.lru_cache(maxsize=4096)  # immutable results; a queue repeats the same texts
def parse_time(text: str) -> datetime | None:
    t = text.strip()
    if t in NULLS:
        return None
    try:
        return datetime.fromisoformat(t)
    except ValueError:
        raise ParseError(f"cannot read a Slurm timestamp from {text!r}", hint="expected YYYY-MM-DDTHH:MM:SS") from None


def parse_int(text: str, what: str) -> int:
    t = text.strip()
    if t in NULLS:
        return 0
    if not t.isdigit():
        raise ParseError(f"cannot read {what} from {text!r}")
    return int(t)


def parse_exit_code(text: str) -> tuple[int, int]:
    """sacct's ``ExitCode`` ``"code:signal"`` to a pair of ints."""
    m = re.fullmatch(r"(-?\d+):(\d+)", text.strip())  # a NODE_FAIL step can read -2:0
    if not m:
        raise ParseError(f"cannot read an exit code from {text!r}", hint="expected CODE:SIGNAL such as 0:0")
    return int(m[1]), int(m[2])


MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def parse_memory_mb(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)[cn]?", text.strip())
    if not m:
        raise ParseError(f"cannot read a memory size from {text!r}")
    return int(float(m[1]) * MEM_UNITS[m[2] or "M"])


@dataclass(frozen=True)
class Tres:
    """Trackable resources of a job: counts of CPUs, memory (MiB), nodes and GPUs (by type, "" = untyped)."""

    cpu: int = 0
    mem_mb: int = 0
    nodes: int = 0
    gpus_by_type: tuple[tuple[str, int], ...] = ()
    billing: int = 0

    @functools.cached_property  # read for every job of every round; parse_tres hands out one Tres per text
    def gpus(self) -> int:
        """Total GPUs. Slurm lists a typed count beside the untyped total; never add both."""
        by = dict(self.gpus_by_type)
        return by[""] if "" in by else sum(by.values())


@functools.lru_cache(maxsize=4096)  # immutable results; a queue repeats the same texts
def parse_tres(text: str) -> Tres:
    """A TRES string such as ``cpu=2,mem=1000M,node=2,billing=2,gres/gpu=8,gres/gpu:a100=8``."""
    t = text.strip()
    if t in NULLS:
        return Tres()
    values: dict[str, int] = {"cpu": 0, "mem_mb": 0, "nodes": 0, "billing": 0}
    gpus: dict[str, int] = {}
    for part in t.split(","):
        key, sep, val = part.partition("=")
        if not sep:
            raise ParseError(f"cannot read TRES item {part!r} in {text!r}", hint="expected name=value")
        if key == "mem":
            values["mem_mb"] = parse_memory_mb(val)
        elif key in ("cpu", "billing"):
            values[key] = int(float(val))
        elif key == "node":
            values["nodes"] = int(val)
        elif key.startswith("gres/gpu"):
            gpus[key.partition(":")[2]] = int(val)
        # other TRES (energy, licenses, fs/disk, gres/shard ...) are not needed by roach
    return Tres(gpus_by_type=tuple(sorted(gpus.items())), **values)


def parse_gres_gpus(text: str) -> int:
    """GPUs in a GRES string: ``gpu:4``, ``gres:gpu:4``, ``gpu:a100:2(S:0-1)``, ``gres/gpu=2``, ``gpu:2(IDX:0-1)``."""
    total = 0
    t = text.strip()
    if t in NULLS:
        return 0
    for part in re.split(r",(?![^(]*\))", t):
        part = re.sub(r"\(.*\)$", "", part.strip()).removeprefix("gres:").removeprefix("gres/")
        if not part.startswith("gpu"):
            continue
        m = re.fullmatch(r"gpu(?:[:=](?:[^:=]*[:=])?(\d+))?", part)
        if not m:
            raise ParseError(f"cannot read a GPU count from GRES {text!r}")
        total += int(m[1]) if m[1] else 1
    return total
