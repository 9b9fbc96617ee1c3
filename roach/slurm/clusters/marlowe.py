"""Marlowe: reached over ``ssh marlowe``; a metered allocation shared with the group.

Metered: roach submits here only when the cluster is named, within a grant its budget's owner made at a
terminal (``roach grant``), never as a fallback, never with more than the user's caps in clusters.toml. The account, partitions, QOS and caps are the user's to give there
(``roach clusters discover marlowe`` proposes the tiers). The page: docs/clusters/marlowe.md.
"""

from __future__ import annotations

from roach.fleet.cluster import Cluster
from roach.model.resources import Resources

H100 = Resources(gpus_per_node=1, time="01:00:00")  # one H100; account/partition/tier from clusters.toml

MARLOWE = Cluster(
    name="marlowe",
    presets={"H100": H100},
    gpu_flag="gres",
    metered=True,
    budget="metered: an allocation of GPU-hours shared with the group",
    ssh_alias="marlowe",
    description="H100 cluster over ssh marlowe; metered allocation shared with the group",
)
CLUSTER = MARLOWE
