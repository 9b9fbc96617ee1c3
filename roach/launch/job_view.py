"""A job's view: :class:`JobView`, what ``roach status`` shows of a job, and :func:`reconcile`, the one function
that decides it for a set of records reached through one client, from the store and Slurm together in a fixed
number of calls (one ``squeue``, at most one ``sacct``, one command for the attempts' bundles), recording the ends
it finds.

``roach status``, ``ls`` (:func:`roach.ops.fleet_views.grouped_views`), ``cancel``, the MCP server's tools (each
runs its command) and :meth:`Job.status() <roach.launch.job.Job.status>` read a job's view through it, so they
say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from roach.errors import RoachError
from roach.model.ids import RecordKind
from roach.model.job_state import JobState
from roach.model.status import status_from_state
from roach.records.job_end import End, record_ends, repairs
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import AcctRecord, QueueRecord, in_array


@dataclass(frozen=True)
class JobView:
    """What ``roach status`` shows of one job (its ``--json`` record) and ``Job.status()`` returns: its record and
    its live (or recorded final) state."""

    run_id: str
    job_id: int
    cluster: str
    name: str
    target: str
    state: str | None  # Slurm's state name (COMPLETED); None if neither Slurm nor the store knows it
    status: str  # roach's status: pending, running, or a final status
    reason: str | None  # why it is pending, or why its state is not known yet
    exit_code: str | None  # sacct's "code:signal" once it ended
    submitted_at: str
    log: str
    held_s: int | None = None  # a holder: how long it has been charged
    idle: bool | None = None  # a running holder with no attempt in it: charged for nothing
    via: str | None = None  # the ssh alias it was submitted (and is read) through, when not its cluster's own
    task: int | None = None  # a sweep's run: its task in array job_id
    holder: int | None = None  # an attempt inside a holder: the holder's job id (job_id is then roach's own)
    attempt: int | None = None  # ... and its number there (1, 2, ...)
    commit: str | None = None  # the git commit it runs
    error_line: str | None = None  # a failed job's cause: the line of its log that says it (recorded with its end)

    @property
    def slurm_id(self) -> str:
        """The job as Slurm names it: ``123``, ``123_4`` for a sweep's run; ``H/n`` for attempt n inside
        holder H (roach's own name: Slurm sees only the holder)."""
        if self.holder is not None:
            return f"{self.holder}/{self.attempt}"
        return f"{self.job_id}_{self.task}" if self.task is not None else str(self.job_id)

    @classmethod
    def of(
        cls,
        rec: JobRecord,
        state: str | None,
        status: str,
        reason: str | None = None,
        exit_code: str | None = None,
        **extra: Any,
    ) -> JobView:
        holder, attempt = (rec.job_id, rec.attempt) if rec.is_attempt else (None, None)
        return cls(
            rec.run_id,
            rec.job_id,
            rec.cluster,
            rec.name,
            rec.target,
            state,
            status,
            reason,
            exit_code,
            rec.submitted_at,
            rec.log_path,
            via=rec.via,
            task=rec.task,
            holder=holder,
            attempt=attempt,
            commit=rec.commit,
            error_line=rec.error_line,
            **extra,
        )

    @property
    def ok(self) -> bool:
        return self.state == JobState.COMPLETED.value


def _state_name(text: str | None) -> str | None:
    """Slurm's state name in a raw state text (``CANCELLED by 0``: CANCELLED); the text if unreadable."""
    if not text:
        return None
    try:
        return JobState.parse(text).value
    except RoachError:
        return text


def _stored_state(rec: JobRecord) -> str | None:
    return _state_name(rec.slurm_state)


def _entries(rec: JobRecord, by_job: dict[int, list[Any]]) -> list[Any]:
    """The queue entries (or accounting rows) of ``rec``: the job's own, every task of an array recorded as one
    job (a remote-workspace array), or just task ``rec.task`` of a sweep's array."""
    found = by_job.get(rec.job_id, [])
    if rec.task is None:
        return found
    return [e for e in found if e.ref.task == rec.task or (e.ref.task is None and in_array(e.ref.tasks, rec.task))]


def _queued_view(rec: JobRecord, entries: list[QueueRecord], idle: dict[int, bool]) -> JobView:
    q = next((e for e in entries if e.state.is_running), entries[0])  # an array runs while any task runs
    reason = q.reason_text if q.state.is_pending and q.reason_text not in ("", "None") else None
    extra: dict[str, Any] = (
        {"held_s": q.elapsed_s, "idle": idle.get(rec.job_id)} if rec.kind is RecordKind.HOLDER else {}
    )
    return JobView.of(rec, q.state.value, status_from_state(q.state), reason, **extra)


LEFT_QUEUE_UNACCOUNTED = "left the queue; accounting has not recorded its end yet"


def _accounted_view(rec: JobRecord, rows: list[AcctRecord]) -> tuple[JobView, End | None]:
    """From sacct's rows of the job, and its end if they show one. An array recorded as one job (a
    remote-workspace array) has a row per task: it ended once accounting lists every task ended, as the worst
    of them."""
    if any(not a.state.is_terminal for a in rows):
        # Gone from squeue, so no longer RUNNING or PENDING whatever accounting says: slurmdbd records a job's
        # end a moment after slurmctld lets it go (or never, when slurmctld lost the job).
        return JobView.of(rec, None, rec.status, LEFT_QUEUE_UNACCOUNTED), None
    # Loaded only where an end is read from accounting: a listing of jobs queued or recorded ended needs none of it.
    from roach.records.workspace_job import array_end, is_workspace_array

    if rec.task is None and (is_workspace_array(rec) or any(a.ref.task is not None or a.ref.tasks for a in rows)):
        found = array_end(rec, rows)
        if found is None:  # accounting has not caught up with every task yet
            return JobView.of(rec, None, rec.status), None
        return JobView.of(rec, _state_name(found.slurm_state), found.status, None, found.exit_code), found
    end = End.of_acct(rec, rows[-1])
    return JobView.of(rec, rows[-1].state.value, end.status, None, end.exit_code), end


@dataclass(frozen=True)
class Reconciled:
    """The views of a set of records, in their order, and the records as they now are (an end found recorded)."""

    views: list[JobView]
    records: list[JobRecord]


def reconcile(client: SlurmClient, records: list[JobRecord], store: Store | None, *, whole_queue: bool) -> Reconciled:
    """The views of ``records`` (all reached through ``client``): one ``squeue`` (the user's queue if
    ``whole_queue``, else just these ids) and at most one ``sacct`` for those that left the queue and are not
    final in the store. The ends found, and those the store has but their job.json may lack (a record of an
    older roach's), are recorded in one :func:`~roach.records.job_end.record_ends` (one command on the cluster;
    the store too unless ``store`` is None)."""
    if not records:
        return Reconciled([], [])

    attempts = [r for r in records if r.is_attempt]  # steps of a holder: Slurm has no job of theirs
    jobs = [r for r in records if not r.is_attempt]
    ends = repairs(records)
    views = {}
    for r, (v, end) in zip(attempts, _attempt_views(client, attempts)):
        views[r.key] = v
        ends += [end] if end is not None else []
    ids = sorted({r.job_id for r in jobs})
    queue = client.squeue() if whole_queue else (client.squeue(job_ids=ids) if ids else [])
    by_job: dict[int, list[QueueRecord]] = {}
    for q in queue:
        if q.state.is_active:
            by_job.setdefault(q.ref.job, []).append(q)
    queued = {r.key: _entries(r, by_job) for r in jobs}
    ask = sorted({r.slurm_id for r in jobs if not queued[r.key] and not r.is_final})
    rows: dict[int, list[AcctRecord]] = {}
    for a in client.ends(ask) if ask else []:
        if a.step is None:
            rows.setdefault(a.ref.job, []).append(a)
    holders = [r.job_id for r in jobs if r.kind is RecordKind.HOLDER and any(q.state.is_running for q in queued[r.key])]
    idle = _idle_holders(client, holders) if holders else {}
    for rec in jobs:
        entries = queued[rec.key]
        accounted = _entries(rec, rows) if rec.slurm_id in ask else []
        if entries:
            views[rec.key] = _queued_view(rec, entries, idle)
        elif accounted:
            views[rec.key], end = _accounted_view(rec, accounted)
            ends += [end] if end is not None else []
        elif rec.is_final:
            views[rec.key] = JobView.of(rec, _stored_state(rec), rec.status, None, rec.exit_code)
        else:
            views[rec.key] = JobView.of(rec, None, rec.status)
    now = {r.key: r for r in record_ends(store, client.transport, ends)}
    for key, r in now.items():  # an end recorded just now: its error line was read with it
        if r.error_line and key in views:
            views[key] = replace(views[key], error_line=r.error_line)
    return Reconciled([views[r.key] for r in records], [now.get(r.key, r) for r in records])


def _idle_holders(client: SlurmClient, holders: list[int]) -> dict[int, bool]:
    """:func:`roach.launch.hold.steps.idle_holders`, loaded only where a holder runs."""
    from roach.launch.hold.steps import idle_holders

    return idle_holders(client, holders)


def live_views(client: SlurmClient, records: list[JobRecord], store: Store, *, whole_queue: bool) -> list[JobView]:
    """The views :func:`reconcile` decides for ``records``, in their order."""
    return reconcile(client, records, store, whole_queue=whole_queue).views


def _attempt_views(client: SlurmClient, attempts: list[JobRecord]) -> list[tuple[JobView, End | None]]:
    """Attempts inside holders: their state from the exit file their driver writes (one command for all), and
    the end of those whose driver wrote one."""
    if not attempts:
        return []
    # loaded only where a holder's attempts are listed: `roach ls` of plain jobs starts without them
    from roach.launch.hold.attempts import attempt_end, read_attempts

    open_ = [r for r in attempts if not r.is_final]
    found = read_attempts(client.transport, [r.bundle_dir for r in open_]) if open_ else {}
    views: list[tuple[JobView, End | None]] = []
    for rec in attempts:
        st = found.get(rec.bundle_dir)
        if st is not None and st.exit is not None:
            ex = st.exit
            views.append((JobView.of(rec, ex.state.value, ex.status, None, f"{ex.exit_code}:0"), attempt_end(rec, ex)))
        elif rec.is_final:
            views.append((JobView.of(rec, _stored_state(rec), rec.status, None, rec.exit_code), None))
        else:
            views.append((JobView.of(rec, JobState.RUNNING.value, "running"), None))
    return views
