"""Golden copies of what runs on the cluster: the batch script of a job and of a sweep's array, node.sh, and
an attempt's step.sh and driver.sh inside a holder, rendered for fixed inputs.

A change to any of them shows in review as a change to tests/data/golden/. After a deliberate change,
regenerate them with ``ROACH_REGEN_GOLDEN=1 pytest tests/test_golden_scripts.py`` and read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roach.launch import script as batch
from roach.launch.hold.attempts import AttemptPaths
from roach.launch.hold.scripts import AttemptInputs, render_driver, render_step
from roach.launch.shipping import node_script
from roach.slurm.clusters.ilc import AMPERE, ILC

GOLDEN = Path(__file__).parent / "data" / "golden"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMON = dict(
    cluster=ILC,
    resources=AMPERE.replace(gpus_per_node=2, nodes=2),
    repo_url="git@github.com:lab/my-repo.git",
    repo_name="my-repo",
    commit=COMMIT,
    clone_root="~/roach_clones",
)


def _job() -> str:
    return batch.render(
        batch.ScriptInputs(
            **COMMON,
            name="train",
            run_id="train-20261201-120000-abcd",
            log_root="/home/u/roach/my-repo/slurm-logs",
            bundle_root="/home/u/roach/my-repo/slurm-logs/bundles",
            roach_path="/home/u/roach/my-repo/slurm-logs/bundles/roach-1a2b",
            run_dir="~/roach/my-repo/runs/train-20261201-120000-abcd",
        )
    )


def _array() -> str:
    part = batch.ArrayPart(
        sweep_id="lr-sweep", count=8, offset=16, parallelism=4, run_root="~/roach/my-repo/runs", after=4242
    )
    return batch.render(
        batch.ScriptInputs(
            **COMMON,
            name="lr-sweep",
            run_id="lr-sweep",
            log_root="/home/u/roach/my-repo/slurm-logs",
            bundle_root="/home/u/roach/my-repo/slurm-logs/bundles",
            roach_path="/home/u/roach/my-repo/slurm-logs/bundles/roach-1a2b",
            run_dir="",
            array=part,
        )
    )


def _attempt() -> AttemptInputs:
    common = {k: v for k, v in COMMON.items() if k != "resources"}
    return AttemptInputs(
        **common,
        resources=AMPERE,
        holder=4242,
        attempt=3,
        run_id="train-20261201-120000-abcd",
        paths=AttemptPaths("/home/u/roach/my-repo/slurm-logs", "train-20261201-120000-abcd", 4242, 3),
        nodes=("g001", "g002"),
        gpus_per_node=4,
        roach_path="/home/u/roach/holders/bundles/roach-1a2b",
        run_dir="~/roach/my-repo/runs/train-20261201-120000-abcd",
        holder_ending="/home/u/roach/holders/bundles/4242/ending",
    )


CASES = {
    "job.sh": _job,
    "array.sh": _array,
    "node.sh": node_script,
    "attempt-step.sh": lambda: render_step(_attempt()),
    "attempt-driver.sh": lambda: render_driver(_attempt()),
}


@pytest.mark.parametrize("name", CASES)
def test_what_runs_on_the_cluster_matches_its_golden_copy(name):
    text = CASES[name]()
    path = GOLDEN / name
    if os.environ.get("ROACH_REGEN_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden copy {path}: run ROACH_REGEN_GOLDEN=1 pytest {__file__}"
    assert text == path.read_text(), (
        f"{name} differs from {path}; if the change is meant, regenerate with "
        f"ROACH_REGEN_GOLDEN=1 pytest tests/test_golden_scripts.py and review the diff"
    )
