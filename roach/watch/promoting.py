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
    OwnRun,
    Promotion,
    Weighing,
    on_tier,
    plan_moves_below,
    plan_promotions,
    promotable,
    record_resources,
    run_loss,
    weigh,
)
from roach.ops.rebalance import probe as probe_will_run
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.scheduler.parse_control import WillRun
from roach.watch.jobs import PENDING_ROUNDS_TO_PROMOTE, JobWatch
from roach.watch.logs import Look

Promoter = Callable[[Promotion], int]  # makes a promotion; returns the new job's id
STARTS_NOW_S = 10.0  # a move below a cap is made only to a tier that `sbatch --test-only` says starts it this soon


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
        made (``--rebalance``) or said once each; ``touched`` gets the keys of the views a promotion changed.

        With ``--rebalance`` (or a probe window) each tier's first promotion is weighed on what ``sbatch
        --test-only`` says: one that would preempt the user's own runs for more than it gains is not made, and
        said once (``not_promoted``); the others of that tier wait for the next round's probe."""
        cands = candidates(views, runs, active)
        weighing = self.rebalance or self.probe_window_s is not None
        asked: dict[str, WillRun | None] = {}
        probe = self._probe(seen, now, asked, self.probe_window_s) if weighing else None
        plans = plan_promotions(self.cluster.tiers, rows, cands, probe) if cands else []
        if weighing and cands:  # a run held back by its own cap starts now below it, where a tier would take it
            promoted = {p.key for p in plans}
            left = [c for c in cands if c.key not in promoted]
            now_probe = self._probe(seen, now, asked, self.probe_window_s or STARTS_NOW_S)
            plans += plan_moves_below(self.cluster.tiers, rows, left, now_probe)
        if weighing:
            plans = [p for i, p in enumerate(plans) if p.to_tier not in {q.to_tier for q in plans[:i]}]
        own = own_runs(views, active)
        before = set(meta.get("promotions") or [])
        failed = set(meta.get("promote_failed") or [])
        held = set(meta.get("not_promoted") or [])
        promoter = self.promoter if self.rebalance else None
        events = []
        for p in plans:
            tag = f"{p.key}>{p.to_tier}"
            will = asked.get(p.to_tier)
            weighed = weigh(will, own, gain_of(views[p.key], will, seen, now)) if will is not None else None
            if weighed is not None and not weighed.worth:
                if tag not in held:
                    events.append(self._event(EventKind.NOT_PROMOTED, p, views, rows, now, weighed))
                    held.add(tag)
                continue
            if promoter is not None:
                if tag not in failed:
                    events.append(self._promote(promoter, p, views, rows, now, weighed))
                    touched.add(p.key)
                    if events[-1].kind is EventKind.PROMOTE_FAILED:
                        failed.add(tag)
            elif tag not in before:
                events.append(self._event(EventKind.PROMOTION, p, views, rows, now, weighed))
        meta["promotions"] = sorted(f"{p.key}>{p.to_tier}" for p in plans)
        meta["promote_failed"] = sorted(failed)
        meta["not_promoted"] = sorted(held & {f"{c.key}>{t.name}" for c in cands for t in self.cluster.tiers})
        return events

    def _event(
        self,
        kind: EventKind,
        p: Promotion,
        views: dict[str, JobWatch],
        rows: tuple[TierRow, ...],
        now: float,
        weighed: Weighing | None,
    ) -> Event:
        """A promotion to make (``promotion``) or weighed and not made (``not_promoted``), in words."""
        if kind is EventKind.NOT_PROMOTED and weighed is not None:
            line = f"not promoting job {p.key} (run {p.run_id}) from {p.from_tier} to {p.to_tier}: {weighed.text()}"
        else:
            line = p.line() + (f" ({weighed.text()})" if weighed is not None else "")
        data = promotion_data(p, weighed)
        return Event(
            kind, now, self.cluster.name, line, p.key, p.run_id, views[p.key].name or None, data=data, tiers=rows
        )

    def _promote(
        self,
        promoter: Promoter,
        p: Promotion,
        views: dict[str, JobWatch],
        rows: tuple[TierRow, ...],
        now: float,
        weighed: Weighing | None,
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
                data={**promotion_data(p, weighed), "error": str(err)},
                tiers=rows,
            )
        w.superseded_by = new
        why = f": {weighed.text()}" if weighed is not None else ""
        return Event(
            EventKind.PROMOTED,
            now,
            self.cluster.name,
            f"promoted job {p.key} (run {p.run_id}) from {p.from_tier} to {p.to_tier}: now job {new}{why}",
            p.key,
            p.run_id,
            w.name or None,
            data={**promotion_data(p, weighed), "new_job_id": new},
            tiers=rows,
        )

    def _probe(
        self, seen: Look | None, now: float, asked: dict[str, WillRun | None], window_s: float | None
    ) -> Callable[[Tier, Candidate], bool]:
        """Whether a tier would take a candidate within ``window_s`` of now (the cluster's clock as this round's log
        look read it, else this machine's); without a window, a capped tier's room is enough. A tier is asked once a
        round: its answer is kept in ``asked``."""

        def probe(tier: Tier, cand: Candidate) -> bool:
            if tier.name not in asked:
                rec = self.store.find(cand.key, cluster=self.cluster.name)
                opts = on_tier(record_resources(rec), tier).sbatch_options(self.cluster.gpu_flag)
                try:
                    asked[tier.name] = probe_will_run(self.client, opts)
                except (SlurmError, TransportError):
                    asked[tier.name] = None
            will = asked[tier.name]
            if window_s is None:  # a capped tier's room is enough (the answer, if any, weighs the move);
                return tier.gpu_cap is not None  # an uncapped tier counts only with a window
            if will is None:
                return False
            return (will.start - cluster_now(seen, now)).total_seconds() <= window_s

        return probe


def cluster_now(seen: Look | None, now: float) -> datetime:
    """The cluster's local time as this round's log look read it, else this machine's."""
    return (
        datetime.fromisoformat(seen.local_now) if seen is not None and seen.local_now else datetime.fromtimestamp(now)
    )


def gain_of(w: JobWatch, will: WillRun | None, seen: Look | None, now: float) -> float | None:
    """How much sooner a pending run starts where ``will`` says than where it pends (its last ``pending`` line's
    likely start); None when either is not known."""
    if will is None or w.start_said is None:
        return None
    starts_in = max((will.start - cluster_now(seen, now)).total_seconds(), 0.0)
    return w.start_said - (now + starts_in)


def own_runs(views: dict[str, JobWatch], active: dict[str, QueueRecord]) -> dict[int, OwnRun]:
    """The user's running runs by Slurm's raw job id (what ``--test-only`` names), with what each would lose."""
    own: dict[int, OwnRun] = {}
    for key, q in active.items():
        w = views.get(key)
        if w is None or not w.run_id or not q.state.is_running:
            continue
        own[q.raw_id] = OwnRun(key, run_loss(w.points, w.step, w.last_checkpoint, w.checkpoints, q.elapsed_s))
    return own


def promotion_data(p: Promotion, weighed: Weighing | None = None) -> dict[str, Any]:
    """A promotion event's data: the move, and (weighed) the user's runs it preempts and what they lose and it gains."""
    data: dict[str, Any] = {"from_tier": p.from_tier, "to_tier": p.to_tier, "gpus": p.gpus, "room": p.room}
    return {**data, **(weighed or Weighing((), None, None)).to_json()}


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
                q.reason.is_limit and q.reason.name.startswith("QOS") and "PerUser" in q.reason.name,
            )
        )
    return cands
