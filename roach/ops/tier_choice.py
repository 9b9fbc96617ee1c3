"""A submission's tier: the one asked for by name, the one `roach plan` chooses now (``auto``), or, asked for
none, the one its resources land on (their partition and QOS read against the cluster's tier table).

:func:`place` puts Resources on a tier the way the plan and the rebalancer do (the tier's partition, QOS and
constraint replace the request's, then the cluster's defaults fill what is left); :func:`landing` only says where
Resources land. Neither queues anything.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from roach.errors import UsageError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import fill_resources
from roach.model.resources import Resources
from roach.model.tiers import Tier, tier_of
from roach.ops.plan import Plan, plan

AUTO = "auto"  # --tier auto: the tier `roach plan` chooses at submit time


@dataclass(frozen=True)
class Placed:
    """Where a submission goes: its tier (None: none of the cluster's), its Resources there, and why."""

    tier: Tier | None
    resources: Resources
    why: str
    plan: Plan | None = None  # --tier auto: the plan that chose it

    @property
    def qos(self) -> str | None:
        return self.resources.qos

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier.name if self.tier else None, "qos": self.qos, "tier_why": self.why}

    def line(self) -> str:
        qos = f"QOS {self.qos}" if self.qos else "no QOS asked (the account's default QOS)"
        return f"{self.tier.name if self.tier else 'none'}, {qos}: {self.why}"


def landing(cluster: Cluster, res: Resources) -> Placed:
    """The tier ``res`` lands on as it is: the first (top down) its partition and QOS count against."""
    tier = tier_of(cluster.tiers, res.partition or "", res.qos or "")
    if tier is not None:
        return Placed(tier, res, "the resources' partition and QOS are this tier's")
    if not cluster.tiers:
        return Placed(None, res, f"cluster {cluster.name} declares no tiers")
    names = ", ".join(t.name for t in cluster.tiers)
    return Placed(None, res, f"outside the tier table ({names}): never preempted nor promoted by roach; --tier NAME")


def place(cluster: Cluster, res: Resources, tier: str | None, *, runs: int = 1) -> Placed:
    """``res`` on the tier named ``tier`` of ``cluster`` (configured), or on the one `roach plan` chooses now for
    ``runs`` such runs (``auto``); ``tier`` None: where ``res`` lands as it is. An unknown tier, a cluster with
    no tiers, or a plan with no choice is a :class:`~roach.errors.UsageError`; nothing is queued."""
    if tier is None:
        return landing(cluster, res)
    if not cluster.tiers:
        raise UsageError(
            f"cluster {cluster.name} declares no tiers: --tier {tier} has nothing to choose from",
            hint=f"submit without --tier, or declare them: `roach clusters discover {cluster.name}` proposes them",
        )
    if tier == AUTO:
        return _planned(cluster, res, runs)
    named = {t.name: t for t in cluster.tiers}
    if tier not in named:
        close = difflib.get_close_matches(tier, [*named, AUTO], n=1)
        raise UsageError(
            f"cluster {cluster.name} has no tier {tier!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
            hint=f"tiers of {cluster.name}, top down: {', '.join(named)}; or auto (the tier `roach plan` chooses now)",
        )
    t = named[tier]
    return Placed(t, fill_resources(cluster, res.replace(**t.resources_changes())), "asked for (--tier)")


def _planned(cluster: Cluster, res: Resources, runs: int) -> Placed:
    """The tier `roach plan` chooses now for ``runs`` runs of ``res``."""
    if not res.total_gpus:
        raise UsageError(
            "--tier auto plans GPUs, and this request asks for none",
            hint=f"name a tier: {', '.join(t.name for t in cluster.tiers)}",
        )
    p = plan(cluster, res.total_gpus, res.nodes, str(res.time), base=res, runs=runs)
    if p.chosen is None:
        raise UsageError(
            f"--tier auto: no tier of {cluster.name} can take it now ({p.reasoning[-1]})",
            hint="`roach plan` says why tier by tier; name a tier to queue it anyway",
        )
    t = next(t for t in cluster.tiers if t.name == p.chosen.tier)
    return Placed(t, p.chosen.resources, f"chosen by `roach plan` (--tier auto): {p.reasoning[-1]}", p)
