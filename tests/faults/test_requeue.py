"""Scenarios 7 and 9: a node set DOWN mid-run, and Slurm requeueing a run that already completed."""

from __future__ import annotations

import re

import pytest

from roach.model.job_state import JobState
from roach.slurm.clusters.lab import GPU1
from tests.conftest import lab_queue, slack, wait_until
from tests.faults.ledger import assert_left_no_process, check_ledger


@pytest.mark.lab
def test_a_completed_run_requeued_by_slurm_runs_nothing_again(faults, slurm):
    job = faults.submit({"steps": 3, "step_s": 0.1}, GPU1, name="once")
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()[-3000:]
    slurm.requeue(job.job_id)
    wait_until(
        "the requeued job to run again and end",
        lambda: "already completed" in job.log() and job.state().is_terminal,
        timeout=120,
    )
    assert "(restart count 1)" in job.log()
    check_ledger(job.record.run_dir, 3, interruptions=0, run_id=job.run_id)  # no step, no start record again
    assert_left_no_process(slurm, job)


@pytest.mark.slow
@pytest.mark.lab
def test_a_node_set_down_mid_run_requeues_onto_the_other_node_which_resumes(faults, slurm):
    every = 5
    job = faults.submit(
        {"steps": 60, "step_s": 0.1}, GPU1.replace(time="00:05:00"), name="node-down", checkpoint_every=every
    )
    rec = wait_until(
        "the job to start",
        lambda: [r for r in slurm.squeue(job_ids=[job.job_id]) if r.state.is_running],
        timeout=300,
        explain=lambda: lab_queue(slurm),
    )
    wait_until(
        "two checkpoints",
        lambda: job.log().count("checkpoint at step") >= 2,
        timeout=120,
        explain=lambda: job.log()[-3000:],
    )
    node, other = rec[0].nodelist, ({"n1", "n2"} - {rec[0].nodelist}).pop()
    try:
        # DOWN fails the job on it (NODE_FAIL, requeued); DRAIN keeps the lab's slurmd from taking it back.
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=roach-faults"], retry=False)
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=roach-faults"], retry=False)
        wait_until(
            f"the job to run again on {other}", lambda: f"on {other} (restart count 1)" in job.log(), timeout=150
        )
        assert job.wait(timeout=slack(180)).state is JobState.COMPLETED, job.log()[-3000:]
    finally:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], retry=False, ok_codes=(0, 1))
    runs = [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]
    assert runs[0].state is JobState.NODE_FAIL and runs[-1].nodelist == other
    assert re.search(r"resumed at step \d+", job.log())
    # Killed without a signal: the steps since the last periodic checkpoint are done again, no more.
    check_ledger(job.record.run_dir, 60, interruptions=1, max_redo=every, run_id=job.run_id)
    assert_left_no_process(slurm, job)
