"""Scenarios 2, 16 and 17: where each signal goes and what the run then does; a library that takes the
handlers; a rank that ignores TERM and hangs. All jobs run side by side (one GPU each, two for the hang)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

import pytest

from roach.model.job_state import JobState
from roach.slurm import resume
from roach.slurm.clusters.lab import GPU1, GPU2
from tests.conftest import slack
from tests.faults.conftest import CLUSTER
from tests.faults.ledger import assert_left_no_process, check_ledger, read_ledger

STEPS, STEP_S = 40, 0.15
RES = GPU1.replace(time="00:05:00")
KILL_WAIT_S = 30  # the lab's KillWait


@dataclass
class Case:
    name: str
    scancel: list[str]  # scancel's options (the job id is added)
    args: dict
    resources: object = RES
    checkpoint_every: int | None = None
    job: object = None
    sent_at: datetime | None = None


CASES = {
    "usr1-batch-only": Case("usr1-batch-only", ["--batch", "--signal=USR1"], {}),
    "usr1-steps-only": Case("usr1-steps-only", ["--signal=USR1"], {}),
    "usr1-batch-and-steps": Case("usr1-batch-and-steps", ["--full", "--signal=USR1"], {}),
    "term-scancel": Case("term-scancel", [], {}),
    "term-full-signal": Case("term-full-signal", ["--full", "--signal=TERM"], {}),
    "library-handlers": Case("library-handlers", ["--signal=USR1"], {"replace_handlers": True}),
    "hang": Case(
        "hang",
        [],
        {"dist": True, "hang_rank": 1, "hang_at": 5, "steps": 12},
        resources=GPU2.replace(time="00:05:00"),
        checkpoint_every=3,
    ),
}


def _steps_done(job) -> int:
    try:
        return sum("step" in r for r in read_ledger(job.record.run_dir))
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def signalled(faults, slurm):
    """Every case's job, submitted at once, each sent its signal once it has done a few steps."""
    for c in CASES.values():
        c.job = faults.submit(
            {"steps": STEPS, "step_s": STEP_S, **c.args}, c.resources, name=c.name, checkpoint_every=c.checkpoint_every
        )
    waiting = dict(CASES)
    deadline = time.monotonic() + slack(180)
    while waiting:
        assert time.monotonic() < deadline, f"no progress in {sorted(waiting)}"
        for name, c in list(waiting.items()):
            if ("hanging at step" in c.job.log()) if name == "hang" else _steps_done(c.job) >= 3:
                c.sent_at = datetime.now()  # local, as sacct prints its times
                slurm.run(["scancel", *c.scancel, str(c.job.job_id)], retry=False)
                del waiting[name]
        time.sleep(0.3)
    return CASES


def _requeued_once_and_completed(c: Case, slurm) -> str:
    rec = c.job.wait(timeout=slack(180))
    log = c.job.log()
    assert rec.state is JobState.COMPLETED, log[-3000:]
    assert "caught_signal USR1" in log and "wall clock at step" in log and "(restart count 1)" in log, log[-3000:]
    check_ledger(c.job.record.run_dir, STEPS, interruptions=1, max_redo=0, run_id=c.job.run_id)
    assert_left_no_process(slurm, c.job)
    return log


def _resumed_to_the_end(c: Case, slurm, faults, steps: int = STEPS, ranks: int = 1, max_redo: int = 0):
    assert_left_no_process(slurm, c.job)
    again = resume(c.job.run_id, cluster=CLUSTER, repo_root=faults.repo.work, store=faults.store)
    assert again.wait(timeout=slack(180)).state is JobState.COMPLETED, again.log()[-3000:]
    check_ledger(c.job.record.run_dir, steps, ranks, interruptions=1, max_redo=max_redo, run_id=c.job.run_id)
    assert_left_no_process(slurm, again)
    return again


@pytest.mark.slow
@pytest.mark.lab
def test_signal_routing_matrix(signalled, slurm, faults):
    # USR1 to the batch shell only (B:): its trap logs it; the ranks never see it and the run completes unbroken.
    c = signalled["usr1-batch-only"]
    rec = c.job.wait(timeout=slack(180))
    log = c.job.log()
    assert rec.state is JobState.COMPLETED and "batch script caught SIGUSR1" in log, log[-3000:]
    assert "caught_signal" not in log and "restart count 1" not in log
    check_ledger(c.job.record.run_dir, STEPS, interruptions=0, run_id=c.job.run_id)
    assert_left_no_process(slurm, c.job)

    # USR1 to the steps only: the ranks checkpoint at their step and the job requeues itself (a wall-clock stop).
    log = _requeued_once_and_completed(signalled["usr1-steps-only"], slurm)
    assert "batch script caught SIGUSR1" not in log
    # To both: the same, and the batch shell's trap says it got one too.
    log = _requeued_once_and_completed(signalled["usr1-batch-and-steps"], slurm)
    assert "batch script caught SIGUSR1" in log

    # TERM from scancel: the ranks checkpoint, the job is CANCELLED and does not come back; resume continues it.
    c = signalled["term-scancel"]
    rec = c.job.wait(timeout=slack(120))
    assert rec.state is JobState.CANCELLED, c.job.log()[-3000:]
    assert "TERM at step" in c.job.log() and "without preemption: cancelled" in c.job.log()
    _resumed_to_the_end(c, slurm, faults)

    # TERM to the batch shell's children too, no cancel (scancel --full --signal=TERM): Slurm's srun in the batch
    # script takes a TERM as "forcing job termination" and SIGKILLs the ranks at once. No checkpoint can be made;
    # the job ends FAILED and the run continues from its last checkpoint (here none: from the top).
    c = signalled["term-full-signal"]
    rec = c.job.wait(timeout=slack(120))
    log = c.job.log()
    assert rec.state is JobState.FAILED and "forcing job termination" in log, (rec, log[-3000:])
    assert "checkpoint at step" not in log and "batch script caught SIGTERM" in log
    _resumed_to_the_end(c, slurm, faults, max_redo=STEPS)


@pytest.mark.lab
def test_a_library_that_replaces_the_handlers_still_stops_at_a_step_boundary(signalled, slurm):
    log = _requeued_once_and_completed(signalled["library-handlers"], slurm)
    assert "re-armed SIGUSR1,SIGTERM" in log, log[-3000:]


@pytest.mark.lab
def test_a_rank_that_ignores_term_and_hangs_ends_within_killwait_and_leaves_nothing(signalled, slurm, faults):
    c = signalled["hang"]
    rec = c.job.wait(timeout=slack(180))
    assert rec.state is JobState.CANCELLED, c.job.log()[-3000:]
    assert "hanging at step 5, ignoring TERM" in c.job.log()
    # Slurm's own record of the end: the KillWait after the TERM, plus the lab's slack for a loaded host.
    assert rec.end_time is not None and (rec.end_time - c.sent_at).total_seconds() <= KILL_WAIT_S + 30, rec
    assert_left_no_process(slurm, c.job)
    # The rank that hung never reached a step boundary: the run resumes from its last periodic checkpoint.
    steps = c.args["steps"]
    saved = [int(n) for n in re.findall(r"checkpoint at step (\d+)", c.job.log())]
    assert saved and saved[-1] == 3, c.job.log()[-3000:]
    _resumed_to_the_end(c, slurm, faults, steps=steps, ranks=2, max_redo=3)
