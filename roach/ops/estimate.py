"""When a pending job will start: the earliest, likely and latest start of every pending job of a queue, and the
basis of each in one line (what ``roach why``, the watch's ``pending`` line and ``roach top`` say). Pure: no I/O.

The queue is played forward three times, each the way Slurm's backfill plans: pending jobs in priority order, each
placed at the first time its nodes (GPUs and CPUs on as many nodes of its partition as it asks for), its per-user
QOS cap and its reservation have room for it over its whole run, and that room kept for it. What differs between the
three is how long each job holds what it has:

- **latest**: every job runs to its time limit (what ``squeue --start`` assumes);
- **likely**: a roach run ends when its observed step pace says (its last step plus :data:`END_S`), any other job
  after the median run of the jobs seen to end on the cluster that ran longer than it has so far (its time limit
  when none has been seen), a pending job runs that median;
- **earliest**: a run at its pace ends :data:`FAST` of its ETA sooner, a job of unknown length may end now, and the
  pending jobs ahead hold nothing (Slurm's backfill starts a job in a hole the jobs ahead of it do not fit).

A job on a tier that is not preemptible may take what jobs on preemptible tiers hold (:data:`PREEMPT_S` later).
Jobs asked for later, and preemptions of the job itself, are not foreseen.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from roach.model.states import PendingReason as R
from roach.model.tiers import Tier, tier_of
from roach.ops.pending import TABLE, Outlook
from roach.scheduler.cluster_queue import Queued
from roach.scheduler.parse import QueueRecord
from roach.scheduler.parse_control import NodeRecord
from roach.scheduler.rest_site import hostnames

END_S = 2.0  # a run's last step to its job's end (result, teardown)
LAG_S = 1.0  # resources free to the next job's start (Slurm's scheduling pass, the epilog)
FAST = 0.8  # the earliest end of a run at its pace: this fraction of its ETA
PREEMPT_S = 10.0  # a preemption's decision to the preempted job's GPUs free (its grace time, its checkpoint)
HORIZON = 400  # pending jobs played forward, in priority order; later ones get no estimate
UNBOUNDED_S = 365 * 86400.0  # a job with no time limit holds its nodes this long


@dataclass(frozen=True)
class Pace:
    """A roach run's progress as its log says it: the last step, of how many, when, and the steps per second."""

    step: int
    steps_total: int
    at: float
    per_s: float

    @classmethod
    def of(cls, points: Sequence[Sequence[float]], step: int | None, steps_total: int | None) -> Pace | None:
        """From the watch's ``[time, step]`` pairs of the run's current attempt (None: too few, or no total)."""
        if len(points) < 2 or not steps_total or step is None or not 0 <= step <= steps_total:
            return None
        (t0, s0), (t1, s1) = points[0][:2], points[-1][:2]
        if t1 <= t0 or s1 <= s0 or s1 > steps_total:
            return None
        return cls(int(s1), int(steps_total), float(t1), (s1 - s0) / (t1 - t0))

    def left_s(self, now: float) -> float:
        """Seconds until its last step ends, from now."""
        return max((self.steps_total - self.step) / self.per_s - (now - self.at), 0.0)


@dataclass(frozen=True)
class Reservation:
    """A reservation's window and nodes (None: not known) as the estimate reads it."""

    name: str
    start: float
    end: float
    nodes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StartEstimate:
    """When one pending job starts: epoch seconds, ``earliest <= likely <= latest`` (None: no bound)."""

    job_id: str
    earliest: float | None
    likely: float | None
    latest: float | None
    basis: str
    ahead: int = 0  # pending jobs ahead of it that it waits behind
    slurm: float | None = None  # Slurm's own expected start (squeue's StartTime), when it gave one

    def line(self, now: float) -> str:
        """``likely in 4m10s (1m05s to 9m00s); basis: ...``"""
        if self.likely is None:
            return f"no start estimate: {self.basis}"
        when = f"likely {_in(self.likely, now)} ({_in(self.earliest, now)} to {_in(self.latest, now)})"
        return f"{when}; basis: {self.basis}"

    def to_json(self, now: float) -> dict[str, Any]:
        def at(t: float | None) -> str | None:
            return None if t is None else datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")

        def within(t: float | None) -> float | None:
            return None if t is None else round(max(t - now, 0.0), 1)

        return {
            "earliest": at(self.earliest),
            "likely": at(self.likely),
            "latest": at(self.latest),
            "earliest_in_s": within(self.earliest),
            "likely_in_s": within(self.likely),
            "latest_in_s": within(self.latest),
            "basis": self.basis,
            "ahead": self.ahead,
            "slurm": at(self.slurm),
        }


