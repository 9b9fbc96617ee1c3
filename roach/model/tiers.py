"""A cluster's tiers: where a job can land, in order from the top, with per-user GPU caps.

Values a site has that roach cannot know come from the cluster module, the user's clusters.toml or
discovery; never invented here.
"""

from __future__ import annotations

from dataclasses import dataclass

from roach.errors import UsageError


@dataclass(frozen=True)
class Tier:
    """One tier: how a job lands there (partition/qos/constraint), its per-user GPU cap, preemptibility."""

    name: str
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpu_cap: int | None = None  # GPUs one user may claim (running + pending) here; None: no per-user cap
    preemptible: bool = False

    def matches(self, partition: str, qos: str) -> bool:
        """Does a job in ``partition`` with ``qos`` count against this tier?"""
        return (self.partition is None or self.partition == partition) and (self.qos is None or self.qos == qos)

    def resources_changes(self) -> dict[str, str | None]:
        """The Resources fields that put a job on this tier."""
        return {"partition": self.partition, "qos": self.qos, "constraint": self.constraint}


def tier_named(tiers: tuple[Tier, ...], name: str) -> Tier:
    for t in tiers:
        if t.name == name:
            return t
    raise UsageError(f"no tier {name!r}", hint=f"tiers, top down: {', '.join(t.name for t in tiers) or '(none)'}")


def tier_of(tiers: tuple[Tier, ...], partition: str, qos: str) -> Tier | None:
    """The first tier (top down) a job with this partition and qos counts against."""
    for t in tiers:
        if t.matches(partition, qos):
            return t
    return None
