"""Every ``--json`` output and every ``roach watch --json`` event, from the real commands on the lab, validates
against its shipped schema (roach.cli.schemas, docs/json.md), closed: a field the schema does not name fails.

One module fixture runs the commands once, as the lab's user, from a real pushed repository: a job and a small
sweep watched until done, status/ls/resume, a pending job explained, promoted, moved and cancelled, a holder
with an attempt inside it, plan/clusters/clean/clones/doctor, and the remote-workspace flow on the lab itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import CONTEXT, RoachGroup
from roach.cli.jsonout import COMMANDS
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import private_store, wait_until
from tests.support.gitrepo import GitRepo, repo_in_tmp
from tests.support.schemas import validate_output

FUNCS = """\
def train(run, lr, steps=2):
    for i in range(steps):
        run.log("step %d/%d", i + 1, steps)
    return lr * steps


def sleepy(run, seconds):
    import time
    for i in range(int(seconds)):
        run.log("tick %d", i)
        time.sleep(1)
"""

#: Commands whose output is validated elsewhere: `lab load status` needs a load playing (test_lab_load.py starts
#: one and validates it), which this module's jobs would queue beside.
NOT_RUN: frozenset[str] = frozenset({"lab load status", "grant"})  # test_lab_load.py, test_grant_cli.py

Outputs = dict[str, list[object]]


@pytest.fixture(scope="module")
def store_path() -> Iterator[Path]:
    yield from private_store("roach-json-store-")


@pytest.fixture(scope="module")
def repo(lab) -> Iterator[GitRepo]:
    r = repo_in_tmp("roach-json-", {"pkg/__init__.py": "", "pkg/funcs.py": FUNCS})
    yield r
    shutil.rmtree(r.base, ignore_errors=True)


class Recorder:
    """Runs `roach ...` in-process and keeps each --json output under its command's path."""

    def __init__(self) -> None:
        self.group = RoachGroup("roach", context_settings=CONTEXT)
        self.got: Outputs = {}

    def __call__(self, command: str, *args: str, codes: tuple[int, ...] = (0,), lines: bool = False):
        r = CliRunner().invoke(self.group, [*command.split(), *args, "--json"], catch_exceptions=False)
        assert r.exit_code in codes, f"roach {command} {' '.join(args)}: exit {r.exit_code}\n{r.output}"
        data = [json.loads(line) for line in r.stdout.splitlines() if line.strip()] if lines else json.loads(r.stdout)
        self.got.setdefault(command, []).extend(data if lines else [data])
        return data


