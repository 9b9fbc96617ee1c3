"""``--tier NAME|auto`` of `roach submit`, `sweep` and `resume`: the submission's Resources put on a tier of the
cluster's table before the library is called (:mod:`roach.ops.tier_choice`), so the job is queued with that
tier's partition, QOS and constraint."""

from __future__ import annotations

import click

from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured, default_cluster_name, get_cluster
from roach.launch.prepare import resolve_resources
from roach.model.resources import Resources
from roach.ops.tier_choice import Placed, place

TIER_OPTION = click.option(
    "--tier",
    metavar="NAME|auto",
    default=None,
    help="Queue it on this tier of the cluster's table (its partition, QOS and constraint replace the preset's); "
    "auto: the tier `roach plan` chooses now. [default: where the resources land, often no tier]",
)


def tier_placed(
    cluster: Cluster | str | None, resources: Resources | str, tier: str | None, *, runs: int = 1
) -> Placed | None:
    """``resources`` (a preset name or Resources) on ``tier`` of ``cluster`` (None: the configured default);
    None when no tier is asked for. Refuses (exit 2) before anything is queued."""
    if tier is None:
        return None
    c = configured(get_cluster(cluster if cluster is not None else default_cluster_name()))
    return place(c, resolve_resources(resources, c), tier, runs=runs)


def tier_line(placed: Placed | None) -> str | None:
    """The line a submission prints for the tier it was put on; None when none was asked for."""
    return None if placed is None else f"  tier {placed.line()}"
