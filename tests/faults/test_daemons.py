"""Scenario 10: slurmdbd, slurmctld and the job's slurmd restarted, one after the other, mid-run and mid-watch.

The ranks never talk to the daemons while they run, so the run carries on untouched (its slurmstepd outlives its
slurmd); the watch says each outage once, marks nothing ended while the controller is away, and reports the run
COMPLETED once the daemons are back."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from roach.lab import lab as lablib
from roach.model.job_state import JobState
from roach.ops.events import EventKind
from roach.scheduler.client import SlurmClient
from roach.slurm.clusters.lab import GPU1
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER
from tests.faults.ledger import assert_left_no_process, check_ledger, steps_done


@pytest.mark.slow
@pytest.mark.lab
def test_daemons_restarted_mid_run_and_mid_watch_the_run_and_the_watch_carry_on(faults, slurm, lab):
    env = {**os.environ, **lab.env()}
    daemons = {d.name: d for d in lablib.daemons(lab)}

    def ok(*argv: str) -> bool:
        return subprocess.run(list(argv), env=env, capture_output=True).returncode == 0

    job = faults.submit({"steps": 150, "step_s": 0.2}, GPU1.replace(time="00:05:00"), name="daemons")
    key = str(job.job_id)
    # no retries: a round that cannot reach Slurm says so at once instead of trying for seconds
    w = Watcher(
        CLUSTER,
        SlurmClient(CLUSTER.transport(), retries=0),
        faults.store,
        job_ids=(key,),
        interval_s=1.0,
        heartbeat_s=1e9,
    )
    events: list = []
    wait_until("the run's first steps", lambda: steps_done(job) >= 3, timeout=120, explain=lambda: job.log()[-2000:])
    events += w.round()
    (q,) = slurm.squeue(job_ids=[job.job_id])
    node = q.nodelist
    restarts = [
        ("slurmdbd", lambda: ok("sacctmgr", "-n", "show", "cluster")),
        ("slurmctld", lambda: ok("scontrol", "ping")),
        (f"slurmd-{node}", lambda: True),
    ]
    for name, ready in restarts:
        before = steps_done(job)
        daemons[name].stop()
        try:
            events += w.round()  # the round while it is away
            assert not [e for e in events if e.kind is EventKind.FINISHED], [e.line() for e in events]
            wait_until(f"the run to go on without {name}", lambda b=before: steps_done(job) > b + 2, timeout=30)
        finally:
            daemons[name].start(ready=ready)
        events += w.round()
    wait_until(
        f"{node} to register again", lambda: [n for n in slurm.nodes() if n.name == node and n.available], timeout=60
    )
    deadline = time.monotonic() + slack(120)
    while not [e for e in events if e.kind is EventKind.FINISHED and e.job_id == key]:
        assert time.monotonic() < deadline, [e.line() for e in events]
        events += w.round()
        time.sleep(1.0)
    lines = [e.line() for e in events]
    (fin,) = [e for e in events if e.kind is EventKind.FINISHED]
    assert fin.data["state"] == "COMPLETED", lines
    outages = [e for e in events if e.kind is EventKind.OUTAGE]
    assert outages and any("slurmctld unreachable" in e.message for e in outages), lines
    assert len([e for e in events if e.kind is EventKind.STARTED]) <= 1, lines  # never seen to start again
    rec = job.wait(timeout=slack(60))
    assert rec.state is JobState.COMPLETED and "(restart count 1)" not in job.log(), job.log()[-3000:]
    check_ledger(job.record.run_dir, 150, interruptions=0, max_redo=0, run_id=job.run_id)
    assert len([r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]) == 1
    assert_left_no_process(slurm, job)
