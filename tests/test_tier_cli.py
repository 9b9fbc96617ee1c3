"""`--tier` on `roach submit`, `sweep` and `resume`, `sweep --dry-run`, and `roach plan --runs`: on the lab, whose
tiers are high (QOS high, 4 GPUs per user) and low (QOS low, preemptible), and whose presets name no QOS."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from tests.conftest import private_store, wait_until
from tests.support.lab_repo import LabRepo, invoke, repo  # noqa: F401  (repo: a fixture)


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    yield from private_store("roach-tier-cli-store-")


def _dry(repo: LabRepo, *args: str, preset: str = "CPU"):
    """`roach submit --dry-run --json` of pkg.train:train with ``args``."""
    return invoke("submit", "pkg.train:train", "--resources", preset, *repo.common, *args, "--dry-run", "--json")


def _qos(slurm: SlurmClient, job_id: int) -> str:
    """The QOS Slurm accounts the job under (its allocation's line in sacct, once slurmdbd names it)."""
    known = lambda: [a.qos for a in slurm.sacct([job_id]) if a.qos != "Unknown"]  # noqa: E731
    return wait_until(f"job {job_id}'s QOS in sacct", known, timeout=60)[0]


def _named(slurm: SlurmClient, name: str) -> list[str]:
    """The ids of every job in the queue with this name, anyone's."""
    return [q.raw_id for q in slurm.squeue(all_users=True) if q.name == name]


def _idle(slurm: SlurmClient) -> bool:
    """No job of anyone's holds a GPU: the lab's 8 are idle."""
    return sum(n.gpus_total - n.gpus_used for n in slurm.nodes()) == 8 and not slurm.squeue(all_users=True)


@pytest.mark.lab
def test_submit_tier_low_queues_on_qos_low_and_resume_tier_high_on_qos_high(repo: LabRepo, user_slurm):
    r = repo.submit("pkg.train:train", "--arg", "lr=0.5", "--tier", "low", "--wait")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert _qos(user_slurm, job["job_id"]) == "low"
    r = invoke("resume", job["run_id"], "--tier", "high", "--repo-root", str(repo.work), "--run-as", LAB_USER, "--json")
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    repo.submitted.append(again["job_id"])
    assert _qos(user_slurm, again["job_id"]) == "high"


@pytest.mark.lab
def test_an_unknown_tier_is_exit_2_listing_the_tiers_and_nothing_is_queued(repo: LabRepo, user_slurm):
    r = repo.submit("pkg.train:train", "--arg", "lr=0.5", "--tier", "bogus", "--name", "tier-bogus")
    assert r.exit_code == 2, r.output
    assert "cluster lab has no tier 'bogus'" in r.stderr
    assert "tiers of lab, top down: high, low; or auto" in r.stderr
    assert not _named(user_slurm, "tier-bogus")
    with Store() as store:
        assert not [rec for rec in store.all_jobs() if rec.name == "tier-bogus"]
    r = repo.submit("pkg.train:train", "--arg", "lr=0.5", "--tier", "lwo")
    assert r.exit_code == 2, r.output
    assert "did you mean 'low'?" in r.stderr, r.output


@pytest.mark.lab
def test_sweep_dry_run_on_tier_low_names_qos_low_and_queues_nothing(repo: LabRepo, user_slurm, tmp_path):
    grid = tmp_path / "grid.jsonl"
    grid.write_text("".join(json.dumps({"lr": lr}) + "\n" for lr in (0.1, 0.2, 0.3)))
    argv = ["sweep", "pkg.train:train", "--grid", str(grid), "--resources", "GPU1", *repo.common]
    argv += ["--tier", "low", "--dry-run", "--name", "tier-dry", "--sweep-id", "tier-dry-1", "--max-array-size", "2"]
    r = invoke(*argv, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["schema"] == "roach.sweep_dry_run/1"
    assert got["queued"] is False
    assert (got["tier"], got["qos"], got["resources"]["qos"]) == ("low", "low", "low")
    assert got["runs"] == 3
    assert got["arrays"] == [{"first": 0, "tasks": 2}, {"first": 2, "tasks": 1}]
    text = invoke(*argv).stdout
    assert "  tier:      low, QOS low: asked for (--tier)" in text
    assert "  runs:      3 in 2 arrays (runs 0-1, runs 2-2)" in text
    assert "nothing was queued or written (--dry-run)" in text
    assert not _named(user_slurm, "tier-dry")
    with Store() as store:
        assert store.sweep_runs("tier-dry-1") == []


@pytest.mark.lab
def test_submit_dry_run_names_the_tier_and_qos_and_without_tier_says_it_lands_on_none(repo: LabRepo):
    r = _dry(repo, "--arg", "lr=0.5", "--tier", "high")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["tier"], got["qos"], got["tier_why"]) == ("high", "high", "asked for (--tier)")
    r = _dry(repo, "--arg", "lr=0.5")
    got = json.loads(r.stdout)
    assert (got["tier"], got["qos"]) == (None, None)
    assert got["tier_why"].startswith("outside the tier table (high, low)")


@pytest.mark.lab
def test_tier_auto_takes_the_plans_choice_low_once_highs_cap_is_claimed(repo: LabRepo, user_slurm, jobs):
    for _ in range(2):  # 4 GPUs on high: the lab user's cap there, claimed
        jobs.append(
            user_slurm.sbatch(
                ["--qos=high", "--gres=gpu:2", "--time=3", "--output=/dev/null", "--job-name=tier-occupy"],
                "#!/bin/bash\nsleep 120\n",
            )
        )
    plan = json.loads(invoke("plan", "--cluster", "lab", "--gpus", "1", "--run-as", LAB_USER, "--json").stdout)
    assert plan["chosen"]["tier"] == "low", plan["reasoning"]
    r = _dry(repo, "--arg", "lr=0.5", "--tier", "auto", preset="GPU1")
    dry = json.loads(r.stdout)
    assert (dry["tier"], dry["qos"]) == ("low", "low"), r.output
    assert dry["tier_why"].startswith("chosen by `roach plan` (--tier auto): low: ")
    r = repo.submit("pkg.train:train", "--arg", "lr=0.5", "--tier", "auto", "--wait", preset="GPU1")
    assert r.exit_code == 0, r.output
    assert _qos(user_slurm, json.loads(r.stdout)["job_id"]) == "low"


@pytest.mark.lab
def test_plan_runs_8_of_1_gpu_starts_4_on_high_within_its_cap_and_8_on_low(user_slurm):
    wait_until("the lab's 8 GPUs idle", lambda: _idle(user_slurm), timeout=180, every=2)
    r = invoke("plan", "--cluster", "lab", "--runs", "8", "--gpus", "1", "--run-as", LAB_USER, "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert (p["runs"], p["gpus"]) == (8, 1)
    assert {x["tier"]: x["runs_now"] for x in p["placements"]} == {"high": 4, "low": 8}, p["reasoning"]
    assert p["chosen"]["tier"] == "low"
    assert p["reasoning"][-1].startswith("low: 8 of 8 runs start now, the most of any tier")
    text = invoke("plan", "--cluster", "lab", "--runs", "8", "--gpus", "1", "--run-as", LAB_USER).stdout
    assert "plan for 8 runs of 1 GPU on 1 node" in text
    assert "chosen: low (" in text
    assert ": 8 of 8 runs start now" in text


@pytest.mark.lab
def test_plan_of_more_gpus_than_highs_cap_says_the_request_is_larger_than_the_cap(user_slurm):
    wait_until("the lab's 8 GPUs idle", lambda: _idle(user_slurm), timeout=180, every=2)
    r = invoke("plan", "--cluster", "lab", "--gpus", "8", "--nodes", "2", "--run-as", LAB_USER, "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    high = p["placements"][0]
    assert (
        high["why"] == "cap 4 GPUs per user: the request (8 GPUs) is larger than the cap; skipped without asking Slurm"
    )
    assert "cap 4 GPUs per user: the request (8 GPUs) is larger than the cap" in p["reasoning"][-1]
    assert "claimed by your own jobs" not in p["reasoning"][-1]
