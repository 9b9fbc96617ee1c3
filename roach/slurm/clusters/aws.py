"""AWS: a Slurm cluster reached over ``ssh aws``; metered in dollars (fellowship credits).

Metered: roach submits here only when the cluster is named, within a grant its budget's owner made at a
terminal (``roach grant``), never as a fallback, never with more than the user's caps in clusters.toml (``gpu_hour_cost`` and ``max_cost`` turn a request into dollars). The page: docs/clusters/aws.md.
"""

from __future__ import annotations

from roach.fleet.cluster import Cluster
from roach.model.resources import Resources

H100 = Resources(gpus_per_node=1, time="01:00:00")  # one H100; account/partition from clusters.toml

AWS = Cluster(
    name="aws",
    presets={"H100": H100},
    gpu_flag="gres",
    metered=True,
    budget="metered in dollars: fellowship credits",
    ssh_alias="aws",
    description="H100 Slurm cluster on AWS over ssh aws; every GPU-hour is paid in dollars",
)
CLUSTER = AWS
