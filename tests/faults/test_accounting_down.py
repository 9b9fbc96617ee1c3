"""Scenario 25: slurmdbd down while a sweep's runs end, under a running `roach watch`.

The runs leave the queue while accounting cannot say how they ended: the watch says accounting is down, marks
none of them finished or lost meanwhile, and records each end once when slurmdbd is back (slurmctld keeps the
ends and sends them then). `roach report` then reads every run completed, no preemption, and the GPU-hours sacct
gives."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from roach.lab import lab as lablib
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import sweep
from roach.slurm.clusters.lab import GPU1
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, TARGET
from tests.faults.ledger import assert_left_no_process, check_ledger, steps_done
from tests.support.labs import SHARED_TMP
from tests.support.pane import roach_argv, roach_env

RUNS = 4
STEPS = 40
ROUNDS_DOWN = 5  # watch rounds taken with every run out of the queue and accounting still down


def _events(out: Path) -> list[dict]:
    """The JSON events the watch printed so far (a line it is still writing is left for the next read)."""
    lines = out.read_text().split("\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def _report(store: Store, name: str) -> dict:
    r = subprocess.run(
        roach_argv("report", name, "--json"), capture_output=True, text=True, env=roach_env(store), timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _start_watch(base: Path, store: Store) -> subprocess.Popen:
    """`roach watch --json` on ``store``, each event written to ``base``/watch.jsonl as it is said."""
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json")
    env = {**roach_env(store), "PYTHONUNBUFFERED": "1"}
    with (base / "watch.jsonl").open("w") as out, (base / "watch.err").open("w") as err:
        return subprocess.Popen(argv, stdout=out, stderr=err, env=env)


def _said(base: Path, watch: subprocess.Popen) -> list[dict]:
    assert watch.poll() is None, f"the watch exited {watch.returncode}: {(base / 'watch.err').read_text()[-3000:]}"
    return _events(base / "watch.jsonl")


def _down_while_runs_end(base: Path, watch: subprocess.Popen, store: Store, slurm, lab, sw) -> list[dict]:
    """slurmdbd stopped from the runs' first steps until they all left the queue and the watch took
    ``ROUNDS_DOWN`` more rounds; returns what the watch said until then."""
    dbd = next(d for d in lablib.daemons(lab) if d.name == "slurmdbd")
    env = {**os.environ, **lab.env()}
    tasks = list(sw)
    wait_until(
        "the watch to see every run start",
        lambda: len([e for e in _said(base, watch) if e["event"] == "started"]) == RUNS,
        timeout=180,
    )
    wait_until("every run to do 2 steps", lambda: all(steps_done(t) >= 2 for t in tasks), timeout=60)
    dbd.stop()
    try:
        wait_until(
            "every run to leave the queue",
            lambda: not [q for q in slurm.squeue(job_ids=sw.array_ids) if q.state.is_active],
            timeout=120,
        )
        at = store.watch_round("lab")[0].round
        wait_until(
            f"{ROUNDS_DOWN} watch rounds with accounting down",
            lambda: _said(base, watch) and store.watch_round("lab")[0].round >= at + ROUNDS_DOWN,
            timeout=120,
        )
        return _events(base / "watch.jsonl")
    finally:
        dbd.start(
            ready=lambda: (
                subprocess.run(["sacctmgr", "-n", "show", "cluster"], env=env, capture_output=True).returncode == 0
            )
        )


def _settled(slurm, sw) -> list:
    """sacct's allocations of the sweep once each has its end."""
    acct = [a for a in slurm.sacct(sw.array_ids, duplicates=True) if a.step is None]
    return acct if len(acct) == RUNS and all(a.end_time is not None for a in acct) else []


@pytest.mark.lab
def test_accounting_down_while_runs_end_marks_none_ended_then_records_each_once(faults, slurm, lab):
    base = Path(tempfile.mkdtemp(prefix="roach-acct-down-", dir=SHARED_TMP))
    store = Store(base / "store.sqlite")  # the watch's own: no other test's job in it
    sw = sweep(
        TARGET,
        [{"steps": STEPS, "step_s": 0.3}] * RUNS,
        resources=GPU1.replace(time="00:05:00"),
        cluster=CLUSTER,
        repo_root=faults.repo.work,
        store=store,
        name="acct-down",
        **faults.roots,
    )
    watch = _start_watch(base, store)
    try:
        meanwhile = _down_while_runs_end(base, watch, store, slurm, lab, sw)
        watch.wait(timeout=slack(120))
    finally:
        watch.kill()
    kinds = [e["event"] for e in meanwhile]
    assert "finished" not in kinds, kinds
    assert "lost" not in kinds, kinds
    assert [e["service"] for e in meanwhile if e["event"] == "outage"] == ["slurmdbd"], meanwhile
    assert watch.returncode == 0, (base / "watch.err").read_text()[-3000:]
    acct = wait_until("accounting to hold every run's end", lambda: _settled(slurm, sw), timeout=60)
    _check_ends(_events(base / "watch.jsonl"), store, sw, acct)
    _check_report(store, sw.sweep_id, acct)
    for t in sw:
        check_ledger(t.record.run_dir, STEPS, interruptions=0, max_redo=0, run_id=t.run_id)
    assert_left_no_process(slurm, sw[0])


def _check_ends(events: list[dict], store: Store, sw, acct: list) -> None:
    """Once slurmdbd is back: one `finished` per run, as sacct ended it, and one final record per run."""
    kinds = [e["event"] for e in events]
    assert [e["service"] for e in events if e["event"] == "recovered"] == ["slurmdbd"], kinds
    assert "lost" not in kinds, kinds
    finished = [e for e in events if e["event"] == "finished"]
    assert sorted(e["run_id"] for e in finished) == sorted(t.run_id for t in sw), finished
    assert {e["state"] for e in finished} == {"COMPLETED"}
    assert {e["job_id"]: e["elapsed_s"] for e in finished} == {str(a.ref): a.elapsed_s for a in acct}
    for t in sw:
        (rec,) = store.jobs_for_run(t.run_id)
        assert rec.slurm_state == "COMPLETED", rec
        assert rec.exit_code == "0:0", rec


def _check_report(store: Store, sweep_id: str, acct: list) -> None:
    """`roach report` of the sweep: every run completed in one attempt, nothing preempted, the GPU-hours of
    ``acct`` (sacct's allocations, each with its end)."""
    rep = _report(store, sweep_id)
    attempts = [a for r in rep["runs"] for a in r["attempts"]]
    assert [a["state"] for a in attempts] == [JobState.COMPLETED.value] * RUNS, attempts
    assert rep["total"]["preemptions"] == 0
    assert rep["total"]["failures"] == {}
    assert len(acct) == RUNS, acct
    gpu_h = sum(a.tres.gpus * a.elapsed_s for a in acct) / 3600
    assert rep["total"]["allocated_gpu_h"] == pytest.approx(gpu_h, abs=1e-6)
