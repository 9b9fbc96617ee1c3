"""A sweep on a small crowded lab: four hosts of two GPUs, a slice of Helios played as two other users holding
most of them, and a sweep of checkpointing runs placed by `roach sweep --tier auto` and driven to its end by one
`roach watch --rebalance`, as an agent drives it. Every run completes once, no job of the other users is
cancelled by the user's commands, and the sweep never holds more of the capped tier than its cap."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from roach.lab import lab as lablib
from roach.lab.config import LAB_USER, LabConfig, LabLayout
from roach.lab.load import LoadSpec, load_dir, played_ids, status
from roach.lab.load import start as start_load
from roach.lab.load import stop as stop_load
from roach.lab.trace import read_trace
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_tres
from roach.scheduler.transport import LocalTransport
from roach.slurm.clusters.lab import LAB
from tests.conftest import slack, wait_until
from tests.support.lab_repo import invoke
from tests.support.labs import MAIN_JOB_VENV, SHARED_TMP, private_port_base
from tests.support.packages import SWEEP_PKG
from tests.support.pane import roach_argv, roach_env

TRACE = Path(__file__).parent / "data" / "traces" / "helios-crowd.csv"
NODES, GPUS = 4, 2
RUNS, STEPS, STEP_S = 4, 16, 0.5
CAP = next(t.gpu_cap for t in LAB.tiers if t.gpu_cap is not None)

PKG = SWEEP_PKG  # what the repo fixture commits

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.usefixtures("cli_store")]


@pytest.fixture(scope="module")
def crowded(lab) -> Iterator[LabConfig]:  # through the lab fixture: the lab marker holds for private labs too
    """A private hosts lab of four nodes of two GPUs, the Helios slice playing on it from a third of the way in
    (its in-flight jobs at once) at 20x as two users; the load stopped and the lab taken down afterwards."""
    state = Path(tempfile.mkdtemp(prefix="roach-crowd-", dir=SHARED_TMP))
    os.chmod(state, 0o755)
    if MAIN_JOB_VENV.exists():
        (state / "pyenv").symlink_to(MAIN_JOB_VENV)
    cfg = lablib.up(
        str(state), log=lambda *_: None, port_base=private_port_base(14), layout=LabLayout.HOSTS.value,
        nodes=NODES, gpus_per_node=GPUS,
    )  # fmt: skip
    jobs = read_trace(TRACE)
    try:
        start_load(cfg, LoadSpec(str(TRACE), "", jobs[len(jobs) // 3].submit_s, 20.0, 1.0, 2, 2))
        wait_until("the load to hold most GPUs", lambda: status(cfg).gpus_busy >= NODES * GPUS // 2, 60)
        yield cfg
    finally:
        stop_load(cfg)
        lablib.down(str(state), log=lambda *_: None)
        subprocess.run(["rm", "-rf", str(state)])


@pytest.fixture
def on_crowd(crowded: LabConfig, monkeypatch: pytest.MonkeyPatch) -> LabConfig:
    """The CLI's `--cluster lab` is the crowded lab."""
    monkeypatch.setenv("ROACH_LAB_DIR", str(crowded.state))
    return crowded


def _cli(*args: str) -> str:
    res = invoke(*args, "--run-as", LAB_USER)
    assert res.exit_code == 0, res.output
    return res.output


def _sacct(cfg: LabConfig, ids: list[int], fields: str) -> list[list[str]]:
    """sacct's allocations of ``ids``, of every user, as lists of ``fields``."""
    root = SlurmClient(LocalTransport(env=cfg.env()))
    res = root.transport.run(
        ["sacct", "-a", "-X", "-n", "-P", "-D", "-j", ",".join(map(str, ids)), "-o", fields]
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return [line.split("|") for line in res.stdout.splitlines() if line.strip()]


def _most_at_once(spans: list[tuple[datetime, datetime, int]]) -> int:
    """The most GPUs held at once by allocations (start, end, GPUs)."""
    edges = sorted([(s, g) for s, _, g in spans] + [(e, -g) for _, e, g in spans], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, g in edges:
        now += g
        most = max(most, now)
    return most


def test_a_sweep_beside_other_users_completes_without_touching_them_or_passing_the_cap(
    on_crowd: LabConfig, repo, store, roots, tmp_path: Path
):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"steps": STEPS, "step_s": STEP_S}] * RUNS))
    os.chmod(grid, 0o644)
    out = _cli(
        "sweep", "pkg.train:train", "--grid", str(grid), "--cluster", "lab", "--resources", "GPU1", "--tier", "auto",
        "--experiment", "crowd", "--repo-root", str(repo.work), "--log-root", roots["log_root"],
        "--clone-root", roots["clone_root"], "--run-root", str(Path(roots["log_root"]).parent / "runs"), "--json",
    )  # fmt: skip
    sweep_id = json.loads(out)["sweep_id"]
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "2", "--json")
    argv += ["--rebalance", "--repo-root", str(repo.work)]
    watch = subprocess.run(argv, capture_output=True, text=True, env=roach_env(store), timeout=slack(400))
    events = [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]
    mine = store.all_jobs()
    load_ids = played_ids(load_dir(on_crowd))
    theirs = _sacct(on_crowd, load_ids, "JobID,User,State")
    ours = _sacct(on_crowd, sorted({r.job_id for r in mine}), "JobID,QOS,Start,End,AllocTRES")

    assert watch.returncode == 0, watch.stderr
    assert events[-1]["event"] == "queue_empty"
    latest = {r.run_id: r for r in sorted(mine, key=lambda r: r.submitted_at)}
    assert sorted(latest) == sorted(r.run_id for r in store.sweep_runs(sweep_id))
    assert {r.status for r in latest.values()} == {"completed"}
    assert len(load_ids) >= 3  # the crowd was there ...
    assert [e for e in events if e["event"] == "pending" and "on Resources" in e["message"]]  # ... and in the way
    uid = pwd.getpwnam(LAB_USER).pw_uid
    assert [j for j, _, state in theirs if state == f"CANCELLED by {uid}"] == []  # none by the user's commands
    high = [
        (datetime.fromisoformat(s), datetime.fromisoformat(e), parse_tres(tres).gpus)
        for _, qos, s, e, tres in ours
        if qos == "high" and s not in ("", "None", "Unknown") and e not in ("", "None", "Unknown")
    ]
    assert _most_at_once(high) <= CAP
