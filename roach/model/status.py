"""roach's status of a job: the one word the store, job.json and every ``--json`` record use for where it is.

A :class:`Status` is a ``str`` (``Status.COMPLETED == "completed"``), so records written before it was an enum,
and the JSON and SQLite it is written to, hold the same text.
"""

from __future__ import annotations

import enum

from roach.errors import UsageError


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
