"""A holder as Slurm shows it: its state now, its steps told apart, and the program that signals ranks.

:class:`HolderInfo` is what ``squeue`` (or ``sacct``) says of a holder. :func:`list_steps` asks Slurm for the
steps of running jobs and :func:`parse_steps` turns its output into :class:`Step` values, each with a
:class:`StepKind` (an attempt's ranks' step or node step, roach signal's own step, the holder's batch shell,
...). :data:`SIGNAL_PROGRAM` is what :meth:`~roach.launch.hold.holder.Holder.signal` and the holder's own script
run on each node to stop an attempt's ranks. ``roach ls`` reads holders through this module alone.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from roach.errors import RoachError
from roach.model.job_state import JobState
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_duration, parse_int
from roach.scheduler.parse import RS, US

STEP_NODE, STEP_RANKS, STEP_SIGNAL = "roach-node", "roach-ranks", "roach-signal"  # step names; + ":<attempt>"

# Runs on each node as a step of the holder: sends a signal to the ranks of the holder's attempts (or of one
# attempt) and to nothing else. A rank is a process of this user whose arguments include `roach.slurm.run`
# and whose environment has ROACH_INSIDE_HOLDER=<holder> (and ROACH_ATTEMPT=<n>); a process whose parent is
# a rank (a forked data loader) is left to its rank. Arguments: signal name, holder id, attempt or "".
SIGNAL_PROGRAM = r"""set -u
sig="$1" holder="$2" attempt="$3"
declare -A hit=()
for d in /proc/[0-9]*; do
  [ -O "$d" ] || continue
  pid="${d#/proc/}"
  [ "$pid" = "$$" ] && continue
  mapfile -d '' -t argv < "$d/cmdline" 2>/dev/null || continue
  rank=0
  for a in "${argv[@]}"; do [ "$a" = roach.slurm.run ] && rank=1 && break; done
  [ "$rank" = 1 ] || continue
  mapfile -d '' -t envs < "$d/environ" 2>/dev/null || continue
  in_holder=0 in_attempt=0
  for e in "${envs[@]}"; do
    [ "$e" = "ROACH_INSIDE_HOLDER=$holder" ] && in_holder=1
    [ "$e" = "ROACH_ATTEMPT=$attempt" ] && in_attempt=1
  done
  if [ "$in_holder" = 1 ] && { [ -z "$attempt" ] || [ "$in_attempt" = 1 ]; }; then hit[$pid]=1; fi
done
n=0
for pid in "${!hit[@]}"; do
  ppid="$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)"
  [ -n "${hit[${ppid:-0}]:-}" ] && continue
  kill -s "$sig" "$pid" 2>/dev/null && n=$((n + 1))
done
echo "roach: ${SLURMD_NODENAME:-$(hostname)}: sent SIG$sig to $n rank(s) of holder $holder${attempt:+ attempt $attempt}"
"""
SENT = re.compile(r"^roach: (\S+): sent SIG\w+ to (\d+) rank\(s\)", re.M)


# -- the holder --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HolderInfo:
    """What Slurm says of a holder now."""

    job_id: int
    state: JobState
    reason: str | None  # why it is pending
    nodelist: str
    nodes: int
    gpus: int  # in all
    held_s: int  # elapsed since it started: what it has been charged for
    time_limit_s: int | None

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes if self.nodes else 0

    @property
    def time_left_s(self) -> int | None:
        return None if self.time_limit_s is None else max(0, self.time_limit_s - self.held_s)


# -- steps ------------------------------------------------------------------------------------------------
class StepKind(enum.Enum):
    """What a step of a holder is: told by roach's step names, else by its task count."""

    RANKS = "ranks"  # one task per GPU: an attempt's ranks
    NODE = "node"  # one task per node: an attempt's node.sh prepare
    SIGNAL = "signal"  # roach signal's own step
    BATCH = "batch"  # the holder's sleeping shell
    EXTERN = "extern"
    OTHER = "other"  # someone's own srun

    @property
    def is_attempt(self) -> bool:
        """A step of an attempt: another attempt must not start beside it."""
        return self in (StepKind.RANKS, StepKind.NODE)


