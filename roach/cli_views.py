"""What the CLI shows of jobs: :class:`JobView`, and :func:`live_views`, which finds their live states in a
fixed number of Slurm calls (for ``roach status``, ``cancel`` and ``ls``; the commands are :mod:`roach.cli_jobs`).
Attempts inside holders are read from their bundles, in one command for all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roach.errors import RoachError
from roach.slurm.bundle import status_from_state
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.states import JobState
from roach.slurm.store import JobRecord, Store, utc_now


@dataclass(frozen=True)
class JobView:
    """What the CLI shows of one job: its record and its live (or recorded final) state."""

    run_id: str
    job_id: int
    cluster: str
    name: str
    target: str
    state: str | None  # Slurm's state name (COMPLETED); None if neither Slurm nor the store knows it
    status: str  # roach's status: pending, running, or a final status
    reason: str | None  # why it is pending
    exit_code: str | None  # sacct's "code:signal" once it ended
    submitted_at: str
    log: str
    held_s: int | None = None  # a holder: how long it has been charged
    idle: bool | None = None  # a running holder with no attempt in it: charged for nothing

    @classmethod
    def of(cls, rec: JobRecord, state: str | None, status: str, reason: str | None = None,
           exit_code: str | None = None, **extra: Any) -> "JobView":
        return cls(rec.run_id, rec.job_id, rec.cluster, rec.name, rec.target, state, status, reason, exit_code,
                   rec.submitted_at, rec.log_path, **extra)

    @property
    def ok(self) -> bool:
        return self.state == JobState.COMPLETED.value


def _stored_state(rec: JobRecord) -> str | None:
    if not rec.slurm_state:
        return None
    try:
        return JobState.parse(rec.slurm_state).value
    except RoachError:
        return rec.slurm_state


def live_views(client: SlurmClient, records: list[JobRecord], store: Store, *, whole_queue: bool) -> list[JobView]:
    """The views of ``records`` (all of one cluster): one ``squeue`` (the user's queue if ``whole_queue``,
    else just these ids) and at most one ``sacct`` for those that left the queue and are not final in the
    store. Final states found are recorded in the store."""
    if not records:
        return []
    from roach.slurm.hold import HOLD_TARGET, idle_holders
    from roach.slurm.inside import is_attempt

    attempts = {r.job_id: r for r in records if is_attempt(r)}  # steps of a holder: Slurm has no job of theirs
    records_of_jobs = [r for r in records if r.job_id not in attempts]
    views = {r.job_id: v for r, v in zip(attempts.values(), _attempt_views(client, list(attempts.values()), store))}
    queue = client.squeue() if whole_queue else client.squeue(job_ids=[r.job_id for r in records_of_jobs])
    queued = {q.raw_id: q for q in queue if q.state.is_active}
    ask = [r.job_id for r in records_of_jobs if r.job_id not in queued and not r.is_final]
    acct = {a.ref.job: a for a in (client.sacct(ask) if ask else []) if a.step is None and a.ref.job in ask}
    holders = [r.job_id for r in records_of_jobs if r.target == HOLD_TARGET and r.job_id in queued
               and queued[r.job_id].state.is_running]
    idle = idle_holders(client, holders) if holders else {}
    for rec in records_of_jobs:
        if rec.job_id in queued:
            q = queued[rec.job_id]
            reason = q.reason_text if q.state.is_pending and q.reason_text not in ("", "None") else None
            extra = {"held_s": q.elapsed_s, "idle": idle.get(rec.job_id)} if rec.target == HOLD_TARGET else {}
            views[rec.job_id] = JobView.of(rec, q.state.value, status_from_state(q.state), reason, **extra)
        elif rec.job_id in acct:
            a = acct[rec.job_id]
            status, code = status_from_state(a.state, a.state_text), f"{a.exit_code}:{a.exit_signal}"
            if a.state.is_terminal:
                store.update_final(rec.cluster, rec.job_id, status, a.state_text, code, utc_now())
            views[rec.job_id] = JobView.of(rec, a.state.value, status, None, code if a.state.is_terminal else None)
        elif rec.is_final:
            views[rec.job_id] = JobView.of(rec, _stored_state(rec), rec.status, None, rec.exit_code)
        else:
            views[rec.job_id] = JobView.of(rec, None, rec.status)
    return [views[r.job_id] for r in records]


def _attempt_views(client: SlurmClient, attempts: list[JobRecord], store: Store) -> list[JobView]:
    """Attempts inside holders: their state from the exit file their driver writes (one command for all)."""
    from roach.slurm.clusterfs import ClusterFS
    from roach.slurm.inside import read_attempts

    open_ = [r for r in attempts if not r.is_final]
    found = read_attempts(ClusterFS(client.transport), [r.bundle_dir for r in open_]) if open_ else {}
    views = []
    for rec in attempts:
        st = found.get(rec.bundle_dir)
        if st is not None and st.exit is not None:
            ex = st.exit
            store.update_final(rec.cluster, rec.job_id, ex.status, ex.state_text, f"{ex.exit_code}:0", utc_now())
            views.append(JobView.of(rec, ex.state.value, ex.status, None, f"{ex.exit_code}:0"))
        elif rec.is_final:
            views.append(JobView.of(rec, _stored_state(rec), rec.status, None, rec.exit_code))
        else:
            views.append(JobView.of(rec, JobState.RUNNING.value, "running"))
    return views
