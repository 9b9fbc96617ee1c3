"""The watcher's view of one job between rounds, and what changed since the last round.

Pure: each function takes the job's view from the previous round and what Slurm (or its log) says now, and
returns the new view and the events the change makes. Nothing is compared with zero: a job first seen
this round is a baseline (plus "started" when it already runs, since nobody has said so yet).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from roach.model.job_state import JobState
from roach.model.tiers import Tier, tier_of
from roach.ops.events import Event, EventKind, human_seconds, job_label
from roach.ops.explain import Explanation, may_never
from roach.scheduler.parse import QueueRecord

_REQUEUE_STATES = (JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED, JobState.SPECIAL_EXIT)


@dataclass(slots=True)  # slots: a long queue's views are many, and each round reads a field or two of each
class JobWatch:
    """What the watcher knows of one job (an allocation or an array task), saved in the store as JSON."""

    key: str  # squeue's id: 123 or 123_4
    job_id: int  # the allocation's own id
    run_id: str | None = None
    name: str = ""
    log_path: str | None = None
    resubmitted: bool = False  # a later job of a run that ran before (resume, promote, move)
    tier: str | None = None
    gpus: int = 0
    submitted: float | None = None
    first_seen: float = 0.0
    # Slurm's view, last round
    state: str | None = None  # JobState value
    reason: str = ""
    elapsed_s: int = 0
    restart_count: int = 0
    in_queue: bool = False
    left_at: float | None = None  # when it left the queue; done only once sacct says it ended
    final_state: str | None = None
    exit_code: str | None = None
    done: bool = False
    # edges already reported
    reported: list[str] = field(default_factory=list)
    pending_rounds: int = 0  # rounds in a row it was seen pending, up to PENDING_ROUNDS_TO_PROMOTE
    never_pending: str | None = None  # a never-reason seen last round: reported if seen again
    req_nodes: str | None = None  # its --nodelist, asked once when its reason is ReqNodeNotAvail
    restarts_reported: int = 0
    requeues: int = 0
    preemptions: dict[str, int] = field(default_factory=dict)  # per tier
    superseded_by: int | None = None  # promoted or moved: the job that continues the run
    holder: bool = False  # a holder (`roach hold`): charged while it runs, attempt or not
    # the reservation it asks for (squeue's %v), remembered: a reservation that ends leaves its jobs without one
    reservation: str | None = None
    resv_start: str | None = None
    resv_gone: bool = False
    # its log
    log_size: int | None = None
    log_mtime: float | None = None
    progress: str | None = None
    step: int | None = None
    steps_total: int | None = None
    last_progress_time: float | None = None
    gaps: list[float] = field(default_factory=list)
    points: list[list[float]] = field(default_factory=list)  # recent [time, step] pairs: the run's own pace
    env_failed: str | None = None  # its log's env_failed line: the environment could not be built
    node_failed: str | None = None  # the last node_failed line its log said (LogFacts.node_failed)
    checkpoints: bool | None = None
    last_checkpoint: int | None = None  # the step its log last said it checkpointed at
    attempt: int | None = None
    stalled: bool = False
    stall_requeued_at: int | None = None  # the checkpoint step `--on-stall requeue` last resumed it from
    held_released: int | None = None  # the restart count at which `--on-stall requeue` last released its hold
    stepping: bool | None = None  # its log: the current attempt has logged a step (False: starting; None: not known)
    last_leave: str | None = None  # how the run's last attempt left, by its log: "preempted", "wall clock", "finished"
    left_step: int | None = None  # the step that stop line names: how many steps were done when it left
    start_said: float | None = None  # the likely start its last `pending` line said (None: none since it pends)

    def to_json(self) -> dict[str, Any]:
        # a round serializes every watched job (to compare and save): dataclasses.asdict's deep copy cost most of
        # a 1,000-job round
        out = dict(zip(_NAMES, _VALUES(self)))
        for k in _MUTABLE:
            out[k] = type(out[k])(out[k])  # their items are plain values: a shallow copy is a copy
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobWatch:
        # a round loads every watched job: skip the filtering copy when the keys are this version's own
        return cls(**data) if data.keys() <= _FIELDS else cls(**{k: v for k, v in data.items() if k in _FIELDS})

    @property
    def jobstate(self) -> JobState | None:
        return (_STATE_OF.get(self.state) or JobState.parse(self.state)) if self.state else None

    @property
    def running(self) -> bool:
        s = self.jobstate
        return bool(self.in_queue and s is not None and s.is_running)

    @property
    def pending(self) -> bool:
        s = self.jobstate
        return bool(self.in_queue and s is not None and s.is_pending)

    @property
    def left_to_do(self) -> float:
        """The fraction of the run still to do, from its last "step N/M" line (1.0 when not known)."""
        if self.step is None or not self.steps_total:
            return 1.0
        return max(0.0, 1.0 - self.step / self.steps_total)

    def label(self) -> str:
        return job_label(self.key, self.run_id, self.name)


@dataclass(frozen=True)
class Ctx:
    """What the transitions need besides the job: the cluster's name and tiers, the clock, explain()."""

    cluster: str
    tiers: tuple[Tier, ...]
    now: float
    explain: Callable[[QueueRecord], Explanation]

    def event(self, kind: EventKind, w: JobWatch, message: str, **data: Any) -> Event:
        return Event(kind, self.now, self.cluster, message, w.key, w.run_id, w.name or None, data)


