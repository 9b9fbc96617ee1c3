"""Scenario 1: the wall clock twice, then completion: two USR1 stops at Slurm's 30 s timer, each checkpointed and
requeued, and the third attempt finishes with every step done once."""

from __future__ import annotations

import pytest

from roach.model.job_state import JobState
from roach.slurm.clusters.lab import GPU1
from tests.conftest import slack
from tests.faults.conftest import CLUSTER
from tests.faults.ledger import assert_left_no_process, check_ledger

# Scenario 1. USR1 when 45 s are left of a 2-minute limit: Slurm's 30 s timer sends it 45-75 s into an attempt,
# so even a rank that takes 25 s to start and resume (a loaded 2-core machine) has 20 s of steps. Slow steps in
# the first two attempts (200 steps of 1 s cannot finish in two windows of at most 75 s), fast ones from restart
# count 2 on (the rest take under 4 s): two wall-clock stops, then completion. With a 1-minute limit the window
# was 15-45 s, and a 20 s start-up under load left the fast attempt no time (a third stop).
WALL = CLUSTER.with_(signal_lead_s=45)
WALL_ARGS = {"steps": 200, "step_s": 1.0, "fast_from_restart": 2, "fast_s": 0.02}


@pytest.fixture(scope="module")
def wall_clock_job(faults):
    return faults.submit(
        WALL_ARGS, GPU1.replace(time="00:02:00", extra=("--nodelist=n2",)), cluster=WALL, name="wall-clock"
    )


@pytest.mark.slow
@pytest.mark.lab
def test_two_wall_clock_stops_then_completion(wall_clock_job, slurm):
    job = wall_clock_job
    rec = job.wait(timeout=slack(480))
    log = job.log()
    assert rec.state is JobState.COMPLETED, log[-4000:]
    assert log.count("wall clock at step") == 2 and "(restart count 2)" in log and "(restart count 3)" not in log
    assert "preempted" not in log
    check_ledger(job.record.run_dir, WALL_ARGS["steps"], interruptions=2, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)
