"""`roach mcp`: the MCP server, driven with the `mcp` package's own stdio client, against the lab as its user.

Each tool must give what the command's ``--json`` prints and refuse what the command refuses.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.agent.server import READ_ONLY, TOOLS, command_help
from roach.cli.agent.skill import generate
from roach.cli.app import cli
from roach.cli.views import job_json
from roach.fleet.userconfig import get_cluster
from roach.lab.config import LAB_USER
from roach.launch.job import Job
from roach.records.grants import GrantBook
from roach.records.store import Store
from tests.conftest import private_store, wait_until
from tests.support.lab_repo import LabRepo, repo  # noqa: F401  (the pushed repository of pkg.train, a fixture)
from tests.support.mcp import Agent
from tests.support.watch import poller_elsewhere


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    yield from private_store("roach-mcp-store-")


@pytest.fixture(scope="module")
def agent(lab) -> Iterator[Agent]:
    """One server for the module, acting as the lab's user."""
    with Agent("--run-as", LAB_USER) as a:
        yield a


def _where(repo: LabRepo, experiment: str) -> dict[str, str]:
    return {
        "cluster": "lab",
        "repo_root": str(repo.work),
        "log_root": str(repo.root / experiment / "logs"),
        "experiment": experiment,
    }


def _cli_json(*args: str):
    r = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_server_lists_every_tool_with_its_commands_help():
    with Agent() as a:
        tools = a.tools()
        # a value the command's parser refuses is its usage error, as the command line prints it
        text = a.refused("logs", ref="any", lines=0)
        skill = a.resource("roach://skill")
    assert skill == generate().text
    assert "Invalid value for '-n' / '--lines': 0 is not in the range x>=1." in text, text
    assert set(tools) == set(TOOLS) >= {"submit", "sweep", "status", "logs", "cancel", "why", "plan", "watch_events"}
    assert set(TOOLS) >= {"move", "clean", "report"}
    for name, (command, _, _hints) in TOOLS.items():
        assert tools[name].description.startswith(command_help(command)), name
    assert tools["submit"].input_schema["required"] == ["target", "resources"]
    assert {"tier", "dry_run"} <= set(tools["submit"].input_schema["properties"]) & set(
        tools["sweep"].input_schema["properties"]
    )
    assert "runs" in tools["plan"].input_schema["properties"]
    assert tools["clean"].input_schema["properties"]["dry_run"]["default"] is True


def test_every_tool_says_what_it_does_in_mcps_annotations():
    with Agent() as a:
        tools = a.tools()
    hints = {n: t.annotations for n, t in tools.items()}
    assert {n for n, h in hints.items() if h.read_only_hint} == READ_ONLY
    assert {n for n, h in hints.items() if h.destructive_hint} == {"submit", "sweep", "cancel", "move", "clean"}
    assert [n for n, h in hints.items() if h.open_world_hint is None] == []
    assert [n for n, h in hints.items() if h.idempotent_hint is None] == []


def test_no_tool_grants_or_opts_into_a_budget():
    with Agent() as a:
        tools = a.tools()
    assert not [n for n in tools if "grant" in n or "budget" in n]
    assert not [n for n, t in tools.items() if "metered" in t.input_schema["properties"]]


def test_a_read_only_server_runs_only_what_changes_nothing():
    with Agent("--read-only") as a:
        tools = a.tools()
        submit = a.refused("submit", target="pkg.train:train", resources="CPU", cluster="lab")
        cancel = a.refused("cancel", ref="123")
        listed = a.call("ls")
    assert set(tools) == set(TOOLS)  # listed all, so an agent sees what a full server would do
    assert READ_ONLY == {"status", "ls", "logs", "why", "plan", "report", "watch_events"}
    for text, name in ((submit, "submit"), (cancel, "cancel")):
        assert "read-only" in text and f"not {name}" in text and "`roach mcp`" in text, text
    assert listed == []  # a tool that changes nothing runs


