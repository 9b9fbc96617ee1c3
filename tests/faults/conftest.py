"""Fixtures of the fault suite: one git repo with the ledger function, a store, and the lab's helpers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB
from tests.support.gitrepo import GitRepo
from tests.support.labs import SHARED_TMP

JOBS = (Path(__file__).parent / "jobs.py").read_text()
TARGET = "pkg.faults:train"
CLUSTER = LAB.with_(run_as=LAB_USER)


class Faults:
    """What every fault test submits with: the repo, its store and its roots on the lab."""

    def __init__(self, base: Path):
        self.base = base
        self.repo = GitRepo(base)
        self.repo.commit({"pkg/__init__.py": "", "pkg/faults.py": JOBS}, "the fault suite's ledger function")
        self.store = Store(base / "store.sqlite")
        self.roots = {"log_root": str(base / "logs"), "clone_root": str(base / "clones")}

    def submit(self, args: dict, resources, *, cluster=CLUSTER, target: str = TARGET, store: Store | None = None, **kw):
        return submit(
            target,
            args=args,
            resources=resources,
            cluster=cluster,
            repo_root=self.repo.work,
            store=store or self.store,
            **{**self.roots, **kw},  # a test may put a root elsewhere (a node-local clone root)
        )


@pytest.fixture(scope="session")
def faults(lab) -> Faults:
    base = Path(tempfile.mkdtemp(prefix="roach-faults-", dir=SHARED_TMP))
    os.chmod(base, 0o777)
    return Faults(base)  # left in /tmp for a post-mortem of a failure; small


def preempt(slurm, node: str = "n1", sleep_s: int = 2) -> int:
    """A short high-tier job as root, pinned to ``node`` and asking one GPU more than it has free, so it can
    only start by preempting low jobs there."""
    n = next(x for x in slurm.nodes() if x.name == node)
    gpus = min(n.gpus_total, n.gpus_total - n.gpus_used + 1)
    return slurm.sbatch(
        [
            "--qos=high",
            f"--nodelist={node}",
            f"--gres=gpu:{gpus}",
            "--time=1",
            "--output=/dev/null",
            "--job-name=preemptor",
        ],
        f"#!/bin/bash\nsleep {sleep_s}\n",
    )
