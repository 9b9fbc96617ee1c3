"""The watch's tier moves (``roach watch --rebalance``): which pending jobs to promote this round, making a
promotion, and the start probe (``sbatch --test-only``) that says a tier would start one now."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from roach.errors import RoachError, SlurmError, TransportError
from roach.fleet.cluster import Cluster
from roach.model.states import PendingReason
from roach.model.tiers import Tier
from roach.ops.events import Event, EventKind, TierRow
from roach.ops.rebalance import (
    Candidate,
    Promotion,
    on_tier,
    plan_promotions,
    probe_start,
    promotable,
    record_resources,
)
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.watch.jobs import PENDING_ROUNDS_TO_PROMOTE, JobWatch
from roach.watch.logs import Look

Promoter = Callable[[Promotion], int]  # makes a promotion; returns the new job's id


@dataclass
class Rebalancer:
    """What a watch does about tiers each round on ``cluster``: plans promotions among its pending runs, and makes
    them (``rebalance`` with a ``promoter``) or says each once. ``probe_window_s``: a tier with room counts only
    when ``sbatch --test-only`` says it would start the job within that many seconds (None: no probe)."""

    cluster: Cluster
    client: SlurmClient
    store: Store
    rebalance: bool = False
    promoter: Promoter | None = None  # makes a promotion (default: nothing; the CLI passes one)
    probe_window_s: float | None = None

    def promotions(
        self,
        meta: dict[str, Any],
        rows: tuple[TierRow, ...],
        views: dict[str, JobWatch],
        runs: list[str],
        active: dict[str, QueueRecord],
        seen: Look | None,
        now: float,
        touched: set[str],
    ) -> list[Event]:
        """The promotions this round plans among ``runs`` (the keys of the views of a run, in the views' order):
        made (``--rebalance``) or said once each; ``touched`` gets the keys of the views a promotion changed."""
        cands = candidates(views, runs, active)
        probe = self._probe(seen, now) if self.probe_window_s is not None else None
        plans = plan_promotions(self.cluster.tiers, rows, cands, probe) if cands else []
        before = set(meta.get("promotions") or [])
        failed = set(meta.get("promote_failed") or [])
        promoter = self.promoter if self.rebalance else None
        events = []
        for p in plans:
            tag = f"{p.key}>{p.to_tier}"
            if promoter is not None:
                if tag not in failed:
                    events.append(self._promote(promoter, p, views, rows, now))
                    touched.add(p.key)
                    if events[-1].kind is EventKind.PROMOTE_FAILED:
                        failed.add(tag)
            elif tag not in before:
                events.append(
                    Event(
                        EventKind.PROMOTION,
                        now,
                        self.cluster.name,
                        p.line(),
                        p.key,
                        p.run_id,
                        views[p.key].name or None,
                        data=promotion_data(p),
                        tiers=rows,
                    )
                )
        meta["promotions"] = sorted(f"{p.key}>{p.to_tier}" for p in plans)
        meta["promote_failed"] = sorted(failed)
        return events

    def _promote(
        self, promoter: Promoter, p: Promotion, views: dict[str, JobWatch], rows: tuple[TierRow, ...], now: float
    ) -> Event:
        """Makes promotion ``p``: PROMOTED, the view superseded by the new job; or PROMOTE_FAILED, saying why."""
        w = views[p.key]
        try:
            new = promoter(p)
        except RoachError as err:
            return Event(
                EventKind.PROMOTE_FAILED,
                now,
                self.cluster.name,
                f"could not promote job {p.key} (run {p.run_id}) to {p.to_tier}: {err.message}",
                p.key,
                p.run_id,
                w.name or None,
                data={**promotion_data(p), "error": str(err)},
                tiers=rows,
            )
        w.superseded_by = new
        return Event(
            EventKind.PROMOTED,
            now,
            self.cluster.name,
            f"promoted job {p.key} (run {p.run_id}) from {p.from_tier} to {p.to_tier}: now job {new}",
            p.key,
            p.run_id,
            w.name or None,
            data={**promotion_data(p), "new_job_id": new},
            tiers=rows,
        )

    def _probe(self, seen: Look | None, now: float) -> Callable[[Tier, Candidate], bool]:
        """Whether a tier would start a candidate within ``probe_window_s`` of now: the cluster's clock as this
        round's log look read it, else this machine's."""

        def probe(tier: Tier, cand: Candidate) -> bool:
            rec = self.store.find(cand.key, cluster=self.cluster.name)
            opts = on_tier(record_resources(rec), tier).sbatch_options(self.cluster.gpu_flag)
            try:
                start = probe_start(self.client, opts)
            except (SlurmError, TransportError):
                return False
            if start is None:
                return False
            ref = (
                datetime.fromisoformat(seen.local_now)
                if seen is not None and seen.local_now
                else datetime.fromtimestamp(now)
            )
            return (start - ref).total_seconds() <= (self.probe_window_s or 0)

        return probe


def promotion_data(p: Promotion) -> dict[str, Any]:
    return {"from_tier": p.from_tier, "to_tier": p.to_tier, "gpus": p.gpus, "room": p.room}


def candidates(views: dict[str, JobWatch], runs: list[str], active: dict[str, QueueRecord]) -> list[Candidate]:
    """The jobs among ``runs`` a promotion may move: a run's, not superseded, on a tier, pending for
    ``PENDING_ROUNDS_TO_PROMOTE`` rounds in a row with a reason a higher tier could clear."""
    cands: list[Candidate] = []
    for key in runs:
        w = views[key]
        # seen pending twice, with a reason: not a job the scheduler has not looked at yet (the view's own
        # tests first: they are the cheap ones, and most jobs of a long queue fail one)
        if (
            not w.run_id
            or w.superseded_by
            or w.tier is None
            or w.pending_rounds < PENDING_ROUNDS_TO_PROMOTE
            or (q := active.get(key)) is None
            or not q.state.is_pending
            or q.reason is PendingReason.NONE
            or not promotable(q.reason)
        ):
            continue
        cands.append(
            Candidate(
                key,
                w.job_id,
                w.run_id,
                w.tier,
                w.gpus,
                w.left_to_do,
                w.submitted or 0.0,
                w.checkpoints,
                w.preemptions.get(w.tier, 0),
            )
        )
    return cands
