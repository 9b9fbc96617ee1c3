"""Attempts inside holders, and a holder's time with no attempt in it, from the holders' steps.

A holder (``roach hold``) is one allocation; each attempt started in it is two steps of it, its node step
(``roach-node:N``) and its ranks' step (``roach-ranks:N``), which ``sacct`` (without ``--allocations``) lists
with their own Start and End. An attempt's span runs from its first step's start to its last step's end; the
holder's own span keeps only the time no attempt ran, so that the holder's allocation is counted once: its
attempts' time in their runs, the rest as the holder's idle time. Pure: records in, spans out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone

from roach.launch.hold.steps import STEP_NODE, STEP_RANKS
from roach.ops.ledger import Span, epoch
from roach.scheduler.parse import AcctRecord


def attempt_spans(
    steps: Sequence[AcctRecord], holders: dict[int, Span], tz: timezone, now: datetime
) -> dict[tuple[int, int], Span]:
    """Each attempt's span by (holder, attempt), from ``steps`` (sacct's step lines of the holders) and the
    holders' own spans (their GPUs, partition and QOS, which the attempt ran on)."""
    parts: dict[tuple[int, int], list[AcctRecord]] = {}
    for s in steps:
        name, _, n = s.name.partition(":")
        if s.step is not None and name in (STEP_NODE, STEP_RANKS) and n.isdigit() and s.ref.job in holders:
            parts.setdefault((s.ref.job, int(n)), []).append(s)
    out = {}
    for key, recs in parts.items():
        started = [t for r in recs if (t := epoch(r.start_time, tz)) is not None]
        if not started:
            continue
        ends = [epoch(r.end_time, tz) for r in recs]
        end = None if None in ends else max(e for e in ends if e is not None)
        start = min(started)
        ranks = [r for r in recs if r.name.startswith(STEP_RANKS)] or recs
        out[key] = replace(
            holders[key[0]],
            state=ranks[-1].state,
            nodes=ranks[-1].nodelist,
            eligible=None,
            start=start,
            end=end,
            elapsed_s=int((end if end is not None else now.timestamp()) - start),
            pending_s=0.0,
            requeue_s=0.0,
        )
    return out


def busy_s(spans: Sequence[Span]) -> int:
    """Seconds in which at least one of ``spans`` ran (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for s in sorted((s for s in spans if s.start is not None), key=lambda s: s.start or 0.0):
        start, end = s.start or 0.0, (s.start or 0.0) + s.elapsed_s
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return int(total)


def holder_idle(holder: Span, attempts: Sequence[Span]) -> Span:
    """The holder's span as the ledger counts it: only the time no attempt ran in it."""
    return replace(holder, elapsed_s=max(0, holder.elapsed_s - busy_s(attempts)))
