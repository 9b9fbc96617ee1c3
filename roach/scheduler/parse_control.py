"""What scontrol, sinfo, sacctmgr and sbatch print, parsed: key=value records, the configuration, nodes, association rows, the job id."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from roach.errors import ParseError
from roach.scheduler.fields import parse_gres_gpus, parse_int, parse_time
from roach.scheduler.parse import RS, US, records


def parse_key_values(text: str) -> dict[str, str]:
    """``scontrol show job|node|partition -o`` (one record per line) as ``Key=Value`` pairs.

    Values may contain spaces only in a few known keys (``Reason=``, ``Comment=``); a token without
    ``=`` is glued to the previous value for that reason.
    """
    out: dict[str, str] = {}
    last = None
    for tok in text.split():
        key, sep, val = tok.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", key):
            out[key] = val
            last = key
        elif last is not None:
            out[last] += " " + tok
        else:
            raise ParseError(f"cannot read key=value output {text[:200]!r}")
    return out


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key  = value`` lines after a dated header."""
    out = {}
    for line in text.splitlines():
        key, sep, val = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = val.strip()
    if "SLURM_VERSION" not in out:
        raise ParseError(f"scontrol show config printed no SLURM_VERSION: {text[:300]!r}")
    return out


@dataclass(frozen=True)
class NodeRecord:
    name: str
    state: str
    cpus_alloc: int
    cpus_total: int
    gpus_total: int
    gpus_used: int
    partitions: tuple[str, ...]
    memory_mb: int
    alloc_mem_mb: int

    @property
    def available(self) -> bool:
        """Whether the node runs jobs: ``planned`` is an idle node the backfill holds for a pending job (the ``-``
        suffix says the same of a mixed one), which runs that job and may run others before it."""
        return self.state.rstrip("*~#!%$@^-+").split("+")[0] in {"idle", "mixed", "allocated", "completing", "planned"}

    @property
    def planned(self) -> bool:
        """Whether the backfill holds the node's idle GPUs for a pending job (``planned``, or a ``-`` suffix)."""
        return self.state.startswith("planned") or self.state.rstrip("*~#!%$@^+").endswith("-")


SINFO_FIELDS = ("NodeList", "StateLong", "CPUsState", "Gres", "GresUsed", "Partition", "Memory", "AllocMem")


def sinfo_format() -> str:
    return ",".join(f"{f}:{US}" for f in SINFO_FIELDS[:-1]) + f",{SINFO_FIELDS[-1]}:{RS}"


DEAD_FIELDS = ("NodeList", "StateLong")


def dead_argv() -> list[str]:
    """``sinfo --dead``: the nodes slurmctld marks not responding now (``idle*``), each node's name and state in
    roach's separators. ``--dead`` is in sinfo's manual from 19.05 to 25.05; 22.05 refuses ``-t NOT_RESPONDING``."""
    return ["sinfo", "--dead", "--Node", "--noheader", "-O", f"{DEAD_FIELDS[0]}:{US},{DEAD_FIELDS[1]}:{RS}"]


def parse_dead_nodes(text: str) -> list[str]:
    """What :func:`dead_argv` prints: the nodes slurmctld marks not responding (a ``*`` after the state: ``idle*``,
    ``mixed*``, ``down*``), each once (a node of several partitions has a line in each), in Slurm's order. A line
    whose state has no ``*`` is left out."""
    out: list[str] = []
    for f in records(text, len(DEAD_FIELDS), RS, "sinfo --dead"):
        name, state = (x.strip() for x in f)
        if "*" in state and name not in out:
            out.append(name)
    return out


def parse_sinfo_nodes(text: str) -> list[NodeRecord]:
    """``sinfo -N -h -O <sinfo_format()>``: one record per node and partition, merged per node."""
    by_node: dict[str, NodeRecord] = {}
    for f in records(text, len(SINFO_FIELDS), RS, "sinfo"):
        name, state, cpus, gres, gres_used, part, mem, alloc = (x.strip() for x in f)
        m = re.fullmatch(r"(\d+)/(\d+)/(\d+)/(\d+)", cpus)
        if not m:
            raise ParseError(f"sinfo: cannot read CPU states {cpus!r}", hint="expected A/I/O/T")
        part = part.rstrip("*")
        if name in by_node:
            prev = by_node[name]
            by_node[name] = NodeRecord(**{**prev.__dict__, "partitions": (*prev.partitions, part)})
            continue
        by_node[name] = NodeRecord(
            name=name,
            state=state,
            cpus_alloc=int(m[1]),
            cpus_total=int(m[4]),
            gpus_total=parse_gres_gpus(gres),
            gpus_used=parse_gres_gpus(gres_used),
            partitions=(part,),
            memory_mb=parse_int(mem, "memory"),
            alloc_mem_mb=parse_int(alloc, "allocated memory"),
        )
    return list(by_node.values())


def parse_sacctmgr(text: str, fields_: Sequence[str]) -> list[dict[str, str]]:
    """``sacctmgr -n -P show ... format=<fields>`` rows as dicts."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(fields_):
            raise ParseError(f"sacctmgr: expected {len(fields_)} fields, got {len(parts)} in {line!r}")
        rows.append(dict(zip(fields_, parts)))
    return rows


@dataclass(frozen=True)
class WillRun:
    """What ``sbatch --test-only`` says of a job: when and where it would start, and the running jobs (their raw
    ids) Slurm would preempt to start it there."""

    start: datetime
    nodes: str | None
    partition: str | None
    preempts: tuple[int, ...] = ()


_WILL_RUN = re.compile(
    r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:.*? on nodes (\S+))?(?:.*? in partition (\S+))?"
)
_PREEMPTS = re.compile(r"Preempts: ([\d,]+)")


def parse_will_run(text: str) -> WillRun | None:
    """``sbatch --test-only``'s answer (stderr): ``Job 7 to start at T using N processors on nodes n1 in partition
    gpu``, then ``  Preempts: 5,6`` where starting it there preempts those jobs; None for a refusal."""
    m = _WILL_RUN.search(text)
    start = parse_time(m[1]) if m else None
    if m is None or start is None:
        return None
    p = _PREEMPTS.search(text)
    preempts = tuple(int(j) for j in p[1].split(",") if j) if p else ()
    return WillRun(start, m[2], m[3], preempts)


def parse_sbatch(text: str) -> tuple[int, str | None]:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster`` (possibly after warnings)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    m = re.fullmatch(r"(\d+)(?:;(\S+))?", lines[-1]) if lines else None
    if not m:
        raise ParseError(f"sbatch --parsable printed no job id: {text!r}")
    return int(m[1]), m[2]
