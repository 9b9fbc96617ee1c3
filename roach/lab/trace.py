"""Real clusters' job traces, read as other people's load for the lab (`roach lab load`): :func:`read_trace`
reads one, :func:`plan_load` picks and scales the jobs to play.

Formats (``../shared/traces/README.md`` gives their provenance and columns):

- ``swf``: the Standard Workload Format (the Parallel Workloads Archive's; the KTH SP2 log): 18 fields a line,
  ``;`` comments. A job's processors are played as GPUs.
- ``gpu-csv``: Helios's and Philly's CSV (``u_id,user,gpu_num,cpu_num,node_num,interval,run_time,...``): each
  job's submission is ``interval`` seconds after the previous one's.
- ``alibaba``: Alibaba's 2023 GPU trace (``name,...,num_gpu,...,qos,pod_phase,creation_time,deletion_time,
  scheduled_time``): a pod never scheduled never ran and is not played; its QoS class picks the job's QOS.

Only GPU jobs are played: a job of no GPU (a CPU job, a CPU pod) is skipped, as are jobs that never ran.
"""

from __future__ import annotations

import csv
import enum
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.errors import UsageError


class TraceFormat(enum.Enum):
    SWF = "swf"
    GPU_CSV = "gpu-csv"
    ALIBABA = "alibaba"


# A trace's QoS class -> the lab's QOS (Alibaba's classes: Guaranteed and latency-sensitive pods are served
# first, best-effort ones may be evicted). A trace without classes plays every job at the default QOS.
QOS_OF_CLASS = {"Guaranteed": "high", "LS": "normal", "Burstable": "normal", "BE": "low"}
DEFAULT_QOS = "normal"
LIMIT_FACTOR = 2  # a job's time limit where the trace has no requested time: this many times its run
MIN_RUN_S = 1.0  # a run scaled under a second is played as one: Slurm counts time in whole seconds


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace, in the trace's own seconds."""

    line: int  # where it is in the file (1-based)
    submit_s: float
    run_s: float
    gpus: int
    nodes: int  # as the trace asked (1 where it does not say)
    user: str
    requested_s: float | None = None  # the time limit it asked for, where the trace has one
    qos_class: str | None = None


class TraceError(UsageError):
    """A line of a trace that cannot be read: its number and why (exit 2, before anything is queued)."""


def detect(path: Path) -> TraceFormat:
    """The format of ``path`` from its name and first line."""
    if path.suffix == ".swf":
        return TraceFormat.SWF
    with path.open(newline="") as f:
        head = f.readline()
    if head.startswith("u_id,user,gpu_num"):
        return TraceFormat.GPU_CSV
    if head.startswith("name,cpu_milli,memory_mib,num_gpu"):
        return TraceFormat.ALIBABA
    raise UsageError(
        f"{path}: not a trace roach reads (its first line: {head.strip()[:80]!r})",
        hint=f"give --format, one of: {', '.join(f.value for f in TraceFormat)}",
    )


def read_trace(path: Path, fmt: TraceFormat | None = None) -> list[TraceJob]:
    """Every job of the trace at ``path`` that ran on GPUs, in submission order."""
    fmt = fmt or detect(path)
    with path.open(newline="") as f:
        lines = f.read().splitlines()
    jobs = {TraceFormat.SWF: _swf, TraceFormat.GPU_CSV: _gpu_csv, TraceFormat.ALIBABA: _alibaba}[fmt](lines, path)
    return sorted(jobs, key=lambda j: (j.submit_s, j.line))


def _num(text: str, what: str, line: int, path: Path) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path} line {line}: {what} {text!r} is not a number") from None
    if math.isnan(value) or math.isinf(value):
        raise TraceError(f"{path} line {line}: {what} {text!r} is not a number")
    return value


def _swf(lines: Sequence[str], path: Path) -> Iterable[TraceJob]:
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith(";"):
            continue
        f = text.split()
        if len(f) != 18:
            raise TraceError(f"{path} line {i}: {len(f)} fields, SWF has 18")
        submit, run = _num(f[1], "submit time", i, path), _num(f[3], "run time", i, path)
        procs = int(_num(f[4], "allocated processors", i, path)) or int(_num(f[7], "requested processors", i, path))
        req = _num(f[8], "requested time", i, path)
        if run > 0 and procs > 0:
            yield TraceJob(i, submit, run, procs, 1, f[11], req if req > 0 else None)


