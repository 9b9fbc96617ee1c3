"""Moving jobs between tiers: which pending job to promote, and promoting or moving one.

- :func:`plan_promotions` (pure): with the tier table counted afresh, spend each tier's room, top down, on
  the user's pending jobs from lower tiers: the jobs with the most left to do first, the youngest first
  among equals; a run that does not checkpoint and was preempted, or one preempted twice, before all.
- :func:`plan_moves_below` (pure): a pending job held back by the user's own cap on its tier goes to the highest
  tier below that would start it now.
- :func:`promote`: a pending job loses nothing by moving: hold it, resubmit its run id into the tier
  (:func:`~roach.launch.submit.resume`), then cancel it (released again if the resubmission fails).
- :func:`move`: a running run that checkpoints: ``scancel`` (TERM: the run checkpoints at its step boundary
  and does not come back), wait until Slurm says it ended, check that ``resume.pt`` is newer than the signal,
  resubmit its run id into the tier, and check that the new log says ``resumed at step N``.
- :func:`probe`: ``sbatch --test-only`` for a tier: when would such a job start, and whose running jobs would
  Slurm preempt for it (it ignores per-user caps, which the tier table accounts for).
- :func:`weigh` (pure): a promotion that would preempt the user's own runs is made only when they lose less
  (steps since their checkpoints, plus a restart each) than it gains (how much sooner it starts).

Only jobs in roach's store are ever touched: they are the user's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.errors import RoachError, SlurmError, UsageError
from roach.fleet.cluster import Cluster
from roach.launch.job import Job
from roach.launch.repo import inspect_repo
from roach.launch.submit import resume
from roach.model.resources import Resources
from roach.model.states import PendingReason
from roach.model.tiers import Tier, tier_named, tier_of
from roach.ops.events import TierRow, human_seconds
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import QueueRecord
from roach.scheduler.parse_control import WillRun, parse_will_run

MOVE_NOT_RESUMED = 8  # exit code: the moved run did not resume at its step


class MoveError(RoachError):
    """A move was made but the new job did not resume where the old one checkpointed."""

    exit_code = MOVE_NOT_RESUMED


# Reasons a job waits on that another tier cannot help with: its own holds, times and dependencies.
_NOT_A_TIER_PROBLEM = {
    PendingReason.BeginTime,
    PendingReason.Dependency,
    PendingReason.DependencyNeverSatisfied,
    PendingReason.JobArrayTaskLimit,
}


def promotable(reason: PendingReason) -> bool:
    """Could a higher tier start a job pending on ``reason`` sooner?"""
    return reason not in _NOT_A_TIER_PROBLEM and not reason.is_held


# -- planning (pure) ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A pending job of the user's that roach could move (a run in its store)."""

    key: str
    job_id: int
    run_id: str
    tier: str
    gpus: int
    left: float = 1.0  # fraction of the run still to do
    submitted: float = 0.0  # epoch; larger = younger
    checkpoints: bool | None = None
    preemptions: int = 0  # on its current tier
    capped: bool = False  # it waits on a per-user limit of its own tier's QOS (the user's cap there, claimed)

    @property
    def urgent(self) -> bool:
        """Preempted and loses everything each time, or preempted twice here: move it first."""
        return (self.checkpoints is False and self.preemptions >= 1) or self.preemptions >= 2


@dataclass(frozen=True)
class Promotion:
    """A move to make now: ``job`` pends on ``from_tier`` while ``to_tier`` has room for it."""

    key: str
    job_id: int
    run_id: str
    from_tier: str
    to_tier: str
    gpus: int
    room: int | None  # free GPUs of the user's on to_tier before this move (None: no cap, the probe said so)
    below: bool = False  # to a lower tier that starts it now, away from its own tier's cap

    def line(self) -> str:
        if self.below:
            return (
                f"job {self.key} (run {self.run_id}, {self.gpus} GPU{'s' if self.gpus != 1 else ''}) waits on "
                f"{self.from_tier} behind your cap there while tier {self.to_tier} would start it now: "
                f"roach promote {self.run_id} --to {self.to_tier}"
            )
        room = f"{self.room} free GPU{'s' if self.room != 1 else ''}" if self.room is not None else "a start now"
        return (
            f"tier {self.to_tier} has {room} while job {self.key} (run {self.run_id}, {self.gpus} GPU"
            f"{'s' if self.gpus != 1 else ''}) pends on {self.from_tier}: "
            f"roach promote {self.run_id} --to {self.to_tier}"
        )


