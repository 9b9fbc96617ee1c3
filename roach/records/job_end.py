"""Recording a job's end: the one function every place that learns one calls (:func:`record_ends`).

A job's end is two facts kept together: the row in roach's store and the ``job.json`` in its bundle on the
cluster. ``roach status``, ``ls`` and ``cancel`` (through :func:`roach.launch.job_view.live_views`),
``Job.state``/``wait``, ``Sweep.wait``, the watch, a holder's ``info``/``release`` and an attempt's exit (read
from what its driver wrote) all hand what they learned to :func:`record_ends`: it rewrites every job.json
of the call in one command (:func:`roach.records.job_json_end.record_finals`, atomic per file) and then records
the ends in the store in one transaction, with the moment job.json got them (``job_json_at``). A record
whose job.json did not get its end (written by an older roach, or a write that failed) is
:attr:`~roach.records.store.JobRecord.job_json_behind`; ``roach ls``/``status`` hand it back here
(:meth:`End.of_record`), which repairs it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, replace

from roach.errors import RoachError, UsageError
from roach.model.status import Status, status_from_state
from roach.records.job_record import FinalRow, JobRecord, utc_now
from roach.records.store import Store
from roach.scheduler.parse import AcctRecord
from roach.scheduler.transport import Transport


@dataclass(frozen=True)
class End:
    """One job's end as a place learned it: its record and the final state."""

    rec: JobRecord
    status: Status  # a final one (a final status's text is taken too)
    slurm_state: str  # raw sacct State ("CANCELLED by 0"), or what stands for it (an attempt's driver)
    exit_code: str  # "code:signal"
    recorded_at: str | None = None  # when the end was looked up; None: now (a repair keeps the store's)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status.final(self.status))

    @classmethod
    def of_acct(cls, rec: JobRecord, acct: AcctRecord) -> End:
        """From sacct's line of the job's allocation (it must have ended)."""
        if not acct.state.is_terminal:
            raise UsageError(
                f"job {acct.job_id} is still {acct.state.value}; only an end is recorded",
                hint="wait until sacct shows the job ended",
            )
        return cls(
            rec, status_from_state(acct.state, acct.state_text), acct.state_text, f"{acct.exit_code}:{acct.exit_signal}"
        )

    @classmethod
    def of_record(cls, rec: JobRecord) -> End:
        """The end the store already holds (to write a job.json that lacks it)."""
        if not rec.is_final:
            raise UsageError(f"job {rec.slurm_id} on {rec.cluster!r} has no recorded end")
        return cls(
            rec, rec.status, rec.slurm_state or "UNKNOWN", rec.exit_code or "unknown", rec.recorded_at or utc_now()
        )


def job_json_path(rec: JobRecord) -> str:
    """Where the job's ``job.json`` is on the cluster: in its bundle (a run, a sweep's run, a holder, an
    attempt, a remote-workspace job alike)."""
    return posixpath.join(rec.bundle_dir, "job.json")


def record_ends(
    store: Store | None, transport: Transport | None, ends: Sequence[End], *, written: bool = False
) -> list[JobRecord]:
    """Record every end of ``ends``: their job.json files through ``transport`` (one command for all), then
    the store (one transaction). Returns the records as they now are, in order.

    ``written``: the caller wrote the job.json files itself (the remote workspace writes its own, fuller
    record on both sides); only the store is written then. A job.json that cannot be written (the command
    failed) leaves the store's ``job_json_at`` empty, so the next ``roach ls``/``status`` writes it again; a
    missing one is not retried (nothing to make final).

    The job.json writer and the error line's reader load here, once there is an end to record: most listings
    hand none.
    """
    if not ends:
        return []
    from roach.records.error_line import error_line
    from roach.records.job_json_end import Final, record_finals

    now = utc_now()
    finals = [
        Final(job_json_path(e.rec), e.status, e.slurm_state, e.exit_code, e.recorded_at or now, _log_of(e))
        for e in ends
    ]
    tails: dict[str, str] = {}
    if written:
        done = {f.path for f in finals}
    elif transport is None:
        raise UsageError("recording a job's end needs the cluster's transport to write its job.json")
    else:
        try:
            wrote = record_finals(transport, finals)
            done, tails = set(wrote.outcomes), wrote.tails  # each path's outcome: written, missing or not roach's
        except RoachError:
            done = set()  # the cluster could not be written: the store still gets the end, job_json_at unset
    rows = [
        FinalRow(
            e.rec.cluster,
            e.rec.job_id,
            e.rec.task,
            e.status,
            f.slurm_state,
            f.exit_code,
            f.recorded_at_utc,
            now if f.path in done else None,
            e.rec.attempt,
            error_line(tails[f.path]) if f.path in tails else None,
        )
        for e, f in zip(ends, finals)
    ]
    if store is not None:
        recorded = store.record_ends(rows)
        if recorded != len(rows):
            missing = [str(e.rec.key) for e in ends if store.get_key(e.rec.cluster, e.rec.key) is None]
            raise UsageError(
                f"job {', '.join(missing)} is not in the store {store.path}", hint="`roach ls` lists the recorded jobs"
            )
    return [
        replace(
            e.rec,
            status=r.status,
            slurm_state=r.slurm_state,
            exit_code=r.exit_code,
            recorded_at=r.recorded_at,
            job_json_at=r.job_json_at,
            error_line=r.error_line or e.rec.error_line,
        )
        for e, r in zip(ends, rows)
    ]


def _log_of(end: End) -> str:
    """The log whose tail is read with the end: a failed job's (for its error line), where its record names one."""
    if end.status is not Status.FAILED or not end.rec.log_path.startswith("/"):
        return ""
    return end.rec.log_path


def repairs(records: Sequence[JobRecord]) -> list[End]:
    """The ends of ``records`` the store has and their job.json may lack (see :func:`record_ends`)."""
    return [End.of_record(r) for r in records if r.job_json_behind]
