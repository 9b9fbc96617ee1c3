"""The lab: roach's own Slurm on this machine (`roach lab up`), the default for demos and tests."""

from __future__ import annotations

from roach.fleet.cluster import Cluster
from roach.lab.saved import saved_slurm_env
from roach.model.resources import Resources
from roach.model.tiers import Tier

CPU = Resources(gpus_per_node=0, cpus_per_task=1, time="00:10:00")
GPU1 = Resources(gpus_per_node=1, cpus_per_gpu=1, time="00:30:00")
GPU2 = Resources(gpus_per_node=2, cpus_per_gpu=1, time="00:30:00")
GPU4 = Resources(gpus_per_node=4, cpus_per_gpu=1, time="00:30:00")
NODES2_GPU2 = Resources(nodes=2, gpus_per_node=2, cpus_per_gpu=1, time="00:30:00")

LAB = Cluster(
    name="lab",
    presets={"CPU": CPU, "GPU1": GPU1, "GPU2": GPU2, "GPU4": GPU4, "NODES2_GPU2": NODES2_GPU2},
    gpu_flag="gres",
    # The lab's QOS (roach/lab/accounting.py). It models a site of two tiers: high, capped per user and never
    # preempted, and low, uncapped and preemptible. normal is the QOS a job gets when it names none
    # (DefaultQOS): not a tier (the plan and the rebalancer place no job there), but a QOS that exists
    # (qos_names), so asking for it is no guardrail refusal. docs/clusters/lab.md says the same.
    tiers=(
        Tier("high", qos="high", gpu_cap=4),
        Tier("low", qos="low", preemptible=True),
    ),
    qos_names=("high", "normal", "low"),
    signal_lead_s=60,
    min_poll_s=1.0,  # our own controller: tests and demos may look often
    env_factory=saved_slurm_env,
    budget="none: roach's own test cluster on this machine",
    description="roach's own Slurm on this machine: nodes n1 n2 (or n1..nN, `roach lab up --nodes N`), 4 fake GPUs "
    "each (--gpus-per-node), tiers high/low (QOS normal: the default)",
)
CLUSTER = LAB
