"""roach's status of a job: the one word the store, job.json and every ``--json`` record use for where it is.

A :class:`Status` is a ``str`` (``Status.COMPLETED == "completed"``), so records written before it was an enum,
and the JSON and SQLite it is written to, hold the same text.
"""

from __future__ import annotations

import enum

from roach.errors import UsageError
from roach.model.job_state import JobState


class Status(enum.StrEnum):
    """Where a job is, as roach says it: live (submitted, pending, running) or its end."""

    SUBMITTED = "submitted"  # recorded at submit; the store keeps it until the end is recorded
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # FAILED, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, LAUNCH_FAILED
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"  # TIMEOUT, DEADLINE
    PREEMPTED = "preempted"
    UNKNOWN = "unknown"  # ended, but nothing says how (REVOKED; a driver that never wrote its exit)

    @property
    def is_final(self) -> bool:
        return self not in _LIVE

    @classmethod
    def final(cls, text: str) -> Status:
        """The final status ``text`` names; a live one or an unknown word is a :class:`UsageError` listing them."""
        try:
            status = cls(text)
        except ValueError:
            status = None
        if status is None or not status.is_final:
            raise UsageError(f"{text!r} is not a final status; expected one of: {', '.join(FINAL_STATUSES)}")
        return status


_LIVE = frozenset({Status.SUBMITTED, Status.PENDING, Status.RUNNING})
FINAL_STATUSES: tuple[str, ...] = tuple(s.value for s in Status if s.is_final)
ACTIVE_STATUSES: tuple[str, ...] = tuple(s.value for s in Status if not s.is_final)


# Terminal Slurm states and what they mean for the job. Terminal states absent here map to "unknown":
# REVOKED only says a sibling federation cluster ran the job, so this record knows nothing of the outcome.
_STATUS_BY_STATE: dict[JobState, Status] = {
    JobState.COMPLETED: Status.COMPLETED,
    JobState.CANCELLED: Status.CANCELLED,
    JobState.TIMEOUT: Status.TIMEOUT,
    JobState.DEADLINE: Status.TIMEOUT,  # killed at its --deadline: out of time, like TIMEOUT
    JobState.PREEMPTED: Status.PREEMPTED,
    JobState.FAILED: Status.FAILED,
    JobState.NODE_FAIL: Status.FAILED,
    JobState.OUT_OF_MEMORY: Status.FAILED,
    JobState.BOOT_FAIL: Status.FAILED,
    JobState.LAUNCH_FAILED: Status.FAILED,
}


def status_from_state(state: JobState, state_text: str = "") -> Status:
    """roach's status for a Slurm state: a final status, or ``pending``/``running`` while the job is queued.

    ``state_text`` is the raw text ``state`` was read from (``CANCELLED by 0``); where ``state`` itself is
    not in the table, its first word is tried, so a raw text naming a final state still maps.
    """
    if state.is_pending:
        return Status.PENDING
    if state.is_running:
        return Status.RUNNING
    if state in _STATUS_BY_STATE:
        return _STATUS_BY_STATE[state]
    word = state_text.strip().rstrip("+").split(" ", 1)[0].upper()
    by_text = {s.value: status for s, status in _STATUS_BY_STATE.items()}
    return by_text.get(word, Status.UNKNOWN)
