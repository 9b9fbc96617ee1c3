"""Scenario 14: failure types told apart by Slurm's state, each with its own retry budget where roach retries.

One run (wall-clock budget 1) goes through a wall-clock stop, a preemption, a node failure and a second
wall-clock stop: roach requeues the first (wall-clock requeue 1 of 1) and the preemption (unlimited, counted
apart), Slurm requeues the NODE_FAIL (counted as a node failure where its ranks live to see it), and the second wall-clock stop finds the budget
spent: FAILED with a line saying how to continue; `roach resume` then completes it. Beside it, a crash
(FAILED, never requeued) and a job whose time limit comes while it is inside a step (TIMEOUT, never requeued; a job
that reaches a step boundary after the limit's USR1 takes it as a wall-clock stop instead).
OUT_OF_MEMORY needs memory enforced (cgroups), which the main lab does not: test_out_of_memory.py makes it
on a private lab started with ``memory_cgroup``."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.model.job_state import JobState
from roach.runtime.attempts import read_counts
from roach.slurm import resume
from roach.slurm.clusters.lab import GPU1
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, preempt
from tests.faults.ledger import (
    assert_left_no_process,
    attempts_by_rank,
    check_ledger,
    read_ledger,
)

BUDGET = CLUSTER.with_(max_timeout_requeues=1)
# The run on n1 (which fails), the others on n2, out of its way.
LOW_N1 = GPU1.replace(qos="low", time="00:10:00", extra=("--nodelist=n1",))
ON_N2 = GPU1.replace(time="00:10:00", extra=("--nodelist=n2",))
EVERY = 5  # periodic checkpoints: the NODE_FAIL kill loses at most the steps since the last one


def _attempts(job) -> list:
    try:
        return attempts_by_rank(read_ledger(job.record.run_dir)).get(0, [])
    except FileNotFoundError:
        return []


def _running_attempt(slurm, job, n: int, steps: int = 3) -> str:
    """Wait until the run's ``n``-th attempt has done ``steps`` steps; returns the node it runs on."""
    wait_until(
        f"attempt {n} of {job.run_id} to do {steps} steps",
        lambda: len(_attempts(job)) >= n and len(_attempts(job)[n - 1].steps) >= steps,
        timeout=120,
        explain=lambda: job.log()[-2000:],
    )
    (q,) = [q for q in slurm.squeue(job_ids=[job.job_id]) if q.state.is_running]
    return q.nodelist


def _allocations(slurm, job) -> list:
    """Every run of the job Slurm accounted (one per requeue)."""
    return [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]


def _node(slurm, node: str, state: str) -> None:
    # RESUME fails (1) where the lab's slurmd, alive, has registered the node back already (ReturnToService=2)
    slurm.run(
        ["scontrol", "update", f"NodeName={node}", f"State={state}", "Reason=roach-faults"],
        retry=False,
        ok_codes=(0, 1) if state == "RESUME" else (0,),
    )