PENDING_ROUNDS_TO_PROMOTE = 2  # seen pending this many rounds in a row, with a reason: the scheduler looked at it
_STATE_OF = {s.value: s for s in JobState}  # what a view saves; JobState.parse reads any way Slurm prints one
_NAMES = tuple(f.name for f in fields(JobWatch))
_VALUES = operator.attrgetter(*_NAMES)
_FIELDS = frozenset(_NAMES)
_MUTABLE = tuple(f.name for f in fields(JobWatch) if f.default_factory is not MISSING)  # lists and dicts


def new_watch(
    key: str,
    rec: QueueRecord | None,
    now: float,
    *,
    run_id: str | None = None,
    name: str = "",
    log_path: str | None = None,
    job_id: int | None = None,
    resubmitted: bool = False,
) -> JobWatch:
    w = JobWatch(
        key=key,
        job_id=job_id if job_id is not None else (rec.raw_id if rec else int(key.split("_")[0])),
        run_id=run_id,
        name=name or (rec.name if rec else ""),
        log_path=log_path,
        first_seen=now,
        resubmitted=resubmitted,
    )
    if rec is not None:
        w.submitted = rec.submit_time.timestamp() if rec.submit_time else None
        w.restart_count = w.restarts_reported = rec.restart_count
    return w


def on_queue(w: JobWatch, rec: QueueRecord, ctx: Ctx, first: bool) -> list[Event]:
    """The job is in this round's squeue: started, requeued/preempted, never-starts; update the view."""
    events: list[Event] = []
    tier = tier_of(ctx.tiers, rec.partition, rec.qos)
    was = w.jobstate if w.in_queue else None
    w.tier, w.gpus, w.name = (tier.name if tier else None), rec.tres.gpus, w.name or rec.name
    why = []
    # A requeued job may show COMPLETING with its restart count already raised: its requeue is told once it
    # leaves COMPLETING (pending or running again), in one event, not by the count now and by COMPLETING ->
    # PENDING next round.
    if not first and rec.state is not JobState.COMPLETING:
        if rec.restart_count > w.restarts_reported:
            why.append(f"restart count {w.restarts_reported} -> {rec.restart_count}")
        if was is not None and was.is_running and rec.state.is_pending:
            why.append(f"{was.value} -> {rec.state.value}")
        if was is not None and was.is_running and rec.state.is_running and rec.elapsed_s < w.elapsed_s:
            why.append(f"elapsed went backwards ({w.elapsed_s}s -> {rec.elapsed_s}s)")
        if rec.state in _REQUEUE_STATES and was is not rec.state and not (was and was.is_pending):
            why.append(f"state {rec.state.value}")
    if why:
        events.append(_requeued(w, rec, tier, why, ctx))
    if rec.state.is_running and (was is None or not was.is_running or bool(why)):
        again = " again" if w.requeues else ""
        where = f" on {rec.nodelist}" if rec.nodelist else ""
        on_tier = f", tier {w.tier}" if w.tier else ""
        waited = f" after {human_seconds(ctx.now - w.submitted)} since submission" if w.submitted and not why else ""
        events.append(
            ctx.event(
                EventKind.STARTED,
                w,
                f"{w.label()} started{again}{where}{on_tier} "
                f"({rec.tres.gpus} GPU{'s' if rec.tres.gpus != 1 else ''}){waited}",
                state=rec.state.value,
                nodes=rec.nodelist,
                tier=w.tier,
                gpus=rec.tres.gpus,
                restart_count=rec.restart_count,
            )
        )
        if "started" not in w.reported:
            w.reported.append("started")
        w.stalled = False
    if rec.state.is_pending:
        flag = f"never:{rec.reason.name}"
        if w.never_pending == rec.reason.name and flag in w.reported:
            pass  # said already; for the same reason it stays "never" (a job's size, its pin, the table)
        elif may_never(rec) and (exp := ctx.explain(rec)).never:
            if w.never_pending == rec.reason.name and flag not in w.reported:
                events.append(
                    ctx.event(
                        EventKind.NEVER_STARTS,
                        w,
                        f"{w.label()} will never start as it is: {exp.line()}",
                        **exp.to_json(),
                    )
                )
                w.reported.append(flag)
            w.never_pending = rec.reason.name
        else:
            w.never_pending = None
    # counted up to what promotion asks, no further: a view that does not change is not written again
    w.pending_rounds = min(w.pending_rounds + 1, PENDING_ROUNDS_TO_PROMOTE) if rec.state.is_pending else 0
    w.state, w.reason, w.elapsed_s = rec.state.value, rec.reason_text, rec.elapsed_s
    w.restart_count, w.in_queue, w.left_at = rec.restart_count, True, None
    return events


