"""`roach report` on the lab: a sweep of 4 runs preempted at known steps, its ledger checked against sacct."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.lab.config import LAB_USER
from roach.launch.hold.start import hold
from roach.launch.sweep import sweep
from roach.model.job_state import JobState
from roach.ops.attempt_log import LogStop
from roach.ops.report import Scope, report
from roach.scheduler.accounting import ledger_argv
from roach.scheduler.client import SlurmClient
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import slack, wait_until
from tests.support.schemas import validate_output
from tests.support.submitting import submit_to_lab

CLUSTER = LAB.with_(run_as=LAB_USER)
STEPS = 24

PKG = {
    "pkg/__init__.py": "",
    "pkg/ledger.py": """
import time


def paced(run, pause_at, keep, steps=24, step_s=0.3):
    # keep: a state to checkpoint, so a preemption saves where it stopped; else each attempt starts from the top.
    run.resume(default={"steps": steps} if keep else None)
    for step in run.steps(run.start_step, steps):
        if step == pause_at and run.restart_count == 0:
            run.log("waiting in step %d", step)
            t0 = time.monotonic()
            while run.caught_signal is None and time.monotonic() - t0 < 300:
                time.sleep(0.2)
        time.sleep(step_s)
    return steps
""",
}

# (pause_at, keep) of each run, and the steps its preemption must make it do again: it stops at the boundary
# after the step it waits in (pause_at + 1 steps done); a run with a state resumes there, one without starts at 0.
GRID = [(6, True), (6, False), (10, True), (10, False)]
FORCED = [0, 7, 0, 11]


def _sacct_truth(user_slurm, array_id: int) -> list[dict[str, str]]:
    """sacct's own view of every attempt, read here apart from roach's parser."""
    fields = ["JobID", "AllocTRES", "ElapsedRaw", "Eligible", "Start"]
    argv = ["sacct", "-X", "-D", "-n", "-P", "--jobs", str(array_id), "--starttime", "1970-01-01"]
    out = user_slurm.run([*argv, f"--format={','.join(fields)}"]).stdout
    return [dict(zip(fields, ln.split("|"))) for ln in out.splitlines() if ln.strip()]


def _gpus(tres: str) -> int:
    return next((int(p.split("=")[1]) for p in tres.split(",") if p.startswith("gres/gpu=")), 0)


@pytest.mark.slow
@pytest.mark.lab
def test_a_preempted_sweeps_ledger_matches_sacct_and_the_steps_the_preemptions_forced(
    repo, store, roots, slurm, user_slurm, tmp_path, monkeypatch
):
    grid = [{"pause_at": p, "keep": k, "steps": STEPS} for p, k in GRID]
    res = GPU1.replace(qos="low", time="00:10:00")
    sw = sweep("pkg.ledger:paced", grid, resources=res, cluster=CLUSTER, repo_root=repo.work, store=store, **roots)
    wait_until("every run waiting in its step", lambda: all("waiting in step" in j.log() for j in sw), timeout=240)
    # One normal-tier job over both nodes' GPUs (as root, the normal tier has no cap) preempts every low run at once.
    slurm.sbatch(
        ["--qos=normal", "--nodes=2", "--nodelist=n1,n2", "--gres=gpu:4", "--time=1", "--output=/dev/null"],
        "#!/bin/bash\nsleep 3\n",
    )
    done = sw.wait(timeout=slack(300), poll_s=2)
    assert {a.state for a in done.values()} == {JobState.COMPLETED}, [j.log()[-2000:] for j in sw]

    calls: list[str] = []
    real_run = SlurmClient.run

    def counted(self, argv, **kw):
        calls.append(argv[0])
        return real_run(self, argv, **kw)

    with monkeypatch.context() as m:
        m.setattr(SlurmClient, "run", counted)
        rep = report(sw.sweep_id, store=store)
    assert calls == ["sacct"]  # one Slurm call for the 4 runs and their 8 attempts
    assert rep.scope is Scope.SWEEP and [r.run_id for r in rep.runs] == [j.run_id for j in sw]
    for led, forced, (pause, _) in zip(rep.runs, FORCED, GRID):
        assert led.preemptions == 1 and led.recomputed_steps == forced, (led, sw[0].log())
        assert led.useful_steps == STEPS and led.failures == {} and led.wall_clock_stops == 0
        first, second = led.attempts
        assert first.stop is LogStop.PREEMPTED and first.end_step == pause + 1 and first.nodes
        assert second.state is JobState.COMPLETED and second.end_step == STEPS and second.nodes
        assert second.start_step == (0 if forced else pause + 1)
        assert (led.recomputed_gpu_h > 0) == bool(forced)
        assert set(led.pending_s_by_tier) == {"low"}

    array_id = int(sw[0].slurm_id.split("_")[0])
    truth = _sacct_truth(user_slurm, array_id)
    sacct_gpu_h = sum(_gpus(t["AllocTRES"]) * int(t["ElapsedRaw"]) for t in truth) / 3600
    ours = rep.total(lambda r: r.allocated_gpu_h)
    assert rep.total(lambda r: r.idle_gpu_h) > 0  # the first attempts' clones and start-up, at least
    assert len(truth) == 8 and abs(ours - sacct_gpu_h) <= 0.01 * sacct_gpu_h, (ours, sacct_gpu_h, truth)
    ours_pending = sorted(a.pending_s for r in rep.runs for a in r.attempts)
    theirs = sorted(
        (datetime.fromisoformat(t["Start"]) - datetime.fromisoformat(t["Eligible"])).total_seconds() for t in truth
    )
    assert all(abs(a - b) <= 1 for a, b in zip(ours_pending, theirs, strict=True)), (ours_pending, theirs)

    # The same through the command line, as JSON that its schema accepts, and a picture of it.
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    png = tmp_path / "ledger.png"
    out = CliRunner().invoke(cli, ["report", sw.sweep_id, "--json", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    validate_output("report", data)
    assert data["total"]["recomputed_steps"] == sum(FORCED) and data["total"]["preemptions"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if keep := os.environ.get("ROACH_REPORT_RECORD"):  # tests/data's recording and the docs' picture, from this run
        _record(Path(keep), user_slurm, array_id, sw, png, out.output)


def _record(out: Path, user_slurm, array_id: int, sw, png: Path, report_json: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(report_json)
    (out / "sacct_XD_ledger.txt").write_text(user_slurm.run(ledger_argv([array_id])).stdout)
    for i, job in enumerate(sw):
        (out / f"log_{i}.txt").write_text(job.log())
    (out / "report.png").write_bytes(png.read_bytes())


@pytest.mark.slow
@pytest.mark.lab
def test_a_holders_allocation_is_counted_once_its_attempts_in_their_runs_and_the_rest_idle(
    repo, store, roots, user_slurm, monkeypatch
):
    h = hold(GPU1, cluster=CLUSTER, name="ledger", time="5", log_root=roots["log_root"], store=store)
    try:
        h.wait_running(timeout=slack(60))
        time.sleep(3)  # the holder sits idle a while first
        runs = []
        for i in range(2):
            job = submit_to_lab(
                repo,
                store,
                roots,
                "pkg.ledger:paced",
                {"pause_at": -1, "keep": True, "steps": 8},
                cluster=CLUSTER,
                inside=h.job_id,
                name=f"held-{i}",
            )
            assert job.wait(timeout=slack(90)).state is JobState.COMPLETED, job.log()[-2000:]
            runs.append(job)
    finally:
        h.release()
    wait_until("the holder's end", lambda: h.state().is_terminal, timeout=60)
    time.sleep(2)  # until slurmdbd has it

    experiment = Path(roots["log_root"]).parent.name  # the experiment of jobs submitted without one
    calls: list[str] = []
    real_run = SlurmClient.run

    def counted(self, argv, **kw):
        calls.append(argv[0])
        return real_run(self, argv, **kw)

    with monkeypatch.context() as m:
        m.setattr(SlurmClient, "run", counted)
        rep = report(experiment, store=store)
    assert calls == ["sacct", "sacct"]  # the allocations, and the holder's steps
    assert rep.scope is Scope.EXPERIMENT
    by_run = {r.run_id: r for r in rep.runs}
    holder_row = by_run[store.get("lab", h.job_id).run_id]
    (idle,) = holder_row.attempts
    assert idle.start_step is None and idle.starting_s == idle.elapsed_s >= 3  # the holder's time with no attempt
    for job in runs:
        (a,) = by_run[job.run_id].attempts
        assert a.job == f"{h.job_id}/{job.attempt}" and a.pending_s == 0 and a.gpus == 1 and a.nodes
        assert a.start_step == 0 and a.end_step == 8 and a.stop is LogStop.FINISHED and a.elapsed_s > 0
    truth = _sacct_truth(user_slurm, h.job_id)
    held_gpu_h = sum(_gpus(t["AllocTRES"]) * int(t["ElapsedRaw"]) for t in truth) / 3600
    ours = rep.total(lambda r: r.allocated_gpu_h)
    assert abs(ours - held_gpu_h) <= max(0.01 * held_gpu_h, 2 / 3600), (ours, held_gpu_h, truth)
