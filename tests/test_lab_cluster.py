"""The lab is a real Slurm: nodes, GPUs, multi-node ranks, QOS caps, preemption and accounting."""

from __future__ import annotations

import re

import pytest

from roach.lab import release
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from tests.conftest import wait_until


def _sbatch(slurm, jobs, options, script):
    job = slurm.sbatch(options, "#!/bin/bash\n" + script)
    jobs.append(job)
    return job


def _queue_state(slurm, job):
    recs = [r for r in slurm.squeue(job_ids=[job]) if r.raw_id == job]
    return recs[0] if recs else None


def _final(slurm, job, timeout=60):
    """The allocation's sacct record once Slurm says it ended."""

    def done():
        recs = [r for r in slurm.sacct([job]) if r.step is None]
        return recs[0] if recs and recs[0].state.is_terminal else None

    return wait_until(f"job {job} to end in sacct", done, timeout=timeout)


@pytest.mark.lab
def test_both_nodes_up_with_four_gpus_and_eight_cpus(slurm):
    nodes = {n.name: n for n in slurm.nodes()}
    assert set(nodes) == {"n1", "n2"}
    for n in nodes.values():
        assert n.gpus_total == 4 and n.cpus_total == 8, n
        assert n.available, n
        assert n.partitions == ("gpu",)


@pytest.mark.lab
def test_jobs_run_as_the_unprivileged_user_with_their_gpus(user_slurm, jobs, shared_tmp):
    out = shared_tmp / "who.out"
    job = _sbatch(
        user_slurm,
        jobs,
        ["--gres=gpu:2", f"--output={out}"],
        'echo "user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID"\n',
    )
    rec = _final(user_slurm, job)
    assert rec.state is JobState.COMPLETED and rec.exit_code == 0
    assert rec.user == LAB_USER
    text = out.read_text()
    assert f"user={LAB_USER} " in text and f"job={job}" in text
    assert len(text.split("gpus=")[1].split()[0].split(",")) == 2  # Slurm bound two fake GPUs


@pytest.mark.lab
def test_two_node_job_gets_ranks_on_both_nodes(user_slurm, jobs, shared_tmp):
    out = shared_tmp / "ranks.out"
    job = _sbatch(
        user_slurm,
        jobs,
        ["--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2", f"--output={out}"],
        "srun bash -c 'echo \"rank=$SLURM_PROCID node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES\"'\n",
    )
    rec = _final(user_slurm, job)
    assert rec.state is JobState.COMPLETED, out.read_text()
    assert rec.nodes == 2 and rec.tres.gpus == 4
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("rank=")]
    ranks = {ln.split()[0]: ln.split()[1] for ln in lines}
    assert sorted(ranks) == ["rank=0", "rank=1", "rank=2", "rank=3"]
    assert set(ranks.values()) == {"node=n1", "node=n2"}


@pytest.mark.lab
def test_job_over_the_high_qos_gpu_cap_pends_with_its_reason(user_slurm, jobs):
    first = _sbatch(user_slurm, jobs, ["--qos=high", "--gres=gpu:4", "--output=/dev/null"], "sleep 120\n")
    wait_until("the capped job to run", lambda: (r := _queue_state(user_slurm, first)) and r.state is JobState.RUNNING)
    over = _sbatch(user_slurm, jobs, ["--qos=high", "--gres=gpu:1", "--output=/dev/null"], "sleep 1\n")
    rec = wait_until(
        "the job over the cap to show its reason",
        lambda: (r := _queue_state(user_slurm, over)) and r.reason is PendingReason.QOSMaxGRESPerUser and r,
    )
    assert rec.state is JobState.PENDING and rec.reason_text == "QOSMaxGRESPerUser"
    assert rec.tres.gpus == 1  # a pending job already claims what it asked for


@pytest.mark.slow
@pytest.mark.lab
def test_high_tier_preempts_low_tier_which_is_requeued_and_comes_back(user_slurm, jobs, shared_tmp):
    out = shared_tmp / "low.out"
    low = _sbatch(
        user_slurm,
        jobs,
        ["--qos=low", "--requeue", "--nodes=2", "--gres=gpu:4", f"--output={out}", "--open-mode=append"],
        "trap 'echo \"TERM at restart ${SLURM_RESTART_COUNT:-0}\"; exit 0' TERM\n"
        'echo "start restart=${SLURM_RESTART_COUNT:-0}"\nsleep 300 & wait\n',
    )
    wait_until("the low job to run", lambda: (r := _queue_state(user_slurm, low)) and r.state is JobState.RUNNING)
    # RUNNING comes before the script starts: a TERM sent before its trap is set would be lost
    wait_until("the low job's trap to be set", lambda: out.exists() and "start restart=0" in out.read_text())
    high = _sbatch(user_slurm, jobs, ["--qos=high", "--gres=gpu:4", "--output=/dev/null"], "sleep 2\n")
    wait_until(
        "the high job to run on the low job's GPUs",
        lambda: (r := _queue_state(user_slurm, high)) is None or r.state is not JobState.PENDING,
        timeout=90,
    )
    back = wait_until(
        "the low job to run again after its requeue",
        lambda: (r := _queue_state(user_slurm, low)) and r.state is JobState.RUNNING and r.restart_count == 1 and r,
        timeout=120,
    )
    assert back.restart_count == 1
    text = wait_until("the requeued run's first line", lambda: "start restart=1" in out.read_text() and out.read_text())
    assert "TERM at restart 0" in text
    runs = [r for r in user_slurm.sacct([low], duplicates=True) if r.step is None]
    assert [r.state for r in runs][0] is JobState.PREEMPTED
    assert runs[-1].state is JobState.RUNNING
    assert _final(user_slurm, high).state is JobState.COMPLETED


