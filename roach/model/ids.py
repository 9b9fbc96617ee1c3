"""Typed names of what the store records: the kind of a record and the key that names one.

A record is one of four kinds (:class:`RecordKind`), told apart by its ``kind`` column, never by the shape
of its id. Its :class:`JobKey` is Slurm's job id plus, for an array task, its index and, for an attempt
inside a holder, its number. Written the way people and Slurm name them: ``123`` (a job or a holder),
``123_4`` (task 4 of array 123), ``123/2`` (attempt 2 inside holder 123; roach's own name, Slurm sees
only the holder).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from roach.errors import UsageError


class RecordKind(enum.StrEnum):
    """What a store record is."""

    JOB = "job"  # a batch job of one run (submit, resume, a remote-workspace job)
    TASK = "task"  # one array task: a sweep's run
    HOLDER = "holder"  # an allocation held for attempts (roach hold)
    ATTEMPT = "attempt"  # a run started as steps inside a holder (submit(..., inside=H))

    @classmethod
    def parse(cls, text: str) -> RecordKind:
        try:
            return cls(text)
        except ValueError:
            raise UsageError(
                f"unknown record kind {text!r}; expected one of: {', '.join(k.value for k in cls)}"
            ) from None


_KEY = re.compile(r"(\d+)(?:_(\d+)|/(\d+))?")


@dataclass(frozen=True, order=True)
class JobKey:
    """Slurm's job id, and the array task index or the attempt number below it (at most one of the two)."""

    job_id: int
    task: int | None = None
    attempt: int | None = None

    def __post_init__(self) -> None:
        if self.task is not None and self.attempt is not None:
            raise UsageError(f"job {self.job_id}: a key names an array task or an attempt, not both")

    @property
    def kind(self) -> RecordKind | None:
        """TASK or ATTEMPT when the key says so; None: a job or a holder (the record's kind tells which)."""
        if self.task is not None:
            return RecordKind.TASK
        return RecordKind.ATTEMPT if self.attempt is not None else None

    @classmethod
    def parse(cls, text: str) -> JobKey | None:
        """``123``, ``123_4`` or ``123/2`` as a key; None for anything else (a run id)."""
        m = _KEY.fullmatch(text.strip())
        if m is None:
            return None
        job, task, attempt = m.groups()
        return cls(int(job), int(task) if task else None, int(attempt) if attempt else None)

    def __str__(self) -> str:
        if self.task is not None:
            return f"{self.job_id}_{self.task}"
        return f"{self.job_id}/{self.attempt}" if self.attempt is not None else str(self.job_id)
