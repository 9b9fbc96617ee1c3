"""The one line of a failed job's log that says why it failed (:func:`error_line`), and git's telling line
(:func:`git_error_line`).

A job can fail before its function runs (git cannot clone, the environment cannot be built) or in it (a rank
raised). Either way the cause is a line of its log, followed by lines that only echo it (srun's "Exited with
exit code", the other ranks' TERM, git's "Could not read from remote repository"). The store keeps the cause
with the job's end, so the watch's ``finished`` event, ``roach status`` and ``roach report`` can say it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

LOG_TAIL_BYTES = 16384  # of a failed job's log read for its error line: the end of its last attempt
MAX_CHARS = 400  # an error line longer than this is cut (a message that dumps a whole object)

TRACEBACK_LINES = 20  # the failing rank's last traceback lines an error carries
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")  # srun --label's rank prefix, and the line after it
_FAILED = re.compile(r"^roach rank (\d+): \S+ failed: ")
_GENERIC_GIT = ("Could not read from remote repository",)
_STEPD = re.compile(r"^slurmstepd(-\S+)?: error: (?!\*\*\*)")  # its OOM line; not the CANCELLED banners


def git_error_line(stderr: str) -> str:
    """The line of git's output that says what went wrong (its first ``fatal:`` or ``error:``, not the generic
    "Could not read from remote repository" that follows it)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    told = [ln for ln in lines if _is_git_cause(ln)]
    return told[0] if told else (lines[-1] if lines else "")


def _is_git_cause(line: str) -> bool:
    return line.startswith(("fatal:", "error:")) and not any(g in line for g in _GENERIC_GIT)


def failing_traceback(log: str) -> tuple[int | None, tuple[str, ...]]:
    """The rank whose function raised first in the log's last attempt, and its last traceback lines (the
    rank label stripped); ``(None, ())`` when no rank raised."""
    lines = log.splitlines()
    start = max((i for i, ln in enumerate(lines) if ln.startswith("roach: attempt ")), default=0)
    labelled = [(int(m[1]), m[2]) for m in map(_LABELLED.match, lines[start:]) if m]
    fail = next(
        ((i, int(m[1])) for i, (r, text) in enumerate(labelled) if (m := _FAILED.match(text)) and int(m[1]) == r), None
    )
    if fail is None:
        return None, ()
    at, rank = fail
    own = [text for r, text in labelled[:at] if r == rank]
    tb = max((i for i, text in enumerate(own) if text.startswith("Traceback (most recent call last)")), default=None)
    body = own[tb:] if tb is not None else [labelled[at][1]]
    return rank, tuple(body[-TRACEBACK_LINES:])


def error_line(log: str) -> str | None:
    """The cause of a failed job in (the tail of) its log, or None when no line says one.

    In order: the line of the rank whose function raised first (``roach rank 1: pkg.f:g failed: ValueError:
    ...``); roach's ``env_failed`` line (what failed, not the closing "no rank started"); git's last cause (a ``fatal:``/``error:`` line, not the generic
    follow-up); the exception line of the last Python traceback; slurmstepd's error line (an OOM kill)."""
    lines = [_bare(ln) for ln in log.splitlines()]
    rank, _ = failing_traceback(log)
    found = None if rank is None else _last(lines, lambda s: s.startswith(f"roach rank {rank}: ") and " failed: " in s)
    found = found or _last(lines, lambda s: s.startswith("roach: env_failed:") and "no rank started" not in s)
    found = found or _last(lines, _is_git_cause) or _last(lines, lambda s: s.startswith(("fatal:", "error:")))
    found = found or _traceback_exception(log.splitlines()) or _last(lines, lambda s: bool(_STEPD.match(s)))
    return None if found is None else _cut(found)


def _bare(line: str) -> str:
    """A log line without srun's rank label and surrounding blanks."""
    return _unlabelled(line).strip()


def _unlabelled(line: str) -> str:
    """The line without srun's rank label, its indentation kept."""
    m = _LABELLED.match(line)
    return m[2] if m else line


def _last(lines: list[str], wanted: Callable[[str], bool]) -> str | None:
    return next((ln for ln in reversed(lines) if wanted(ln)), None)


def _traceback_exception(lines: list[str]) -> str | None:
    """The exception line of the last traceback: its first unindented line after the frames."""
    starts = [i for i, ln in enumerate(lines) if _bare(ln) == "Traceback (most recent call last):"]
    if not starts:
        return None
    for ln in lines[starts[-1] + 1 :]:
        text = _unlabelled(ln)
        if text.strip() and not text[0].isspace():
            return text.strip()
    return None


def _cut(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."
