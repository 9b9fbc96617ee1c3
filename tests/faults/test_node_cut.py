"""Scenario 19: a node cut off from the lab's network mid-step. Slurm fails it after SlurmdTimeout and requeues the
job onto the other node, which resumes; the attempt left running on the cut node still reaches the shared run
directory, and the first write it tries after the new attempt claimed the run is refused: it stops, saying why."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from roach.lab import lab as lablib
from roach.lab.hosts import Fabric
from roach.model.job_state import JobState
from roach.runtime.fence import Fence
from roach.slurm.clusters.lab import GPU1
from tests.conftest import lab_queue, slack, wait_until
from tests.faults.ledger import assert_left_no_process, check_ledger, read_ledger

SLURMD_TIMEOUT_S = 20  # Slurm's default is 300; Slurm's own node-failure tests set a short one too
EVERY = 5  # the run's checkpoint period, in steps
STEPS = 360


def _link(lab, node: str, state: str) -> None:
    """Set ``node``'s link on the lab's bridge up or down (this machine's end of its veth pair)."""
    veth = Fabric(lab.port_base, lab.node_names).veth(node)
    subprocess.run(["ip", "link", "set", veth, state], check=True, capture_output=True, timeout=30)


@pytest.fixture
def short_slurmd_timeout(lab):
    """The lab's SlurmdTimeout short (a live setting), restored to Slurm's default after the test."""
    lablib.up(log=lambda *_: None, slurmd_timeout=SLURMD_TIMEOUT_S)
    yield
    lablib.up(log=lambda *_: None, slurmd_timeout=300)


@pytest.mark.slow
@pytest.mark.lab
def test_a_node_cut_off_mid_step_is_requeued_elsewhere_and_its_old_attempt_writes_nothing_more(
    faults, slurm, lab, short_slurmd_timeout
):
    if not lab.hosts:
        pytest.skip("cutting a node's link needs the hosts layout")
    job = faults.submit(
        {"steps": STEPS, "step_s": 0.25}, GPU1.replace(time="00:10:00"), name="node-cut", checkpoint_every=EVERY
    )
    rec = wait_until(
        "the job to start",
        lambda: [r for r in slurm.squeue(job_ids=[job.job_id]) if r.state.is_running],
        timeout=300,
        explain=lambda: lab_queue(slurm),
    )
    wait_until("two checkpoints", lambda: job.log().count("checkpoint at step") >= 2, timeout=120)
    node, other = rec[0].nodelist, ({"n1", "n2"} - {rec[0].nodelist}).pop()
    _link(lab, node, "down")
    try:
        wait_until(
            f"the job to run again on {other}",
            lambda: f"on {other} (restart count 1)" in job.log(),
            timeout=240,
            explain=lambda: lab_queue(slurm) + job.log()[-2000:],
        )
        wait_until("the cut-off attempt to stop", lambda: "superseded at step" in job.log(), timeout=120)
    finally:
        _link(lab, node, "up")
    assert job.wait(timeout=slack(240)).state is JobState.COMPLETED, job.log()[-3000:]
    runs = [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]
    assert runs[0].state is JobState.NODE_FAIL
    assert runs[-1].nodelist == other
    said = [line for line in job.log().splitlines() if "superseded at step" in line]
    assert len(said) == 1, job.log()[-3000:]
    assert f"took run {job.run_id} over, so this attempt ({job.job_id}.0.0) stops without writing" in said[0]
    assert Fence(Path(job.record.run_dir), "").holder()["key"] == f"{job.job_id}.1.0"  # the run is the new attempt's
    stale = [
        r["step"] for r in read_ledger(job.record.run_dir) if r.get("attempt") == f"{job.job_id}.0" and "step" in r
    ]
    resumed = [
        r["start"] for r in read_ledger(job.record.run_dir) if r.get("attempt") == f"{job.job_id}.1" and "start" in r
    ]
    assert max(stale) - resumed[0] < 2 * EVERY  # it stopped at its first write after the new attempt's claim
    check_ledger(job.record.run_dir, STEPS, interruptions=1, max_redo=2 * EVERY, run_id=job.run_id)
    assert_left_no_process(slurm, job)