@pytest.mark.slow
@pytest.mark.lab
def test_failure_types_are_told_apart_each_with_its_own_budget(faults, slurm):
    run = faults.submit({"steps": 80, "step_s": 0.1}, LOW_N1, cluster=BUDGET, name="budgets", checkpoint_every=EVERY)
    crash = faults.submit({"steps": 20, "step_s": 0.1, "fail_at": 4}, ON_N2, name="crash")
    # A 1-minute job in a step that lasts until its limit: the limit's USR1 waits for the step's end, which comes
    # only with Slurm's TERM at the limit: TIMEOUT, whatever the ranks then do.
    slow = faults.submit(
        {"steps": 2, "step_s": 0.1, "until_term_at": 0},
        ON_N2.replace(time="00:01:00"),
        cluster=CLUSTER.with_(max_timeout_requeues=0),
        name="timeout",
    )

    # A wall-clock stop (USR1 to the steps, as Slurm's --signal sends it): requeued, wall-clock requeue 1 of 1.
    _running_attempt(slurm, run, 1)
    slurm.run(["scancel", "--signal=USR1", str(run.job_id)], retry=False)
    # A preemption: requeued, counted apart (preemption 1), the wall-clock budget untouched.
    _running_attempt(slurm, run, 2)
    preempt(slurm, "n1")
    # A node failure: NODE_FAIL, Slurm requeues it (--requeue); the node is back before the requeue delay is over.
    # No preemption, no wall clock.
    _running_attempt(slurm, run, 3, steps=EVERY + 1)
    try:
        _node(slurm, "n1", "DOWN")
        wait_until(
            "the node failure's requeue",
            lambda: [q for q in slurm.squeue(job_ids=[run.job_id]) if q.state.is_pending],
            timeout=30,
        )
    finally:
        _node(slurm, "n1", "RESUME")
    _running_attempt(slurm, run, 4)
    # A second wall-clock stop: the budget is spent; not requeued, the job ends FAILED and says how to go on.
    slurm.run(["scancel", "--signal=USR1", str(run.job_id)], retry=False)
    rec = run.wait(timeout=slack(120))
    log = run.log()
    assert (rec.state, rec.exit_code) == (JobState.FAILED, 1), (rec, log[-3000:])
    assert "wall-clock requeue 1 of 1" in log and "(preemption 1)" in log, log[-4000:]
    assert "the run has used its 1 wall-clock requeues: not requeueing" in log, log[-3000:]
    assert f"Resubmit with run_id={run.run_id} to continue" in log
    # Counted apart: the node failure is no preemption (its ranks, alive on the lab's node, caught the step's TERM
    # and asked Slurm: it had requeued the job already; its accounting said NODE_FAIL).
    counts = read_counts(Path(run.record.run_dir))
    assert {k: counts.get(k) for k in ("timeout", "preempted")} == {"timeout": 1, "preempted": 1}, counts
    assert set(counts) <= {"timeout", "preempted", "node_fail"}, counts
    runs = _allocations(slurm, run)
    # rank 0's own requeues read REQUEUED, Slurm's node failure NODE_FAIL, the spent budget FAILED
    assert [r.state for r in runs] == [JobState.REQUEUED, JobState.REQUEUED, JobState.NODE_FAIL, JobState.FAILED], runs
    assert faults.store.get("lab", run.job_id).status == "failed"
    check_ledger(run.record.run_dir, 80, interruptions=3, max_redo=EVERY, run_id=run.run_id, complete=False)
    assert_left_no_process(slurm, run)

    # The crash: FAILED with the function's exit, never requeued; the run stops at the step that raised.
    c = crash.wait(timeout=slack(60))
    assert (c.state, c.exit_code) == (JobState.FAILED, 1), (c, crash.log()[-2000:])
    assert len(_allocations(slurm, crash)) == 1  # never requeued
    assert "RuntimeError: the fault suite's crash at step 4" in crash.log()
    assert faults.store.get("lab", crash.job_id).status == "failed"
    assert [a.steps for a in _attempts(crash)] == [(0, 1, 2, 3)]
    assert_left_no_process(slurm, crash)

    # The budget run goes on with `roach resume`: every step once after the checkpoint boundaries.
    again = resume(
        run.run_id,
        resources=GPU1.replace(time="00:05:00"),
        cluster=BUDGET,
        repo_root=faults.repo.work,
        store=faults.store,
    )
    # The time limit inside a step: TIMEOUT, never requeued (the wall-clock budget of 0 is not what ended it).
    t = slow.wait(timeout=slack(90))
    assert t.state is JobState.TIMEOUT, (t, slow.log()[-3000:])
    assert len(_allocations(slurm, slow)) == 1
    assert faults.store.get("lab", slow.job_id).status == "timeout"
    assert "(restart count 1)" not in slow.log()
    check_ledger(slow.record.run_dir, 2, interruptions=0, max_redo=0, run_id=slow.run_id, complete=False)
    assert_left_no_process(slurm, slow)

    assert again.wait(timeout=slack(120)).state is JobState.COMPLETED, again.log()[-3000:]
    check_ledger(run.record.run_dir, 80, interruptions=4, max_redo=EVERY, run_id=run.run_id)
    assert read_counts(Path(run.record.run_dir)) == counts
    assert_left_no_process(slurm, again)
