"""One run of a sweep is one run to every command: `why`, `status`, `promote`, `move` and `cancel` of run 0 (named
as its array task, ``ARRAY_0``) touch that task alone, and the sweep's other runs go on where they were, whichever
task holds the array's own job id in Slurm."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.launch.sweep import sweep
from roach.model.job_state import JobState
from roach.ops.events import Event, EventKind
from roach.ops.rebalance import Promotion
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.watcher import Watcher
from tests.conftest import wait_until
from tests.support.cli import roach
from tests.support.lab_repo import invoke
from tests.support.submitting import submit_to_lab
from tests.support.watch import TRAIN

CLUSTER = LAB.with_(run_as=LAB_USER)

PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # a checkpointing train(run, steps, step_s)


pytestmark = pytest.mark.usefixtures("cli_store")  # the CLI finds the test's store


def _sweep(repo, store, roots, resources, name, runs=4, steps=300):
    return sweep(
        "pkg.train:train",
        [{"steps": steps}] * runs,
        resources=resources,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        name=name,
        checkpoint_every=5,
        **roots,
    )


def _states(client, array: int) -> dict[int, JobState]:
    """Each task of ``array`` in the queue: task index -> state (a task that left the queue is absent)."""
    return {q.ref.task: q.state for q in client.squeue(job_ids=[array]) if q.ref.task is not None}


def _common(repo) -> list[str]:
    return ["--run-as", LAB_USER, "--repo-root", str(repo.work)]


@pytest.mark.lab
def test_moving_and_cancelling_one_running_run_of_a_sweep_leaves_the_others_running(
    lab, repo, store, roots, user_slurm
):
    sw = _sweep(repo, store, roots, GPU1.replace(qos="low", time="00:05:00"), "four")
    array = sw[0].job_id
    try:
        wait_until("all four running", lambda: set(_states(user_slurm, array).values()) == {JobState.RUNNING}, 90)
        wait_until("run 0's first checkpoint", lambda: "checkpoint at step" in sw[0].log(), 90)
        why = roach("why", f"{array}_0", "--run-as", LAB_USER)
        assert f"job {array}_0 (run {sw[0].run_id})" in why.output
        assert "is RUNNING" in why.output
        shown = json.loads(invoke("status", f"{array}_2", "--run-as", LAB_USER, "--json").output)
        assert shown["state"] == "RUNNING"
        moved = roach("move", f"{array}_0", "--to", "high", *_common(repo), "--wait", "120")
        assert moved.exit_code == 0, moved.output
        assert re.search(rf"job {array}_0 checkpointed at step \d+", moved.output), moved.output
        assert _states(user_slurm, array) == {1: JobState.RUNNING, 2: JobState.RUNNING, 3: JobState.RUNNING}
        cancelled = invoke("cancel", f"{array}_1", "--run-as", LAB_USER, "--wait", "60")
        assert cancelled.exit_code == 0, cancelled.output
        assert f"cancelled job {array}_1" in cancelled.output
        assert _states(user_slurm, array) == {2: JobState.RUNNING, 3: JobState.RUNNING}
        assert store.get("lab", array, task=0).status == "cancelled"
        assert store.get("lab", array, task=3).status == "submitted"
    finally:
        user_slurm.scancel([r.job_id for r in store.recent(100)])


@pytest.mark.lab
def test_promoting_one_pending_run_of_a_sweep_leaves_the_others_pending(lab, repo, store, roots, user_slurm):
    later = GPU1.replace(qos="low", time="00:05:00", extra=("--begin=now+1hour",))
    sw = _sweep(repo, store, roots, later, "later")
    array = sw[0].job_id
    try:
        wait_until("all four pending", lambda: len(_states(user_slurm, array)) == 4, 30)
        promoted = roach("promote", f"{array}_0", "--to", "high", *_common(repo), "--json")
        assert promoted.exit_code == 0, promoted.output
        data = json.loads(promoted.output)
        assert (data["old_job"], data["old_task"]) == (array, 0)
        assert _states(user_slurm, array) == {1: JobState.PENDING, 2: JobState.PENDING, 3: JobState.PENDING}

        def why_with_a_reason():  # the split array's tasks have none until Slurm's next pass ("pending on None")
            res = roach("why", f"{array}_1", "--run-as", LAB_USER)
            return None if "pending on None" in res.output else res

        why = wait_until("task 1's reason", why_with_a_reason, 30)
        assert f"job {array}_1 (run {sw[1].run_id})" in why.output
        assert "pending on BeginTime" in why.output
        new = store.get("lab", data["new_job"])
        assert new.run_id == sw[0].run_id
    finally:
        user_slurm.scancel([r.job_id for r in store.recent(100)])


@pytest.mark.lab
def test_a_moved_run_stays_in_its_experiment_and_clean_covers_every_job_of_it(lab, repo, store, roots, user_slurm):
    from roach.ops.clean import clean

    home_runs = f"roach-test-runs-{uuid.uuid4().hex[:8]}"  # under the lab user's ~, as a default run root is
    sw = sweep(
        "pkg.train:train",
        [{"steps": 300}] * 2,
        resources=GPU1.replace(qos="low", time="00:05:00"),
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        checkpoint_every=5,
        experiment="moving",
        run_root=f"~/{home_runs}",
        **roots,
    )
    array = sw[0].job_id
    try:
        wait_until("run 0's first checkpoint", lambda: "checkpoint at step" in sw[0].log(), 90)
        moved = json.loads(roach("move", f"{array}_0", "--to", "high", *_common(repo), "--json").output)
        assert store.experiment_names().get(("lab", moved["new_job"])) == "moving"
        new_log = Path(store.get("lab", moved["new_job"]).log_path)
        (report,) = clean("moving", store=store, cluster=CLUSTER)
        assert any(line.startswith(f"{moved['new_job']} ") for line in report.cancelled), report.cancelled
        assert not new_log.exists()
        assert not Path(sw[1].record.log_path).exists()
        assert sorted(Path(p).parent.name for p in report.checkpoints_kept) == sorted(j.run_id for j in sw)
    finally:
        user_slurm.scancel([r.job_id for r in store.recent(100)])
        shutil.rmtree(Path("/home", LAB_USER, home_runs), ignore_errors=True)


@pytest.mark.lab
def test_the_rebalancer_does_not_preempt_the_users_own_runs_to_promote_another(lab, repo, store, roots, user_slurm):
    low = GPU1.replace(qos="low", time="00:05:00")
    sw = _sweep(repo, store, roots, low, "eight", runs=8, steps=200)  # every GPU of n1 and n2, for about 40 s
    array = sw[0].job_id
    try:
        wait_until("all eight running", lambda: list(_states(user_slurm, array).values()) == [JobState.RUNNING] * 8, 90)
        ninth = submit_to_lab(repo, store, roots, "pkg.train:train", {"steps": 20}, resources=low, name="ninth")
        made: list[Promotion] = []
        w = Watcher(CLUSTER, CLUSTER.client(), store, interval_s=1.0, heartbeat_s=1e9, rebalance=True)
        w.rebalancer.promoter = lambda p: made.append(p) or 0
        events: list[Event] = []

        def weighed() -> list[Event]:
            events.extend(w.round())
            return [e for e in events if e.kind is EventKind.NOT_PROMOTED]

        (held,) = wait_until("the promotion weighed", weighed, 30, every=1.0)
        assert held.job_id == str(ninth.job_id)
        assert held.data["to_tier"] == "high"
        assert held.data["preempts"]
        assert set(held.data["preempts"]) <= {f"{array}_{i}" for i in range(8)}
        assert made == []
        refused = roach("promote", str(ninth.job_id), "--to", "high", *_common(repo))
        assert refused.exit_code == 2, refused.output
        assert "would preempt your running job" in refused.output
        assert list(_states(user_slurm, array).values()) == [JobState.RUNNING] * 8
        assert ninth.state() is JobState.PENDING
    finally:
        user_slurm.scancel([r.job_id for r in store.recent(100)])
