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
from roach.scheduler.client import SlurmClient
from roach.slurm import submit
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import wait_until
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


def pending_below_room(
    repo: GitRepo, store: Store, roots: Mapping[str, Any], client: SlurmClient, jobs: list[int], name: str
) -> Job:
    """A run pending on the low tier while the high tier has room: two fillers take every GPU of n1 and n2 (their
    ids go to ``jobs``), then a 1-GPU run is submitted on low, the case a promotion to high is proposed for."""
    opts = ["--time=5", "--output=/dev/null", "--gres=gpu:4", f"--job-name={name}-filler"]
    jobs += [client.sbatch([*opts, f"--nodelist={n}"], "#!/bin/bash\nsleep 300\n") for n in ("n1", "n2")]
    wait_until("the fillers to run", lambda: all(q.state.is_running for q in client.squeue(job_ids=jobs)), 60)
    return submit_to_lab(
        repo,
        store,
        roots,
        "pkg.train:train",
        {"steps": 20, "step_s": 0.2},
        resources=GPU1.replace(qos="low", time="00:05:00"),
        name=name,
    )
