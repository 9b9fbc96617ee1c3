"""What runs returned, or why they did not complete: :meth:`Job.result` and :meth:`Sweep.results`.

Rank 0 of a run that completes writes its function's return value into the run directory: ``result.json``
when it is JSON (so a tuple comes back a list, a dict's keys strings), else ``result.pkl``. A run that did
not complete gets a :class:`NotCompletedError` instead: its final state and the failing rank's traceback,
read from its log (``srun --label`` prefixes each line with the rank: ``1: Traceback ...``).

The files live on the cluster, which may be a login host over SSH: they are read through its transport,
many runs' files in one remote call (base64, so a pickle's bytes survive the text transport).
"""

from __future__ import annotations

import base64
import binascii
import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from roach.errors import RoachError
from roach.model.job_state import JobState
from roach.records.error_line import failing_traceback
from roach.scheduler.clusterfs import ClusterFS

JOB_NOT_COMPLETED = 6  # exit code, as `roach submit --wait` and `roach watch` use it
RESULT_MISSING = 7  # exit code: something required is missing (here: a completed run's result file)
LOG_TAIL_LINES = 2000  # of a failed run's log read for its traceback: the end of the last attempt
CONTEXT_LINES = 10  # the log's last lines an error carries when no rank printed a traceback

# Reads each path named on stdin (one per line): "-" when missing, "!" when unreadable, else its bytes
# (all of them, or its last $1 lines) in base64 on one line. stdin, not argv: a sweep of thousands of runs.
_READ_MANY = (
    "while IFS= read -r p; do "
    'if [ ! -e "$p" ]; then echo -; elif [ ! -r "$p" ] || [ ! -f "$p" ]; then echo "!"; '
    'elif [ -n "$1" ]; then tail -n "$1" -- "$p" | base64 | tr -d "\\n"; echo; '
    'else base64 < "$p" | tr -d "\\n"; echo; fi; done'
)


class NotCompletedError(RoachError):
    """A run ended other than COMPLETED: its final ``state``, the failing ``rank`` (None when no rank raised)
    and its ``traceback`` lines, and the ``log_path`` to read (``log_tail``: its last lines when no rank
    printed a traceback: a timeout, a cancel, a node that failed)."""

    exit_code = JOB_NOT_COMPLETED

    def __init__(
        self,
        what: str,
        *,
        run_id: str,
        state: JobState,
        state_text: str,
        log_path: str,
        rank: int | None,
        traceback: tuple[str, ...],
        log_tail: tuple[str, ...] = (),
    ):
        self.run_id, self.state, self.state_text, self.log_path = run_id, state, state_text, log_path
        self.rank, self.traceback, self.log_tail = rank, traceback, log_tail
        if traceback:
            detail = f"; rank {rank} raised {traceback[-1].strip()}\n" + "\n".join(f"    {ln}" for ln in traceback)
        elif log_tail:
            detail = "; no rank raised. The log ends:\n" + "\n".join(f"    {ln}" for ln in log_tail)
        else:
            detail = "; its log is empty or missing"
        advice = _ADVICE.get(state, "")
        super().__init__(
            f"{what} did not complete: {state_text}{detail}",
            hint=f"{advice}read its log: roach logs {run_id} ({log_path})",
        )


# What to do about an end that no traceback explains: Slurm's state says what stopped the run.
_ADVICE = {
    JobState.OUT_OF_MEMORY: "it used more memory than it asked for (Slurm's cgroup killed it): resubmit with more "
    "(Resources(mem=...), --resources with mem) or use less; ",
    JobState.TIMEOUT: "it reached its time limit inside a step: give it more time (Resources(time=...)) or "
    "checkpoint more often; ",
    JobState.NODE_FAIL: "its node failed: `roach resume` continues it from its last checkpoint; ",
}


class SweepNotCompletedError(RoachError):
    """Some runs of a sweep did not complete: ``failures`` maps each one's grid index to its error."""

    exit_code = JOB_NOT_COMPLETED

    def __init__(self, sweep_id: str, total: int, failures: dict[int, NotCompletedError]):
        self.sweep_id, self.failures = sweep_id, failures
        first = min(failures)
        listed = ", ".join(f"{i} ({e.state_text})" for i, e in sorted(failures.items())[:10])
        more = f" and {len(failures) - 10} more" if len(failures) > 10 else ""
        super().__init__(
            f"{len(failures)} of the {total} runs of sweep {sweep_id} did not complete: runs "
            f"{listed}{more}. The first: {failures[first].message}",
            hint="each run's error is in .failures (by grid index); results(return_errors=True) "
            "returns the others' values with the errors in place",
        )


class ResultMissingError(RoachError):
    """A run completed and its run directory holds no result file (removed, or a job that is no function)."""

    exit_code = RESULT_MISSING


@dataclass(frozen=True)
class Ended:
    """What :func:`collect` needs of a run that ended: its handle's identity and how it ended."""

    what: str  # "job 12 (run r) on lab"
    run_id: str
    run_dir: str
    log_path: str
    state: JobState
    state_text: str


