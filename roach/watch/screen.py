"""`roach top`'s model: one frame of the screen, built from what a watch round saw. Pure: no I/O.

A frame is the tier table, the running holders and one row per watched job: its state, tier, nodes, restarts
and preemptions, the last progress line, its pace (steps per minute and an ETA from the run's own step times,
:func:`pace`), the pending reason with its outlook (:func:`~roach.ops.explain.explain`, what ``roach why``
says) and whether it is stalled. The round itself is :class:`~roach.watch.watcher.Watcher`'s: the screen costs
no Slurm call of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roach.model.tiers import Tier
from roach.ops.events import Event, EventKind, TierRow, human_seconds, iso
from roach.ops.explain import Explanation, PendingContext, explain
from roach.scheduler.parse import QueueRecord
from roach.watch.jobs import JobWatch

KEEP_DONE_S = 3600.0  # an ended job stays on the screen this long after it left the queue


@dataclass(frozen=True)
class Pace:
    """How fast a run goes: steps per minute over its recent progress lines, and the time its remaining steps
    take at that pace (None where not known: fewer than two timed lines, no step total)."""

    steps_per_min: float | None = None
    eta_s: float | None = None


def pace(points: Sequence[Sequence[float]], step: int | None, steps_total: int | None) -> Pace:
    """The pace from ``[time, step]`` pairs (oldest first, one attempt's: see
    :func:`~roach.watch.progress.add_points`) and the ETA of ``steps_total - step`` steps at it."""
    if len(points) < 2:
        return Pace()
    (t0, s0), (t1, s1) = points[0][:2], points[-1][:2]
    if t1 <= t0 or s1 <= s0:
        return Pace()
    per_s = (s1 - s0) / (t1 - t0)
    eta = None
    if steps_total and step is not None:
        eta = max(steps_total - step, 0) / per_s
    return Pace(per_s * 60.0, eta)


@dataclass(frozen=True)
class JobRow:
    """One watched job as the screen shows it."""

    key: str  # squeue's id: 123 or 123_4
    run_id: str | None
    name: str
    state: str  # Slurm's state, its final state once ended, "ENDING" while sacct has not said yet
    tier: str | None
    nodes: str
    gpus: int
    restarts: int  # Slurm's restart count
    preemptions: int  # the watch's count, every tier
    progress: str | None  # the last progress line
    step: int | None
    steps_total: int | None
    pace: Pace
    stalled: bool
    done: bool
    exit_code: str | None
    reason: str  # the pending reason as squeue prints it ("" when not pending)
    explanation: Explanation | None  # a pending job's reason read with the queue (roach why)
    estimate: Mapping[str, Any] | None  # a pending job's start estimate, as the round saved it (roach why --json's)
    promotion: str | None  # the tier a promotion would move it to now (roach watch's promotion line)
    superseded_by: int | None  # promoted or moved on: the job that continues the run
    holder: bool
    held_s: int | None  # a running holder's held time
    time_limit_s: int | None
    log_path: str | None

    @property
    def pending(self) -> bool:
        return self.explanation is not None

    @property
    def outlook(self) -> str | None:
        return self.explanation.outlook.value if self.explanation else None

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.key,
            "run_id": self.run_id,
            "name": self.name or None,
            "state": self.state,
            "tier": self.tier,
            "nodes": self.nodes or None,
            "gpus": self.gpus,
            "restarts": self.restarts,
            "preemptions": self.preemptions,
            "progress": self.progress,
            "step": self.step,
            "steps_total": self.steps_total,
            "steps_per_min": None if self.pace.steps_per_min is None else round(self.pace.steps_per_min, 2),
            "eta_s": None if self.pace.eta_s is None else round(self.pace.eta_s, 1),
            "stalled": self.stalled,
            "done": self.done,
            "exit_code": self.exit_code,
            "reason": self.reason or None,
            "outlook": self.outlook,
            "why": self.explanation.to_json() if self.explanation else None,
            "estimate": dict(self.estimate) if self.estimate and self.explanation else None,
            "promotion": self.promotion,
            "superseded_by": self.superseded_by,
            "holder": self.holder,
            "held_s": self.held_s,
            "time_limit_s": self.time_limit_s,
            "log": self.log_path,
        }


@dataclass(frozen=True)
class Frame:
    """One screen: the cluster, when, its tiers, the watched jobs, and what is unreachable."""

    cluster: str
    time: float
    tiers: tuple[TierRow, ...]
    rows: tuple[JobRow, ...]
    outages: tuple[str, ...] = ()
    holders_idle: Mapping[str, bool | None] | None = None  # from the last heartbeat: is a holder idle?

    def row(self, key: str) -> JobRow | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "time": iso(self.time),
            "tiers": [t.to_json() for t in self.tiers],
            "jobs": [r.to_json() for r in self.rows],
            "outages": list(self.outages),
        }


def _natural(key: str) -> tuple[int, int, str]:
    job, _, task = key.partition("_")
    return (int(job) if job.isdigit() else 0, int(task) if task.isdigit() else -1, key)


def _row(
    w: JobWatch,
    q: QueueRecord | None,
    ctx: PendingContext,
    promotion: str | None,
    estimate: Mapping[str, Any] | None = None,
) -> JobRow:
    exp = None
    if q is not None and q.state.is_pending:
        exp = explain(q, PendingContext(queue=ctx.queue, tiers=ctx.tiers, req_nodes=w.req_nodes))
    if w.done:
        state = w.final_state or w.state or "?"
    elif q is None:
        state = "ENDING" if w.state else "?"  # left the queue; accounting has not said how it ended yet
    else:
        state = q.state.value
    running_holder = w.holder and q is not None and q.state.is_running
    return JobRow(
        key=w.key,
        run_id=w.run_id,
        name=w.name,
        state=state,
        tier=w.tier,
        nodes=(q.nodelist or "") if q is not None and q.state.is_running else "",
        gpus=w.gpus,
        restarts=q.restart_count if q is not None else w.restart_count,
        preemptions=sum(w.preemptions.values()),
        progress=w.progress,
        step=w.step,
        steps_total=w.steps_total,
        pace=pace(w.points, w.step, w.steps_total),
        stalled=w.stalled and not w.done,
        done=w.done,
        exit_code=w.exit_code if w.done else None,
        reason=q.reason_text if exp is not None and q is not None else "",
        explanation=exp,
        estimate=estimate if exp is not None else None,
        promotion=promotion,
        superseded_by=w.superseded_by,
        holder=w.holder,
        held_s=q.elapsed_s if running_holder and q is not None else None,
        time_limit_s=q.time_limit_s if running_holder and q is not None else None,
        log_path=w.log_path,
    )


def build_frame(
    cluster: str,
    tiers: tuple[Tier, ...],
    now: float,
    saved: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any],
    queue: Sequence[QueueRecord],
    holders_idle: Mapping[str, bool | None] | None = None,
    keep_done_s: float = KEEP_DONE_S,
) -> Frame:
    """The frame of one round: ``saved`` and ``meta`` are the watch state the round left in the store
    (:meth:`~roach.records.store.Store.watch_load`), ``queue`` its squeue (the user's whole queue)."""
    active = {str(q.ref): q for q in queue if q.state.is_active}
    ctx = PendingContext(queue=tuple(queue), tiers=tiers)
    promotions = dict(tag.split(">", 1) for tag in meta.get("promotions") or [] if ">" in tag)
    estimates = meta.get("estimates") or {}
    rows = []
    for key in sorted(saved, key=_natural):
        w = JobWatch.from_json(dict(saved[key]))
        if w.done and now - (w.left_at or w.first_seen) > keep_done_s:
            continue
        rows.append(_row(w, active.get(key), ctx, promotions.get(key), estimates.get(key)))
    table = tuple(
        TierRow(r["tier"], r["cap"], r["claimed"], r["running"], r["pending"], r["preemptible"])
        for r in meta.get("tiers") or []
    )
    outages = tuple(
        f"{k.removeprefix('outage_')} unreachable for {human_seconds(now - v['since'])}: {v.get('error', '')}"
        for k, v in sorted(meta.items())
        if k.startswith("outage_") and v
    )
    return Frame(cluster, now, table, tuple(rows), outages, dict(holders_idle or {}))


def holders_idle_of(events: Sequence[Event]) -> dict[str, bool | None] | None:
    """What a round's heartbeat said of each running holder (idle or not); None when the round had none."""
    for e in events:
        if e.kind is EventKind.HEARTBEAT:
            return {str(h["job_id"]): h.get("idle") for h in e.data.get("holders") or []}
    return None


_STAMP = re.compile(r"^\S*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\]?\s*")


def short_progress(line: str | None) -> str:
    """A progress line without its leading timestamp and roach's prefix: ``step 40/100``."""
    if not line:
        return ""
    text = _STAMP.sub("", line.strip())
    at = text.lower().find("step ")
    return text[at:] if at > 0 and text[:at].rstrip().endswith(":") else text