@pytest.mark.lab
def test_watch_events_cursors_are_the_watch_logs_and_a_reader_gets_nothing_twice(agent, store_path):
    first = agent.call("watch_events", cursor=0, cluster="lab")  # no viewer polls: the tool's command rounds
    assert first["events"] and not first["stale_cursor"] and first["cursor"] == first["events"][-1]["seq"]
    with poller_elsewhere(store_path):  # another viewer polls now: the tool only reads
        again = agent.call("watch_events", cursor=first["cursor"], cluster="lab")
        stale = agent.call("watch_events", cursor=10**12, cluster="lab")  # a cursor the log never gave
    assert again["events"] == [] and again["cursor"] == first["cursor"] and again["dropped"] == 0
    with Store(store_path) as s:
        kept = [e.seq for e in s.watch_log("lab")]
    assert stale["stale_cursor"] and [e["seq"] for e in stale["events"]] == kept


@pytest.mark.lab
def test_submit_watch_status_logs_why_clean_on_the_lab(agent, repo):
    sub = agent.call(
        "submit", target="pkg.train:train", resources="CPU", args={"lr": 0.5, "steps": 4}, **_where(repo, "mcp-a")
    )
    repo.submitted.append(sub["job_id"])
    assert sub["status"] == "submitted" and sub["run_id"].startswith("train-")

    # the watch's events by cursor: each call runs one round and returns only what is new
    cursor, seen = 0, []

    def finished():
        nonlocal cursor
        got = agent.call("watch_events", cursor=cursor, cluster="lab")
        assert got["cursor"] >= cursor and not got["stale_cursor"]
        seen.extend(got["events"])
        cursor = got["cursor"]
        return [e for e in got["events"] if e["event"] == "finished" and e["run_id"] == sub["run_id"]]

    (end,) = wait_until("a finished event for the run", finished, timeout=120, every=1)
    assert end["state"] == "COMPLETED"
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # no event twice across the calls
    again = agent.call("watch_events", cursor=0, cluster="lab")  # an older cursor: the kept events again
    assert [e["seq"] for e in again["events"]][: len(seqs)] == seqs

    status = agent.call("status", ref=sub["run_id"])
    assert (status["state"], status["exit_code"]) == ("COMPLETED", "0:0")
    assert status == _cli_json("status", sub["run_id"], "--run-as", LAB_USER)  # the CLI's own JSON

    logs = agent.call("logs", ref=sub["run_id"], lines=20)
    assert "lr=0.5 steps=4" in logs["log"] and "finished" in logs["log"]
    assert agent.call("logs", ref=str(sub["job_id"]), lines=1)["log"].count("\n") == 1

    why = agent.call("why", ref=sub["run_id"])
    assert why == _cli_json("why", sub["run_id"], "--run-as", LAB_USER)
    assert why == {
        "schema": "roach.why/1",
        "job_id": str(sub["job_id"]),
        "run_id": sub["run_id"],
        "state": "not in the queue",
        "pending": False,
    }

    log = Path(status["log"])
    (report,) = agent.call("clean", experiment="mcp-a", cluster="lab")  # dry_run unless told otherwise
    assert report["dry_run"] is True and str(log) in report["logs"] and log.exists()  # listed, not deleted
    assert report == _cli_json("clean", "mcp-a", "--cluster", "lab", "--dry-run", "--run-as", LAB_USER)[0]

    ledger = agent.call("report", name="mcp-a")  # the experiment's GPU-hours: a CPU job holds none
    assert ledger["scope"] == "experiment" and [r["run_id"] for r in ledger["runs"]] == [sub["run_id"]]
    (attempt,) = ledger["runs"][0]["attempts"]
    assert (attempt["state"], attempt["gpus"], ledger["total"]["allocated_gpu_h"]) == ("COMPLETED", 0, 0)

    def same() -> bool:  # once accounting has the end, the tool's report and the command's agree
        tool = agent.call("report", name="mcp-a")
        cli = _cli_json("report", "mcp-a", "--run-as", LAB_USER)
        return {**tool, "generated_at": None} == {**cli, "generated_at": None}

    wait_until("the tool and the command to report alike", same, timeout=30, every=1)