def _in(t: float | None, now: float) -> str:
    if t is None:
        return "no bound"
    s = max(int(round(t - now)), 0)
    if s == 0:
        return "now"
    if s < 3600:
        return f"in {s // 60}m{s % 60:02d}s" if s >= 60 else f"in {s}s"
    return f"in {s // 3600}h{s % 3600 // 60:02d}m"


@dataclass(frozen=True)
class Inputs:
    """What an estimate reads: the cluster's queue (every user's jobs on the partitions, with priorities; the user's
    own queue where that is all there is), the nodes, the tiers, the runs' paces by job id, the durations of jobs
    seen to end, the reservations and which job asks for which."""

    queue: Sequence[Queued]
    nodes: Sequence[NodeRecord]
    tiers: tuple[Tier, ...] = ()
    paces: Mapping[str, Pace] = field(default_factory=dict)
    durations: Sequence[float] = ()
    reservations: Sequence[Reservation] = ()
    resv_of: Mapping[str, str] = field(default_factory=dict)
    qos_gpu_caps: Mapping[str, int] = field(default_factory=dict)
    whole_queue: bool = True  # False: only the user's own jobs are known


# -- the capacity timeline ---------------------------------------------------------------------------------
@dataclass
class _Pool:
    """What is held of one capacity (a node's GPUs and CPUs, or a user's cap on a tier) over time."""

    gpus: int
    cpus: int
    holds: list[tuple[float, float, int, int, bool, str]] = field(default_factory=list)  # start end g c soft resv

    def room(self, t: float, end: float, g: int, c: int, preempts: bool, resv: str) -> bool:
        """Whether ``g`` GPUs and ``c`` CPUs are free over [t, end); ``preempts``: preemptible holds do not count."""
        over = [
            h for h in self.holds if h[0] < end and h[1] > t and not (preempts and h[4]) and not (resv and h[5] == resv)
        ]
        if not over:
            return g <= self.gpus and c <= self.cpus
        for at in [t] + [h[0] for h in over if h[0] > t]:
            used_g = sum(h[2] for h in over if h[0] <= at < h[1])
            used_c = sum(h[3] for h in over if h[0] <= at < h[1])
            if used_g + g > self.gpus or used_c + c > self.cpus:
                return False
        return True

    def free_at(self, t: float) -> int:
        return self.gpus - sum(h[2] for h in self.holds if h[0] <= t < h[1])


@dataclass(frozen=True)
class _Job:
    key: str
    record: QueueRecord
    tier: Tier | None
    order: tuple[float, float, int]


def _order(q: Queued, tiers: tuple[Tier, ...]) -> tuple[float, float, int]:
    """Priority order: Slurm's priority (else non-preemptible tiers first), then submit time, then id."""
    rec = q.record
    tier = tier_of(tiers, rec.partition, rec.qos)
    prio = float(q.priority) if q.priority is not None else (0.0 if tier is not None and tier.preemptible else 1.0)
    submit = rec.submit_time.timestamp() if rec.submit_time else 0.0
    return (-prio, submit, rec.raw_id)


def _residual(durations: Sequence[float], elapsed: float) -> float | None:
    """The median length of the jobs seen to end that ran longer than ``elapsed``, less ``elapsed``."""
    longer = [d for d in durations if d > elapsed]
    return statistics.median(longer) - elapsed if longer else None


