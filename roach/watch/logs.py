"""One look per round at every watched run's log, and at the log directories' disk use.

The look is a single command on the cluster (one ``sh -c`` through the transport: over SSH, one remote call
on the multiplexed connection) whatever the number of logs: for each log its size, its mtime and its last
lines of interest (progress, resume, checkpoint, signal and attempt lines); the cluster's clock; and, when
asked, ``du`` of each log directory and ``df`` of its file system. Paths travel as arguments to a fixed
program, never spliced into it. Reading what came back, and deciding whether a log is stalled, is pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from roach.errors import RoachError
from roach.scheduler.transport import Transport

US, RS = "\x1f", "\x1e"
TAIL_BYTES = 262144  # how much of each log's end is searched for the lines of interest
LINES_KEPT = 16

# Lines worth reading: progress ("step N"), the run's own markers, and the batch script's attempt line.
INTEREST = (
    r"step [0-9]|resumed at|fresh start|from the top|checkpoint at|caught_signal|preempted at|"
    r"wall clock at|does not checkpoint|finished; result|roach: attempt [0-9]|roach: env_failed: |"
    r"roach: node_failed: |roach: excluded node |(no space left on device|disk quota exceeded|read-only file system) writing"
)

# $1: how many directories follow for du/df; then the directories; then the logs.
_PROGRAM = (
    r"""
n="$1"; shift
printf 'T\037%s\037%s\036' "$(date +%s)" "$(date +%Y-%m-%dT%H:%M:%S)"
i=0
while [ "$i" -lt "$n" ]; do
  d="$1"; shift; i=$((i + 1))
  used="$(du -sb -- "$d" 2>/dev/null | cut -f1)"
  fs="$(df -P -B1 -- "$d" 2>/dev/null | tail -n 1 | tr -s ' ' | cut -d' ' -f2,4)"
  printf 'D\037%s\037%s\037%s\036' "$d" "$used" "$fs"
done
for p in "$@"; do
  if [ -f "$p" ]; then
    printf 'F\037%s\037%s\037' "$p" "$(stat -c '%s %Y' -- "$p")"
    tail -c TAIL -- "$p" | grep -a -E -i 'INTEREST' | tail -n KEPT | tr -d '\036\037'
    printf '\036'
  else
    printf 'M\037%s\036' "$p"
  fi
done
""".replace("TAIL", str(TAIL_BYTES))
    .replace("INTEREST", INTEREST)
    .replace("KEPT", str(LINES_KEPT))
)


@dataclass(frozen=True)
class LogLook:
    """One log as seen this round (``exists`` False: not there yet, the job has not started)."""

    path: str
    exists: bool
    size: int = 0
    mtime: float = 0.0
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiskLook:
    """A log directory's size and the free space of its file system (None where unreadable)."""

    path: str
    used: int | None
    fs_size: int | None
    fs_free: int | None

    @property
    def free_fraction(self) -> float | None:
        return None if not self.fs_size or self.fs_free is None else self.fs_free / self.fs_size


@dataclass(frozen=True)
class Look:
    """Everything one round's look returned; ``now`` is the cluster's clock (epoch seconds)."""

    now: float
    local_now: str  # the cluster's local time, YYYY-MM-DDTHH:MM:SS (what sbatch --test-only prints in)
    logs: dict[str, LogLook] = field(default_factory=dict)
    disks: dict[str, DiskLook] = field(default_factory=dict)


def look(transport: Transport, logs: Sequence[str], dirs: Sequence[str] = ()) -> Look:
    """One command on the cluster: the logs' sizes, mtimes and lines of interest; du/df of ``dirs``."""
    res = transport.run(["sh", "-c", _PROGRAM, "sh", str(len(dirs)), *dirs, *logs])
    if res.returncode != 0:
        raise RoachError(
            f"looking at the logs on the cluster failed (exit {res.returncode}): {res.stderr.strip()[-500:]}",
            hint="check that the submitting user may read the log root",
        )
    return parse_look(res.stdout)


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def parse_look(text: str) -> Look:
    now, local_now = 0.0, ""
    logs: dict[str, LogLook] = {}
    disks: dict[str, DiskLook] = {}
    for rec in text.split(RS):
        if not rec.strip("\n"):
            continue
        parts = rec.lstrip("\n").split(US)
        tag = parts[0]
        if tag == "T" and len(parts) == 3:
            now, local_now = float(parts[1]), parts[2]
        elif tag == "D" and len(parts) == 4:
            size_free = parts[3].split()
            disks[parts[1]] = DiskLook(
                parts[1],
                _int(parts[2]),
                _int(size_free[0]) if size_free else None,
                _int(size_free[1]) if len(size_free) > 1 else None,
            )
        elif tag == "M" and len(parts) == 2:
            logs[parts[1]] = LogLook(parts[1], False)
        elif tag == "F" and len(parts) == 4:
            size, _, mtime = parts[2].partition(" ")
            lines = tuple(ln for ln in parts[3].splitlines() if ln.strip())
            logs[parts[1]] = LogLook(parts[1], True, _int(size) or 0, float(mtime or 0), lines)
        else:
            raise RoachError(f"cannot read the log look's output record {rec[:300]!r}")
    return Look(now, local_now, logs, disks)