def settled(w: JobWatch, rec: QueueRecord, tiers: tuple[Tier, ...]) -> bool:
    """Whether ``on_queue(w, rec, ctx, first=False)`` would change nothing in ``w`` and say nothing: ``w`` is
    where on_queue leaves a job that ``rec`` keeps describing (the same state, reason and counts, pending
    counted up, a never-start said). A round skips such a job while its squeue line stays the same and nothing
    else touched its view (its req_nodes included, which explain() reads). Mirrors :func:`on_queue` test by
    test; tests/test_watch_edges.py checks the two agree."""
    state = rec.state
    pending = state.is_pending
    if not (
        w.in_queue
        and w.left_at is None
        and w.state == state.value
        and w.reason == rec.reason_text
        and w.elapsed_s == rec.elapsed_s
        and w.restart_count == rec.restart_count
        and (state is JobState.COMPLETING or rec.restart_count <= w.restarts_reported)
        and w.gpus == rec.tres.gpus
        and (w.name or rec.name) == w.name
        and w.pending_rounds == (PENDING_ROUNDS_TO_PROMOTE if pending else 0)
    ):
        return False
    if pending and w.never_pending is not None:
        # on_queue leaves None (no never-start) or the reason's name; with its flag the never-start is said
        name = rec.reason.name
        if w.never_pending != name or f"never:{name}" not in w.reported:
            return False
    tier = tier_of(tiers, rec.partition, rec.qos)
    return w.tier == (tier.name if tier else None)


_REQUEUE_VERBS = {
    "wall clock": "requeued at its wall clock",
    "finished": "requeued by Slurm after its run finished (its next attempt finds the result and ends)",
}


def _requeued(w: JobWatch, rec: QueueRecord, tier: Tier | None, why: list[str], ctx: Ctx) -> Event:
    w.requeues += 1
    w.restarts_reported = max(rec.restart_count, w.restarts_reported + 1)
    said, step = w.last_leave, w.left_step if w.left_step is not None else w.step
    w.last_leave = w.left_step = None
    # an attempt that ran to its end and is requeued anyway was not preempted: Slurm 24.11 requeues once more the run
    # that follows a preemption with a grace time, when it ends; its next attempt finds the result
    preempted = said == "preempted" or (bool(tier and tier.preemptible) and said not in ("wall clock", "finished"))
    name = w.tier or "?"
    if preempted:
        w.preemptions[name] = w.preemptions.get(name, 0) + 1
    n = w.preemptions.get(name, 0)
    at = f" at step {step}" if step is not None else ""
    advice = ""
    if preempted and n >= 2:
        advice = (
            f"; preempted {n} times on tier {name}: a placement to change "
            f"(`roach promote {w.run_id or w.key} --to <tier>` once it pends, or `roach move`)"
        )
    elif preempted and w.checkpoints is False:
        advice = (
            "; it does not checkpoint and restarts from the top: first to promote when a non-preemptible slot frees"
        )
    kind = EventKind.PREEMPTED if preempted else EventKind.REQUEUED
    verb = "preempted" if preempted else _REQUEUE_VERBS.get(said or "", "requeued")
    return ctx.event(
        kind,
        w,
        f"{w.label()} {verb}{at} on tier {name}: back in the queue ({', '.join(why)}; "
        f"restart {rec.restart_count}){advice}",
        tier=w.tier,
        why=why,
        restart_count=rec.restart_count,
        step=step,
        preemptions_on_tier=n,
        checkpoints=w.checkpoints,
    )
