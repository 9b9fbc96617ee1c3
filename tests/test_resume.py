"""Resumable runs on the lab with real signals and real preemption: wall clock, preemption, moves."""

from __future__ import annotations

import json
import pwd
import re
import time
from functools import partial
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab import lab as lablib
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.slurm import resume
from roach.slurm.clusters.lab import GPU1, LAB, NODES2_GPU2
from tests.conftest import lab_queue, slack, wait_until
from tests.support.once import Once
from tests.support.resumable import repo, roots, store  # noqa: F401  (fixtures)
from tests.support.submitting import submit_to_lab

pytestmark = pytest.mark.slow

# USR1 70 s before a 2-minute limit. Slurm sends --signal up to one 30 s timer tick early (sbatch(1): "may be
# sent up to 60 seconds earlier"): here 20-50 s into an attempt, after the ranks' start-up (10-16 s on a
# loaded 2-core machine; 59 s of a 1-minute limit came at once, before it, and each such attempt spent a
# wall-clock requeue on one step). 45 s of steps cannot finish in one attempt, so there is at least one
# wall-clock stop, and may be several: the limit is raised here (a cluster's default is 3).
CLUSTER = LAB.with_(run_as=LAB_USER, signal_lead_s=70, max_timeout_requeues=12)
SHORT = NODES2_GPU2.replace(qos="low", time="00:02:00")
STEPS, STEP_S = 450, 0.1
_submit = partial(submit_to_lab, cluster=CLUSTER)


def _preempt(slurm) -> int:
    """A short high-tier job as root (its own cap), pinned to n1 and asking one GPU more than n1 has free,
    so it can only start by preempting the low job there."""
    n1 = next(n for n in slurm.nodes() if n.name == "n1")
    gpus = min(n1.gpus_total, n1.gpus_total - n1.gpus_used + 1)
    return slurm.sbatch(
        ["--qos=high", "--nodelist=n1", f"--gres=gpu:{gpus}", "--time=1", "--output=/dev/null", "--job-name=preemptor"],
        "#!/bin/bash\nsleep 2\n",
    )


def _attempts(log: str) -> list[str]:
    return re.split(r"(?m)^roach: attempt \d+ of run ", log)[1:]


def _drive(job, slurm, preemptions: int, timeout: float = 420):
    """Preempt each new attempt soon after it makes progress, until ``preemptions`` happened; then let the
    run meet its wall clock and finish. Returns the final sacct record."""
    deadline = time.monotonic() + slack(timeout)
    done = 0
    while done < preemptions:
        assert time.monotonic() < deadline, job.log()[-3000:]
        attempts = _attempts(job.log())
        if (
            attempts
            and attempts[-1].count("done loss") >= 5
            and "preempted at step" not in attempts[-1]
            and "wall clock at step" not in attempts[-1]
        ):
            n = len(attempts)
            _preempt(slurm)
            wait_until(
                "the attempt to leave",
                lambda n=n: (
                    len(_attempts(job.log())) > n
                    or "preempted at step" in _attempts(job.log())[-1]
                    or job.state().is_terminal
                ),
                timeout=90,
            )
            done = job.log().count("preempted at step")
        time.sleep(0.5)
    return job.wait(timeout=max(30, deadline - time.monotonic()))


def _check_resumed_run(job, log: str, reference_digest: str, signal_name: str):
    rank0 = [ln for ln in log.splitlines() if ln.startswith("0: ")]
    done = [int(m[1]) for ln in rank0 if (m := re.search(r"step (\d+) done loss", ln))]
    assert sorted(done) == list(range(STEPS)), "every step exactly once (none redone, none skipped)"
    assert log.count("preempted at step") >= 2 and log.count("wall clock at step") >= 1, log[-4000:]
    assert sum("caught_signal" in ln for ln in rank0) >= 3
    resumed = re.findall(r"0: \S+ roach rank 0: resumed at step (\d+)", log)
    assert len(resumed) >= 3 and all(int(n) > 0 for n in resumed)
    assert "preempted at step" in log and f"({'checkpointed'}, {signal_name})" in log
    run_dir = Path(job.record.run_dir)
    assert json.loads((run_dir / "result.json").read_text()) == reference_digest  # bitwise the same parameters
    assert (run_dir / "resume.pt").exists()  # roach never deletes it


