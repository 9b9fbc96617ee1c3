"""What a run's log says of each of its attempts: the step it started at, the step it reached, and when.

A run's log (``--open-mode=append``) holds every attempt of its job, each opened by the batch script's line
``roach: attempt N of run RUN: job J on NODES (restart count R) at TIME``. Rank 0's lines then say where the
attempt started (``resumed at step N``, ``fresh start``, ``... from the top``), its progress (``step K``: step K
is in flight, so K steps are done), its checkpoints (``checkpoint at step C``: the next step is C) and where it
stopped (``preempted at step S``, ``wall clock at step S``: S steps done). Pure: the text in, the facts out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum

#: The lines :func:`read_attempts` reads (an ERE: the remote grep keeps only these): the attempt lines and rank 0's
#: own lines that name a step or where an attempt started or ended. A function's own ``run.log`` lines are left out
#: (one a step would make the read grow with the run); roach's progress lines are about 20 per attempt.
INTEREST = (
    r"roach: attempt [0-9]+ of run |"
    r"roach rank 0: (step [0-9]+(/[0-9]+)?$|.* at step [0-9]+|fresh start|.*from the top|finished; result)"
)
_INTEREST = re.compile(INTEREST)

_ATTEMPT = re.compile(r"roach: attempt (\d+) of run \S+: job (\d+) on (\S+) \(restart count (\d+)\)")
_INSIDE = re.compile(r"roach: attempt (\d+) of run \S+: inside holder (\d+) on (\S+)")
_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z")
_RESUMED = re.compile(r"resumed at step (\d+)")
_AT_STEP = re.compile(r"\bat step (\d+)")
_PROGRESS = re.compile(r"\bstep (\d+)(?:\s*/\s*(\d+))?")
_TOTAL = re.compile(r"\bstep \d+\s*/\s*(\d+)")


class LogStop(Enum):
    """How an attempt left, as its own lines say (NONE: no such line: it ended otherwise, or still runs)."""

    PREEMPTED = "preempted"
    WALL_CLOCK = "wall_clock"
    CANCELLED = "cancelled"  # TERM without preemption
    FINISHED = "finished"
    NONE = "none"


@dataclass
class AttemptLog:
    """One attempt as its log lines tell it. ``end_step``: how many steps were done when it left (a lower
    bound where it died without a line saying so: its last logged step)."""

    job_id: int  # Slurm's job id, or the holder's
    restart: int  # its restart count, or its attempt number inside the holder
    nodes: str
    start_step: int = 0
    end_step: int = 0
    total: int | None = None
    first_step_at: float | None = None  # UTC epoch of its first progress line
    points: list[tuple[float, int]] = field(default_factory=list)  # (UTC epoch, step in flight)
    checkpoints: list[int] = field(default_factory=list)
    stop: LogStop = LogStop.NONE

    def reached_at(self, step: int) -> float | None:
        """When this attempt first had ``step`` in flight or done (from its progress lines), None if never seen."""
        return next((t for t, s in self.points if s >= step), None)


def line_time(line: str) -> float | None:
    m = _TS.search(line)
    return None if m is None else datetime.fromisoformat(m[1]).replace(tzinfo=UTC).timestamp()


def read_attempts(lines: Sequence[str]) -> dict[tuple[int, int], AttemptLog]:
    """Each attempt's facts by (Slurm's job id as the attempt saw it, restart count); an attempt inside a holder
    by (the holder's id, its attempt number)."""
    out: dict[tuple[int, int], AttemptLog] = {}
    cur: AttemptLog | None = None
    for line in lines:
        if not _INTEREST.search(line):
            continue
        if m := _ATTEMPT.search(line):
            cur = AttemptLog(int(m[2]), int(m[4]), m[3])
            out[(cur.job_id, cur.restart)] = cur
            continue
        if m := _INSIDE.search(line):
            cur = AttemptLog(int(m[2]), int(m[1]), m[3])
            out[(cur.job_id, cur.restart)] = cur
            continue
        if cur is None or "roach rank 0: " not in line:
            continue
        _read_line(cur, line.split("roach rank 0: ", 1)[1], line_time(line))
    return out


def _read_line(a: AttemptLog, text: str, t: float | None) -> None:
    if m := _RESUMED.search(text):
        a.start_step = a.end_step = int(m[1])
        return
    if text.startswith("fresh start") or "from the top" in text:
        a.start_step = a.end_step = 0
        return
    if text.startswith("checkpoint at step"):
        c = int(text.split()[3].rstrip(":"))
        a.checkpoints.append(c)
        a.end_step = max(a.end_step, c)
        return
    if m := _AT_STEP.search(text):  # a stop line: "preempted at step S (...)", "caught_signal USR1 at step K"
        a.end_step = max(a.end_step, int(m[1]))
        if text.startswith("preempted at step"):  # roach's requeue, or Slurm's already ("... Slurm requeued")
            a.stop = LogStop.PREEMPTED
        elif text.startswith("wall clock at step"):
            a.stop = LogStop.WALL_CLOCK
        elif text.startswith("TERM at step"):
            a.stop = LogStop.CANCELLED
        return
    if text.startswith("finished; result"):
        a.stop = LogStop.FINISHED
        a.end_step = max(a.end_step, a.total or 0, (a.points[-1][1] + 1) if a.points else 0)
        return
    if m := _PROGRESS.search(text):
        step = int(m[1])
        a.total = int(m[2]) if m[2] else a.total
        a.end_step = max(a.end_step, step)
        if t is not None:
            a.first_step_at = t if a.first_step_at is None else a.first_step_at
            a.points.append((t, step))