@pytest.mark.lab
def test_status_is_one_view_for_the_command_the_tool_and_the_handle(agent, repo):
    """`roach status --json`, the MCP `status` tool and `Job.status()` decide a job's view in one function: a
    running job and the same job once cancelled read the same from all three, whichever of them sees the end."""
    sub = agent.call(
        "submit", target="pkg.train:sleepy", resources="CPU", args={"seconds": 300}, **_where(repo, "mcp-s")
    )
    repo.submitted.append(sub["job_id"])
    job = Job.from_ref(sub["run_id"], cluster=get_cluster("lab").with_(run_as=LAB_USER), store=Store())

    def three() -> list[dict]:
        return [
            job_json(job.status()),
            agent.call("status", ref=sub["run_id"]),
            _cli_json("status", sub["run_id"], "--run-as", LAB_USER),
        ]

    wait_until("the job to run", lambda: job.status().state == "RUNNING", timeout=60)
    api, tool, command = three()
    assert api["state"] == "RUNNING" and api["exit_code"] is None and api["job_id"] == sub["job_id"]
    assert api == tool == command
    job.cancel()
    ended = wait_until("the cancel to be accounted", lambda: (v := job.status()).exit_code is not None and v, 60)
    assert (ended.state, ended.status) == ("CANCELLED", "cancelled") and job.record.status == "cancelled"
    api, tool, command = three()
    assert api["state"] == "CANCELLED" and api == tool == command


@pytest.mark.lab
def test_cancel_acts_on_its_own_jobs_only(agent, repo, user_slurm, jobs):
    sub = agent.call(
        "submit", target="pkg.train:sleepy", resources="CPU", args={"seconds": 300}, **_where(repo, "mcp-b")
    )
    repo.submitted.append(sub["job_id"])
    got = agent.call("cancel", ref=sub["run_id"], wait_s=60)
    assert got["cancelled"] is True and got["ended"] == "CANCELLED" and got["run_id"] == sub["run_id"]
    assert not [q for q in user_slurm.squeue(job_ids=[sub["job_id"]]) if q.state.is_active]

    # a job of the same user that roach did not submit: not in the store, so not the agent's to cancel
    other = user_slurm.sbatch(
        ["--job-name=not-roach", "--output=/dev/null", "--time=00:05:00"], "#!/bin/sh\nsleep 300\n"
    )
    jobs.append(other)
    text = agent.refused("cancel", ref=str(other), cluster="lab")
    assert f"no job id or run id '{other}' on cluster 'lab' in the store" in text and "hint: " in text
    time.sleep(1)
    assert [q for q in user_slurm.squeue(job_ids=[other]) if q.state.is_active]  # still there


@pytest.mark.lab
def test_plan_is_the_commands_plan(agent):
    got = agent.call("plan", gpus=1, cluster="lab")
    cli_plan = _cli_json("plan", "--gpus", "1", "--cluster", "lab", "--run-as", LAB_USER)
    assert set(got) == set(cli_plan) and got["chosen"] is not None
    assert got["chosen"]["tier"] == cli_plan["chosen"]["tier"]


@pytest.mark.lab
def test_submit_and_sweep_pass_the_tier(agent, repo, user_slurm):
    where = _where(repo, "mcp-tier")
    sub = agent.call("submit", target="pkg.train:train", resources="CPU", args={"lr": 0.5}, tier="low", **where)
    repo.submitted.append(sub["job_id"])
    qos = wait_until(
        "the job's QOS in sacct",
        lambda: [a.qos for a in user_slurm.sacct([sub["job_id"]]) if a.qos != "Unknown"],
        timeout=60,
    )
    assert qos == ["low"]
    grid = [{"lr": 0.1}, {"lr": 0.2}]
    dry = agent.call("sweep", target="pkg.train:train", grid=grid, resources="CPU", tier="high", dry_run=True, **where)
    assert (dry["schema"], dry["tier"], dry["qos"], dry["runs"]) == ("roach.sweep_dry_run/1", "high", "high", 2)
    text = agent.refused("submit", target="pkg.train:train", resources="CPU", args={"lr": 0.5}, tier="bogus", **where)
    assert "cluster lab has no tier 'bogus'" in text
    assert "high, low" in text


