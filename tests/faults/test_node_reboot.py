"""Scenario 26: a node rebooted mid-job (`roach lab reboot`: every process of the node killed at once, its /tmp
emptied, its daemons started again with a boot clock of 0): the job is requeued and resumes from its last
checkpoint, and the node's clone (in its /tmp) is made again, once.

Who requeues it depends on the release. 22.05 ends a job missing from a node that registers as booted and requeues
it. 24.11 and 26.05, with the lab's ReturnToService=2, leave it RUNNING on the rebooted node until its time limit;
its log stops, and `roach watch --on-stall requeue`, which the test runs throughout as a user would, requeues it."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.lab.reboot import reboot
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm.clusters.lab import GPU1
from tests.conftest import lab_queue, slack, wait_until
from tests.faults.ledger import assert_left_no_process, check_ledger
from tests.support.labs import SHARED_TMP
from tests.support.pane import roach_argv, roach_env

EVERY = 5
STEPS = 160
ON_N1 = GPU1.replace(time="00:10:00", extra=("--nodelist=n1",))


def _boot_times(slurm) -> str:
    """n1's boot and slurmd start times as slurmctld has them: whether it saw the reboot."""
    text = slurm.run(["scontrol", "show", "node", "n1"]).stdout
    return "\n" + " ".join(w for w in text.split() if w.startswith(("BootTime=", "SlurmdStartTime=", "State="))) + "\n"


def _allocations(slurm, job_id: int) -> str:
    """Every allocation accounting has of the job: how it ended where it was not requeued."""
    argv = ["sacct", "-X", "-D", "-n", "-P", "-j", str(job_id), "-o", "JobID,State,ExitCode,Reason,Start,End,NodeList"]
    return slurm.run(argv, ok_codes=(0, 1)).stdout


@pytest.mark.slow
@pytest.mark.lab
def test_a_node_rebooted_mid_job_requeues_it_and_it_resumes_with_its_clone_made_again(faults, slurm, lab):
    if not lab.hosts:
        pytest.skip("a node of its own to reboot needs the hosts layout")
    clones = f"/tmp/roach-reboot-{os.getpid()}"  # node-local: the reboot empties it
    store = Store(Path(tempfile.mkdtemp(prefix="roach-reboot-", dir=SHARED_TMP)) / "store.sqlite")
    job = faults.submit(
        {"steps": STEPS, "step_s": 0.25}, ON_N1, name="reboot", checkpoint_every=EVERY, clone_root=clones, store=store
    )
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "2", "--json")
    argv += ["--on-stall", "requeue", "--stall-after", "15", "--heartbeat", "3600"]
    watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=roach_env(store))
    try:
        _reboot_mid_run(job, slurm, lab)
        out, err = watch.communicate(timeout=slack(300))
    finally:
        if watch.poll() is None:
            watch.kill()
    kinds = [e["event"] for e in map(json.loads, filter(str.strip, out.splitlines())) if e["job_id"] == str(job.job_id)]
    assert watch.returncode == 0, err[-3000:]
    assert kinds.count("stall_requeued") <= 1, kinds  # never a second requeue of one reboot
    assert "preempted" not in kinds, kinds
    assert job.wait(timeout=slack(240)).state is JobState.COMPLETED, job.log()[-3000:]
    assert job.log().count("n1: cloned") == 2, job.log()[-3000:]  # before the reboot, and once after it
    runs = [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]
    assert len(runs) == 2
    check_ledger(job.record.run_dir, STEPS, interruptions=1, max_redo=EVERY, run_id=job.run_id)
    assert_left_no_process(slurm, job)


def _reboot_mid_run(job, slurm, lab) -> None:
    """n1 rebooted once the run has stepped 20 s there; returns once the job runs there again."""
    # slurmctld ends a job missing from a node that registers as booted only where the job started more than
    # MessageTimeout + 5 s before that boot (22.05's _purge_missing_jobs): a site's reboot takes longer than that
    wait_until(
        "20 s of steps",
        lambda: "checkpoint at step 80:" in job.log(),
        timeout=300,
        explain=lambda: lab_queue(slurm) + job.log()[-2000:],
    )
    reboot(str(lab.state), "n1", log=lambda *_: None)
    wait_until(
        "the job to run again on n1",
        lambda: "on n1 (restart count 1)" in job.log(),
        timeout=300,
        explain=lambda: lab_queue(slurm) + _boot_times(slurm) + _allocations(slurm, job.job_id) + job.log()[-2000:],
    )