def _rank(c: Candidate) -> tuple[bool, float, float]:
    return (not c.urgent, -c.left, -c.submitted)


def plan_promotions(
    tiers: Sequence[Tier],
    rows: Sequence[TierRow],
    candidates: Sequence[Candidate],
    probe: Callable[[Tier, Candidate], bool] | None = None,
) -> list[Promotion]:
    """The promotions to make now, top down. A capped tier's room is its cap minus what the user claims
    (pending included), spent without overshooting; an uncapped tier takes one job a round, and only
    when ``probe`` says such a job would start soon. ``probe`` is asked at most once per tier."""
    order = {t.name: i for i, t in enumerate(tiers)}
    free = {r.name: r.free for r in rows}
    taken: set[str] = set()
    plans: list[Promotion] = []
    for i, tier in enumerate(tiers):
        room = free.get(tier.name)
        if tier.gpu_cap is None and probe is None:
            continue
        if tier.gpu_cap is not None and not room:
            continue
        # a job on a QOS outside the tier table (a plain default QOS) ranks below every tier, but is never
        # moved onto a preemptible one: that would trade a safe slot for one that can be taken away
        lower = sorted(
            (
                c
                for c in candidates
                if order.get(c.tier, len(tiers)) > i
                and c.key not in taken
                and not (tier.preemptible and c.tier not in order)
            ),
            key=_rank,
        )
        probed = False
        for c in lower:
            if tier.gpu_cap is not None and c.gpus > (room or 0):
                continue
            if probe is not None and not probed:
                if not probe(tier, c):
                    break  # the cluster would not start such a job on this tier now
                probed = True
            plans.append(Promotion(c.key, c.job_id, c.run_id, c.tier, tier.name, c.gpus, room))
            taken.add(c.key)
            if tier.gpu_cap is None:
                break
            room = (room or 0) - c.gpus
            if room <= 0:
                break
    return plans


def plan_moves_below(
    tiers: Sequence[Tier],
    rows: Sequence[TierRow],
    candidates: Sequence[Candidate],
    starts_now: Callable[[Tier, Candidate], bool],
) -> list[Promotion]:
    """The runs to move down now: each one waiting behind the user's own cap on its tier goes to the highest tier
    below it that ``starts_now`` says would start it at once, one run a tier a round (``starts_now`` is asked at
    most once per tier). A run that does not checkpoint is never moved onto a preemptible tier, and a capped tier
    below takes only what its room holds."""
    order = {t.name: i for i, t in enumerate(tiers)}
    free = {r.name: r.free for r in rows}
    answered: dict[str, bool] = {}
    plans: list[Promotion] = []
    for c in sorted((c for c in candidates if c.capped and c.tier in order), key=_rank):
        for tier in tiers[order[c.tier] + 1 :]:
            if tier.preemptible and c.checkpoints is False:
                continue
            if tier.gpu_cap is not None and c.gpus > (free.get(tier.name) or 0):
                continue
            if tier.name not in answered:
                answered[tier.name] = starts_now(tier, c)
                if answered[tier.name]:
                    plans.append(
                        Promotion(c.key, c.job_id, c.run_id, c.tier, tier.name, c.gpus, free.get(tier.name), True)
                    )
                    break
    return plans


# -- what a promotion costs the user's own runs (pure) ------------------------------------------------------
# What a preempted run pays to come back, besides the steps since its checkpoint: the requeue, a node, the clone,
# the imports (the lab takes about 25 s from preemption to the first step; a site's requeue and start take longer).
RESTART_S = 60.0


