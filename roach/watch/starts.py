"""The watch's start estimates: the likely start of every watched job that pends (:mod:`roach.ops.estimate.starts`), kept in
the watch state for ``roach top``, and a ``pending`` line when a job starts to pend (seen pending in two rounds in a
row) and when its likely start moves. One ``squeue`` of the cluster's queue on their partitions, only in a round where
such a watched job pends on a reason that clears (the nodes and the reservations come from the site cache).

They are made again in a round where a pending job has none yet, or once the last ones are old enough that making
them takes at most :data:`CPU_SHARE` of the watch's time: each round on a quiet cluster, every few rounds beside
thousands of other users' jobs, whose replay of Slurm's passes takes seconds. In between, the last ones are kept.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from roach.errors import RoachError, TransportError
from roach.model.tiers import Tier
from roach.ops.estimate.reads import estimates, note_ended, reservation
from roach.ops.estimate.starts import Reservation, StartEstimate, blocked
from roach.ops.events import Event, EventKind
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.watch.jobs import PENDING_ROUNDS_TO_PROMOTE, Ctx, JobWatch
from roach.watch.resv import show_reservations

MOVED_S = 60.0  # a likely start that moves by more than this (and a third of the wait) is said again
CPU_SHARE = 0.1  # the most of the watch's time its estimates take: made again once as old as 10x what they took


def on_estimates(
    client: SlurmClient,
    tiers: tuple[Tier, ...],
    views: dict[str, JobWatch],
    watched: Sequence[str],
    active: Mapping[str, QueueRecord],
    queue: Sequence[QueueRecord],
    meta: dict[str, Any],
    ctx: Ctx,
    touched: set[str],
    resv_of: Mapping[str, str] | None = None,
) -> list[Event]:
    """This round's estimates into ``meta["estimates"]`` (by job id, as JSON), and the ``pending`` lines."""
    now = ctx.now
    meta["ended_s"], meta["running_s"] = note_ended(meta.get("ended_s") or [], meta.get("running_s") or {}, queue, now)
    # a job seen pending in two rounds in a row: one that starts at once gets no line, and costs no read
    pending = [
        q
        for k in watched
        if (q := active.get(k)) is not None
        and q.state.is_pending
        and views[k].pending_rounds >= PENDING_ROUNDS_TO_PROMOTE
        and blocked(q) is None
    ]
    for k in watched:
        w = views[k]
        if w.start_said is not None and not (k in active and active[k].state.is_pending):
            w.start_said = None
            touched.add(k)
    found: dict[str, StartEstimate] = {}
    kept = {k: StartEstimate(**v) for k, v in (meta.get("estimates_made") or {}).items()}
    if pending and not _due(pending, kept, meta, now):
        meta["estimates"] = {q.job_id: kept[q.job_id].to_json(now) for q in pending} or None
        return []
    if pending:
        paced = {k: {"points": w.points, "step": w.step, "steps_total": w.steps_total} for k, w in views.items()}
        cpu = time.process_time()
        try:
            found = estimates(client, pending, tiers, paced, meta["ended_s"], now, lambda: windows(client), resv_of)
        except (RoachError, TransportError):
            found = {}  # estimated again next round
        meta["estimated"] = [now, time.process_time() - cpu]
    meta["estimates_made"] = {k: asdict(e) for k, e in found.items()} or None
    meta["estimates"] = {k: e.to_json(now) for k, e in found.items()} or None
    events = []
    for key, est in found.items():
        w, q = views[key], active[key]
        if est.likely is None or not _moved(w.start_said, est.likely, now):
            continue
        w.start_said = est.likely
        touched.add(key)
        events.append(
            ctx.event(
                EventKind.PENDING,
                w,
                f"{w.label()} pending on {q.reason_text or q.reason.value}: starts {est.line(now)}",
                reason=q.reason.name,
                reason_text=q.reason_text,
                estimate=est.to_json(now),
            )
        )
    return events


def _due(
    pending: Sequence[QueueRecord], kept: Mapping[str, StartEstimate], meta: Mapping[str, Any], now: float
) -> bool:
    """Whether this round makes the estimates again: a pending job has none, or the last ones (made at ``at``,
    taking ``cpu`` seconds) are old enough for :data:`CPU_SHARE`."""
    at, cpu = meta.get("estimated") or (0.0, 0.0)
    return any(q.job_id not in kept for q in pending) or now - at >= cpu / CPU_SHARE


def windows(client: SlurmClient) -> list[Reservation]:
    """The cluster's reservations as the estimate reads them, from the site cache when it has them (an
    administrator's reservation changes rarely: one read per cache age)."""
    out = []
    for r in show_reservations(client, cached=True).values():
        w = reservation(r.name, r.start, r.end, r.nodes)
        if w is not None:
            out.append(w)
    return out


def _moved(said: float | None, likely: float, now: float) -> bool:
    if said is None:
        return True
    return abs(likely - said) > max(MOVED_S, (max(said, likely) - now) / 3)
