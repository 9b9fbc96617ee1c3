"""submit() of a test repository's pushed HEAD to the lab, as the lab's unprivileged user: what the lab tests submit
with, each giving its own resources where GPU1 does not fit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roach.fleet.cluster import Cluster
from roach.lab.config import LAB_USER
from roach.launch.job import Job
from roach.model.resources import Resources
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import GPU1, LAB
from tests.support.gitrepo import GitRepo

# The lab, its jobs run as the unprivileged user (root hides permission bugs).
LAB_AS_USER = LAB.with_(run_as=LAB_USER)


def submit_to_lab(
    repo: GitRepo,
    store: Store,
    roots: Mapping[str, Any],
    target: str,
    args: Mapping[str, Any] | None = None,
    *,
    resources: Resources | str = GPU1,
    cluster: Cluster | str = LAB_AS_USER,
    **kw: Any,
) -> Job:
    """Submit ``target`` of ``repo``'s pushed HEAD, recorded in ``store``, with ``roots``' log_root and clone_root;
    the other keywords are submit()'s."""
    return submit(target, args, resources=resources, cluster=cluster, repo_root=repo.work, store=store, **roots, **kw)