@pytest.mark.lab
@pytest.mark.parametrize(
    "script,state,code,sig",
    [
        ("exit 0\n", JobState.COMPLETED, 0, 0),
        ("exit 3\n", JobState.FAILED, 3, 0),
        ("kill -9 $$\n", JobState.FAILED, 0, 9),
    ],
)
def test_sacct_reports_final_state_and_exit_code(user_slurm, jobs, script, state, code, sig):
    job = _sbatch(user_slurm, jobs, ["--output=/dev/null"], script)
    rec = _final(user_slurm, job)
    assert (rec.state, rec.exit_code, rec.exit_signal) == (state, code, sig)


@pytest.mark.lab
def test_sacct_reports_a_cancelled_job(user_slurm, jobs):
    job = _sbatch(user_slurm, jobs, ["--output=/dev/null"], "sleep 300\n")
    wait_until("the job to run", lambda: (r := _queue_state(user_slurm, job)) and r.state is JobState.RUNNING)
    user_slurm.scancel([job])
    rec = _final(user_slurm, job)
    assert rec.state is JobState.CANCELLED and rec.state_text.startswith("CANCELLED by")


@pytest.mark.lab
def test_array_tasks_are_listed_one_per_line_with_their_ids(user_slurm, jobs):
    job = _sbatch(user_slurm, jobs, ["--array=0-3%2", "--output=/dev/null", "--job-name=we|ird $(name)"], "sleep 30\n")
    recs = wait_until(
        "two array tasks to run",
        lambda: (
            (rs := [r for r in user_slurm.squeue(job_ids=[job])])
            and sum(r.state is JobState.RUNNING for r in rs) == 2
            and rs
        ),
    )
    running = sorted(r.ref.task for r in recs if r.state is JobState.RUNNING)
    assert running == [0, 1]
    pending = [r for r in recs if r.state is JobState.PENDING]
    # --array expands even the still-pending range into one record per task
    assert sorted(r.ref.task for r in pending) == [2, 3]
    assert all(r.reason is PendingReason.JobArrayTaskLimit for r in pending)
    assert all(r.name == "we|ird $(name)" and r.ref.job == job for r in recs)


@pytest.mark.lab
def test_probe_reports_the_lab_settings(slurm, lab):
    caps = slurm.capabilities(refresh=True)
    have = release.installed()  # the installed slurmctld's own word (`slurmctld -V`), whichever release it is
    assert have is not None and caps.version == (have.major, have.minor, have.patch)
    assert caps.cluster_name == "lab"
    assert caps.accounting is True
    assert caps.min_job_age_s == lab.min_job_age
    assert caps.preempt_type == "preempt/qos" and caps.preempt_mode == "REQUEUE" and caps.preemption_requeues
    assert caps.preempt_send_user_signal is lab.preempt_send_user_signal
    assert caps.max_array_size == lab.max_array_size and caps.kill_wait_s == 30
    assert slurm.capabilities() is caps  # cached


@pytest.mark.lab
def test_the_lab_numbers_its_jobs_from_its_own_first_id(slurm, user_slurm, jobs, lab):
    assert _sbatch(user_slurm, jobs, ["--output=/dev/null", "--time=1"], "true\n") >= lab.first_job_id
    config = slurm.run(["scontrol", "show", "config"]).stdout
    assert re.search(rf"(?m)^FirstJobId\s+= {lab.first_job_id}$", config)


@pytest.mark.lab
def test_lab_tiers_are_real_qos_with_limits(slurm):
    qos = {q["Name"]: q for q in slurm.qos()}
    assert qos["high"]["MaxTRESPU"] == "gres/gpu=4" and qos["high"]["Preempt"] == "low"
    assert qos["low"]["PreemptMode"] == "requeue" and qos["low"]["GraceTime"] != "00:00:00"
    assocs = {a["User"]: a for a in slurm.associations(LAB_USER)}
    assert set(assocs[LAB_USER]["QOS"].split(",")) == {"high", "normal", "low"}
