"""Rebalancing: which pending job a freed tier goes to (pure), and `roach promote` / `roach move` on the lab with
real runs and real signals: a moved run resumes at the step it checkpointed at, on the new tier."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.model.states import PendingReason as R
from roach.model.tiers import Tier
from roach.ops.events import TierRow
from roach.ops.move import checkpoints
from roach.ops.rebalance import (
    RESTART_S,
    Candidate,
    OwnRun,
    plan_moves_below,
    plan_promotions,
    promotable,
    run_loss,
    weigh,
)
from roach.scheduler.parse_control import WillRun, parse_will_run
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import wait_until
from tests.support.cli import roach
from tests.support.submitting import submit_to_lab

# made-up: the lab's tiers (high, capped; low, preemptible) with an uncapped, non-preemptible tier between them
TIERS = (Tier("high", qos="high", gpu_cap=4), Tier("normal", qos="normal"), Tier("low", qos="low", preemptible=True))


def rows(high_claimed: int = 0) -> list[TierRow]:
    return [
        TierRow("high", 4, high_claimed, high_claimed, 0),
        TierRow("normal", None, 0, 0, 0),
        TierRow("low", None, 0, 0, 0, True),
    ]


def cand(key: str, tier: str = "low", gpus: int = 1, left: float = 1.0, submitted: float = 0.0, **kw) -> Candidate:
    return Candidate(key, int(key), f"run{key}", tier, gpus, left, submitted, **kw)


# -- planning --------------------------------------------------------------------------------------------------
def test_room_is_spent_top_down_without_overshooting_the_cap():
    plans = plan_promotions(TIERS, rows(high_claimed=1), [cand("1", gpus=2), cand("2", gpus=2), cand("3", gpus=1)])
    assert [(p.key, p.to_tier, p.room) for p in plans] == [("1", "high", 3), ("3", "high", 1)]


def test_no_room_no_promotion_and_uncapped_tiers_need_the_probe():
    assert plan_promotions(TIERS, rows(high_claimed=4), [cand("1")]) == []
    asked = []

    def probe(tier, c):
        asked.append((tier.name, c.key))
        return tier.name == "normal"

    plans = plan_promotions(TIERS, rows(high_claimed=4), [cand("1"), cand("2")], probe)
    assert [(p.key, p.to_tier, p.room) for p in plans] == [("1", "normal", None)]  # one a round on an uncapped tier
    assert asked == [("normal", "1")]  # at most once per tier, whatever the number of jobs


def test_most_left_to_do_first_then_youngest_then_urgent_before_all():
    cands = [cand("1", left=0.2, submitted=10), cand("2", left=0.9, submitted=5), cand("3", left=0.9, submitted=7)]
    assert [p.key for p in plan_promotions(TIERS, rows(high_claimed=2), cands)] == ["3", "2"]
    cands.append(cand("4", left=0.1, checkpoints=False, preemptions=1))
    assert [p.key for p in plan_promotions(TIERS, rows(high_claimed=2), cands)] == ["4", "3"]


def test_a_job_on_the_top_tier_or_its_own_is_not_promoted():
    assert plan_promotions(TIERS, rows(), [cand("1", tier="high")]) == []


def test_a_job_on_a_qos_outside_the_tiers_goes_up_to_a_safe_tier_never_onto_a_preemptible_one():
    lab_tiers = (Tier("high", qos="high", gpu_cap=4), Tier("low", qos="low", preemptible=True))
    lab_rows = [TierRow("high", 4, 0, 0, 0), TierRow("low", None, 0, 0, 0, True)]
    plans = plan_promotions(lab_tiers, lab_rows, [cand("1", tier="normal")])
    assert [(p.key, p.from_tier, p.to_tier) for p in plans] == [("1", "normal", "high")]
    full = [TierRow("high", 4, 4, 4, 0), TierRow("low", None, 0, 0, 0, True)]
    assert plan_promotions(lab_tiers, full, [cand("1", tier="normal")], lambda t, c: True) == []


def test_a_run_behind_its_own_cap_moves_to_the_highest_tier_below_that_starts_it_now():
    asked = []

    def starts_now(tier, c):
        asked.append(tier.name)
        return True

    capped = [cand("1", tier="high", capped=True), cand("2", tier="high", capped=True)]
    plans = plan_moves_below(TIERS, rows(high_claimed=6), capped, starts_now)
    assert [(p.key, p.from_tier, p.to_tier, p.below) for p in plans] == [
        ("1", "high", "normal", True),
        ("2", "high", "low", True),
    ]  # one run a tier a round
    assert asked == ["normal", "low"]  # each tier asked once


def test_a_run_waiting_on_anything_but_its_own_cap_is_not_moved_down():
    assert plan_moves_below(TIERS, rows(high_claimed=6), [cand("1", tier="high")], lambda t, c: True) == []


def test_a_tier_below_that_would_not_start_it_now_takes_no_run():
    plans = plan_moves_below(TIERS, rows(high_claimed=6), [cand("1", tier="high", capped=True)], lambda t, c: False)
    assert plans == []


def test_a_run_that_does_not_checkpoint_is_never_moved_down_onto_a_preemptible_tier():
    lab_tiers = (Tier("high", qos="high", gpu_cap=4), Tier("low", qos="low", preemptible=True))
    lab_rows = [TierRow("high", 4, 6, 4, 2), TierRow("low", None, 0, 0, 0, True)]
    c = cand("1", tier="high", capped=True, checkpoints=False)
    assert plan_moves_below(lab_tiers, lab_rows, [c], lambda t, c: True) == []


def test_a_run_loses_its_steps_since_the_checkpoint_at_its_pace_plus_a_restart():
    points = [[0.0, 10], [10.0, 20]]  # one step a second
    assert run_loss(points, 20, 15, True, 100) == 5 + RESTART_S
    assert run_loss(points, 20, None, True, 100) is None  # no checkpoint seen: not known
    assert run_loss([[0.0, 10]], 20, 15, True, 100) is None  # no pace yet
    assert run_loss([], None, None, False, 100) == 100 + RESTART_S  # no checkpoint: all it ran


def test_a_promotion_that_preempts_own_runs_is_worth_it_only_when_they_lose_less_than_it_gains():
    will = WillRun(datetime(2027, 1, 15, 8), "n1", "gpu", preempts=(5, 6, 9))
    own = {5: OwnRun("5_0", 70.0), 6: OwnRun("5_1", 70.0)}  # 9 is another user's job
    assert weigh(will, own, 200.0).preempts == ("5_0", "5_1")
    assert weigh(will, own, 200.0).loss_s == 140.0
    assert weigh(will, own, 200.0).worth
    assert not weigh(will, own, 100.0).worth
    assert not weigh(will, own, None).worth  # a gain not known is no gain
    assert not weigh(will, {5: OwnRun("5_0", None)}, 1e9).worth  # nor is a loss not known small
    assert weigh(will, {}, None).worth  # preempting nobody of the user's: made


def test_will_run_reads_the_start_the_nodes_and_the_jobs_it_preempts():
    said = (
        "sbatch: Job 1003 to start at 2026-12-06T06:07:12 using 1 processors on nodes n1 in partition gpu\n"
        "sbatch:   Preempts: 1001,1002\n"
    )
    will = parse_will_run(said)
    assert will == WillRun(datetime(2026, 12, 6, 6, 7, 12), "n1", "gpu", (1001, 1002))
    assert parse_will_run("sbatch: error: Batch job submission failed: Invalid qos specification\n") is None


def test_promotable_reasons():
    assert promotable(R.Resources) and promotable(R.Priority) and promotable(R.QOSMaxGRESPerUser)
    assert not promotable(R.JobHeldUser) and not promotable(R.BeginTime) and not promotable(R.Dependency)


def test_checkpointing_is_read_from_the_log_or_resume_pt():
    assert checkpoints("0: x roach rank 0: fresh start: no resume.pt in /r", False)
    assert checkpoints("0: x roach rank 0: checkpoint at step 4 after caught_signal TERM", False)
    assert checkpoints("", True)
    assert not checkpoints("0: x roach rank 0: plain step 10", False)


# -- on the lab ----------------------------------------------------------------------------------------------------
FUNCS = """
import time

