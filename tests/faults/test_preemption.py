"""Scenarios 3, 5, 8, 12 and 15: preemption (GraceTime 0 and 30, PreemptMode CANCEL, a storm of ten), one log
over every attempt, a sweep's preempted tasks. Every preempted job is at QOS low on n1, where the preemptor is
pinned; the wall clock (scenario 1) is tests/faults/test_wall_clock.py."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from roach.lab import lab as lablib
from roach.model.job_state import JobState
from roach.slurm import resume, sweep
from roach.slurm.clusters.lab import GPU1
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, preempt
from tests.faults.ledger import (
    assert_left_no_process,
    attempts_by_rank,
    check_ledger,
    read_ledger,
)

LOW_N1 = GPU1.replace(qos="low", time="00:10:00", extra=("--nodelist=n1",))
STORM = int(os.environ.get("ROACH_FAULTS_STORM", "10"))
STORM_STEPS = 40 * STORM  # an attempt does some 5-10 steps before its preemption lands: the run outlasts the storm


def _ledger_steps(job, attempt_no: int) -> int:
    """Steps rank 0 has done in its ``attempt_no``-th attempt (1-based) so far."""
    try:
        atts = attempts_by_rank(read_ledger(job.record.run_dir)).get(0, [])
    except FileNotFoundError:
        return 0
    return len(atts[attempt_no - 1].steps) if len(atts) >= attempt_no else 0


def _preempt_when_running(slurm, job, attempt_no: int, steps: int = 2) -> None:
    wait_until(
        f"attempt {attempt_no} of {job.run_id} to do {steps} steps",
        lambda: _ledger_steps(job, attempt_no) >= steps,
        timeout=120,
        explain=lambda: job.log()[-2000:],
    )
    preempt(slurm)
    wait_until(
        f"attempt {attempt_no} to be preempted",
        lambda: job.log().count("preempted at step") >= attempt_no or job.state().is_terminal,
        timeout=90,
        explain=lambda: job.log()[-2000:],
    )


@pytest.fixture
def grace(lab):
    def set_to(seconds: int) -> None:
        lablib.up(log=lambda *_: None, low_grace_time=seconds)

    yield set_to
    set_to(20)


@pytest.mark.slow
@pytest.mark.lab
def test_preemption_with_requeue_and_grace_time_0_then_30(faults, slurm, grace):
    job = faults.submit({"steps": 30, "step_s": 0.2, "dist": True}, LOW_N1.replace(gpus_per_node=2), name="grace")
    grace(0)
    _preempt_when_running(slurm, job, 1)
    grace(30)
    _preempt_when_running(slurm, job, 2)
    rec = job.wait(timeout=slack(180))
    log = job.log()
    assert rec.state is JobState.COMPLETED, log[-4000:]
    assert log.count("preempted at step") == 2 and "(restart count 2)" in log, log[-4000:]
    # GraceTime 0: Slurm requeues the job at once, before rank 0 asks; GraceTime 30: rank 0 requeues it.
    assert "Slurm requeued job" in log and "requeueing job" in log, log[-4000:]
    check_ledger(job.record.run_dir, 30, 2, interruptions=2, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)


@pytest.fixture
def preempt_mode_cancel(lab):
    env = {**os.environ, **lab.env()}

    def qos_mode(mode: str) -> None:
        subprocess.run(
            ["sacctmgr", "-i", "modify", "qos", "where", "name=low", "set", f"PreemptMode={mode}"],
            check=True,
            capture_output=True,
            env=env,
        )
        subprocess.run(["scontrol", "reconfigure"], check=True, capture_output=True, env=env)

    qos_mode("cancel")
    yield
    qos_mode("requeue")


@pytest.mark.slow
@pytest.mark.lab
def test_preempt_mode_cancel_ends_preempted_and_resumes_once(faults, slurm, preempt_mode_cancel):
    job = faults.submit({"steps": 30, "step_s": 0.2}, LOW_N1, name="cancel-mode")
    wait_until("a few steps", lambda: _ledger_steps(job, 1) >= 3, timeout=120)
    preempt(slurm)
    rec = job.wait(timeout=slack(120))
    log = job.log()
    # The ranks checkpoint and leave within the grace time. Slurm 22.05 records their exit (FAILED, 3); 26.05
    # records PREEMPTED (exit 0:0, derived 3:0). Either way the log says it was preempted (what roach watch
    # reads), and roach does not requeue it against the site.
    assert (rec.state is JobState.FAILED and rec.exit_code == 3) or rec.state is JobState.PREEMPTED, (rec, log[-3000:])
    assert "preempted at step" in log and "(PreemptMode=CANCEL)" in log, log[-3000:]
    assert "(restart count 1)" not in log, "the site cancels preempted jobs: roach must not requeue it"
    assert_left_no_process(slurm, job)
    again = resume(
        job.run_id,
        resources=GPU1.replace(time="00:05:00"),
        cluster=CLUSTER,
        repo_root=faults.repo.work,
        store=faults.store,
    )
    assert again.wait(timeout=slack(120)).state is JobState.COMPLETED, again.log()[-3000:]
    check_ledger(job.record.run_dir, 30, interruptions=1, max_redo=0, run_id=job.run_id)
    runs = [r for r in slurm.sacct([job.job_id, again.job_id], duplicates=True) if r.step is None]
    assert len(runs) == 2, runs  # one preempted job, one resumed job: nothing ran twice
    assert_left_no_process(slurm, again)


def _ran_nothing_after_completing(log: str) -> bool:
    """The log's last attempt came after the run completed and said so, starting nothing (scenario 9)."""
    last = log.rsplit("roach: attempt ", 1)[-1]
    return "already completed" in last and "not running it again" in last and " starting " not in last


