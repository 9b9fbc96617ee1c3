"""The capacity timeline a start estimate plays the queue forward on (:mod:`roach.ops.estimate.starts`): each node's GPUs
and CPUs and each user's cap on a tier, what holds them over time, and where a pending job fits first. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from roach.model.states import PendingReason as R
from roach.model.tiers import Tier, tier_of
from roach.scheduler.cluster_queue import Queued
from roach.scheduler.parse import QueueRecord
from roach.scheduler.parse_control import NodeRecord
from roach.scheduler.rest.site import hostnames

END_S = 2.0  # a run's last step to its job's end (result, teardown)
LAG_S = 1.0  # resources free to the next job's start (Slurm's scheduling pass, the epilog)
FAST = 0.8  # the earliest end of a run at its pace: this fraction of its ETA
PREEMPT_S = 10.0  # a preemption's decision to the preempted job's GPUs free (its grace time, its checkpoint)
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
class Pool:
    """What is held of one capacity (a node's GPUs and CPUs, or a user's cap on a tier) over time."""

    gpus: int
    cpus: int
    holds: list[tuple[float, float, int, int, bool, str]] = field(default_factory=list)  # start end g c soft resv

    def room(self, t: float, end: float, g: int, c: int, preempts: bool, resv: str) -> bool:
        """Whether ``g`` GPUs and ``c`` CPUs are free over [t, end); ``preempts``: preemptible holds do not count."""
        return self.clash(t, end, g, c, preempts, resv) is None

    def clash(self, t: float, end: float, g: int, c: int, preempts: bool, resv: str) -> float | None:
        """None where ``g`` GPUs and ``c`` CPUs are free over [t, end) (as :meth:`room`); else the first time a later
        window may have them: the first end of the holds over the first moment short of room (infinity: never).
        Until then that moment stays held as much, and stays in the window or before a fuller one."""
        over = [
            h for h in self.holds if h[0] < end and h[1] > t and not (preempts and h[4]) and not (resv and h[5] == resv)
        ]
        if not over:
            return None if g <= self.gpus and c <= self.cpus else math.inf
        for at in [t] + [h[0] for h in over if h[0] > t]:
            held = [h for h in over if h[0] <= at < h[1]]
            if sum(h[2] for h in held) + g > self.gpus or sum(h[3] for h in held) + c > self.cpus:
                return min((h[1] for h in held), default=math.inf)
        return None

    def free_at(self, t: float) -> int:
        return self.gpus - sum(h[2] for h in self.holds if h[0] <= t < h[1])


@dataclass(frozen=True)
class Job:
    key: str
    record: QueueRecord
    tier: Tier | None
    order: tuple[float, float, int]


def order(q: Queued, tiers: tuple[Tier, ...]) -> tuple[float, float, int]:
    """Priority order: Slurm's priority (else non-preemptible tiers first), then submit time, then id."""
    rec = q.record
    tier = tier_of(tiers, rec.partition, rec.qos)
    prio = float(q.priority) if q.priority is not None else (0.0 if tier is not None and tier.preemptible else 1.0)
    submit = rec.submit_time.timestamp() if rec.submit_time else 0.0
    return (-prio, submit, rec.raw_id)


def residual(durations: Sequence[float], elapsed: float) -> float | None:
    """The median length of the jobs seen to end that ran longer than ``elapsed``, less ``elapsed``."""
    longer = [d for d in durations if d > elapsed]
    return statistics.median(longer) - elapsed if longer else None