class _Plan:
    """One playing forward of the queue (``how``: "earliest", "likely" or "latest")."""

    def __init__(self, inp: Inputs, now: float, how: str) -> None:
        self.inp, self.now, self.how = inp, now, how
        self.nodes = {n.name: _Pool(n.gpus_total if n.available else 0, n.cpus_total) for n in inp.nodes}
        self.parts = {n.name: set(n.partitions) for n in inp.nodes}
        self.caps: dict[tuple[str, str], _Pool] = {}
        self.times: list[float] = [now]
        self.resv = {r.name: r for r in inp.reservations}
        for r in inp.reservations:
            for n in r.nodes or ():
                if n in self.nodes and r.end > now:
                    pool = self.nodes[n]
                    self._hold(pool, max(r.start, now), r.end, pool.gpus, pool.cpus, False, r.name)

    def _hold(self, pool: _Pool, start: float, end: float, g: int, c: int, soft: bool, resv: str = "") -> None:
        pool.holds.append((start, end, g, c, soft, resv))
        bisect.insort(self.times, end)

    def _cap(self, rec: QueueRecord, tier: Tier | None) -> _Pool | None:
        cap = tier.gpu_cap if tier is not None and tier.gpu_cap is not None else self.inp.qos_gpu_caps.get(rec.qos)
        if cap is None:
            return None
        key = (rec.user, tier.name if tier is not None else rec.qos)
        return self.caps.setdefault(key, _Pool(cap, 1 << 30))

    def run_left(self, rec: QueueRecord, key: str) -> float:
        """How long a running job still holds its nodes in this plan."""
        limit = (rec.time_limit_s - rec.elapsed_s) if rec.time_limit_s is not None else UNBOUNDED_S
        limit = max(float(limit), 0.0)
        if rec.state.is_ending or self.how == "latest":
            return 0.0 if rec.state.is_ending else limit
        pace = self.inp.paces.get(key)
        if pace is not None:
            left = pace.left_s(self.now) + END_S
            return min(left * (FAST if self.how == "earliest" else 1.0), limit)
        if self.how == "earliest":
            return 0.0
        rest = _residual(self.inp.durations, float(rec.elapsed_s))
        return min(rest, limit) if rest is not None else limit

    def run_length(self, rec: QueueRecord, key: str) -> float:
        """How long a pending job will hold its nodes once it starts, in this plan."""
        limit = float(rec.time_limit_s) if rec.time_limit_s is not None else UNBOUNDED_S
        if self.how == "latest":
            return limit
        pace = self.inp.paces.get(key)  # a requeued run: what its last attempt's pace leaves
        if pace is not None:
            left = (pace.steps_total - pace.step) / pace.per_s + END_S
            return min(left * (FAST if self.how == "earliest" else 1.0), limit)
        if not self.inp.durations:
            return 0.0 if self.how == "earliest" else limit
        pick = min(self.inp.durations) if self.how == "earliest" else statistics.median(self.inp.durations)
        return min(pick, limit)

    def running(self, job: _Job) -> None:
        rec = job.record
        names = [n for n in hostnames(rec.nodelist) if n in self.nodes] if rec.nodelist else []
        end = self.now + self.run_left(rec, job.key)
        soft = job.tier is not None and job.tier.preemptible
        per = max(len(names), 1)
        for n in names:
            self._hold(self.nodes[n], self.now, end, rec.tres.gpus // per, rec.tres.cpu // per, soft)
        if (cap := self._cap(rec, job.tier)) is not None:
            self._hold(cap, self.now, end, rec.tres.gpus, 0, False)

    def place(self, job: _Job) -> float | None:
        """Where and when a pending job fits first; its hold is kept. None: it never fits."""
        rec, inp = job.record, self.inp
        length = max(self.run_length(rec, job.key), 1.0)
        resv = self.resv.get(inp.resv_of.get(job.key, ""))
        parts = set(rec.partition.split(","))
        allowed = [n for n, p in self.parts.items() if p & parts and (resv is None or n in (resv.nodes or (n,)))]
        n_nodes = max(rec.nodes, 1)
        g, c = -(-rec.tres.gpus // n_nodes), -(-rec.tres.cpu // n_nodes)
        preempts = job.tier is None or not job.tier.preemptible
        not_before = self.now
        if resv is not None:
            not_before = max(not_before, resv.start)
        if rec.reason is R.BeginTime and rec.start_time is not None:
            not_before = max(not_before, rec.start_time.timestamp())
        cap = self._cap(rec, job.tier)
        for t in [not_before] + [x for x in self.times if x > not_before]:
            fits = [n for n in allowed if self.nodes[n].room(t, t + length, g, c, preempts, resv.name if resv else "")]
            if len(fits) < n_nodes or (cap is not None and not cap.room(t, t + length, rec.tres.gpus, 0, False, "")):
                continue
            hard = [n for n in fits if self.nodes[n].room(t, t + length, g, c, False, resv.name if resv else "")]
            use = sorted(hard, key=lambda n: self.nodes[n].free_at(t))[:n_nodes]
            start = t
            if len(use) < n_nodes:  # it takes what preemptible jobs hold
                use = (use + sorted(set(fits) - set(use), key=lambda n: self.nodes[n].free_at(t)))[:n_nodes]
                start = t + (PREEMPT_S if self.how != "earliest" else 0.0)
            if self.how != "earliest":  # at the earliest, Slurm's backfill may start it before the jobs ahead
                for n in use:
                    self._hold(self.nodes[n], start, start + length, g, c, not preempts)
                if cap is not None:
                    self._hold(cap, start, start + length, rec.tres.gpus, 0, False)
            return start
        return None


# -- estimating ----------------------------------------------------------------------------------------------
_NO_ESTIMATE = {R.Dependency: "it waits on its dependency", R.Licenses: "it waits on licenses, which are not modelled"}


def blocked(rec: QueueRecord) -> str | None:
    """Why a pending job gets no estimate (held, never starts as it is, waits on what is not modelled)."""
    if rec.reason.is_held or TABLE[rec.reason].outlook is Outlook.NEVER:
        return f"{rec.reason_text or rec.reason.value}: it will not start as it is"
    return _NO_ESTIMATE.get(rec.reason)


def estimate_queue(inp: Inputs, now: float, only: Iterable[str] | None = None) -> dict[str, StartEstimate]:
    """The start estimate of every pending job of ``inp.queue`` (or of those in ``only``), by squeue's id."""
    jobs = [
        _Job(q.record.job_id, q.record, tier_of(inp.tiers, q.record.partition, q.record.qos), _order(q, inp.tiers))
        for q in inp.queue
    ]
    run = [j for j in jobs if j.record.state.is_running]
    pend = sorted((j for j in jobs if j.record.state.is_pending and blocked(j.record) is None), key=lambda j: j.order)
    pend = pend[:HORIZON]
    starts: dict[str, dict[str, float | None]] = {}
    for how in ("earliest", "likely", "latest"):
        plan = _Plan(inp, now, how)
        for j in run:
            plan.running(j)
        starts[how] = {j.key: plan.place(j) for j in pend}
    wanted = set(only) if only is not None else None
    out: dict[str, StartEstimate] = {}
    rank = {j.key: i for i, j in enumerate(pend)}
    paced = sum(1 for j in run if j.key in inp.paces)
    for j in jobs:
        if not j.record.state.is_pending or (wanted is not None and j.key not in wanted):
            continue
        slurm = j.record.start_time.timestamp() if j.record.start_time and j.record.reason is not R.BeginTime else None
        why = blocked(j.record)
        if why is None and j.key not in rank:
            why = f"more than {HORIZON} pending jobs ahead of it"
        if why is not None:
            out[j.key] = StartEstimate(j.key, None, None, None, why, slurm=slurm)
            continue
        e, m, u = (starts[h][j.key] for h in ("earliest", "likely", "latest"))
        if m is None:
            out[j.key] = StartEstimate(
                j.key, None, None, None, "no node of its partition can ever hold it", slurm=slurm
            )
            continue
        lag = LAG_S
        likely = m + lag
        earliest = min(x for x in (e, m) if x is not None)
        latest = None if u is None or u >= now + UNBOUNDED_S / 2 else max(u, m) + 2 * lag
        out[j.key] = StartEstimate(
            j.key, earliest, likely, latest, _basis(j, rank[j.key], len(run), paced, inp), rank[j.key], slurm
        )
    return out


def _basis(job: _Job, ahead: int, running: int, paced: int, inp: Inputs) -> str:
    who = "the cluster's queue" if inp.whole_queue else "your own jobs only (other users' are not seen)"
    parts = [f"{ahead} pending ahead of it and {running} running in {who}"]
    parts.append(f"{paced} at their runs' step pace" if paced else "none with a step pace")
    parts.append(
        f"the rest at the median of {len(inp.durations)} ended jobs, time limits at the latest"
        if inp.durations
        else "the rest at their time limits"
    )
    if job.tier is not None and job.tier.gpu_cap is not None:
        parts.append(f"tier {job.tier.name}'s cap of {job.tier.gpu_cap} GPUs")
    if job.tier is None or not job.tier.preemptible:
        parts.append("preempting preemptible tiers")
    if inp.resv_of.get(job.key):
        parts.append(f"reservation {inp.resv_of[job.key]}")
    return ", ".join(parts)
