"""The likely play of a start estimate: Slurm's scheduling replayed pass by pass. Pure: no I/O.

At each pass Slurm plans the way ``squeue --start`` shows it, every job at its time limit, the pending ones in
priority order each keeping the room it will take; a job whose planned start is now starts (a lower one too, in a
hole the jobs ahead of it do not fit: backfill). The replay makes those passes at the times jobs really end by its
own reckoning (a roach run at its step pace, another job after the ended jobs' median length), so a job ahead that
ends early lets the next start early, as on the cluster. A job that takes what a preemptible job holds starts
:data:`~roach.ops.estimate.timeline.PREEMPT_S` later, and the preempted job ends then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from roach.ops.estimate.timeline import PREEMPT_S, UNBOUNDED_S, Inputs, Job, Plan
from roach.scheduler.rest.site import hostnames

PASSES = 400  # at most this many passes: the jobs past them get the priority-order play's start


@dataclass
class _Held:
    job: Job
    nodes: list[str]
    end: float  # when it really ends, by the replay's reckoning
    limit_end: float  # when Slurm plans it ends


def _limit(job: Job) -> float:
    rec = job.record
    return float(rec.time_limit_s) if rec.time_limit_s is not None else UNBOUNDED_S


def replay(inp: Inputs, now: float, running: Sequence[Job], pending: Sequence[Job]) -> dict[str, float]:
    """When each of ``pending`` (in priority order) starts, by the replay; a job it does not reach is left out."""
    reckon = Plan(inp, now, "likely")
    held = []
    for j in running:
        rec = j.record
        names = [n for n in hostnames(rec.nodelist) if n in reckon.nodes] if rec.nodelist else []
        left = max(_limit(j) - rec.elapsed_s, 0.0) if not rec.state.is_ending else 0.0
        held.append(_Held(j, names, now + reckon.run_left(rec, j.key), now + left))
    waiting = [(j, reckon.not_before(j)) for j in pending]
    starts: dict[str, float] = {}
    t = now
    for _ in range(PASSES):
        plan = Plan(inp, t, "latest")
        for h in held:
            plan.commit(h.job, t, h.nodes, max(h.limit_end - t, 1.0))
        still = []
        for j, not_before in waiting:
            length = max(_limit(j), 1.0)
            found = plan.find(j, length, max(not_before, t))
            if found is None:
                still.append((j, not_before))
                continue
            at, use, takes = found
            if at > t:
                plan.commit(j, at, use, length)  # its room, kept in Slurm's plan
                still.append((j, not_before))
                continue
            start = t + (PREEMPT_S if takes else 0.0)
            if takes:  # the preemptible jobs on those nodes leave
                for h in held:
                    if set(h.nodes) & set(use) and h.job.tier is not None and h.job.tier.preemptible:
                        h.end = min(h.end, start)
            starts[j.key] = start
            plan.commit(j, t, use, length)
            end = start + max(reckon.run_length(j.record, j.key), 1.0)
            held.append(_Held(j, list(use), end, t + length))
        waiting = still
        if not waiting:
            break
        later = [h.end for h in held if h.end > t] + [nb for _, nb in waiting if nb > t]
        if not later:
            break
        t = min(later)
        held = [h for h in held if h.end > t]
    return starts