@pytest.fixture(scope="module")
def reference(repo, store, roots, tmp_path_factory):
    """The digest of the same training, uninterrupted (normal tier, same 4 ranks on 2 nodes), as a call: trained
    once in the run, by the first worker to ask, which starts it at once."""

    def train():
        return _submit(
            repo,
            store,
            roots,
            "pkg.resumable:ddp_train",
            args={"steps": STEPS, "step_s": STEP_S},
            resources=NODES2_GPU2.replace(time="00:10:00"),
            name="reference",
        )

    once = Once(tmp_path_factory, "bitwise-reference")
    job = train() if once.claim() else None
    yield lambda: once.value(lambda: _digest(job or train()))
    once.release()


def _digest(job) -> str:
    rec = job.wait(timeout=slack(300))
    assert rec.state is JobState.COMPLETED, job.log()[-3000:]
    return json.loads((Path(job.record.run_dir) / "result.json").read_text())


@pytest.mark.lab
def test_preempted_twice_and_wall_clock_once_gives_bitwise_the_same_model(reference, repo, store, roots, slurm):
    job = _submit(
        repo,
        store,
        roots,
        "pkg.resumable:ddp_train",
        args={"steps": STEPS, "step_s": STEP_S},
        resources=SHORT,
        name="interrupted",
    )
    rec = _drive(job, slurm, preemptions=2)
    assert rec.state is JobState.COMPLETED, job.log()[-3000:]
    runs = [r for r in job.client.sacct([job.job_id], duplicates=True) if r.step is None]
    assert len(runs) >= 4 and runs[-1].state is JobState.COMPLETED  # same job id every attempt
    _check_resumed_run(job, job.log(), reference(), "TERM")


@pytest.fixture
def send_user_signal(lab):
    lablib.up(log=lambda *_: None, preempt_send_user_signal=True)
    yield
    lablib.up(log=lambda *_: None, preempt_send_user_signal=False)


@pytest.mark.lab
def test_same_with_preempt_send_user_signal(send_user_signal, reference, repo, store, roots, slurm):
    assert LAB.client().capabilities(refresh=True).preempt_send_user_signal
    job = _submit(
        repo,
        store,
        roots,
        "pkg.resumable:ddp_train",
        args={"steps": STEPS, "step_s": STEP_S},
        resources=SHORT,
        name="interrupted-usr1",
    )
    rec = _drive(job, slurm, preemptions=2)
    assert rec.state is JobState.COMPLETED, job.log()[-3000:]
    # With the site setting on, preemption sends the job's USR1: it must count as a preemption, not a wall clock.
    _check_resumed_run(job, job.log(), reference(), "USR1")


@pytest.mark.lab
def test_cancelled_while_pending_and_resubmitted_on_another_tier_resumes(repo, store, roots, user_slurm):
    job = _submit(
        repo,
        store,
        roots,
        "pkg.resumable:ddp_train",
        args={"steps": 60, "step_s": 0.1},
        resources=NODES2_GPU2.replace(time="00:05:00"),
        name="moved",
    )
    wait_until("some progress", lambda: job.log().count("done loss") >= 10, timeout=120)
    job.cancel()  # TERM: the ranks checkpoint at their step and the job does not come back
    rec = job.wait(timeout=slack(120))
    assert rec.state is JobState.CANCELLED
    saved_at = int(re.findall(r"checkpoint at step (\d+)", job.log())[-1])
    # A pending job (held on purpose) is cancelled and moved to the low tier with its run id.
    held = resume(
        job.run_id,
        resources=NODES2_GPU2.replace(qos="normal", time="00:05:00", extra=("--begin=now+1hour",)),
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
    )
    wait_until("the held job to pend", lambda: held.state() is JobState.PENDING)
    held.cancel()
    moved = resume(
        job.run_id,
        resources=NODES2_GPU2.replace(qos="low", time="00:05:00"),
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
    )
    assert moved.wait(timeout=slack(180)).state is JobState.COMPLETED, moved.log()[-3000:]
    assert f"resumed at step {saved_at}" in moved.log()
    assert moved.job_id != job.job_id and moved.run_id == job.run_id