def ended(job: Any, end: Any) -> Ended:
    """The :class:`Ended` of a :class:`~roach.launch.job.Job` (or an attempt inside a holder) and what its
    ``wait()`` returned: sacct's record, or the attempt's exit."""
    return Ended(
        str(job),
        job.run_id,
        job.record.run_dir,
        job.record.log_path,
        end.state,
        getattr(end, "state_text", "") or end.state.value,
    )


def read_many(fs: ClusterFS, paths: Sequence[str], tail_lines: int | None = None) -> list[bytes | None]:
    """Each file's bytes (its last ``tail_lines`` lines), None when it is missing, in one remote call."""
    if not paths:
        return []
    for p in paths:
        if "\n" in p or not p.startswith("/"):
            raise RoachError(f"cluster path {p!r} is relative or has a newline", hint="expand ~ on the cluster first")
    res = fs.transport.run(
        ["sh", "-c", _READ_MANY, "sh", "" if tail_lines is None else str(tail_lines)],
        input="".join(p + "\n" for p in paths),
    )
    lines = res.stdout.split("\n")[: len(paths)]
    if res.returncode != 0 or len(lines) != len(paths):
        raise RoachError(
            f"on the cluster, reading {len(paths)} result and log files failed: "
            f"{res.stderr.strip() or 'output cut short'}",
            hint="check that the run directories exist",
        )
    out: list[bytes | None] = []
    for p, line in zip(paths, lines):
        if line == "-":
            out.append(None)
            continue
        if line == "!":
            raise RoachError(
                f"on the cluster, {p} is not a readable file", hint="read it as the user the job ran as (--run-as)"
            )
        try:
            out.append(base64.b64decode(line, validate=True))
        except binascii.Error:
            raise RoachError(f"on the cluster, reading {p} gave garbled output") from None
    return out


def _value(run: Ended, json_raw: bytes | None, pkl_raw: bytes | None, where: str) -> Any:
    if json_raw is not None:
        try:
            return json.loads(json_raw)
        except ValueError as exc:
            raise RoachError(
                f"{run.what}: {where}/result.json is not JSON: {exc}",
                hint="it is rank 0's own write; was it changed after the job?",
            ) from None
    if pkl_raw is not None:
        try:
            return pickle.loads(pkl_raw)  # the user's own function's value, unpickled on their request
        except Exception as exc:  # noqa: BLE001 - any error a user's class raises while it is rebuilt
            raise RoachError(
                f"{run.what}: {where}/result.pkl cannot be unpickled here: {type(exc).__name__}: {exc}",
                hint="the classes in the value must be importable in this Python (install or put "
                "the job's package on sys.path); or return plain JSON values",
            ) from None
    raise ResultMissingError(
        f"{run.what} completed, and its run directory {where} holds no result.json or result.pkl",
        hint="the run directory may have been removed; a job that is no roach function (roach sbatch) has no result",
    )


@dataclass(frozen=True)
class Outcome:
    """A run's return value, or the error that stands for it (then ``value`` is None)."""

    value: Any = None
    error: RoachError | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def collect(fs: ClusterFS, runs: Sequence[Ended]) -> list[Outcome]:
    """Each run's :class:`Outcome`, in order: its return value, or a :class:`NotCompletedError` for a run that
    did not complete, a :class:`RoachError` for a completed run whose result cannot be read.

    One remote call reads every completed run's result files; one more the failed runs' log tails.
    Unpickles ``result.pkl``: that runs the pickled classes' code (the user's own function's value).
    """
    done = [i for i, r in enumerate(runs) if r.state is JobState.COMPLETED]
    failed = [i for i, r in enumerate(runs) if r.state is not JobState.COMPLETED]
    dirs = {i: fs.expand(runs[i].run_dir) for i in done}
    raw = read_many(fs, [f"{dirs[i]}/{name}" for i in done for name in ("result.json", "result.pkl")])
    logs = read_many(fs, [runs[i].log_path for i in failed], tail_lines=LOG_TAIL_LINES)
    values = [Outcome()] * len(runs)
    for k, i in enumerate(done):
        try:
            values[i] = Outcome(_value(runs[i], raw[2 * k], raw[2 * k + 1], dirs[i]))
        except RoachError as exc:
            values[i] = Outcome(error=exc)
    for i, log in zip(failed, logs):
        r, text = runs[i], (log or b"").decode(errors="replace")
        rank, tb = failing_traceback(text)
        tail = () if tb else tuple(text.splitlines()[-CONTEXT_LINES:])
        values[i] = Outcome(
            error=NotCompletedError(
                r.what,
                run_id=r.run_id,
                state=r.state,
                state_text=r.state_text,
                log_path=r.log_path,
                rank=rank,
                traceback=tb,
                log_tail=tail,
            )
        )
    return values
