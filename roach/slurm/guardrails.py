"""Guardrails checked before anything is submitted (metered clusters, caps, submit hosts, satisfiable
requests). Filled in by the clusters issue; submit() and hold() call :func:`check` first."""

from __future__ import annotations

from roach.slurm.cluster import Cluster
from roach.slurm.resources import Resources


def check(cluster: Cluster, resources: Resources, *, allow_metered: bool = False) -> None:
    """Raise a UsageError (nothing submitted) when this submission must not happen."""