@pytest.mark.lab
def test_a_run_id_that_does_not_exist_is_an_error_not_a_fresh_start(repo, store, roots, user_slurm):
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(UsageError, match="run no-such-run does not exist"):
        _submit(repo, store, roots, "pkg.resumable:plain_loop", resources=GPU1, run_id="no-such-run")
    # a run root under ~ is said as the home it was looked for in: a run made as another user is in theirs
    home = pwd.getpwnam(LAB_USER).pw_dir
    with pytest.raises(UsageError) as refused:
        _submit(
            repo,
            store,
            {**roots, "run_root": "~/roach-no-runs"},
            "pkg.resumable:plain_loop",
            resources=GPU1,
            run_id="no-such-run",
        )
    assert f"no run directory at ~/roach-no-runs/no-such-run ({home}/roach-no-runs/no-such-run) on lab" in str(
        refused.value
    )
    assert "--run-as USER" in refused.value.hint
    assert {r.raw_id for r in user_slurm.squeue()} == before


@pytest.mark.lab
def test_non_checkpointing_function_restarts_from_the_top_and_says_so(repo, store, roots, slurm):
    job = _submit(
        repo,
        store,
        roots,
        "pkg.resumable:plain_loop",
        args={"steps": 60, "step_s": 0.2},
        resources=NODES2_GPU2.replace(qos="low", time="00:05:00"),
        name="plain",
    )
    wait_until("the first attempt to run", lambda: "plain step 10" in job.log(), timeout=120)
    _preempt(slurm)
    rec = job.wait(timeout=slack(240))
    assert rec.state is JobState.COMPLETED
    log = job.log()
    assert "caught_signal TERM" in log and "preempted at step" in log
    assert "restart count 1 and no resume.pt: this attempt starts from the top" in log
    assert len(re.findall(r"rank 0: plain step 0$", log, re.M)) == 2  # the top, twice


@pytest.mark.lab
def test_a_completed_run_does_not_run_again_when_requeued(repo, store, roots, slurm):
    job = _submit(
        repo, store, roots, "pkg.resumable:plain_loop", args={"steps": 3, "step_s": 0.1}, resources=GPU1, name="once"
    )
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED
    slurm.requeue(job.job_id)
    wait_until(
        "the requeued job to run again and end",
        lambda: "already completed" in job.log() and job.state().is_terminal,
        timeout=120,
    )
    assert len(re.findall(r"rank 0: plain step 0$", job.log(), re.M)) == 1


@pytest.mark.lab
def test_node_failure_requeues_onto_the_other_node_which_resumes(repo, store, roots, slurm):
    job = _submit(
        repo,
        store,
        roots,
        "pkg.resumable:ddp_train",
        args={"steps": 200, "step_s": 0.1},
        resources=GPU1.replace(time="00:05:00"),
        name="nodefail",
        checkpoint_every=10,
    )
    # Waiting to start is its own wait: the lab's GPUs may still be held by the tests before this one.
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
        explain=lambda: lab_queue(slurm) + "\nlog:\n" + job.log()[-3000:],
    )
    node, other = rec[0].nodelist, ({"n1", "n2"} - {rec[0].nodelist}).pop()
    try:
        # DOWN fails the job on it (NODE_FAIL, requeued); DRAIN keeps the lab's slurmd from taking it back.
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=roach-test"], retry=False)
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=roach-test"], retry=False)
        wait_until(
            f"the job to run again on {other}",
            lambda: f"on {other} (restart count 1)" in job.log() and "resumed at step" in job.log(),
            timeout=150,
        )
    finally:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], retry=False, ok_codes=(0, 1))
    assert job.wait(timeout=slack(180)).state is JobState.COMPLETED, job.log()[-3000:]
    runs = [r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]
    assert runs[0].state is JobState.NODE_FAIL and runs[-1].nodelist == other
    steps = [int(n) for n in re.findall(r"0: \S+ roach rank 0: resumed at step (\d+)", job.log())]
    assert steps and steps[0] >= 10