@dataclass(frozen=True)
class OwnRun:
    """A running run of the user's that a promotion may preempt, and what it would lose."""

    key: str
    loss_s: float | None  # since its last checkpoint (all it ran, if it does not checkpoint) plus a restart


def run_loss(
    points: Sequence[Sequence[float]],
    step: int | None,
    last_checkpoint: int | None,
    checkpoints: bool | None,
    elapsed_s: float,
) -> float | None:
    """What a running run loses if preempted now: the steps since its last checkpoint at its pace (all it ran when
    it does not checkpoint), plus :data:`RESTART_S`; None when its log does not say enough to tell."""
    if checkpoints is False:
        return elapsed_s + RESTART_S
    if step is None or last_checkpoint is None or len(points) < 2:
        return None
    (t0, s0), (t1, s1) = points[0][:2], points[-1][:2]
    if t1 <= t0 or s1 <= s0:
        return None
    return max(step - last_checkpoint, 0) * (t1 - t0) / (s1 - s0) + RESTART_S


@dataclass(frozen=True)
class Weighing:
    """A promotion weighed: the user's own runs Slurm would preempt to start it, what they lose, what it gains."""

    preempts: tuple[str, ...]  # keys of the user's running runs that starting it would preempt
    loss_s: float | None  # their losses added up (None: one of them is not known)
    gain_s: float | None  # how much sooner it starts than where it pends (None: not known)

    @property
    def worth(self) -> bool:
        """Make it: it preempts none of the user's runs, or they lose less than it gains."""
        if not self.preempts:
            return True
        return self.loss_s is not None and self.gain_s is not None and self.loss_s < self.gain_s

    def text(self) -> str:
        if not self.preempts:
            return "it starts without preempting a run of yours"
        runs = f"run{'s' if len(self.preempts) > 1 else ''} {', '.join(self.preempts)}"
        cost = f"losing {human_seconds(self.loss_s)} (steps since the checkpoint, and a restart)"
        gain = f"to start {human_seconds(self.gain_s)} sooner"
        if self.worth:
            return f"it preempts your {runs}, {cost}, {gain}"
        return f"it would preempt your {runs}, {cost}, {gain}: not worth it"

    def to_json(self) -> dict[str, object]:
        return {"preempts": list(self.preempts), "loss_s": _round(self.loss_s), "gain_s": _round(self.gain_s)}


def _round(s: float | None) -> float | None:
    return None if s is None else round(s, 1)


def weigh(will: WillRun, own: Mapping[int, OwnRun], gain_s: float | None) -> Weighing:
    """Weigh starting a job where ``will`` (``sbatch --test-only``) says: ``own`` are the user's running runs by
    Slurm's raw job id; a preempted job that is not one of them is another user's (or not a run roach follows)."""
    hit = [own[j] for j in will.preempts if j in own]
    losses = [r.loss_s for r in hit]
    loss = None if any(x is None for x in losses) else sum(x for x in losses if x is not None)
    return Weighing(tuple(r.key for r in hit), loss, gain_s)


# -- the start probe --------------------------------------------------------------------------------------
def record_resources(rec: JobRecord) -> Resources:
    """The Resources a recorded job was submitted with."""
    return Resources.from_json(rec.resources)


def on_tier(res: Resources, tier: Tier) -> Resources:
    return res.replace(**tier.resources_changes())


def probe(client: SlurmClient, options: Sequence[str]) -> WillRun | None:
    """What ``sbatch --test-only`` says of a job with ``options``: when (cluster local time) and where it would
    start, and whose jobs it would preempt; None: it would not be accepted."""
    res = client.test_only(options, "roach-probe")
    return parse_will_run(res.stderr + "\n" + res.stdout)


# -- promote ------------------------------------------------------------------------------------------------
def queued(client: SlurmClient, rec: JobRecord) -> QueueRecord | None:
    """``rec``'s own line while it is in the queue: a sweep's run is its array task, never a sibling task."""
    lines = client.squeue(job_ids=[rec.slurm_id])
    recs = [q for q in lines if q.ref.names(rec.job_id, rec.task) and q.state.is_active]
    return recs[0] if recs else None


