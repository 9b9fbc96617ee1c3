"""Resources -> sbatch options, and the errors that name the valid choices."""

from __future__ import annotations

import pytest

from roach.errors import UsageError
from roach.model.resources import Resources


def test_one_rank_per_gpu_becomes_tasks_per_node_and_gres():
    r = Resources(
        account="a",
        partition="gpu",
        qos="high",
        nodes=2,
        gpus_per_node=4,
        cpus_per_gpu=8,
        mem="64G",
        time="04:00:00",
        constraint="a100|h100",
        reservation="r1",
        extra=("--exclusive",),
    )
    assert r.sbatch_options() == [
        "--nodes=2",
        "--ntasks-per-node=4",
        "--time=04:00:00",
        "--gres=gpu:4",
        "--cpus-per-task=8",
        "--mem=64G",
        "--account=a",
        "--partition=gpu",
        "--qos=high",
        "--constraint=a100|h100",
        "--reservation=r1",
        "--exclusive",
    ]
    assert (r.world_size, r.total_gpus) == (8, 8)


def test_gpu_flag_typed_gpus_and_extra_gres():
    r = Resources(gpus_per_node=2, gpu_type="a100", gres_extra=("local:100G",))
    assert "--gres=gpu:a100:2,local:100G" in r.sbatch_options("gres")
    opts = r.sbatch_options("gpus-per-node")
    assert "--gpus-per-node=a100:2" in opts and "--gres=local:100G" in opts


def test_cpu_only_job_runs_one_task_per_node():
    assert Resources(cpus_per_task=4).sbatch_options()[:2] == ["--nodes=1", "--ntasks-per-node=1"]


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"nodes": 0}, "nodes=0 must be an integer >= 1"),
        ({"gpus_per_node": -1}, "gpus_per_node=-1"),
        ({"cpus_per_gpu": 4}, "cpus_per_gpu is set but gpus_per_node is 0"),
        ({"gpus_per_node": 1, "cpus_per_gpu": 2, "cpus_per_task": 2}, "contradict each other"),
        ({"mem": "lots"}, "mem='lots' is not a size"),
        ({"time": "forever"}, "time='forever' is not a Slurm time"),
        ({"qos": "hi gh"}, "qos='hi gh' is not a valid Slurm name"),
        ({"extra": ("--gres=gpu:8",)}, "contradicts a Resources field"),
        ({"extra": ("exclusive",)}, "must start with '-'"),
        ({"gres_extra": ("gpu:2",)}, "GPUs go in gpus_per_node"),
    ],
)
def test_invalid_values_are_refused_with_the_valid_fields(kw, says):
    with pytest.raises(UsageError) as err:
        Resources(**kw)
    assert says in str(err.value) and "valid fields: account, partition" in str(err.value)


def test_replace_makes_variants_and_refuses_unknown_fields():
    base = Resources(gpus_per_node=1)
    assert base.replace(qos="low").qos == "low" and base.with_(nodes=2).nodes == 2 and base.qos is None
    with pytest.raises(UsageError, match="unknown Resources field\\(s\\): gpus(.|\\n)*valid fields: account"):
        base.replace(gpus=2)