@pytest.fixture(scope="module")
def storm(faults, slurm):
    """One run preempted STORM times in a row, each attempt after it has done two steps."""
    job = faults.submit({"steps": STORM_STEPS, "step_s": 0.1}, LOW_N1, name="storm")
    for n in range(1, STORM + 1):
        _preempt_when_running(slurm, job, n)
    rec = job.wait(timeout=slack(180))
    return job, rec


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.xdist_group("preemption-storm")  # the storm is made once, for both its tests
def test_a_storm_of_preemptions_finishes_with_every_step_once(storm, slurm):
    job, rec = storm
    assert rec.state is JobState.COMPLETED, job.log()[-4000:]
    assert job.log().count("preempted at step") == STORM
    check_ledger(job.record.run_dir, STORM_STEPS, interruptions=STORM, max_redo=0, run_id=job.run_id)
    runs = [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]
    assert runs[-1].state is JobState.COMPLETED
    # STORM + 1 runs; one more only as scenario 9: Slurm 24.11 once kept a preemption's requeue request that
    # met the rank's own `scontrol requeue` and applied it when the last run completed ("_job_complete: requeue
    # JobId=14 per user/system request"). That run must run nothing.
    assert len(runs) == STORM + 1 or (len(runs) == STORM + 2 and _ran_nothing_after_completing(job.log())), runs
    assert_left_no_process(slurm, job)


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.xdist_group("preemption-storm")
def test_one_log_holds_every_attempt_in_order(storm):
    job, _ = storm
    log = job.log()
    headers = [int(n) for n in re.findall(r"(?m)^roach: attempt (\d+) of run ", log)]
    extra = [STORM + 2] if _ran_nothing_after_completing(log) else []  # see the storm test above
    assert headers == list(range(1, STORM + 2)) + extra, headers  # appended, never truncated
    atts = check_ledger(job.record.run_dir, STORM_STEPS, interruptions=STORM, max_redo=0)
    resumed = [int(n) for n in re.findall(r"0: \S+ roach rank 0: resumed at step (\d+)", log)]
    assert resumed == [a.start for a in atts[1:]]  # each attempt's lines come after its header, in order
    stamps = re.findall(r"(?m)^0: (\S+Z) roach rank 0:", log)
    assert stamps == sorted(stamps)
    assert len(re.findall(r"finished; result in", log)) == 1


@pytest.mark.slow
@pytest.mark.lab
def test_a_sweeps_preempted_tasks_resume_and_the_others_are_untouched(faults, slurm):
    sw = sweep(
        "pkg.faults:train",
        [{"steps": 40, "step_s": 0.2}] * 6,
        resources=GPU1.replace(qos="low", time="00:10:00"),
        cluster=CLUSTER,
        repo_root=faults.repo.work,
        store=faults.store,
        name="sweep",
        **faults.roots,
    )
    tasks = list(sw)
    wait_until("every task to do 3 steps", lambda: all(_ledger_steps(t, 1) >= 3 for t in tasks), timeout=180)
    preempt(slurm)
    wait_until("a task to be preempted", lambda: any("preempted at step" in t.log() for t in tasks), timeout=90)
    done = sw.wait(timeout=slack(240))
    assert all(r.state is JobState.COMPLETED for r in done.values()), done
    hit = [t for t in tasks if "preempted at step" in t.log()]
    assert hit and len(hit) < len(tasks)
    for t in tasks:
        check_ledger(t.record.run_dir, 40, interruptions=1 if t in hit else 0, max_redo=0, run_id=t.run_id)
    assert_left_no_process(slurm, tasks[0])
