"""The watch's ``budget`` lines: a metered cluster's grants read against Slurm's accounting, at most once a minute."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roach.errors import RoachError, TransportError
from roach.ops import spend
from roach.ops.events import Event, EventKind
from roach.records.grants import GrantBook
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord


def budget_events(
    store: Store,
    client: SlurmClient,
    cluster: str,
    meta: dict[str, Any],
    active: Mapping[str, QueueRecord],
    now: float,
    every_s: float,
) -> list[Event]:
    """Where the cluster's grants hold unfinished submissions, and at most every ``every_s``: one sacct for
    what they spent, and a line for each grant that passed 50, 80 or 100 % of its GPU-hours (at 100 % its
    pending jobs held in Slurm). A cluster with no grant costs no Slurm call."""
    if now - (meta.get("budget_at") or 0) < every_s:
        return []
    if not any(h.job_ids and not h.settled for u in GrantBook(store).uses(cluster) for h in u.holds):
        return []
    meta["budget_at"] = now
    try:
        uses = spend.refresh(store, cluster, client)
    except (RoachError, TransportError):
        return []  # read again next time; a failed read says nothing of the budget
    pending = {q.ref.job for q in active.values() if q.state.is_pending and not q.reason.is_held}
    return [
        Event(
            EventKind.BUDGET,
            now,
            cluster,
            line.message,
            data={
                "grant": line.grant.name,
                "share": line.share,
                "spent": round(line.spent, 4),
                "gpu_hours": line.grant.gpu_hours,
                "held_jobs": list(line.held_jobs),
                "hold_error": line.hold_error,
            },
        )
        for line in spend.budget(store, uses, client, pending)
    ]
