"""Benchmark 13's scoring: every moment's estimates (roach's from that moment's inputs, Slurm's ``squeue --start``)
against the real starts (sacct ``--duplicates``). Pure but for the one sacct; tested in tests/test_bench_smoke.py.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.model.tiers import Tier
from roach.ops.estimate.reads import note_ended
from roach.ops.estimate.starts import Inputs, Pace, estimate_queue
from roach.scheduler.cluster_queue import parse_cluster_queue
from roach.scheduler.fields import parse_time
from roach.scheduler.parse_control import NodeRecord


@dataclass(frozen=True)
class Scored:
    """One estimate of one job at one moment, beside Slurm's and the real start (seconds from the moment)."""

    t: float
    job: str
    tier: str
    real: float
    likely: float
    earliest: float
    latest: float | None
    slurm: float | None
    plain: float  # the likely start of one play in priority order, without Slurm's passes replayed


def _slurm_starts(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        job, _, when = line.strip().partition("|")
        t = parse_time(when)
        if job and t is not None:
            out[job] = t.timestamp()
    return out


def real_starts(acct: Iterable) -> dict[str, list[float]]:
    """Each job's attempts' start times (sacct ``-X -D``), sorted."""
    out: dict[str, list[float]] = {}
    for a in acct:
        if a.step is None and a.start_time is not None:
            out.setdefault(str(a.ref), []).append(a.start_time.timestamp())
    return {k: sorted(v) for k, v in out.items()}


def score(lines: Sequence[dict], starts: dict[str, list[float]]) -> list[Scored]:
    """Every pending job's estimate at every moment of ``lines`` (snapshots.jsonl), with the real start."""
    head, moments = lines[0], lines[1:]
    nodes = [NodeRecord(**{**n, "partitions": tuple(n["partitions"])}) for n in head["nodes"]]
    tiers = tuple(Tier(**t) for t in head["tiers"])
    durations: list[float] = []
    last_running: dict[str, list[float]] = {}
    out: list[Scored] = []
    for m in moments:
        queue = parse_cluster_queue(m["queue"])
        seen = {q.record.job_id: q.record for q in queue}
        # the lengths of the jobs that ran at the last moment and are gone now, as the watch counts them
        durations, last_running = note_ended(durations, last_running, seen.values(), m["t"])
        paces = {
            k: p for k, v in m["views"].items() if (p := Pace.of(v["points"], v["step"], v["steps_total"])) is not None
        }
        inp = Inputs(queue, nodes, tiers, paces, tuple(durations))
        slurm = _slurm_starts(m["start"])
        plain = estimate_queue(inp, m["t"], replayed=False)
        for key, est in estimate_queue(inp, m["t"]).items():
            later = [s for s in starts.get(key, []) if s >= m["t_round"] - 1]
            if not later or est.likely is None or est.earliest is None:
                continue
            rec = seen[key]
            out.append(
                Scored(
                    m["t"],
                    key,
                    rec.qos,
                    later[0] - m["t"],
                    est.likely - m["t"],
                    est.earliest - m["t"],
                    None if est.latest is None else est.latest - m["t"],
                    slurm[key] - m["t"] if key in slurm else None,
                    (plain[key].likely or est.likely) - m["t"],
                )
            )
    return out


RESOLUTION_S = 1.0  # sacct's Start is to the second (truncated): the real start lies within a second after it


def inside(s: Scored, slack: float = RESOLUTION_S) -> bool:
    """Whether the real start fell in ``[earliest, latest]``, to ``slack`` seconds (sacct's resolution)."""
    return s.earliest - slack <= s.real and (s.latest is None or s.real <= s.latest + slack)


def _width(scored: Sequence[Scored]) -> float:
    widths = [s.latest - s.earliest if s.latest is not None else float("inf") for s in scored]
    return statistics.median(widths) if widths else float("nan")


def tables(scored: Sequence[Scored]) -> tuple[str, list[dict], dict]:
    both = [s for s in scored if s.slurm is not None]
    roach_err = statistics.median(abs(s.likely - s.real) for s in both) if both else float("nan")
    slurm_err = statistics.median(abs(s.slurm - s.real) for s in both if s.slurm is not None) if both else float("nan")
    cover = sum(inside(s) for s in scored) / len(scored) if scored else float("nan")
    rows = [
        "| | roach (likely) | Slurm (`squeue --start`) |",
        "| --- | --- | --- |",
        f"| estimates scored (a pending job at a moment, started later) | {len(scored)} | {len(both)} with an answer |",
        f"| median absolute error, where both answered | {roach_err:.1f} s | {slurm_err:.1f} s |",
        f"| ... of one play in priority order (no replay of Slurm's passes), where both answered | "
        f"{statistics.median(abs(s.plain - s.real) for s in both) if both else float('nan'):.1f} s | |",
        f"| median absolute error, every roach estimate | "
        f"{statistics.median(abs(s.likely - s.real) for s in scored) if scored else float('nan'):.1f} s | |",
        f"| median signed error (estimate - real), where both answered | "
        f"{statistics.median(s.likely - s.real for s in both) if both else float('nan'):+.1f} s | "
        f"{statistics.median(s.slurm - s.real for s in both if s.slurm is not None) if both else float('nan'):+.1f} s |",
        f"| real start inside roach's interval [earliest, latest], to sacct's 1 s | {cover:.0%} | |",
        f"| ... to the exact second (no slack) | {sum(inside(s, 0) for s in scored) / max(len(scored), 1):.0%} | |",
        f"| ... within 5 s of it | {sum(inside(s, 5) for s in scored) / max(len(scored), 1):.0%} | |",
        f"| median width of roach's interval (latest - earliest) | {_width(scored):.1f} s | |",
        f"| median real wait | {statistics.median(s.real for s in scored) if scored else float('nan'):.1f} s | |",
    ]
    by_tier = [
        "",
        "| QOS | estimates | roach error | Slurm error | inside the interval |",
        "| --- | --- | --- | --- | --- |",
    ]
    for tier in sorted({s.tier for s in scored}):
        ss = [s for s in scored if s.tier == tier]
        bb = [s for s in ss if s.slurm is not None]
        by_tier.append(
            f"| {tier} | {len(ss)} | {statistics.median(abs(s.likely - s.real) for s in ss):.1f} s | "
            + (f"{statistics.median(abs(s.slurm - s.real) for s in bb if s.slurm is not None):.1f} s" if bb else "–")
            + f" | {sum(inside(s) for s in ss) / len(ss):.0%} |"
        )
    ratio = roach_err / slurm_err if slurm_err else float("nan")
    summary = [
        {
            "figure": "a pending job's start estimate: median absolute error",
            "roach": f"{roach_err:.1f} s",
            "baseline": f"{slurm_err:.1f} s (squeue --start)",
            "ratio": f"{ratio:.2f}x",
            "target": "<= 0.5x squeue --start",
            "holds": bool(ratio <= 0.5),
        },
        {
            "figure": "a pending job's real start inside its estimated interval",
            "roach": f"{cover:.0%}",
            "baseline": "–",
            "ratio": "–",
            "target": ">= 80%",
            "holds": bool(cover >= 0.8),
        },
    ]
    wait = statistics.median(s.real for s in scored) if scored else float("nan")
    widening = _width(scored) / wait if wait else float("nan")
    summary.append(
        {
            "figure": "a pending job's estimated interval: median width beside the median real wait",
            "roach": f"{_width(scored):.1f} s",
            "baseline": f"{wait:.1f} s (the real wait)",
            "ratio": f"{widening:.2f}x",
            "target": "<= 4x the wait",
            "holds": bool(widening <= 4),
        }
    )
    return "\n".join(rows + by_tier) + "\n", summary, {"estimates": len(scored)}


def score_dir(out: Path, client) -> tuple[str, list[dict], dict]:
    lines = [json.loads(ln) for ln in (out / "snapshots.jsonl").read_text().splitlines() if ln.strip()]
    submitted = json.loads((out / "submitted.json").read_text())
    ids = [j["job_id"] for j in submitted]
    acct = client.sacct(ids, duplicates=True)
    preempted = sum(1 for a in acct if a.step is None and a.state.value in ("PREEMPTED", "REQUEUED"))
    scored = score(lines, real_starts(acct))
    body, summary, params = tables(scored)
    head = (
        f"{len(ids)} jobs, {len(lines) - 1} moments, {preempted} attempts ended by a preemption or requeue. "
        "Each moment: a watch round, then the cluster's queue and `squeue --start`; every job pending then and "
        "started later is one estimate, scored against its next start (sacct).\n\n"
    )
    return head + body, summary, params