@pytest.mark.lab
def test_a_metered_cluster_refuses_the_agent_without_a_grant_and_serves_it_within_one(
    repo, tmp_path, user_slurm, store_path, jobs
):
    toml = tmp_path / "clusters.toml"
    toml.write_text("[clusters.lab]\nmetered = true\n")
    before = {q.raw_id for q in user_slurm.squeue()}
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    accounted_before = {a.raw_id for a in user_slurm.sacct(user=LAB_USER, since=since)}
    run = {"target": "pkg.train:train", "resources": "GPU1", "args": {"lr": 1}, **_where(repo, "mcp-m")}
    with Agent("--run-as", LAB_USER, env={"ROACH_CLUSTERS_TOML": str(toml)}) as a:
        text = a.refused("submit", **run)
        assert "cluster lab is metered and no live grant covers it" in text
        assert "roach grant lab" in text
        text = a.refused("sweep", grid=[{"lr": 1}], **{k: v for k, v in run.items() if k != "args"})
        assert "no live grant covers it" in text
        assert {q.raw_id for q in user_slurm.squeue()} == before  # nothing queued
        with Store(store_path) as s:  # the person, at their terminal (tests/test_grant_cli.py)
            g = GrantBook(s).make("lab", 1.0, experiment="mcp-m", granted_by="budget-owner")
        served = [a.call("submit", **run) for _ in range(2)]  # GPU1: 0.5 GPU-hours at worst each
        jobs.extend(j["job_id"] for j in served)
        text = a.refused("submit", **run)
    assert f"grant {g.name} on lab (experiment mcp-m) has 0.00 of its 1 GPU-hours left" in text
    # the two served, and only they: from accounting, since a 3-step train may end before squeue is read
    queued = lambda: {a.raw_id for a in user_slurm.sacct(user=LAB_USER, since=since)} - accounted_before  # noqa: E731
    wait_until("accounting to list the two jobs served", lambda: len(queued()) >= len(jobs), timeout=30)
    assert queued() == {str(j) for j in jobs}


@pytest.mark.lab
def test_a_dirty_tree_is_refused(agent, repo, user_slurm):
    train = repo.work / "pkg" / "train.py"
    text = train.read_text()
    train.write_text(text + "\n# not committed\n")
    try:
        before = {q.raw_id for q in user_slurm.squeue()}
        refused = agent.refused(
            "submit", target="pkg.train:train", resources="CPU", args={"lr": 1}, **_where(repo, "mcp-d")
        )
        assert "uncommitted change" in refused and "pkg/train.py" in refused and "hint: " in refused
        assert {q.raw_id for q in user_slurm.squeue()} == before
    finally:
        train.write_text(text)
    assert os.path.exists(train)


@pytest.mark.lab
def test_sweep_and_a_move_the_command_refuses(agent, repo):
    sw = agent.call(
        "sweep", target="pkg.train:train", grid=[{"lr": 1}, {"lr": 2}], resources="CPU", **_where(repo, "mcp-s")
    )
    repo.submitted += sw["array_ids"]
    assert sw["runs"] == 2 and sw["cluster"] == "lab" and len(sw["array_ids"]) == 1
    wait_until(
        "both runs of the sweep to complete",
        lambda: all(agent.call("status", ref=f"{sw['sweep_id']}-{i}")["state"] == "COMPLETED" for i in (0, 1)),
        timeout=120,
        every=2,
    )
    text = agent.refused("move", ref=f"{sw['sweep_id']}-0", to="high", repo_root=str(repo.work))
    assert "is not in the queue: there is nothing to move" in text and "hint: " in text

    sub = agent.call(
        "submit", target="pkg.train:sleepy", resources="CPU", args={"seconds": 300}, **_where(repo, "mcp-s")
    )
    repo.submitted.append(sub["job_id"])
    wait_until("the sleepy run to run", lambda: agent.call("status", ref=sub["run_id"])["status"] == "running", 60)
    text = agent.refused("move", ref=sub["run_id"], to="high", repo_root=str(repo.work))
    assert f"run {sub['run_id']} does not checkpoint" in text and "hint: pass --force" in text
    assert agent.call("status", ref=sub["run_id"])["status"] == "running"  # refused: nothing was done to it
    assert agent.call("cancel", ref=sub["run_id"], wait_s=60)["ended"] == "CANCELLED"