def _rows(lines: Sequence[str], path: Path, header: str) -> Iterable[tuple[int, dict[str, str]]]:
    if not lines or not lines[0].startswith(header):
        raise TraceError(f"{path} line 1: the header is not {header}...")
    names = lines[0].split(",")
    for i, row in enumerate(csv.reader(lines[1:]), 2):
        if not row:
            continue
        if len(row) != len(names):
            raise TraceError(f"{path} line {i}: {len(row)} fields, the header names {len(names)}")
        yield i, dict(zip(names, row))


def _gpu_csv(lines: Sequence[str], path: Path) -> Iterable[TraceJob]:
    at = 0.0
    for i, r in _rows(lines, path, "u_id,user,gpu_num"):
        at += _num(r["interval"], "interval", i, path)
        run, gpus = _num(r["run_time"], "run_time", i, path), int(_num(r["gpu_num"], "gpu_num", i, path))
        nodes = max(1, int(_num(r["node_num"], "node_num", i, path)))
        if run > 0 and gpus > 0:
            yield TraceJob(i, at, run, gpus, nodes, r["user"])


def _alibaba(lines: Sequence[str], path: Path) -> Iterable[TraceJob]:
    for i, r in _rows(lines, path, "name,cpu_milli,memory_mib,num_gpu"):
        gpus = int(_num(r["num_gpu"], "num_gpu", i, path))
        if not r["scheduled_time"] or gpus <= 0:
            continue  # never scheduled (it did not run), or a CPU pod
        submit = _num(r["creation_time"], "creation_time", i, path)
        run = _num(r["deletion_time"], "deletion_time", i, path) - _num(r["scheduled_time"], "scheduled_time", i, path)
        if run > 0:
            yield TraceJob(i, submit, run, gpus, 1, r["name"].rsplit("-", 1)[0], None, r["qos"] or None)


@dataclass(frozen=True)
class Played:
    """One job as the load plays it on the lab."""

    line: int  # its line in the trace
    at_s: float  # seconds after the load starts
    run_s: float
    nodes: int
    gpus_per_node: int
    user: int  # which of the load's users (0-based)
    qos: str
    time_min: int  # its time limit, whole minutes

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Lab:
    """The part of the lab a load is shaped to: its nodes and GPUs per node."""

    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def plan_load(
    jobs: Sequence[TraceJob],
    lab: Lab,
    *,
    offset_s: float = 0.0,
    speed: float = 1.0,
    load: float = 0.9,
    users: int = 4,
    seed: int = 0,
) -> list[Played]:
    """The jobs to play from ``offset_s`` of the trace on: those running then (at once, with what is left of their
    run), then those submitted after; time divided by ``speed``, jobs sampled (``seed``) so that the GPUs they keep
    busy average ``load`` of the lab's, each job's size and length kept (a job larger than the whole lab could never
    run there and is not played), the trace's users spread over ``users`` lab users."""
    if speed <= 0 or not 0 < load <= 4 or users < 1:
        raise UsageError("--speed must be > 0, --load in (0, 4], --users >= 1")
    # the jobs running at the offset start at once with what is left of their run, so the lab starts as the
    # cluster was then (as if each started when submitted: Helios and Philly record no wait), then the arrivals
    window = [j for j in jobs if (j.submit_s >= offset_s or j.submit_s + j.run_s > offset_s) and j.gpus <= lab.gpus]
    if not [j for j in window if j.submit_s >= offset_s]:
        raise UsageError(
            f"no job of the trace is submitted at or after offset {offset_s:g} s", hint="give a smaller --offset"
        )
    span = max(window[-1].submit_s - offset_s, 1.0)
    offered = sum(j.gpus * _left(j, offset_s) for j in window) / span  # GPUs busy on average
    keep = min(1.0, load * lab.gpus / offered)
    rng = random.Random(seed)
    owner = {u: n % users for n, u in enumerate(dict.fromkeys(j.user for j in window))}
    out = []
    for j in window:
        if rng.random() >= keep:
            continue
        gpus = j.gpus
        nodes = max(min(j.nodes, lab.nodes), math.ceil(gpus / lab.gpus_per_node))
        run = max(MIN_RUN_S, _left(j, offset_s) / speed)
        limit = j.requested_s / speed if j.requested_s else LIMIT_FACTOR * run
        qos = QOS_OF_CLASS.get(j.qos_class or "", DEFAULT_QOS)
        at = max(0.0, j.submit_s - offset_s) / speed
        played = Played(
            j.line, at, run, nodes, math.ceil(gpus / nodes), owner[j.user], qos, max(1, math.ceil(limit / 60))
        )
        out.append(played)
    return sorted(out, key=lambda p: (p.at_s, p.line))


def _left(j: TraceJob, offset_s: float) -> float:
    """What is left of ``j``'s run at ``offset_s`` (all of it when it is submitted after)."""
    return j.run_s - max(0.0, offset_s - j.submit_s)
