"""Pending reasons in plain words: the table covers every reason, docs/pending.md is its rendering, and a
reason read with its context (the user's queue, the tiers, a pinned nodelist) changes outlook where it must.
Captured squeue output from the lab (tests/data) and `roach why` on the lab."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.model.states import PendingReason as R
from roach.ops import pending
from roach.ops.explain import PendingContext, explain
from roach.ops.pending import Outlook
from roach.scheduler.parse import parse_squeue
from roach.slurm.clusters.lab import LAB
from tests.conftest import wait_until
from tests.support.cli import roach

DATA = Path(__file__).parent / "data"
DOC = Path(__file__).parent.parent / "docs" / "pending.md"


def captured(name: str):
    return parse_squeue((DATA / name).read_bytes().decode())


def by_id(records, job_id: str):
    return next(r for r in records if r.job_id == job_id)


# -- the table -----------------------------------------------------------------------------------------------
def test_every_reason_has_a_row_with_words_an_outlook_and_an_action():
    assert set(pending.TABLE) == set(R)
    for reason, row in pending.TABLE.items():
        assert row.meaning and row.action and isinstance(row.outlook, Outlook), reason
        assert "None" not in row.meaning, reason


def test_outlooks_follow_the_states_table_and_the_issue():
    never = [
        R.PartitionConfig,
        R.InvalidAccount,
        R.DependencyNeverSatisfied,
        R.JobHeldUser,
        R.BadConstraints,
        R.QOSMaxGRESPerJob,
        R.AssocMaxWallDurationPerJobLimit,
        R.JobRequeuedHeld,
    ]
    clears = [
        R.Priority,
        R.Resources,
        R.BeginTime,
        R.QOSMaxGRESPerUser,
        R.Dependency,
        R.JobArrayTaskLimit,
        R.QOSGrpGRES,
        R.TimeLimit,
        R.NonZeroExitCode,
    ]
    waits = [R.ReqNodeNotAvail, R.PartitionDown, R.QOSGrpCPUMinutesLimit, R.UNKNOWN]
    assert all(pending.info(r).outlook is Outlook.NEVER for r in never)
    assert all(pending.info(r).outlook is Outlook.CLEARS for r in clears)
    assert all(pending.info(r).outlook is Outlook.WAITS for r in waits)


def test_family_reasons_are_read_from_their_names():
    assert "GRES (GPUs)" in pending.info(R.QOSMaxGRESPerUser).meaning
    assert "one user" in pending.info(R.QOSMaxGRESPerUser).meaning
    assert "memory per node" in pending.info(R.AssocMaxMemPerNode).meaning
    assert "budget" in pending.info(R.QOSGrpGRESMinutes).meaning
    assert "less" in pending.info(R.QOSMinGRES).meaning
    assert "wall time" in pending.info(R.QOSMaxWallDurationPerJobLimit).meaning


def test_docs_pending_md_is_the_rendered_table_and_names_every_reason():
    text = DOC.read_text()
    assert text == pending.render_markdown(), "regenerate: python -m roach.ops.pending > docs/pending.md"
    for reason in R:
        if reason is R.UNKNOWN:
            assert "UNKNOWN" in text
        else:
            assert f"`{reason.value}`" in text, reason
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| reason")]
    assert len(rows) == len(R)


# -- explain with context, on captured squeue -------------------------------------------------------------------
def test_qos_cap_clears_while_own_running_jobs_hold_it():
    queue = captured("squeue_lab_22.05_mixed.txt")
    over = by_id(queue, "63")  # 1 GPU on high while 61 and 62 run there with 2 GPUs each
    assert over.reason is R.QOSMaxGRESPerUser
    exp = explain(over, PendingContext(queue=queue, tiers=LAB.tiers))
    assert exp.outlook is Outlook.CLEARS
    assert "hold 4 of its 4 GPUs" in exp.detail and "it needs 1" in exp.detail


def test_qos_cap_never_clears_for_a_job_bigger_than_the_cap():
    queue = captured("squeue_lab_22.05_mixed.txt")
    big = by_id(queue, "63")
    big = replace(big, tres=replace(big.tres, gpus_by_type=(("", 8),)))
    exp = explain(big, PendingContext(queue=queue, tiers=LAB.tiers))
    assert exp.outlook is Outlook.NEVER and exp.never
    assert "asks for 8 GPUs" in exp.detail and "at most 4" in exp.detail
    assert "roach promote 63 --to low" in exp.action  # the lab's other tier


def test_qos_cap_with_nothing_of_yours_running_should_start_soon():
    queue = [r for r in captured("squeue_lab_22.05_mixed.txt") if r.job_id == "63"]
    exp = explain(queue[0], PendingContext(queue=queue, tiers=LAB.tiers))
    assert exp.outlook is Outlook.CLEARS and "next scheduling pass" in exp.detail


def test_reqnodenotavail_never_clears_when_pinned_and_waits_when_not():
    rec = by_id(captured("squeue_lab_22.05_mixed.txt"), "64")
    rec = replace(
        rec, reason=R.parse("ReqNodeNotAvail, UnavailableNodes:n2"), reason_text="ReqNodeNotAvail, UnavailableNodes:n2"
    )
    pinned = explain(rec, PendingContext(req_nodes="n2"))
    assert pinned.outlook is Outlook.NEVER and "pinned to n2" in pinned.detail
    assert "without --nodelist" in pinned.action
    free = explain(rec, PendingContext(req_nodes=""))
    assert free.outlook is Outlook.WAITS and "(n2)" in free.detail
    unknown = explain(rec, PendingContext())
    assert unknown.outlook is Outlook.WAITS and unknown.detail == ""


@pytest.mark.parametrize(
    "job, reason, outlook",
    [
        ("64", R.Resources, Outlook.CLEARS),
        ("65", R.Priority, Outlook.CLEARS),
        ("67", R.BeginTime, Outlook.CLEARS),
        ("66", R.JobHeldUser, Outlook.NEVER),
        ("70", R.DependencyNeverSatisfied, Outlook.NEVER),
        ("69", R.Dependency, Outlook.CLEARS),
        ("68_2", R.JobArrayTaskLimit, Outlook.CLEARS),
    ],
)
def test_captured_reasons(job, reason, outlook):
    rec = by_id(captured("squeue_lab_22.05_mixed.txt"), job)
    exp = explain(rec, PendingContext(queue=captured("squeue_lab_22.05_mixed.txt"), tiers=LAB.tiers))
    assert (exp.reason, exp.outlook) == (reason, outlook)
    assert "<jobid>" not in exp.action
    if reason is R.JobHeldUser:
        assert exp.action == f"release it with `scontrol release {job}`"
    assert json.loads(json.dumps(exp.to_json()))["outlook"] == outlook.value
    assert exp.line().startswith(rec.reason_text)


def test_a_job_that_is_not_pending_has_no_reason_to_explain():
    running = by_id(captured("squeue_lab_22.05_mixed.txt"), "61")
    assert running.state is JobState.RUNNING
    with pytest.raises(UsageError, match="not pending"):
        explain(running)


# -- `roach why` on the lab ----------------------------------------------------------------------------------------
@pytest.fixture
def store_env(monkeypatch):
    d = Path(tempfile.mkdtemp(prefix="roach-why-store-"))
    monkeypatch.setenv("ROACH_STORE", str(d / "store.sqlite"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.lab
def test_roach_why_on_the_lab(user_slurm, jobs, store_env):
    over = user_slurm.sbatch(
        [
            "--qos=high",
            "--nodelist=n1",
            "--ntasks=2",
            "--gpus-per-task=4",
            "--time=1",
            "--output=/dev/null",
            "--job-name=why-over-cap",
        ],
        "#!/bin/bash\nsleep 30\n",
    )
    held = user_slurm.sbatch(["--hold", "--time=1", "--output=/dev/null", "--job-name=why-held"], "#!/bin/bash\ntrue\n")
    jobs += [over, held]
    wait_until(
        "the over-cap job's reason",
        lambda: [q for q in user_slurm.squeue(job_ids=[over]) if q.reason is R.QOSMaxGRESPerUser],
        timeout=30,
    )
    run = roach("why", str(over), "--cluster", "lab", "--run-as", LAB_USER)
    assert run.exit_code == 0, run.output
    assert "pending on QOSMaxGRESPerUser" in run.output and "tier high" in run.output
    assert "never starts as it is" in run.output and "asks for 8 GPUs" in run.output
    run = roach("why", str(held), "--cluster", "lab", "--run-as", LAB_USER, "--json")
    assert run.exit_code == 0, run.output
    data = json.loads(run.output)
    assert (data["reason"], data["outlook"], data["pending"]) == ("JobHeldUser", "never", True)
    assert data["action"] == f"release it with `scontrol release {held}`"
    run = roach("why", "no-such-run")
    assert run.exit_code == 2 and "no job id or run id" in run.output
    assert re.search(r"hint: .*roach ls", run.output)


@pytest.mark.lab
def test_roach_why_says_when_a_pending_job_starts_on_the_lab(user_slurm, jobs, store_env):
    """Every GPU held by two jobs of 2 minutes: a pending job starts when the first reaches its limit, and `roach why`
    says so, with Slurm's own answer beside it."""
    script = "#!/bin/bash\nsleep 100\n"
    blockers = [
        user_slurm.sbatch([f"--nodelist={n}", "--gres=gpu:4", "--time=2", "--output=/dev/null"], script)
        for n in ("n1", "n2")
    ]
    jobs += blockers
    wait_until("both blockers run", lambda: all(q.state.is_running for q in user_slurm.squeue(job_ids=blockers)))
    waiting = user_slurm.sbatch(["--gres=gpu:2", "--time=1", "--output=/dev/null", "--job-name=why-when"], script)
    jobs.append(waiting)
    wait_until(
        "a reason for the waiting job",
        lambda: [q for q in user_slurm.squeue(job_ids=[waiting]) if q.reason in (R.Resources, R.Priority)],
        timeout=30,
    )
    elapsed = max(q.elapsed_s for q in user_slurm.squeue(job_ids=blockers))
    run = roach("why", str(waiting), "--cluster", "lab", "--run-as", LAB_USER, "--json")
    assert run.exit_code == 0, run.output
    est = json.loads(run.output)["estimate"]
    assert 120 - elapsed - 5 <= est["likely_in_s"] <= 120 - elapsed + 5, est
    assert est["earliest_in_s"] <= est["likely_in_s"] <= est["latest_in_s"] <= 120 - elapsed + 5
    assert "0 pending ahead of it and 2 running in the cluster's queue" in est["basis"]
    run = roach("why", str(waiting), "--cluster", "lab", "--run-as", LAB_USER)
    assert run.exit_code == 0, run.output
    assert re.search(r"starts:  likely in (1m5\ds|2m0\ds) \(now to in (1m5\ds|2m0\ds)\)", run.output), run.output
