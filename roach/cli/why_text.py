"""What `roach why` says of a job (and `roach top`'s `w`): its explanation and start estimate as lines and as
``roach why --json``'s record, and the reads they need beyond the queue."""

from __future__ import annotations

from typing import Any

from roach.cli.jsonout import stamp
from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.model.states import PendingReason
from roach.ops.estimate.reads import estimates
from roach.ops.estimate.starts import StartEstimate
from roach.ops.explain import Explanation
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.watch.starts import windows


def estimate(client: SlurmClient, q: QueueRecord, c: Cluster, now: float) -> StartEstimate | None:
    """The job's start estimate: one read of the cluster's queue on its partitions, the nodes and reservations from
    the site cache, the runs' paces and the ended jobs' lengths from the watch's saved state (when a watch ran); the
    reservation a job pending on one asks for, from ``scontrol show job``."""
    with Store() as store:
        views, meta = store.watch_load(c.name)
    try:
        resv_of = {}
        if q.reason is PendingReason.Reservation and (shown := client.show_job(q.raw_id)) is not None:
            resv_of = {q.job_id: shown.get("Reservation", "")}
        ended = meta.get("ended_s") or []
        return estimates(client, [q], c.tiers, views, ended, now, lambda: windows(client), resv_of).get(q.job_id)
    except RoachError:
        return None  # the explanation stands on its own


def why_lines(
    label: str, tier: str | None, exp: Explanation, est: StartEstimate | None = None, now: float = 0.0
) -> list[str]:
    """What `roach why` prints of a pending job (and `roach top`'s `w`)."""
    lines = [f"{label}{', tier ' + tier if tier else ''}: pending on {exp.reason_text or exp.reason.value}"]
    lines.append(f"  means:   {exp.meaning}")
    if exp.detail:
        lines.append(f"  here:    {exp.detail}")
    lines += [f"  outlook: {exp.outlook.label}", f"  action:  {exp.action}"]
    if est is not None:
        starts, _, basis = est.line(now).partition("; ")
        lines.append(f"  starts:  {starts}")
        if basis:
            lines.append(f"           {basis}")
    return lines


def why_json(
    job: str,
    rec: JobRecord | None,
    q: QueueRecord | None,
    exp: Explanation | None = None,
    tier: str | None = None,
    env_failed: str | None = None,
    estimate: StartEstimate | None = None,
    now: float = 0.0,
) -> dict[str, Any]:
    """``roach why --json``: the explanation of a pending job (``exp``, its ``tier``), else only its state
    (``q`` None: it is not in the queue) and, where its environment could not be built, what the bundle says."""
    run_id = rec.run_id if rec else None
    if q is None or exp is None:
        state = q.state.value if q else "not in the queue"
        out = {"job_id": job, "run_id": run_id, "state": state, "pending": False}
        return stamp("why", {**out, "env_failed": env_failed} if env_failed else out)
    est = estimate.to_json(now) if estimate is not None else None
    out = {**exp.to_json(), "run_id": run_id, "state": q.state.value, "pending": True, "tier": tier}
    return stamp("why", {**out, "estimate": est})


def req_nodes(client, q: QueueRecord) -> str | None:
    """The job's --nodelist (scontrol's ReqNodeList), asked only where the reason is about nodes."""

    if q.reason not in (PendingReason.ReqNodeNotAvail, PendingReason.NodesDownDrained):
        return None
    shown = client.show_job(q.raw_id)
    if shown is None:
        return None
    nodes = shown.get("ReqNodeList", "")
    return "" if nodes in ("(null)", "") else nodes
