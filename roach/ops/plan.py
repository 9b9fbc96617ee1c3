"""The resource plan: where a job of N GPUs would finish soonest on a cluster, worked out fresh.

:func:`plan` reads the cluster now: one ``squeue`` of the user's queue (GPUs claimed per tier, pending
included: a pending job owns its slot), the nodes, the user's associations; it applies the user's caps and
budget (the guardrails), skips every tier whose per-user cap the user has claimed, and asks
``sbatch --test-only`` once per remaining tier when such a job would start (it ignores per-user caps,
which the tier table accounts for). The placement chosen finishes soonest: the earliest start (every
tier runs the same wall clock; no tier is assumed faster); on a tie, the tier higher in the cluster's
order, which is not preemptible before one that is. Each step says why in ``Plan.reasoning``, and the last line
says why each tier above the chosen one was passed over (its cap claimed by the user's own jobs, N/cap).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
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

_START = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:.*?on nodes (\S+))?")


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
        }

    def text(self) -> str:
        head = (
            f"plan for {self.gpus} GPU{'s' if self.gpus != 1 else ''} on {self.nodes} node"
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
    m = _START.search(said)
    if m:
        return parse_time(m[1]), m[2], said.splitlines()[-1]
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


def choose(
    tiers: Sequence[Tier],
    rows: Sequence[TierRow],
    res: Resources,
    now: datetime,
    probe: Probe,
    on_tier: Callable[[Tier], Resources] | None = None,
) -> tuple[list[Placement], Placement | None, list[str]]:
    """The candidates, the choice and the reasons (pure but for ``probe``, asked once per tier with room).

    A tier whose per-user cap the user's claims leave too little of is skipped without asking. Of the rest,
    the earliest start wins (the wall clock is the same everywhere, so it finishes soonest); on a tie, the
    tier higher in ``tiers``.
    """
    gpus = res.total_gpus
    wall = timedelta(seconds=parse_duration(str(res.time)) or 0)
    reasoning = [f"read the cluster at {now:%H:%M:%S}: you claim " + "; ".join(r.text() for r in rows)]
    placements: list[Placement] = []
    for tier, row in zip(tiers, rows):
        on = on_tier(tier) if on_tier else res.replace(**tier.resources_changes())
        if row.free is not None and row.free < gpus:
            why = (
                f"cap {row.cap} GPUs per user, you claim {row.claimed} ({row.running} running, {row.pending} "
                f"pending): {row.free} free < {gpus} asked; skipped without asking Slurm"
            )
            placements.append(Placement(tier.name, on, tier.preemptible, None, None, None, False, why))
            continue
        start, where, said = probe(tier, on)
        if start is None:
            placements.append(
                Placement(tier.name, on, tier.preemptible, None, None, None, False, f"Slurm would not take it: {said}")
            )
            continue
        room = f"{row.free} of cap {row.cap} free" if row.cap is not None else "no per-user cap"
        why = f"{_when(start, now)} on {where or '?'} ({room}{', preemptible' if tier.preemptible else ''})"
        placements.append(Placement(tier.name, on, tier.preemptible, start, start + wall, where, True, why))
    possible = [p for p in placements if p.possible]
    chosen = min(possible, key=lambda p: (max(p.start or now, now), placements.index(p))) if possible else None
    reasoning += [f"not {p.tier}: {p.why}" for p in placements if not p.possible]
    if chosen is None:
        reasoning.append("no tier can take it now: wait for your own jobs to end, or ask for less")
        return placements, None, reasoning
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
    for p, row in list(zip(placements, rows))[: placements.index(chosen)]:  # the tiers above the choice: why not
        if p.possible:
            continue
        if row.free is not None and row.free < gpus:
            because += (
                f"; not {p.tier}, though higher in the cluster's order: its cap is claimed by your own jobs "
                f"({row.claimed}/{row.cap} GPUs: {row.running} running, {row.pending} pending; {row.free} free < "
                f"{gpus} asked)"
            )
        else:
            because += f"; not {p.tier}, though higher in the cluster's order: Slurm would not take it"
    reasoning.append(because)
    return placements, chosen, reasoning


def plan(
    cluster: Cluster | str,
    gpus: int,
    nodes: int = 1,
    time: str = "01:00:00",
    client: SlurmClient | None = None,
    *,
    base: Resources | None = None,
) -> Plan:
    """Where ``gpus`` GPUs over ``nodes`` nodes for ``time`` would finish soonest on ``cluster`` now.

    Reads: the user's queue (one squeue), the nodes, partitions and associations (the live guardrail), the
    cluster's clock, and ``sbatch --test-only`` per tier with room. Raises
    :class:`~roach.fleet.guardrails.Refused` when the request is over the user's caps or no node could ever
    run it; returns a plan whose ``chosen`` is None when every tier is full or refuses it.
    """

    c = configured(cluster)  # a name: get_cluster's lookup; an object: the file applied to it likewise
    if not isinstance(gpus, int) or gpus < 1 or not isinstance(nodes, int) or nodes < 1:
        raise UsageError(f"gpus={gpus!r} and nodes={nodes!r} must be integers >= 1")
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
    guardrails.check_caps(c, res)
    guardrails.check_satisfiable(c, res)
    client = client or c.client()
    guardrails.check_live(c, res, client)
    now = _cluster_now(client)
    rows = tier_table(c.tiers, client.squeue())
    placements, chosen, reasoning = choose(
        c.tiers,
        rows,
        res,
        now,
        lambda tier, on: ask_start(client, on.sbatch_options(c.gpu_flag)),
        on_tier=lambda tier: fill_resources(c, res.replace(**tier.resources_changes())),
    )
    return Plan(c.name, gpus, nodes, time, now, rows, tuple(placements), chosen, tuple(reasoning))