@dataclass(frozen=True)
class Step:
    """One line of ``squeue -s`` for a holder."""

    holder: int
    step: str  # "3", "batch", "extern"
    name: str
    tasks: int
    nodelist: str
    elapsed_s: int
    state: str  # RUNNING, COMPLETING, ...
    kind: StepKind
    attempt: int | None  # the attempt number in roach's step name

    @property
    def id(self) -> str:
        return f"{self.holder}.{self.step}"

    def describe(self) -> str:
        what = {
            StepKind.RANKS: f"ranks' step ({self.tasks} tasks, one per GPU)",
            StepKind.NODE: f"node step ({self.tasks} task(s), one per node)",
            StepKind.SIGNAL: "roach signal's step",
            StepKind.BATCH: "the holder's sleeping shell",
            StepKind.EXTERN: "extern step",
            StepKind.OTHER: f"not roach's ({self.tasks} tasks)",
        }[self.kind]
        return what + (f" of attempt {self.attempt}" if self.attempt is not None else "")


STEP_FIELDS = ("StepId", "StepName", "NumTasks", "TimeUsed", "StepState", "Nodes")


def steps_format() -> str:
    """The ``squeue -s -O`` argument matching :func:`parse_steps`: US after each field, RS ends a record."""
    return ",".join(f"{f}:{US}" for f in STEP_FIELDS[:-1]) + f",{STEP_FIELDS[-1]}:{RS}"


def classify_step(name: str, step: str, tasks: int, gpus: int, nodes: int) -> tuple[StepKind, int | None]:
    """A step's kind and attempt: roach's names first (``roach-ranks:3``), then Slurm's own steps, then the
    task count (a step with one task per GPU is a ranks' step; one per node, a node step)."""
    base, _, attempt = name.partition(":")
    n = int(attempt) if attempt.isdigit() else None
    by_name = {STEP_RANKS: StepKind.RANKS, STEP_NODE: StepKind.NODE, STEP_SIGNAL: StepKind.SIGNAL}
    if base in by_name:
        return by_name[base], n
    if step in ("batch", "extern"):
        return StepKind(step), None
    if gpus and tasks == gpus:
        return StepKind.RANKS, None
    if nodes and tasks == nodes:
        return StepKind.NODE, None
    return StepKind.OTHER, None


def parse_steps(text: str, gpus: int = 0, nodes: int = 0) -> list[Step]:
    """Output of ``squeue -s --noheader -O <steps_format()>``; ``gpus`` and ``nodes`` are the holder's totals."""
    out = []
    for chunk in text.split(RS):
        chunk = chunk.strip("\n")
        if not chunk.strip():
            continue
        f = chunk.split(US)
        if len(f) != len(STEP_FIELDS):
            raise RoachError(
                f"squeue -s: expected {len(STEP_FIELDS)} fields in {chunk!r}",
                hint="the cluster's Slurm prints a step format roach does not know; report it with this line",
            )
        sid, name, ntasks, used, state, nodelist = (x.strip() for x in f)
        job, _, step = sid.partition(".")
        tasks = parse_int(ntasks, "a task count")
        kind, attempt = classify_step(name, step, tasks, gpus, nodes)
        out.append(
            Step(
                holder=parse_int(job, "a job id"),
                step=step,
                name=name,
                tasks=tasks,
                nodelist=nodelist,
                elapsed_s=parse_duration(used) or 0,
                state=state,
                kind=kind,
                attempt=attempt,
            )
        )
    return out


def list_steps(client: SlurmClient, job_ids: Iterable[int], gpus: int = 0, nodes: int = 0) -> list[Step]:
    """One ``squeue -s`` for the steps of the given jobs (none for a job that is not running)."""
    ids = [str(j) for j in job_ids]
    if not ids:
        return []
    return parse_steps(client.steps_text(ids, steps_format()), gpus, nodes)


def idle_holders(client: SlurmClient, holder_ids: Iterable[int]) -> dict[int, bool]:
    """For each running holder: True when no attempt's step runs in it (one ``squeue -s`` for all). Holders
    that are not running are absent. For ``roach ls`` and ``roach watch``: an idle holder is charged for nothing."""
    ids = list(holder_ids)
    running = {j: True for j in ids}
    seen: set[int] = set()
    for s in list_steps(client, ids):
        seen.add(s.holder)
        if s.kind.is_attempt or s.kind is StepKind.OTHER:
            running[s.holder] = False
    return {j: v for j, v in running.items() if j in seen}
