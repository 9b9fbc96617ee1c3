"""A workspace job's record on both sides: the local copy beside the workspace and the job.json in its bundle on the cluster, kept equal."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import RoachError
from roach.model.status import Status
from roach.records.bundle import ENDED
from roach.records.job_end import End, record_ends
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob, final_record
from roach.workspace.base import SETTLE_DELAYS, Remote, Workspace, read_local

# -- records on both sides -------------------------------------------------------------------------------


def write_local(ws: Workspace, rec: WorkspaceJob) -> Path:
    return atomic_write(ws.local_bundle(rec.job_id) / "job.json", rec.to_json())


def read_record(ws: Workspace, remote: Remote, job_id: str) -> WorkspaceJob:
    """The job's record: the local one, else the bundle's on the cluster, else a new one (a job submitted by hand)."""
    local = read_local(ws, job_id)
    if local is not None:
        return local
    path = posixpath.join(ws.remote_bundle(job_id), "job.json")
    if remote.fs.exists(path):
        try:
            return WorkspaceJob.from_json(remote.fs.read(path), f"{remote.cluster.name}:{path}")
        except RoachError:
            pass
    return WorkspaceJob(job_id=job_id, cluster=remote.cluster.name)


def write_both(ws: Workspace, remote: Remote, rec: WorkspaceJob) -> None:
    """Write job.json into the bundle on the cluster and here."""
    remote.fs.write(posixpath.join(ws.remote_bundle(rec.job_id), "job.json"), rec.to_json())
    write_local(ws, rec)


def queued_states(remote: Remote, job_id: str) -> list[str]:
    """The states of the job's (or array's) entries still in the queue; empty once it left."""
    recs = remote.client().squeue(job_ids=[job_id])
    return [r.state.value for r in recs if str(r.ref.job) == job_id and r.state.is_active]


def record_final(
    ws: Workspace,
    remote: Remote,
    job_id: str,
    base: WorkspaceJob | None = None,
    *,
    delays: Sequence[float] = SETTLE_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
    store: Store | None = None,
) -> WorkspaceJob:
    """Read the job's end from sacct (asking again briefly while accounting catches up) and write job.json
    on both sides, and into roach's store if the job is recorded there. Call it once the job has left the
    queue."""
    base = base or read_record(ws, remote, job_id)
    client = remote.client()
    rec = None
    for i, delay in enumerate(delays):
        sleep(delay)
        rec = final_record(base, client.ends([job_id]), utc_now(), partial=i == len(delays) - 1)
        if rec is not None:
            break
    if rec is None:
        rec = replace(
            base,
            status="unknown",
            slurm_state="UNKNOWN",
            exit_code="unknown",
            recorded_at_utc=utc_now(),
            live_state=ENDED,
        )
    write_both(ws, remote, rec)  # the workspace's own, fuller record (array tasks), on both sides
    store = store if store is not None else Store()
    row = store.get(remote.cluster.name, int(job_id))
    if row is not None and not row.is_final:  # the store's half, unless a poller recorded the end first
        record_ends(
            store,
            None,
            [
                End(
                    row,
                    Status.final(rec.status),
                    rec.slurm_state or "UNKNOWN",
                    rec.exit_code or "unknown",
                    rec.recorded_at_utc,
                )
            ],
            written=True,
        )
    return rec
