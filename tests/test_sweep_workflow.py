"""The seeds' rebalance workflow end to end, driven as a coding agent drives it through the command line: a sweep of
8 checkpointing runs on the low tier under an experiment, one `roach watch --rebalance` in the background, another
user's high-QOS job preempting two runs, one run moved by hand to the high tier; then `report` and `clean` of the
experiment. Every run completes once with every step counted once, nothing is cancelled that was not asked, and
the report and the clean cover every job and attempt of it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.job_record import JobRecord
from tests.conftest import slack, wait_until
from tests.support.lab_repo import invoke
from tests.support.packages import SWEEP_PKG
from tests.support.pane import roach_argv, roach_env

STEPS, STEP_S = 100, 0.5  # about 50 s a run
RUNS = 8  # one GPU each: every GPU of the lab's two nodes

PKG = SWEEP_PKG  # what the repo fixture commits


pytestmark = pytest.mark.usefixtures("cli_store")  # the CLI finds the test's store


def _cli(*args: str) -> str:
    res = invoke(*args, "--run-as", LAB_USER)
    assert res.exit_code == 0, res.output
    return res.output


def _tasks(client, array: int) -> dict[int, tuple[JobState, int]]:
    """Each queued task of ``array``: its state and restart count."""
    return {q.ref.task: (q.state, q.restart_count) for q in client.squeue(job_ids=[array]) if q.ref.task is not None}


def _sweep(repo, roots, store, tmp_path: Path) -> list[JobRecord]:
    """The sweep as `roach sweep --tier low` queues it; its runs' records, in task order."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"steps": STEPS, "step_s": STEP_S}] * RUNS))
    out = _cli(
        "sweep", "pkg.train:train", "--grid", str(grid), "--cluster", "lab", "--resources", "GPU1", "--tier", "low",
        "--experiment", "e2e", "--repo-root", str(repo.work), "--log-root", roots["log_root"],
        "--clone-root", roots["clone_root"], "--run-root", str(Path(roots["log_root"]).parent / "runs"),
        "--name", "e2e", "--json",
    )  # fmt: skip
    return store.sweep_runs(json.loads(out)["sweep_id"])


def _watch(store, repo) -> subprocess.Popen[str]:
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "2", "--json")
    argv += ["--rebalance", "--repo-root", str(repo.work)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=roach_env(store))


def _others_high_job(slurm) -> int:
    """Another user (root) takes two of n1's GPUs on the high tier for 20 s: two runs there are preempted."""
    opts = ["--qos=high", "--gres=gpu:2", "--nodelist=n1", "--time=2", "--output=/dev/null", "--job-name=others"]
    return slurm.sbatch(opts, "#!/bin/bash\nsleep 20\n")


def _latest(store) -> dict[str, JobRecord]:
    """Each run's latest job in the store (a promotion or a move adds one)."""
    out: dict[str, JobRecord] = {}
    for r in sorted(store.all_jobs(), key=lambda r: r.submitted_at):
        out[r.run_id] = r
    return out


def _running(client, recs: list[JobRecord]) -> bool:
    queued = {str(q.ref): q.state for q in client.squeue(job_ids=sorted({r.job_id for r in recs}))}
    return all(queued.get(r.slurm_id) is JobState.RUNNING for r in recs)


@pytest.mark.slow
@pytest.mark.lab
def test_a_sweep_driven_as_an_agent_drives_it_completes_every_run_once(
    lab, repo, store, roots, slurm, user_slurm, tmp_path
):
    runs = _sweep(repo, roots, store, tmp_path)
    array = runs[0].job_id
    watch = _watch(store, repo)
    others: int | None = None
    try:
        wait_until("all 8 running", lambda: _running(user_slurm, runs))
        wait_until(
            "a checkpoint in every run",
            lambda: all(
                Path(r.log_path).exists() and "checkpoint at step" in Path(r.log_path).read_text() for r in runs
            ),
        )
        others = _others_high_job(slurm)
        wait_until("two runs requeued", lambda: sum(n for _, n in _tasks(user_slurm, array).values()) == 2, 60)
        preempted = sorted(t for t, (_, n) in _tasks(user_slurm, array).items() if n)
        wait_until("the other user's job to end", lambda: not slurm.squeue(job_ids=[others]), 90)
        again = [_latest(store)[runs[t].run_id] for t in preempted]
        wait_until(
            "the preempted runs to run again",
            lambda: _running(user_slurm, [_latest(store)[r.run_id] for r in again]),
            90,
        )
        # one run moved by hand: a preempted one still on low (the watch may have promoted one already)
        on_low = [_latest(store)[runs[t].run_id] for t in preempted + [t for t in range(RUNS) if t not in preempted]]
        mover = next(r for r in on_low if r.resources.get("qos") == "low" and _running(user_slurm, [r]))
        moved = json.loads(
            _cli("move", mover.slurm_id, "--to", "high", "--repo-root", str(repo.work), "--wait", "60", "--json")
        )
        out, err = watch.communicate(timeout=slack(240))
    finally:
        watch.kill()
        if others is not None:
            slurm.scancel([others])  # root's own: the lab user may not cancel it
        user_slurm.scancel(sorted({r.job_id for r in store.all_jobs()}))
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    promoted = {e["job_id"] for e in events if e["event"] == "promoted"}
    assert watch.returncode == 0, err
    assert events[-1]["event"] == "queue_empty"
    assert len(preempted) == 2
    ends = {r.key: r for r in store.all_jobs()}
    latest = _latest(store)
    assert len(latest) == RUNS
    assert {r.run_id: r.status for r in latest.values()} == {r.run_id: "completed" for r in runs}
    cancelled = sorted(r.slurm_id for r in ends.values() if r.status == "cancelled")
    assert cancelled == sorted({mover.slurm_id, *promoted})  # the moved job and those promoted, nothing else
    completed = sorted(r.run_id for r in ends.values() if r.status == "completed")
    assert completed == sorted(r.run_id for r in runs)  # each run completed once
    results = {r.run_id: json.loads((Path(r.run_dir) / "result.json").read_text()) for r in latest.values()}
    assert set(results.values()) == {STEPS}  # every step counted once across preemption and the move
    assert moved["new_job"] == latest[mover.run_id].job_id

    report = json.loads(_cli("report", "e2e", "--json"))
    attempts = [a for run in report["runs"] for a in run["attempts"]]
    assert len(report["runs"]) == RUNS
    assert {a["job"] for a in attempts} == {r.slurm_id for r in ends.values()}
    said = "\n".join(
        [
            *(f"{a['job']} #{a['restart']} {a['tier']} {a['state']} {a['stop']}" for a in attempts),
            *(e["message"] for e in events),
        ]
    )
    assert report["total"]["preemptions"] == 2, said  # the two the other user's job made, none by the move
    assert report["total"]["recomputed_steps"] <= 3 * 5  # at most a checkpoint's worth per stop

    cleaned = json.loads(_cli("clean", "e2e", "--json"))
    (lab_clean,) = cleaned if isinstance(cleaned, list) else cleaned["clusters"]
    assert sorted(lab_clean["jobs"]) == sorted({r.job_id for r in ends.values()})
    assert not [r.log_path for r in ends.values() if Path(r.log_path).exists()]
    kept = {Path(p).parent.name for p in lab_clean["checkpoints_kept"]}
    assert kept == {r.run_id for r in runs}