def resume_commit(rec: JobRecord, repo_root: str | Path, allow_new_commit: bool) -> str | None:
    """The commit the moved run is resubmitted at: its own (None: the repository's HEAD, with
    ``allow_new_commit``). Checked before anything is touched: it must be pushed, HEAD clean and pushed."""

    return inspect_repo(repo_root, None if allow_new_commit else rec.commit).commit


def refuse_preempting_own(client: SlurmClient, cluster: Cluster, rec: JobRecord, target: Tier) -> None:
    """Refuse to move ``rec``'s run onto ``target`` where ``sbatch --test-only`` says starting it there now would
    preempt running jobs of the user's (the run's own job aside): a move made at their cost."""
    will = probe(client, on_tier(record_resources(rec), target).sbatch_options(cluster.gpu_flag))
    if will is None or not will.preempts:
        return
    mine = {q.raw_id: q for q in client.squeue() if q.state.is_running and not q.ref.names(rec.job_id, rec.task)}
    hit = [str(mine[j].ref) for j in will.preempts if j in mine]
    if hit:
        raise UsageError(
            f"moving run {rec.run_id} to tier {target.name} now would preempt your running job"
            f"{'s' if len(hit) > 1 else ''} {', '.join(hit)} (sbatch --test-only says so): they would lose their "
            "steps since their last checkpoint and a restart",
            hint="wait for a node to free (`roach watch --rebalance` weighs such moves), or pass --preempt-own",
        )


def resolve(cluster: Cluster, tier: Tier | str) -> Tier:
    if isinstance(tier, Tier):
        return tier
    if not cluster.tiers:
        raise UsageError(f"cluster {cluster.name} declares no tiers", hint="a cluster module lists its tiers, top down")
    return tier_named(cluster.tiers, tier)


def promote(
    ref: str | int,
    tier: Tier | str,
    *,
    cluster: Cluster,
    store: Store,
    repo_root: str | Path = ".",
    client: SlurmClient | None = None,
    allow_new_commit: bool = False,
    preempt_own: bool = False,
) -> Job:
    """Move the pending job ``ref`` (a run id or job id in the store) to ``tier``; returns the new job.

    Refuses where Slurm says starting it there would preempt running jobs of the user's, unless ``preempt_own``
    (the watch's rebalancer passes it for a move it has weighed)."""

    rec = store.find(str(ref), cluster=cluster.name)
    target = resolve(cluster, tier)
    client = client or cluster.client()
    q = queued(client, rec)
    if q is None:
        raise UsageError(
            f"job {rec.slurm_id} (run {rec.run_id}) is not in the queue any more: nothing to promote",
            hint="`roach status` shows how it ended",
        )
    if not q.state.is_pending:
        raise UsageError(
            f"job {rec.slurm_id} (run {rec.run_id}) is {q.state.value}, not pending",
            hint=f"a running run moves with `roach move {rec.run_id} --to {target.name}`",
        )
    if tier_of(cluster.tiers, q.partition, q.qos) == target:
        raise UsageError(f"job {rec.slurm_id} (run {rec.run_id}) already pends on tier {target.name}")
    commit = resume_commit(rec, repo_root, allow_new_commit)
    if not preempt_own:
        refuse_preempting_own(client, cluster, rec, target)
    fs = ClusterFS(client.transport)
    fs.makedirs(fs.expand(rec.run_dir))  # resume() wants the run's directory; a job that never ran made none
    try:
        client.hold(rec.slurm_id)
    except SlurmError as e:
        raise UsageError(
            f"job {rec.slurm_id} could not be held for the move (it may have started): {e.message}",
            hint=f"`roach status {rec.run_id}`; a running run moves with `roach move`",
        ) from None
    try:
        new = resume(
            rec.run_id,
            resources=on_tier(record_resources(rec), target),
            cluster=cluster,
            repo_root=repo_root,
            store=store,
            commit=commit,
        )
    except BaseException:
        client.release(rec.slurm_id)
        raise
    client.scancel([rec.slurm_id])  # this run's own task: a sweep's other runs go on
    return new
