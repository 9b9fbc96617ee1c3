"""Scenarios 20 and 21: a node's /tmp full. A clone that cannot be made there ends the attempt with one line, and
the job is requeued without that node (node.sh: roach_clone_step, roach_exclude_failed_nodes); a rank's write
that finds no room ends the attempt with one line and leaves the previous resume.pt whole; the watch says each."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from roach.lab import lab as lablib
from roach.ops.events import EventKind
from roach.runtime import checkpoint as ckpt
from roach.slurm.clusters.lab import GPU1
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, preempt
from tests.faults.ledger import assert_left_no_process, bundle_dir_of, check_ledger

NODE_TMP_MB = 16
STEPS = 30


@pytest.fixture
def small_node_tmp(lab):
    """Each node's /tmp a tmpfs of NODE_TMP_MB MiB (the nodes' slurmd start again), back to none after the test."""
    lablib.up(log=lambda *_: None, node_tmp_mb=NODE_TMP_MB)
    yield
    lablib.up(log=lambda *_: None, node_tmp_mb=0)


def _fill(lab, node: str) -> Path:
    """Fill ``node``'s /tmp (from this machine, where it is a tmpfs) until no page is left."""
    fill = lab.node_tmp(node) / "fill"
    subprocess.run(["dd", "if=/dev/zero", f"of={fill}", "bs=64k"], capture_output=True, timeout=60)
    r = subprocess.run(["df", "--output=avail", str(fill.parent)], capture_output=True, text=True, timeout=30)
    assert r.stdout.split()[-1] == "0", r.stdout
    return fill


def _state(slurm, node: str) -> str:
    """``node``'s state as sinfo prints it (``idle``; ``idle*`` while it does not answer)."""
    return slurm.run(["sinfo", "-h", "-n", node, "-o", "%t"]).stdout.strip()


def _watch_to_end(faults, job, timeout: float = 240.0) -> list:
    """`roach watch`'s rounds over the job until it says the job finished; every event said."""
    key = str(job.job_id)
    w = Watcher(CLUSTER, CLUSTER.client(), faults.store, job_ids=(key,), interval_s=1.0, heartbeat_s=1e9)
    events: list = []
    deadline = time.monotonic() + slack(timeout)
    while time.monotonic() < deadline:
        events += w.round()
        if [e for e in events if e.kind is EventKind.FINISHED and e.job_id == key]:
            return events
        time.sleep(1.0)
    pytest.fail(f"no end of {job} within {timeout:.0f}s: {[e.line() for e in events]}")


