"""When a pending job will start: the earliest, likely and latest start of every pending job of a queue, and the
basis of each in one line (what ``roach why``, the watch's ``pending`` line and ``roach top`` say). Pure: no I/O.

The queue is played forward (:mod:`roach.ops.estimate.timeline`) the way Slurm's backfill plans: pending jobs in priority
order, each placed at the first time its nodes (GPUs and CPUs on as many nodes of its partition as it asks for), its
per-user QOS cap and its reservation have room for it over its whole run, and that room kept for it. The three
differ in how long each job holds what it has:

- **latest**: the likely start with its wait taken twice and a minute more (``LATE_WAIT``, ``LATE_S``), or where
  sooner, the start if every job ran to its time limit (what ``squeue --start`` assumes, one play). Time limits
  are loose (the crowd's jobs asked for 11.5x what they ran): their play alone is a bound too wide to plan with.
  Beside a crowd (bench 13, Helios's 16th day, which it was not picked on), the real start fell inside [earliest,
  latest] 90% of the time, the interval a median 1.65x the real wait (the time-limit play alone, on the 11th: 99%,
  8.6x);
- **likely**: a roach run ends when its observed step pace says (its last step plus ``END_S``), any other running
  job after the median length of the jobs seen to end that ran longer than it has so far (its time limit when none
  has been seen), a pending job runs that median; Slurm's passes are replayed at those ends
  (:mod:`roach.ops.estimate.replay`), so a job may start in a hole before the jobs ahead of it, as backfill does;
- **earliest**: a run at its pace ends ``FAST`` of its ETA sooner, a job of unknown length may end now, and the
  pending jobs ahead hold nothing (backfill may start a job in a hole the jobs ahead of it do not fit), one play.

A job on a tier that is not preemptible may take what jobs on preemptible tiers hold (``PREEMPT_S`` later). Jobs
asked for later, and preemptions of the job itself, are not foreseen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from roach.model.states import PendingReason as R
from roach.model.tiers import tier_of
from roach.ops.estimate.replay import replay
from roach.ops.estimate.timeline import (
    END_S,
    FAST,
    LAG_S,
    PREEMPT_S,
    UNBOUNDED_S,
    Inputs,
    Job,
    Pace,
    Plan,
    Reservation,
    order,
)
from roach.ops.pending import TABLE, Outlook
from roach.scheduler.parse import QueueRecord

__all__ = ["END_S", "FAST", "LAG_S", "PREEMPT_S", "Inputs", "Pace", "Reservation", "StartEstimate", "estimate_queue"]

HORIZON = 400  # pending jobs played forward, in priority order; later ones get no estimate
LATE_WAIT = 2.0  # the latest start: the likely wait taken this many times, ...
LATE_S = 60.0  # ... plus this (a scheduling cycle's worth), where sooner than the time-limit play


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


# -- estimating ----------------------------------------------------------------------------------------------
_NO_ESTIMATE = {R.Dependency: "it waits on its dependency", R.Licenses: "it waits on licenses, which are not modelled"}


def blocked(rec: QueueRecord) -> str | None:
    """Why a pending job gets no estimate (held, never starts as it is, waits on what is not modelled)."""
    if rec.reason.is_held or TABLE[rec.reason].outlook is Outlook.NEVER:
        return f"{rec.reason_text or rec.reason.value}: it will not start as it is"
    return _NO_ESTIMATE.get(rec.reason)


def estimate_queue(
    inp: Inputs, now: float, only: Iterable[str] | None = None, *, replayed: bool = True
) -> dict[str, StartEstimate]:
    """The start estimate of every pending job of ``inp.queue`` (or of those in ``only``), by squeue's id.
    ``replayed``: the likely start from Slurm's passes replayed (:mod:`roach.ops.estimate.replay`); False: from one
    play in priority order, as the earliest and latest are."""
    jobs = [
        Job(q.record.job_id, q.record, tier_of(inp.tiers, q.record.partition, q.record.qos), order(q, inp.tiers))
        for q in inp.queue
    ]
    run = [j for j in jobs if j.record.state.is_running]
    pend = sorted((j for j in jobs if j.record.state.is_pending and blocked(j.record) is None), key=lambda j: j.order)
    pend = pend[:HORIZON]
    wanted = set(only) if only is not None else None
    if wanted is not None:  # the jobs below the last one asked about change nothing above it
        last = max((i for i, j in enumerate(pend) if j.key in wanted), default=-1)
        pend = pend[: last + 1]
    starts: dict[str, dict[str, float | None]] = {}
    for how in ("earliest", "likely", "latest"):
        plan = Plan(inp, now, how)
        for j in run:
            plan.running(j)
        starts[how] = {j.key: plan.place(j) for j in pend}
    if replayed:
        starts["likely"] = {**starts["likely"], **replay(inp, now, run, pend)}
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
        bound = None if u is None or u >= now + UNBOUNDED_S / 2 else max(u, m) + 2 * lag
        latest = None if bound is None else min(bound, now + LATE_WAIT * (likely - now) + LATE_S)
        out[j.key] = StartEstimate(
            j.key, earliest, likely, latest, _basis(j, rank[j.key], len(run), paced, inp), rank[j.key], slurm
        )
    return out


def _basis(job: Job, ahead: int, running: int, paced: int, inp: Inputs) -> str:
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
