"""Scenario 13: a failing Prolog. slurmd drains the node ("Prolog error") and Slurm requeues the job held
("launch failed requeued held"); `roach why` and the watch say it never starts as it is and what to do; once
the Prolog is fixed, the node resumed and the job released (as its user, the action said), it runs once. A watch
with `--on-stall requeue` releases it itself, once per attempt."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.lab import lab as lablib
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.ops.events import EventKind
from roach.slurm.clusters.lab import GPU1
from roach.watch.stalls import OnStall
from roach.watch.watcher import Watcher
from tests.conftest import slack
from tests.faults.conftest import CLUSTER
from tests.faults.ledger import assert_left_no_process, check_ledger

PROLOG = """#!/bin/sh
# The fault suite's Prolog: fails every job until {ok} exists.
[ -e {ok} ] && exit 0
echo "roach-faults: this Prolog fails job $SLURM_JOB_ID" >&2
exit 1
"""


@pytest.fixture
def failing_prolog(faults, slurm):
    """The lab's slurmd run a Prolog that fails (a live setting: `scontrol reconfigure`); the returned path,
    once created, makes it pass. Afterwards: no Prolog, and no node left drained by it."""
    ok = faults.base / "prolog-ok"
    script = faults.base / "prolog.sh"
    ok.unlink(missing_ok=True)  # an earlier test of the session made its Prolog pass
    script.write_text(PROLOG.format(ok=ok))
    os.chmod(script, 0o755)
    lablib.up(log=lambda *_: None, prolog=str(script))
    try:
        yield ok
    finally:
        lablib.up(log=lambda *_: None, prolog="")
        for n in slurm.nodes():
            if not n.available:
                slurm.run(["scontrol", "update", f"NodeName={n.name}", "State=RESUME"], retry=False, ok_codes=(0, 1))


def _roach(store, *args: str):
    return CliRunner().invoke(cli, list(args), env={"ROACH_STORE": str(store)}, catch_exceptions=False)


def _rounds(w: Watcher, events: list, what: str, pred, timeout: float = 60.0):
    deadline = time.monotonic() + slack(timeout)
    while time.monotonic() < deadline:
        new = w.round()
        events += new
        hit = [e for e in new if pred(e)]
        if hit:
            return hit
        time.sleep(1.0)
    pytest.fail(f"no {what} within {timeout:.0f}s: {[e.line() for e in events]}")


@pytest.mark.slow
@pytest.mark.lab
def test_a_failing_prolog_holds_the_job_with_a_reason_why_and_the_watch_say_so(
    faults, slurm, user_slurm, failing_prolog
):
    job = faults.submit({"steps": 10, "step_s": 0.1}, GPU1.replace(time="00:05:00"), name="prolog")
    key = str(job.job_id)
    w = Watcher(CLUSTER, CLUSTER.client(), faults.store, job_ids=(key,), interval_s=1.0, heartbeat_s=1e9)
    events: list = []
    (never,) = _rounds(w, events, "a never-starts line", lambda e: e.kind is EventKind.NEVER_STARTS and e.job_id == key)
    (q,) = user_slurm.squeue(job_ids=[job.job_id])
    assert q.state is JobState.PENDING and q.reason is PendingReason.LaunchFailedRequeuedHeld, q
    drained = [n for n in slurm.nodes() if not n.available]
    assert len(drained) == 1, drained  # the node whose Prolog failed, and only that one
    assert "launch failed requeued held" in never.message and "prolog" in never.message, never.message
    assert f"scontrol release {job.job_id}" in never.message, never.message
    assert not [e for e in events if e.kind is EventKind.FINISHED and e.job_id == key], [e.line() for e in events]

    why = _roach(faults.store.path, "why", job.run_id, "--run-as", LAB_USER)
    assert why.exit_code == 0, why.output
    assert "pending on launch failed requeued held" in why.output and "never starts as it is" in why.output, why.output
    assert "prolog" in why.output and f"scontrol release {job.job_id}" in why.output, why.output
    as_json = json.loads(_roach(faults.store.path, "why", job.run_id, "--run-as", LAB_USER, "--json").output)
    assert (as_json["reason"], as_json["outlook"], as_json["pending"]) == ("LaunchFailedRequeuedHeld", "never", True)

    # What the action says, done as the job's user (the admin fixes the Prolog and resumes the node).
    failing_prolog.touch()
    for n in drained:
        slurm.run(["scontrol", "update", f"NodeName={n.name}", "State=RESUME"], retry=False)
    user_slurm.run(["scontrol", "release", key], retry=False)
    fin = _rounds(w, events, "the job's end", lambda e: e.kind is EventKind.FINISHED and e.job_id == key, timeout=120)
    assert fin[0].data["state"] == "COMPLETED", [e.line() for e in events]
    assert job.wait(timeout=slack(60)).state is JobState.COMPLETED, job.log()[-3000:]
    # The failed launch ran nothing: one attempt of the function, every step once.
    check_ledger(job.record.run_dir, 10, interruptions=0, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)


@pytest.mark.slow
@pytest.mark.lab
def test_a_watch_that_requeues_stalls_releases_a_run_held_after_its_launch_failed(faults, slurm, failing_prolog):
    job = faults.submit({"steps": 10, "step_s": 0.1}, GPU1.replace(time="00:05:00"), name="prolog-release")
    key = str(job.job_id)
    w = Watcher(
        CLUSTER, CLUSTER.client(), faults.store, job_ids=(key,), interval_s=1.0, heartbeat_s=1e9,
        on_stall=OnStall.REQUEUE,
    )  # fmt: skip
    events: list = []
    _rounds(w, events, "a release", lambda e: e.kind is EventKind.HELD_RELEASED and e.job_id == key)
    # the admin fixes the Prolog and resumes the node; nobody releases the job by hand
    failing_prolog.touch()
    for n in slurm.nodes():
        if not n.available:
            slurm.run(["scontrol", "update", f"NodeName={n.name}", "State=RESUME"], retry=False)
    fin = _rounds(w, events, "the job's end", lambda e: e.kind is EventKind.FINISHED and e.job_id == key, timeout=120)
    lines = [e.line() for e in events]
    assert fin[0].data["state"] == "COMPLETED", lines
    released = [e.data["restart_count"] for e in events if e.kind is EventKind.HELD_RELEASED]
    assert len(released) == len(set(released)), lines  # once per attempt whose launch failed
    check_ledger(job.record.run_dir, 10, interruptions=0, max_redo=0, run_id=job.run_id)  # failed launches ran nothing
    assert_left_no_process(slurm, job)