# -- reading a log's lines ----------------------------------------------------------------------------------
_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z")
_STEP = re.compile(r"\bstep (\d+)(?:\s*/\s*(\d+))?", re.IGNORECASE)
_ATTEMPT = re.compile(r"roach: attempt (\d+) of run")
_RESUMED = re.compile(r"resumed at step (\d+)")
_CHECKPOINT = re.compile(r"checkpoint at step (\d+)")
_LEFT = re.compile(r"(?:preempted|wall clock) at step (\d+)")


@dataclass(frozen=True)
class LogFacts:
    """What the lines of interest say about the run."""

    progress: str | None = None  # the last progress line
    step: int | None = None
    steps_total: int | None = None
    progress_times: tuple[float, ...] = ()  # UTC times of the progress lines (roach's own lines carry them)
    attempt: int | None = None  # the last "roach: attempt N" line
    resumed_at: int | None = None  # this attempt resumed at that step
    fresh: bool = False  # this attempt started from step 0
    checkpoints: bool | None = None  # does the run checkpoint? None: not known from these lines
    last_checkpoint: int | None = None
    preempted: bool = False  # this attempt (or the one before it) left on preemption
    wall_clock: bool = False
    progress_points: tuple[tuple[float, int], ...] = ()  # (UTC time, step) of each timed progress line
    env_failed: str | None = None  # node.sh's line: the job's environment could not be built (the job ends, exit 7)
    # each line, oldest first, that says a node could not hold the clone or a rank's write found no room, or that
    # the job was requeued without such a node (node.sh's node_failed and excluded node lines, a rank's disk-full line)
    node_failed: tuple[str, ...] = ()
    left_at: int | None = None  # the step its stop line names ("preempted at step S"): S steps were done
    finished: bool = False  # this attempt ran to its end ("finished; result"), whatever Slurm then made of it
    stepping: bool | None = None  # a progress line after the last attempt line (False: none yet; None: no such line)


_NODE_FAILED = re.compile(
    r"(?<=roach: )(node_failed: .*|excluded node .*)|"
    r"roach rank [0-9]+: .*(no space left on device|disk quota exceeded|read-only file system) writing .*"
)


def line_time(line: str) -> float | None:
    m = _TS.search(line)
    if not m:
        return None
    return datetime.fromisoformat(m[1]).replace(tzinfo=UTC).timestamp()


def _is_progress(line: str) -> bool:
    # "step N" lines, not the markers that name a step ("resumed at step N", "caught_signal TERM at step N") nor
    # Slurm's own ("slurmstepd-n1: error: *** STEP 4360.0 ON n1 CANCELLED AT ...", a job step's id)
    return bool(_STEP.search(line)) and "at step" not in line.lower() and "slurmstepd" not in line


def read_facts(lines: Sequence[str]) -> LogFacts:
    """Read the lines of interest (oldest first) of one log."""
    progress = step = total = attempt = resumed = last_ckpt = left_at = None
    times: list[float] = []
    points: list[tuple[float, int]] = []
    fresh = preempted = wall = finished = False
    checkpoints: bool | None = None
    env_failed: str | None = None
    node_failed: list[str] = []
    stepping: bool | None = None
    for line in lines:
        if "roach: env_failed: " in line:
            env_failed = env_failed or line.strip().removeprefix("roach: ")  # the node's line, which names the tool
        if m := _NODE_FAILED.search(line):
            node_failed.append(m[0].strip())
        if m := _ATTEMPT.search(line):
            attempt, resumed, fresh, finished, stepping = int(m[1]), None, False, False, False
            continue
        if m := _RESUMED.search(line):
            resumed, fresh, checkpoints = int(m[1]), False, True
        if "fresh start: no resume.pt" in line:
            fresh, checkpoints = True, True if checkpoints is None else checkpoints
        if "from the top" in line:
            fresh = True
        if m := _CHECKPOINT.search(line):
            last_ckpt, checkpoints = int(m[1]), True
        if "does not checkpoint" in line:
            checkpoints = False
        if "preempted at step" in line:
            preempted, wall = True, False
        if "wall clock at step" in line:
            wall, preempted = True, False
        if "finished; result" in line:
            finished, preempted, wall = True, False, False
        if m := _LEFT.search(line):
            left_at = int(m[1])
        if _is_progress(line) and (m := _STEP.search(line)):
            progress, step, stepping = line.strip(), int(m[1]), True
            total = int(m[2]) if m[2] else total
            t = line_time(line)
            if t is not None:
                times.append(t)
                points.append((t, step))
    return LogFacts(
        progress,
        step,
        total,
        tuple(times),
        attempt,
        resumed,
        fresh,
        checkpoints,
        last_ckpt,
        preempted,
        wall,
        tuple(points),
        env_failed,
        tuple(node_failed),
        left_at,
        finished,
        stepping,
    )


def gaps_of(times: Sequence[float], after: float | None) -> list[float]:
    """Gaps between consecutive progress times, for the lines newer than ``after`` (seen before)."""
    out = []
    for a, b in zip(times, times[1:]):
        if b > a and (after is None or b > after):
            out.append(b - a)
    return out


@dataclass(frozen=True)
class StallRule:
    """A log is stalled when it has not moved since the last round and its silence is longer than
    ``factor`` times the run's usual (longest recent) gap between progress lines, and at least ``min_s``;
    with no gap known yet, longer than ``unknown_s``."""

    factor: float = 3.0
    min_s: float = 60.0
    unknown_s: float = 900.0

    def threshold(self, gaps: Sequence[float]) -> float:
        if not gaps:
            return max(self.unknown_s, self.min_s)
        return max(self.factor * max(gaps[-20:]), self.min_s)
