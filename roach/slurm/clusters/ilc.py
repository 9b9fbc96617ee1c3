"""ILC: the group's own cluster, driven from an ILC node itself (no SSH). The default cluster.

``~`` is the node-local home and ``~/scratch`` the shared store: every path a submission passes is written
in those terms. The ILC login host is not a submit host (its home is AFS, with no scratch): a submission
from it is refused. Its host names, the account, the partitions, QOS and per-user caps are the user's to
give in clusters.toml (``roach clusters discover ilc`` proposes the tiers). The page: docs/clusters/ilc.md.
"""

from __future__ import annotations

import os

from roach.fleet.cluster import Cluster
from roach.model.resources import Resources

AMPERE = Resources(gpus_per_node=1, time="01:00:00")  # one Ampere GPU; account/partition/tier from clusters.toml

LOGIN_HOST_REASON = (
    "the ILC login host is not a submit host: its home is AFS and has no scratch; submit from an "
    "ILC node, where ~ is the node-local home and ~/scratch the shared store"
)


def afs_home() -> str | None:
    """The reason this host cannot submit to ILC when its home is on AFS (the login host's is), else None."""
    home = os.path.realpath(os.path.expanduser("~"))
    if home == "/afs" or home.startswith("/afs/"):
        return f"its home {home} is on AFS (the ILC login host's is): no ~/scratch, no node-local home"
    return None


ILC = Cluster(
    name="ilc",
    presets={"AMPERE": AMPERE},
    gpu_flag="gres",
    metered=False,
    budget="not metered: the group's own cluster; per-user GPU caps per tier (clusters.toml, from discovery)",
    refused_host_reason=LOGIN_HOST_REASON,
    host_check=afs_home,
    description="the group's cluster, driven from one of its nodes; ~ node-local, ~/scratch shared",
)
CLUSTER = ILC
