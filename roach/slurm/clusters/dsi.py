"""DSI: reached over ``ssh login.ds``; worked with the remote-workspace backend (docs/remote-workspace.md).

Partitions: ``general`` (the default, for unattended batch work; preemptible), ``protected`` (short jobs
that must not be preempted) and ``interactive`` (debugging; not a tier roach plans into). GPUs are asked
as ``--gres=gpu:N``. Node-local scratch is asked as ``--gres=local:<SIZE>`` and appears at
``/local/scratch/<user>_<jobid>/``, deleted when the job ends. The account and any per-user caps come
from clusters.toml (``roach clusters discover dsi``). The page: docs/clusters/dsi.md; the policy:
https://cluster-policy.ds.uchicago.edu/.
"""

from __future__ import annotations

from roach.fleet.cluster import Cluster
from roach.model.resources import Resources
from roach.model.tiers import Tier

GPU1 = Resources(partition="general", gpus_per_node=1, time="01:00:00")  # one GPU on the default partition
DEBUG = Resources(partition="interactive", gpus_per_node=1, time="01:00:00")  # for debugging, not batch work


def local_scratch_dir(user: str, job_id: int | str) -> str:
    """Where ``--gres=local:<SIZE>`` puts a job's node-local scratch (deleted when the job ends)."""
    return f"/local/scratch/{user}_{job_id}/"


DSI = Cluster(
    name="dsi",
    presets={"GPU1": GPU1, "DEBUG": DEBUG},
    # general first: the partition for unattended batch work; protected only for short jobs that must
    # not be preempted. Per-user caps are the site's: discovery or clusters.toml adds them.
    tiers=(
        Tier("general", partition="general", preemptible=True),
        Tier("protected", partition="protected"),
    ),
    partitions=("general", "interactive", "protected"),
    default_partition="general",
    gpu_flag="gres",
    metered=False,
    budget="roach knows of no metering: the cluster policy governs use (cluster-policy.ds.uchicago.edu)",
    ssh_alias="login.ds",
    backend="remote-workspace",
    description="DSI cluster over ssh login.ds: general (preemptible), protected, interactive; --gres=local scratch",
)
CLUSTER = DSI