class Plan:
    """One playing forward of the queue (``how``: "earliest", "likely" or "latest")."""

    def __init__(self, inp: Inputs, now: float, how: str) -> None:
        self.inp, self.now, self.how = inp, now, how
        self.nodes = {n.name: Pool(n.gpus_total if n.available else 0, n.cpus_total) for n in inp.nodes}
        self.parts = {n.name: set(n.partitions) for n in inp.nodes}
        self.caps: dict[tuple[str, str], Pool] = {}
        self.times: list[float] = [now]
        self.resv = {r.name: r for r in inp.reservations}
        for r in inp.reservations:
            for n in r.nodes or ():
                if n in self.nodes and r.end > now:
                    pool = self.nodes[n]
                    self._hold(pool, max(r.start, now), r.end, pool.gpus, pool.cpus, False, r.name)

    def _hold(self, pool: Pool, start: float, end: float, g: int, c: int, soft: bool, resv: str = "") -> None:
        pool.holds.append((start, end, g, c, soft, resv))
        i = bisect.bisect_left(self.times, end)
        if i == len(self.times) or self.times[i] != end:  # each time once: find asks the pools at each
            self.times.insert(i, end)

    def _cap(self, rec: QueueRecord, tier: Tier | None) -> Pool | None:
        cap = tier.gpu_cap if tier is not None and tier.gpu_cap is not None else self.inp.qos_gpu_caps.get(rec.qos)
        if cap is None:
            return None
        key = (rec.user, tier.name if tier is not None else rec.qos)
        return self.caps.setdefault(key, Pool(cap, 1 << 30))

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
        rest = residual(self.inp.durations, float(rec.elapsed_s))
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

    def running(self, job: Job) -> None:
        rec = job.record
        names = [n for n in hostnames(rec.nodelist) if n in self.nodes] if rec.nodelist else []
        end = self.now + self.run_left(rec, job.key)
        soft = job.tier is not None and job.tier.preemptible
        per = max(len(names), 1)
        for n in names:
            self._hold(self.nodes[n], self.now, end, rec.tres.gpus // per, rec.tres.cpu // per, soft)
        if (cap := self._cap(rec, job.tier)) is not None:
            self._hold(cap, self.now, end, rec.tres.gpus, 0, False)

    def not_before(self, job: Job) -> float:
        """The first time a pending job may start: now, its reservation's start, its begin time."""
        rec, t = job.record, self.now
        resv = self.resv.get(self.inp.resv_of.get(job.key, ""))
        if resv is not None:
            t = max(t, resv.start)
        if rec.reason is R.BeginTime and rec.start_time is not None:
            t = max(t, rec.start_time.timestamp())
        return t

    def find(self, job: Job, length: float, not_before: float) -> tuple[float, list[str], bool] | None:
        """When and on which nodes a pending job fits first for ``length`` seconds, and whether it takes what
        preemptible jobs hold there (None: it never fits)."""
        rec = job.record
        resv = self.resv.get(self.inp.resv_of.get(job.key, ""))
        rname = resv.name if resv else ""
        parts = set(rec.partition.split(","))
        allowed = [n for n, p in self.parts.items() if p & parts and (resv is None or n in (resv.nodes or (n,)))]
        n_nodes = max(rec.nodes, 1)
        g, c = -(-rec.tres.gpus // n_nodes), -(-rec.tres.cpu // n_nodes)
        preempts = job.tier is None or not job.tier.preemptible
        cap = self._cap(rec, job.tier)
        # A pool without room at t has none before the clash it names ends (a plan's time): it is asked again only
        # from then.
        again = dict.fromkeys(allowed, not_before)
        cap_again = not_before
        for t in [not_before] + self.times[bisect.bisect_right(self.times, not_before) :]:
            fits = []
            for n in allowed:
                if again[n] > t:
                    continue
                if (later := self.nodes[n].clash(t, t + length, g, c, preempts, rname)) is None:
                    fits.append(n)
                else:
                    again[n] = later
            if len(fits) < n_nodes or t < cap_again:
                continue
            if cap is not None and (later := cap.clash(t, t + length, rec.tres.gpus, 0, False, "")) is not None:
                cap_again = later
                continue
            hard = [n for n in fits if self.nodes[n].room(t, t + length, g, c, False, rname)]
            use = sorted(hard, key=lambda n: self.nodes[n].free_at(t))[:n_nodes]
            if len(use) == n_nodes:
                return t, use, False
            rest = sorted(set(fits) - set(use), key=lambda n: self.nodes[n].free_at(t))
            return t, (use + rest)[:n_nodes], True  # it takes what preemptible jobs hold
        return None

    def commit(self, job: Job, start: float, use: Sequence[str], length: float) -> None:
        """Keep the room a job takes from ``start`` for ``length`` seconds."""
        rec = job.record
        n_nodes = max(rec.nodes, 1)
        g, c = -(-rec.tres.gpus // n_nodes), -(-rec.tres.cpu // n_nodes)
        soft = job.tier is not None and job.tier.preemptible
        for n in use:
            self._hold(self.nodes[n], start, start + length, g, c, soft)
        if (cap := self._cap(rec, job.tier)) is not None:
            self._hold(cap, start, start + length, rec.tres.gpus, 0, False)

    def place(self, job: Job) -> float | None:
        """When a pending job starts in this plan, its room kept (at the earliest, not: Slurm's backfill may start
        it before the jobs ahead of it, in a hole they do not fit). None: it never fits."""
        length = max(self.run_length(job.record, job.key), 1.0)
        found = self.find(job, length, self.not_before(job))
        if found is None:
            return None
        t, use, takes = found
        start = t + (PREEMPT_S if takes and self.how != "earliest" else 0.0)
        if self.how != "earliest":
            self.commit(job, start, use, length)
        return start
