"""One row of the store: a job roach submitted (:class:`JobRecord`), and what recording its end writes (:class:`FinalRow`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from roach.model.ids import JobKey, RecordKind
from roach.model.status import Status


def utc_now() -> str:
    """Now in UTC as ``YYYY-MM-DDTHH:MM:SSZ`` (the form job.json and the store use)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class JobRecord:
    """One submitted Slurm job, as the submitting host knows it."""

    cluster: str
    job_id: int
    run_id: str
    name: str
    target: str  # "pkg.module:function"
    commit: str
    repo: str
    log_path: str  # on the cluster
    bundle_dir: str  # on the cluster
    run_dir: str  # on the cluster
    submitted_at: str  # UTC, utc_now() form
    resources: dict[str, Any]
    status: Status  # SUBMITTED until a final status is recorded
    slurm_state: str | None  # raw sacct State, e.g. "CANCELLED by 0"
    exit_code: str | None  # raw sacct ExitCode, e.g. "0:0"
    recorded_at: str | None
    holder: int | None = None  # the holding allocation: a holder's own id, an attempt's holder
    task: int | None = None  # the array task index when one run of a sweep (job_id is the array's id)
    via: str | None = None  # the SSH alias it was submitted through, when not the cluster's own
    via_config: str | None = None  # the ssh config file that alias came from (None: ssh's default)
    job_json_at: str | None = None  # when job.json on the cluster got the recorded end (None: not yet)
    attempt: int | None = None  # an attempt's number inside its holder (job_id is the holder's id)
    kind: RecordKind = RecordKind.JOB
    error_line: str | None = None  # a failed job's cause, the line of its log that says it (recorded with its end)

    @property
    def key(self) -> JobKey:
        """The record's key within its cluster: ``123``, ``123_4``, ``123/2``."""
        return JobKey(self.job_id, self.task, self.attempt)

    @property
    def is_attempt(self) -> bool:
        return self.kind is RecordKind.ATTEMPT

    @property
    def is_final(self) -> bool:
        return self.status != Status.SUBMITTED

    @property
    def job_json_behind(self) -> bool:
        """The store has the end but job.json on the cluster may not (an older roach's record, a failed write)."""
        return self.is_final and self.job_json_at is None

    @property
    def slurm_id(self) -> str:
        """The job as Slurm names it: ``123``, or ``123_4`` for an array task (an attempt: its holder's id;
        :attr:`key` names the attempt itself)."""
        return f"{self.job_id}_{self.task}" if self.task is not None else str(self.job_id)


@dataclass(frozen=True)
class FinalRow:
    """One job's end as the store records it (:meth:`Store.record_ends`)."""

    cluster: str
    job_id: int
    task: int | None
    status: Status  # a final one
    slurm_state: str | None
    exit_code: str | None
    recorded_at: str
    job_json_at: str | None = None  # when its job.json was written with it; None: not (yet)
    attempt: int | None = None  # an attempt's number inside holder job_id
    error_line: str | None = None  # a failed job's cause in its log; None keeps what the store has


COLUMNS = tuple(f.name for f in fields(JobRecord))


def from_row(row: tuple[Any, ...]) -> JobRecord:
    values = dict(zip(COLUMNS, row))
    values["resources"] = json.loads(values["resources"])
    values["kind"] = RecordKind(values["kind"])
    values["status"] = Status(values["status"])
    return JobRecord(**values)
