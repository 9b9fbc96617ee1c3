"""Grants against what Slurm spends, on the lab marked metered: a hold becomes what sacct says its jobs spent;
a grant spent by requeues holds its pending jobs in Slurm and says so; a new grant made at a terminal releases
them. The submission-side refusals are tests/test_guardrails.py's and tests/test_mcp.py's."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.ops import spend
from roach.ops.events import Event, EventKind
from roach.records.grants import GrantBook
from roach.records.store import Store
from roach.slurm import Resources, submit
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.watcher import Watcher
from tests.conftest import private_store, slack, wait_until
from tests.support.lab_repo import LabRepo, invoke, repo  # noqa: F401  (a fixture)
from tests.support.terminal import at_terminal

METERED = LAB.with_(run_as=LAB_USER, metered=True, budget="pretend dollars")


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    yield from private_store("roach-grants-store-")


@pytest.fixture(autouse=True)
def metered_lab(tmp_path, monkeypatch) -> Path:
    toml = tmp_path / "clusters.toml"
    toml.write_text("[clusters.lab]\nmetered = true\n")
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    return toml


def _submit(repo: LabRepo, store: Store, resources: Resources, seconds: float, experiment: str):
    return submit(
        "pkg.train:sleepy",
        args={"seconds": seconds},
        cluster=METERED,
        resources=resources,
        experiment=experiment,
        repo_root=repo.work,
        store=store,
        log_root=str(repo.root / experiment / "logs"),
    )


@pytest.mark.lab
def test_what_a_hold_spent_is_what_sacct_says_once_its_job_ended(repo, store_path, user_slurm, jobs):
    store = Store(store_path)
    g = GrantBook(store).make("lab", 1.0, experiment="settle", granted_by="budget-owner")
    job = _submit(repo, store, GPU1.replace(time="00:05:00"), 3, "settle")
    jobs.append(job.job_id)
    job.wait(timeout=slack(120))
    (use,) = [u for u in spend.refresh(store, "lab", METERED.client()) if u.grant.id == g.id]
    want = sum(a.gpu_seconds for a in user_slurm.allocations([job.job_id])) / 3600
    (hold,) = use.holds
    assert hold.settled
    assert hold.spent == pytest.approx(want)
    assert 0 < hold.spent < 1 / 12  # 1 GPU for seconds, not its 5-minute worst case
    r = invoke("grant", "--list", "--json", "--run-as", LAB_USER)
    (row,) = [x for x in json.loads(r.stdout) if x["id"] == g.name]
    assert (row["held"], row["left"]) == (0.0, pytest.approx(1.0 - want, abs=1e-4))


def _requeue_after(user_slurm, job_id: int, restarts: int, seconds: float) -> None:
    """Once the job's attempt ``restarts`` runs, let it run ``seconds``, then requeue it, as a preemption would."""

    def running() -> bool:
        job = user_slurm.show_job(job_id) or {}
        return job.get("JobState") == "RUNNING" and job.get("Restarts") == str(restarts)

    wait_until(f"attempt {restarts} of job {job_id} to run", running, timeout=slack(90))
    time.sleep(seconds)
    assert running(), user_slurm.show_job(job_id)
    user_slurm.requeue(job_id)


def _rounds(w: Watcher, events: list[Event], until, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events += w.round()
        if until(events):
            return
        time.sleep(1)
    raise AssertionError(f"not seen in {timeout:.0f} s: {[e.line() for e in events]}")


@pytest.mark.slow
@pytest.mark.lab
def test_a_grant_spent_by_requeues_holds_its_pending_job_until_a_new_grant(repo, store_path, user_slurm, jobs):
    store = Store(store_path)
    res = Resources(gpus_per_node=4, cpus_per_gpu=1, time="00:01:00")  # 4 GPU-minutes at worst an attempt
    g = GrantBook(store).make("lab", 4 / 60, experiment="spent", granted_by="budget-owner")
    job = _submit(repo, store, res, 600, "spent")
    jobs.append(job.job_id)
    w = Watcher(METERED, METERED.client(), store, interval_s=1.0, heartbeat_s=1e9, budget_every_s=0)
    events: list[Event] = []
    _requeue_after(user_slurm, job.job_id, 0, 35)  # ~140 GPU-seconds of 240
    _requeue_after(user_slurm, job.job_id, 1, 35)  # ~280: past the grant, and pending again
    _rounds(w, events, lambda ev: any(e.kind is EventKind.BUDGET and e.data["held_jobs"] for e in ev), slack(60))
    lines = [e for e in events if e.kind is EventKind.BUDGET]
    assert {e.data["grant"] for e in lines} == {g.name}, [e.line() for e in lines]
    assert lines[-1].data["held_jobs"] == [job.job_id]
    assert "makes a new grant at a terminal (`roach grant lab --gpu-hours H --experiment spent`)" in lines[-1].message
    (q,) = user_slurm.squeue(job_ids=[job.job_id])
    assert q.reason.is_held
    env = {**os.environ, "ROACH_STORE": str(store_path)}
    code, shown = at_terminal(
        ["grant", "lab", "--gpu-hours", "0.2", "--experiment", "spent", "--run-as", LAB_USER], env, "lab"
    )
    assert code == 0, shown
    assert f"released {job.job_id}" in shown
    (q,) = user_slurm.squeue(job_ids=[job.job_id])
    assert not q.reason.is_held