@pytest.fixture(scope="module")
def outputs(lab, repo: GitRepo, store_path: Path, user_slurm) -> Iterator[Outputs]:
    run = Recorder()
    base = repo.base
    logs, clones = str(base / "logs"), str(base / "clones")
    me = ("--run-as", LAB_USER)
    common = ("--cluster", "lab", *me, "--repo-root", str(repo.work), "--log-root", logs, "--clone-root", clones)
    try:
        run("lab status")
        run("clusters")
        run("clusters show", "lab")
        run("clusters discover", "lab", *me)
        run("plan", "--cluster", "lab", "--gpus", "1", *me)

        # a job and a sweep, watched until every one has ended
        job = run("submit", "pkg.funcs:train", "--resources", "CPU", "--arg", "lr=0.5", "--experiment", "jx", *common)
        grid = base / "grid.jsonl"
        grid.write_text("".join(json.dumps({"lr": lr}) + "\n" for lr in (0.1, 0.2)))
        run("sweep", "pkg.funcs:train", "--grid", str(grid), "--resources", "CPU", "--sweep-id", "jx-sweep", *common)
        events = run("watch", "--cluster", "lab", *me, "--interval", "1", "--heartbeat", "1", lines=True)
        assert events[-1]["event"] == "queue_empty", events
        run("status", job["run_id"], *me)
        run("ls", *me)
        run("resume", job["run_id"], "--resources", "CPU", "--repo-root", str(repo.work), *me, "--wait")
        one = base / "one.jsonl"
        one.write_text(json.dumps({"lr": 1.0}) + "\n")
        run(
            "sweep",
            "pkg.funcs:train",
            "--grid",
            str(one),
            "--resources",
            "CPU",
            "--sweep-id",
            "jx-w",
            *common,
            "--wait",
        )
        run("report", "jx", *me)  # the experiment's GPU-hours: the job, its resume and the sweeps
        run("why", job["run_id"], *me)  # not pending: its state only
        run("cancel", job["run_id"], *me)  # already ended: nothing cancelled

        # a pending job: explained, promoted, moved while it pends, cancelled
        with Store(store_path) as store:
            later = submit(
                "pkg.funcs:train",
                {"lr": 0.3},
                cluster=LAB.with_(run_as=LAB_USER),
                resources=GPU1.replace(qos="low", time="00:05:00", extra=("--begin=now+1hour",)),
                repo_root=repo.work,
                store=store,
                log_root=logs,
                clone_root=clones,
                name="later",
            )
        wait_until("it to pend", lambda: later.state() is JobState.PENDING, timeout=30)
        wait_until(
            "its reason",
            lambda: [q for q in user_slurm.squeue(job_ids=[later.job_id]) if q.reason_text],
            timeout=30,
        )
        run("why", later.run_id, *me)
        run("top", "--cluster", "lab", *me, "--once")  # one frame's data, the pending job in it
        run("promote", later.run_id, "--to", "high", "--repo-root", str(repo.work), *me)
        run("move", later.run_id, "--to", "low", "--repo-root", str(repo.work), *me)
        run("cancel", later.run_id, *me, "--wait", "30")

        # a holder, an attempt inside it, stopped and released
        holder = run("hold", "--cluster", "lab", "--resources", "GPU1", "--log-root", logs, "--wait", "60", *me)
        run("steps", str(holder["job_id"]), *me)
        run(
            "submit", "pkg.funcs:sleepy", "--resources", "GPU1", "--arg", "seconds=60", "--inside", str(holder["job_id"]),
            *common,
        )  # fmt: skip
        wait_until(
            "the attempt's ranks' step",
            lambda: any(s["kind"] == "ranks" for s in run("steps", str(holder["job_id"]), *me)["steps"]),
            timeout=60,
        )
        run("signal", str(holder["job_id"]), *me)
        run("release", str(holder["job_id"]), *me)

        run("clean", "jx", "--cluster", "lab", *me, "--dry-run")
        run("clones", "--cluster", "lab", "--clone-root", clones, *me)
        run("clones prune", "--cluster", "lab", "--clone-root", clones, *me)
        run("clean", "jx", "--cluster", "lab", *me)
        run("doctor", "--cluster", "lab", codes=(0, 7))

        _workspace_flow(run, base)
        yield run.got
    finally:
        with Store(store_path) as store:
            ours = {r.job_id for r in store.recent(1000)}
        left = [q.raw_id for q in user_slurm.squeue() if q.state.is_active and q.raw_id in ours]
        if left:
            user_slurm.scancel(left)
        if os.environ.get("ROACH_JSON_DUMP"):  # for writing a schema: what the commands printed
            Path(os.environ["ROACH_JSON_DUMP"]).write_text(json.dumps(run.got, indent=1, default=str))


def _workspace_flow(run: Recorder, base: Path) -> None:
    """The remote-workspace commands on the lab itself (no ssh): sync, sbatch, wait --pull, pull, verify."""
    remote, local = base / "ws-remote", base / "ws-local"
    remote.mkdir()
    shutil.chown(remote, LAB_USER, LAB_USER)
    (local / ".neurico").mkdir(parents=True)
    (local / ".neurico" / "dsi_slurm_remote_workspace.json").write_text(
        json.dumps({"remote_root": str(remote), "rsync_remote_root": str(remote)})
    )
    (local / "roach.toml").write_text('[workspace]\ncluster = "lab"\noutputs = ["out.txt"]\n')
    (local / "scoring").mkdir()
    (local / "scoring" / "interface.md").write_text("## Required files\n- `out.txt`\n- `REPORT.md`\n")
    (local / "s.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --account=lab\n#SBATCH --partition=gpu\n#SBATCH --time=00:05:00\n"
        "#SBATCH --mem=100M\n#SBATCH --cpus-per-task=1\necho done > out.txt\n"
    )
    subprocess.run(["chmod", "-R", "a+rX", str(local)], check=True)
    ws = ("--workspace", str(local))
    run("doctor", *ws, codes=(0, 7))
    run("sync", *ws)
    sub = run("sbatch", "s.sbatch", *ws, "--description", "json schema test")
    run("wait", sub["job_id"], *ws, "--interval", "1", "--pull")
    run("pull", sub["job_id"], *ws)
    run("verify", *ws, codes=(7,))  # REPORT.md is missing: a problem listed
    (local / "REPORT.md").write_text("done\n")
    run("verify", *ws)


@pytest.mark.lab
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_output_validates_against_its_schema(outputs: Outputs, command: str):
    if command in NOT_RUN:
        pytest.skip(f"roach {command} --json is validated in another module")
    got = outputs.get(command)
    assert got, f"roach {command} --json was not run: add it to the module fixture"
    for data in got:
        validate_output(command, data)


@pytest.mark.lab
def test_watch_said_what_a_watch_of_finishing_jobs_says(outputs: Outputs):
    kinds = {e["event"] for e in outputs["watch"]}  # type: ignore[index]
    assert {"started", "finished", "heartbeat", "queue_empty"} <= kinds, kinds