def _load_as_the_job(lab, path: Path) -> dict:
    """``path`` loaded by roach's checkpoint module in the lab's job venv (a torch.save where it has torch)."""
    code = (
        "import json, sys; from roach.runtime import checkpoint as c; print(json.dumps(c.load(sys.argv[1])['roach']))"
    )
    env = {"PYTHONPATH": str(Path(ckpt.__file__).resolve().parents[2])}
    r = subprocess.run(
        [str(lab.state / "pyenv" / "bin" / "python"), "-c", code, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return {"roach": json.loads(r.stdout)}


@pytest.mark.lab
def test_a_full_node_tmp_fails_the_clone_in_one_line_and_the_next_attempt_excludes_the_node(
    faults, slurm, lab, small_node_tmp
):
    if not lab.hosts:
        pytest.skip("a node's own /tmp needs the hosts layout")
    _fill(lab, "n2")
    # n2's slurmd was started again on the small /tmp: once it answers, with every GPU free, the run can start there
    wait_until("n2 to answer, idle", lambda: _state(slurm, "n2") == "idle", timeout=120)
    blocker = preempt(slurm, "n1", sleep_s=30)  # n1's GPUs busy: the run starts on n2
    wait_until("the blocker to run on n1", lambda: slurm.squeue(job_ids=[blocker])[0].state.is_running, timeout=60)
    # steps of 0.2 s: the second attempt runs across several of the watch's rounds, which read its log then
    job = faults.submit({"steps": STEPS, "step_s": 0.2}, GPU1, name="node-disk", clone_root="/tmp/roach-clones")
    events = _watch_to_end(faults, job)
    log = job.log()
    assert "on n2 (restart count 0)" in log, log  # the first attempt ran where the disk is full
    assert job.wait(timeout=60).state.name == "COMPLETED", log
    said = [e.line() for e in events if e.kind is EventKind.NODE_FAILED]
    assert any("n2: no space left on device" in ln for ln in said), [e.line() for e in events]
    assert any("excluded node n2" in ln for ln in said), [e.line() for e in events]
    failed = [ln for ln in log.splitlines() if "node_failed" in ln]
    assert len(failed) == 1, log
    assert "n2: no space left on device" in failed[0], failed
    assert "/tmp/roach-clones/" in failed[0], failed
    assert "fatal:" not in log, log  # git's own error is not in the log: roach's one line says it
    excluded = [ln for ln in log.splitlines() if "roach: excluded node n2 " in ln]
    assert len(excluded) == 1, log
    assert "1 of at most 2 nodes excluded" in excluded[0], excluded
    assert "n1: cloned" in log, log
    info = subprocess.run(
        ["scontrol", "show", "job", str(job.job_id)], capture_output=True, text=True, env=lab.env(), timeout=30
    ).stdout
    assert "ExcNodeList=n2" in info, info
    attempts = json.loads(Path(job.record.bundle_dir, "job.json").read_text())["attempts"]
    assert [(a["attempt"], a["nodes"], a["ended"]) for a in attempts] == [(1, ["n2"], "node_failed")], attempts
    assert "no space left on device" in attempts[0]["causes"], attempts
    assert_left_no_process(slurm, job)
    check_ledger(job.record.run_dir, STEPS, run_id=job.run_id, interruptions=0)  # the failed attempt ran no rank


@pytest.mark.lab
def test_a_rank_write_with_no_room_ends_in_one_line_and_keeps_the_last_resume_pt(faults, slurm, lab, small_node_tmp):
    if not lab.hosts:
        pytest.skip("a node's own /tmp needs the hosts layout")
    job = faults.submit(
        {"steps": 400, "step_s": 0.2}, GPU1, name="rank-disk", run_root="/tmp/roach-runs", checkpoint_every=1
    )
    rec = wait_until(
        "the job to run", lambda: [r for r in slurm.squeue(job_ids=[job.job_id]) if r.state.is_running], timeout=120
    )
    node = rec[0].nodelist
    wait_until("three checkpoints", lambda: job.log().count("checkpoint at step") >= 3, timeout=120)
    _fill(lab, node)
    events = _watch_to_end(faults, job, timeout=120)
    log = job.log()
    assert job.wait(timeout=60).state.name == "FAILED", log
    said = [e.line() for e in events if e.kind is EventKind.NODE_FAILED]
    assert any(f"{node}: no space left on device writing" in ln for ln in said), [e.line() for e in events]
    full = [ln for ln in log.splitlines() if "no space left on device writing" in ln]
    assert len(full) == 1, log
    # the checkpoint's write as a rule; the ledger's append (an os.write, which names no file) where it crossed a page
    written = full[0].split(" writing ", 1)[1]
    assert written.startswith((f"/tmp/roach-runs/{job.run_id}/", "a file;")), full
    assert f"{node}: no space left on device writing " in full[0], full
    assert "Traceback" not in log, log
    run_dir = lab.node_tmp(node) / "roach-runs" / job.run_id
    saved = _load_as_the_job(lab, run_dir / ckpt.RESUME_FILE)  # whole: the write that found no room left it as it was
    last = max(
        int(ln.rsplit("checkpoint at step ", 1)[1].split(":")[0])
        for ln in log.splitlines()
        if "checkpoint at step" in ln
    )
    assert saved["roach"]["next_step"] == last, (saved, last)
    assert_left_no_process(slurm, job)
    (lab.node_tmp(node) / "fill").unlink()
    check_ledger(run_dir, 400, run_id=job.run_id, interruptions=0, complete=False)
    assert json.loads((Path(bundle_dir_of(job)) / "job.json").read_text())["run_id"] == job.run_id