def train(run, steps=400, step_s=0.2):
    state = run.resume(default={"x": 0})
    for step in run.steps(run.start_step, steps):
        state["x"] += 1
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint(state)
    return state["x"]


def plain(run, steps=400, step_s=0.2):
    for step in range(steps):
        if step % 10 == 0:
            run.log("plain step %d", step)
        time.sleep(step_s)
"""
CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {"pkg/__init__.py": "", "pkg/funcs.py": FUNCS}  # what the repo fixture commits


pytestmark = pytest.mark.usefixtures("cli_store")  # the CLI finds the test's store


def _cancel_run(store, client):
    ids = [r.job_id for r in store.recent(100)]
    if ids:
        client.scancel(ids)


def _common(repo):
    return ["--run-as", LAB_USER, "--repo-root", str(repo.work)]


@pytest.mark.lab
def test_promote_a_pending_run_resubmits_its_run_id_on_the_tier(lab, repo, store, roots, user_slurm):
    later = GPU1.replace(qos="low", time="00:05:00", extra=("--begin=now+1hour",))
    job = submit_to_lab(repo, store, roots, "pkg.funcs:train", resources=later, name="later")
    try:
        wait_until("it to pend", lambda: job.state() is JobState.PENDING, timeout=30)
        # GitRepo.commit gives the remote to the lab user; a second push as root needs it back first
        subprocess.run(["chown", "-R", "root", str(repo.remote)], check=True)
        repo.commit({"pkg/other.py": "X = 1\n"}, "a newer commit")
        (repo.work / "notes.txt").write_text("not committed\n")  # the working tree's state does not matter
        run = roach("promote", job.run_id, "--to", "high", *_common(repo), "--json")
        assert run.exit_code == 0, run.output
        data = json.loads(run.output)
        new = store.get("lab", data["new_job"])
        assert new.run_id == job.run_id and data["old_job"] == job.job_id and new.resources["qos"] == "high"
        # resubmitted at the run's own commit, not at the newer HEAD
        assert new.commit == job.record.commit != repo.git("rev-parse", "HEAD").strip()
        wait_until("the old job to be cancelled", lambda: job.state() is JobState.CANCELLED, timeout=30)
        (q,) = wait_until(
            "the new job's reason",
            lambda: [q for q in user_slurm.squeue(job_ids=[new.job_id]) if q.reason is not R.NONE],
            timeout=30,
        )
        assert q.qos == "high" and q.state is JobState.PENDING and q.reason is R.BeginTime
        why = roach("why", new.run_id, "--run-as", LAB_USER)
        assert "pending on BeginTime" in why.output and "clears by itself" in why.output and "tier high" in why.output
        again = roach("promote", new.run_id, "--to", "high", *_common(repo), "--allow-new-commit")
        assert again.exit_code == 2 and "already pends on tier high" in again.output
    finally:
        _cancel_run(store, user_slurm)


# The moves go from normal to low: on the shared lab, other sessions' jobs may preempt a job on low at any time,
# and only the new job's first seconds (when it says where it resumed) need to be left alone.
@pytest.mark.lab
def test_move_a_running_run_resumes_at_its_step_on_the_new_tier(lab, repo, store, roots, user_slurm):
    normal = GPU1.replace(qos="normal", time="00:05:00")
    job = submit_to_lab(repo, store, roots, "pkg.funcs:train", resources=normal, name="mover")
    try:
        wait_until("progress", lambda: "step 20/400" in job.log(), timeout=60)
        refused = roach("promote", job.run_id, "--to", "low", *_common(repo))
        assert refused.exit_code == 2 and f"roach move {job.run_id} --to low" in refused.output
        run = roach("move", job.run_id, "--to", "low", *_common(repo), "--wait", "120")
        assert run.exit_code == 0, run.output
        m = re.search(r"job (\d+) checkpointed at step (\d+); job (\d+) submitted", run.output)
        assert m and int(m[1]) == job.job_id, run.output
        step, new_id = int(m[2]), int(m[3])
        assert step >= 20 and f"job {new_id} resumed at step {step}" in run.output
        old_log = job.log()
        assert f"checkpoint at step {step} after caught_signal TERM" in old_log
        assert "without preemption: cancelled; the job does not come back" in old_log
        new = store.get("lab", new_id)
        assert new.run_id == job.run_id and new.resources["qos"] == "low"
        assert f"resumed at step {step}" in Path(new.log_path).read_text()
        assert {q.qos for q in user_slurm.squeue(job_ids=[new_id])} <= {"low"}
        assert store.get("lab", job.job_id).status == "cancelled"
    finally:
        _cancel_run(store, user_slurm)


@pytest.mark.lab
def test_move_refuses_a_run_that_does_not_checkpoint_unless_forced(lab, repo, store, roots, user_slurm):
    normal = GPU1.replace(qos="normal", time="00:05:00")
    job = submit_to_lab(repo, store, roots, "pkg.funcs:plain", resources=normal, name="plain")
    try:
        wait_until("progress", lambda: "plain step 10" in job.log(), timeout=60)
        refused = roach("move", job.run_id, "--to", "low", *_common(repo))
        assert refused.exit_code == 2 and "does not checkpoint" in refused.output and "--force" in refused.output
        assert job.state() is JobState.RUNNING
        run = roach("move", job.run_id, "--to", "low", *_common(repo), "--force", "--json", "--wait", "60")
        assert run.exit_code == 0, run.output
        data = json.loads(run.output)
        assert data["checkpoint_step"] is None and data["how"] == "moved"
        assert data["verified"] is True and data["resumed_at"] is None  # started over, as announced
        new_log = Path(store.get("lab", data["new_job"]).log_path)
        # verified means rank 0 has started; its first step line may come a moment later
        wait_until("the new job's first step", lambda: "plain step 0" in new_log.read_text(), timeout=30)
    finally:
        _cancel_run(store, user_slurm)


# -- a moved run's new job waits for the old one's GPUs -------------------------------------------------------
class _Completing:
    """squeue of a job whose end accounting has while its node still holds it: COMPLETING for ``rounds`` calls."""

    def __init__(self, rounds: int):
        self.rounds, self.calls = rounds, 0

    def squeue(self, *, job_ids=(), **_):
        from roach.scheduler.parse import parse_squeue
        from tests.support.watch import sq

        self.calls += 1
        return parse_squeue(sq(700, "COMPLETING", task=3)) if self.calls <= self.rounds else []


def _moved_record():
    from tests.support.watch import record

    return replace(record(700), task=3)


def test_a_move_resubmits_only_once_the_old_job_has_left_the_queue():
    from roach.ops.move import until_released

    client, slept = _Completing(rounds=2), []
    until_released(client, _moved_record(), slept.append, lambda: 0.0)
    assert slept == [1.0, 1.0]


def test_a_move_waits_for_the_old_job_at_most_a_minute():
    from roach.ops.move import RELEASE_WAIT_S, until_released

    clock = iter(range(0, 1000))
    until_released(_Completing(rounds=10**6), _moved_record(), lambda s: None, lambda: float(next(clock)))
    assert next(clock) == RELEASE_WAIT_S + 1  # the clock was read up to the deadline, and no further
