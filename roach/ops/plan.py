"""The resource plan: where a job of N GPUs (or a sweep of R such runs) would finish soonest on a cluster, worked
out fresh.

:func:`plan` reads the cluster now: one ``squeue`` of the user's queue (GPUs claimed per tier, pending
included: a pending job owns its slot), the nodes, the user's associations; it applies the user's caps and
budget (the guardrails), skips every tier whose per-user cap the user has claimed, and asks
``sbatch --test-only`` once per remaining tier when such a job would start (it ignores per-user caps,
which the tier table accounts for). The placement chosen finishes soonest: the earliest start (every
tier runs the same wall clock; no tier is assumed faster); on a tie, the tier higher in the cluster's
order, which is not preemptible before one that is. Each step says why in ``Plan.reasoning``, and the last line
says why each tier above the chosen one was passed over (the request larger than its cap, or its cap claimed by
the user's own jobs, N/cap).

A sweep (``runs`` > 1) goes to one tier as a whole: on each tier, as many of its runs as the cap's room leaves
(the runs' GPUs count against it like any job's) and the idle GPUs of the nodes hold start now (at least one where
``sbatch --test-only`` says a run starts now: it may preempt); the tier where the most start now is chosen, then
the earliest start, then the order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured, fill_resources
from roach.model.resources import Resources
from roach.model.tiers import Tier
from roach.ops.events import TierRow, tier_table
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_duration, parse_time
from roach.scheduler.parse_control import NodeRecord, parse_will_run


@dataclass(frozen=True)
class Placement:
    """One candidate: the request on one tier, what the tier table and ``sbatch --test-only`` said."""

    tier: str
    resources: Resources
    preemptible: bool
    start: datetime | None  # cluster local time; None: not asked, or Slurm would not take it
    finish: datetime | None
    nodes: str | None  # where Slurm would start it
    possible: bool
    why: str
    runs_now: int = 0  # how many of the plan's runs would start now there

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "resources": self.resources.to_json(),
            "preemptible": self.preemptible,
            "start": self.start.isoformat() if self.start else None,
            "finish": self.finish.isoformat() if self.finish else None,
            "nodes": self.nodes,
            "possible": self.possible,
            "why": self.why,
            "runs_now": self.runs_now,
        }


@dataclass(frozen=True)
class Plan:
    cluster: str
    gpus: int
    nodes: int
    time: str
    now: datetime  # the cluster's clock when it was read
    tiers: tuple[TierRow, ...]
    placements: tuple[Placement, ...]
    chosen: Placement | None
    reasoning: tuple[str, ...] = field(default_factory=tuple)
    runs: int = 1  # a sweep's runs, ``gpus`` over ``nodes`` each

    @property
    def resources(self) -> Resources | None:
        return self.chosen.resources if self.chosen else None

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "time": self.time,
            "now": self.now.isoformat(),
            "tiers": [r.to_json() for r in self.tiers],
            "placements": [p.to_json() for p in self.placements],
            "chosen": self.chosen.to_json() if self.chosen else None,
            "reasoning": list(self.reasoning),
            "runs": self.runs,
        }

    def text(self) -> str:
        runs = f"{self.runs} runs of " if self.runs > 1 else ""
        head = (
            f"plan for {runs}{self.gpus} GPU{'s' if self.gpus != 1 else ''} on {self.nodes} node"
            f"{'s' if self.nodes != 1 else ''} for {self.time} on {self.cluster}, read at {self.now:%Y-%m-%d %H:%M:%S}"
        )
        lines = [head, "tiers (yours: claimed = running + pending):"]
        lines += [f"  {r.text()}" + (" (preemptible)" if r.preemptible else "") for r in self.tiers]
        lines.append("candidates:")
        lines += [f"  {p.tier}: {p.why}" for p in self.placements]
        lines.append("why:")
        lines += [f"  {r}" for r in self.reasoning]
        lines.append(
            f"chosen: {self.chosen.tier} ({resources_line(self.chosen.resources)})"
            + (f": {self.chosen.runs_now} of {self.runs} runs start now" if self.runs > 1 else "")
            if self.chosen
            else "chosen: nothing: no tier can take this request now"
        )
        return "\n".join(lines)

    def write(self, path: str | Path) -> Path:
        """Write the chosen Resources for a submit script: JSON for ``*.json``, else a Python module with
        ``RESOURCES`` and the reasoning as comments."""
        if self.chosen is None:
            raise UsageError("the plan chose no placement: there is nothing to write", hint="read its reasoning")
        p = Path(path)
        if p.suffix == ".json":
            p.write_text(
                json.dumps({"resources": self.chosen.resources.to_json(), "plan": self.to_json()}, indent=2) + "\n"
            )
            return p
        args = ", ".join(
            f"{k}={v!r}"
            for k, v in self.chosen.resources.to_json().items()
            if v != getattr(Resources(), k) or k in ("gpus_per_node", "nodes", "time")
        )
        comments = "\n".join(f"#   {r}" for r in self.reasoning)
        p.write_text(
            f"# Written by `roach plan` at {self.now:%Y-%m-%d %H:%M:%S} (cluster time) for {self.cluster}: "
            f"tier {self.chosen.tier}.\n# A record of that moment's cluster, not a default: plan again "
            f"before the next submission.\n{comments}\nfrom roach.slurm import Resources\n\n"
            f"RESOURCES = Resources({args.replace('extra=[]', 'extra=()')})\n"
        )
        return p


def resources_line(res: Resources) -> str:
    return " ".join(res.sbatch_options())


def ask_start(client: SlurmClient, options: list[str]) -> tuple[datetime | None, str | None, str]:
    """``sbatch --test-only``: (start, nodes, what it said). Submits nothing."""
    r = client.test_only(options, "roach-plan")
    said = (r.stderr + "\n" + r.stdout).strip()
    will = parse_will_run(said)
    if will is not None:
        return will.start, will.nodes, said.splitlines()[-1]
    return None, None, said.splitlines()[-1] if said else f"exit {r.returncode}"


def _cluster_now(client: SlurmClient) -> datetime:
    r = client.transport.run(["date", "+%Y-%m-%dT%H:%M:%S"])
    t = parse_time(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None
    return t or datetime.now()


def _when(start: datetime, now: datetime) -> str:
    wait = (start - now).total_seconds()
    if wait <= 60:
        return "starts now"
    return f"starts at {start:%Y-%m-%d %H:%M:%S} (in {int(wait // 3600)}h{int(wait % 3600 // 60):02d}m)"


Probe = Callable[[Tier, Resources], tuple[datetime | None, str | None, str]]


@dataclass(frozen=True)
class Ask:
    """What a plan is asked: ``runs`` runs of ``res`` each (one: a job). ``slots``: how many such runs the nodes'
    idle GPUs hold now, by partition (None: not read; a tier's runs starting now are then bounded by its cap only)."""

    res: Resources
    runs: int = 1
    slots: Mapping[str, int] | None = None


def idle_slots(nodes: Sequence[NodeRecord], res: Resources) -> dict[str, int]:
    """By partition: how many runs of ``res`` the idle GPUs of its nodes hold now (each run ``res.nodes`` nodes of
    ``res.gpus_per_node`` GPUs); under ``""`` every node's, once, for a request that names no partition."""
    per_node: dict[str, int] = {}
    for n in nodes:
        if not n.available or n.planned or not res.gpus_per_node:  # a planned node's idle GPUs are a pending job's
            continue
        fit = max(0, n.gpus_total - n.gpus_used) // res.gpus_per_node
        for part in {*n.partitions, ""}:
            per_node[part] = per_node.get(part, 0) + fit
    return {part: k // res.nodes for part, k in per_node.items()}


def _over_cap(row: TierRow, gpus: int) -> str | None:
    """Why a tier's cap leaves no room for one run of ``gpus`` GPUs; None: it does."""
    if row.free is None or row.free >= gpus:
        return None
    if row.cap is not None and gpus > row.cap:
        return f"cap {row.cap} GPUs per user: the request ({gpus} GPUs) is larger than the cap"
    return (
        f"cap {row.cap} GPUs per user, you claim {row.claimed} ({row.running} running, {row.pending} "
        f"pending): {row.free} free < {gpus} asked"
    )


def _runs_now(row: TierRow, ask: Ask, on: Resources, start: datetime, now: datetime) -> tuple[int, str]:
    """How many of the asked runs would start now on a tier, and what bounds them."""
    if (start - now).total_seconds() > 60:
        return 0, "none start now"
    gpus = ask.res.total_gpus
    by_cap = ask.runs if row.free is None else min(ask.runs, row.free // gpus)
    idle = ask.slots.get(on.partition or "", 0) if ask.slots is not None else None
    n = by_cap if idle is None else min(by_cap, max(idle, 1))  # Slurm says one starts now: it may preempt
    bounds = [f"the cap's room holds {by_cap}"] if row.free is not None else []
    bounds += [f"idle GPUs hold {idle}"] if idle is not None else []
    return n, f"{n} of {ask.runs} runs start now ({', '.join(bounds) or 'no cap'})"


def _placement(tier: Tier, row: TierRow, on: Resources, ask: Ask, now: datetime, probe: Probe) -> Placement:
    """One tier's candidate: skipped where its cap has no room for a run, else what ``probe`` says."""
    over = _over_cap(row, ask.res.total_gpus)
    if over is not None:
        return Placement(
            tier.name, on, tier.preemptible, None, None, None, False, f"{over}; skipped without asking Slurm"
        )
    start, where, said = probe(tier, on)
    if start is None:
        return Placement(tier.name, on, tier.preemptible, None, None, None, False, f"Slurm would not take it: {said}")
    room = f"{row.free} of cap {row.cap} free" if row.cap is not None else "no per-user cap"
    why = f"{_when(start, now)} on {where or '?'} ({room}{', preemptible' if tier.preemptible else ''})"
    n, runs = _runs_now(row, ask, on, start, now)
    if ask.runs > 1:
        why += f"; {runs}"
    wall = timedelta(seconds=parse_duration(str(ask.res.time)) or 0)
    return Placement(tier.name, on, tier.preemptible, start, start + wall, where, True, why, n)


def choose(
    tiers: Sequence[Tier],
    rows: Sequence[TierRow],
    res: Resources | Ask,
    now: datetime,
    probe: Probe,
    on_tier: Callable[[Tier], Resources] | None = None,
) -> tuple[list[Placement], Placement | None, list[str]]:
    """The candidates, the choice and the reasons (pure but for ``probe``, asked once per tier with room).

    A tier whose per-user cap leaves too little for one run (the user's claims, or a run larger than the cap) is
    skipped without asking. Of the rest, for a sweep the tier where the most runs start now; then the earliest
    start (the wall clock is the same everywhere, so it finishes soonest); on a tie, the tier higher in ``tiers``.
    """
    ask = res if isinstance(res, Ask) else Ask(res)
    reasoning = [f"read the cluster at {now:%H:%M:%S}: you claim " + "; ".join(r.text() for r in rows)]
    placements = [
        _placement(
            tier, row, on_tier(tier) if on_tier else ask.res.replace(**tier.resources_changes()), ask, now, probe
        )
        for tier, row in zip(tiers, rows)
    ]
    possible = [p for p in placements if p.possible]
    many = ask.runs > 1
    chosen = (
        min(possible, key=lambda p: (-p.runs_now if many else 0, max(p.start or now, now), placements.index(p)))
        if possible
        else None
    )
    reasoning += [f"not {p.tier}: {p.why}" for p in placements if not p.possible]
    if chosen is None:
        reasoning.append("no tier can take it now: wait for your own jobs to end, or ask for less")
        return placements, None, reasoning
    because = _sweep_because(chosen, possible, ask, now) if many else _because(chosen, possible, now)
    for p, row in list(zip(placements, rows))[: placements.index(chosen)]:  # the tiers above the choice: why not
        if not p.possible:
            because += f"; not {p.tier}, though higher in the cluster's order: {_passed_over(row, ask.res.total_gpus)}"
    reasoning.append(because)
    return placements, chosen, reasoning


def _because(chosen: Placement, possible: Sequence[Placement], now: datetime) -> str:
    """Why a job goes to ``chosen``: it starts soonest, and what starts as soon or later."""
    earliest = max(chosen.start or now, now)
    ties = [p for p in possible if p is not chosen and max(p.start or now, now) == earliest]
    later = [f"{p.tier} ({_when(p.start or now, now)})" for p in possible if max(p.start or now, now) > earliest]
    because = f"{chosen.tier}: {_when(chosen.start or now, now)}, so it finishes soonest, by {chosen.finish:%Y-%m-%d %H:%M:%S}"
    if ties:
        because += f"; {', '.join(p.tier for p in ties)} would start as soon, and {chosen.tier} is higher in the cluster's order"
        if any(p.preemptible for p in ties) and not chosen.preemptible:
            because += " and is not preemptible"
    if later:
        because += f"; later: {', '.join(later)}"
    return because


def _sweep_because(chosen: Placement, possible: Sequence[Placement], ask: Ask, now: datetime) -> str:
    """Why a sweep goes to ``chosen``: the most of its runs start now there."""
    because = (
        f"{chosen.tier}: {chosen.runs_now} of {ask.runs} runs start now, the most of any tier "
        f"(the first {_when(chosen.start or now, now)})"
    )
    others = [f"{p.tier} {p.runs_now}" for p in possible if p is not chosen]
    if others:
        because += f"; runs starting now elsewhere: {', '.join(others)}"
    return because


def _passed_over(row: TierRow, gpus: int) -> str:
    """Why a tier above the chosen one was passed over: its cap (as :func:`_over_cap` says it), else Slurm."""
    return _over_cap(row, gpus) or "Slurm would not take it"


def plan(
    cluster: Cluster | str,
    gpus: int,
    nodes: int = 1,
    time: str = "01:00:00",
    client: SlurmClient | None = None,
    *,
    base: Resources | None = None,
    runs: int = 1,
) -> Plan:
    """Where ``gpus`` GPUs over ``nodes`` nodes for ``time`` would finish soonest on ``cluster`` now; with ``runs``,
    where a sweep of that many such runs would start the most of them now.

    Reads: the user's queue (one squeue), the nodes, partitions and associations (the live guardrail), the
    cluster's clock, and ``sbatch --test-only`` per tier with room; for a sweep, the nodes' idle GPUs (one sinfo).
    Raises :class:`~roach.fleet.guardrails.Refused` when the request is over the user's caps or no node could ever
    run it; returns a plan whose ``chosen`` is None when every tier is full or refuses it.
    """

    c = configured(cluster)  # a name: get_cluster's lookup; an object: the file applied to it likewise
    for label, v in (("gpus", gpus), ("nodes", nodes), ("runs", runs)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise UsageError(f"{label}={v!r} must be an integer >= 1")
    if gpus % nodes:
        raise UsageError(
            f"{gpus} GPUs do not split evenly over {nodes} nodes (one rank per GPU, the same per node)",
            hint=f"ask for a multiple of {nodes} GPUs",
        )
    if not c.tiers:
        raise UsageError(
            f"cluster {c.name} declares no tiers: there is nothing to choose between",
            hint=f"`roach clusters discover {c.name}` proposes them for clusters.toml",
        )
    res = fill_resources(c, (base or Resources()).replace(nodes=nodes, gpus_per_node=gpus // nodes, time=time))
    guardrails.check_caps(c, res, runs=runs if runs > 1 else None)
    guardrails.check_satisfiable(c, res)
    client = client or c.client()
    guardrails.check_live(c, res, client)
    now = _cluster_now(client)
    rows = tier_table(c.tiers, client.squeue())
    ask = Ask(res, runs, idle_slots(client.nodes(), res) if runs > 1 else None)
    placements, chosen, reasoning = choose(
        c.tiers,
        rows,
        ask,
        now,
        lambda tier, on: ask_start(client, on.sbatch_options(c.gpu_flag)),
        on_tier=lambda tier: fill_resources(c, res.replace(**tier.resources_changes())),
    )
    return Plan(c.name, gpus, nodes, time, now, rows, tuple(placements), chosen, tuple(reasoning), runs)
