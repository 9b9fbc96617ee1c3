"""Scenario 22: a rank of a 2-node DDP run stops (SIGSTOP) and the other waits for it in the step's all-reduce for
ever; `roach watch --on-stall requeue` sees the log stall and requeues the job, and the run resumes from its
checkpoint with no change to its function. Slurm's requeue sends SIGCONT before TERM, so the stopped rank goes on,
both ranks reach the step boundary and checkpoint there as they leave (a rank hung for good would be killed after
KillWait, and the run would resume from its last periodic checkpoint: the ledger allows either)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm.clusters.lab import NODES2_GPU2
from tests.conftest import slack, wait_until
from tests.faults.ledger import assert_left_no_process, bundle_dir_of, check_ledger
from tests.support.labs import SHARED_TMP
from tests.support.pane import roach_argv, roach_env

STEPS, STEP_S, EVERY = 30, 0.5, 3
RES = NODES2_GPU2.replace(gpus_per_node=1, time="00:05:00")  # one rank on each node
STALL_AFTER_S = 5


def rank_pid(bundle_dir: str, rank: int) -> int | None:
    """The pid of rank ``rank``'s Python (``-m roach.slurm.run``) of the job whose ROACH_BUNDLE is ``bundle_dir``;
    every lab node's processes are this host's."""
    want = {f"ROACH_BUNDLE={bundle_dir}".encode(), f"SLURM_PROCID={rank}".encode()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if want <= env and b"roach.slurm.run" in cmd:
            return int(pid)
    return None


@pytest.mark.lab
def test_a_stopped_rank_stalls_the_run_and_the_watch_requeues_it_to_resume(faults, slurm, record_property):
    store = Store(Path(tempfile.mkdtemp(prefix="roach-hung-", dir=SHARED_TMP)) / "store.sqlite")
    job = faults.submit(
        {"steps": STEPS, "step_s": STEP_S, "dist": True}, RES, name="hung-rank", checkpoint_every=EVERY, store=store
    )
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json")
    argv += ["--on-stall", "requeue", "--stall-after", str(STALL_AFTER_S), "--heartbeat", "3600"]
    watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=roach_env(store))
    try:
        # progress lines over a few seconds first: the watch's stall rule needs the run's usual gap (line times are
        # whole seconds; lines all in one second give none, and an unknown gap waits 15 minutes)
        wait_until("two checkpoints", lambda: "checkpoint at step 6:" in job.log(), timeout=120, explain=job.log)
        pid = rank_pid(bundle_dir_of(job), 1)
        assert pid is not None, "rank 1's process is not on this host"
        os.kill(pid, signal.SIGSTOP)  # rank 0 now waits in the step's all-reduce for ever
        stopped_at = time.time()
        out, err = watch.communicate(timeout=slack(240))
    finally:
        if watch.poll() is None:
            watch.kill()
        if [r for r in slurm.squeue(job_ids=[job.job_id]) if r.state.is_active]:
            slurm.scancel([job.job_id])  # a failed watch leaves the run hung: it holds two nodes until its limit
    said = [json.loads(line) for line in out.splitlines() if line.strip()]
    kinds = [e["event"] for e in said if e["job_id"] == str(job.job_id)]
    assert watch.returncode == 0, err[-3000:]
    assert kinds.count("stall_requeued") == 1, kinds
    assert "resumed" in kinds, kinds
    assert "preempted" not in kinds, kinds  # the watch's own requeue is no preemption
    assert job.wait(timeout=slack(60)).state is JobState.COMPLETED, job.log()[-3000:]
    counts = json.loads(Path(job.record.run_dir, ".roach", "requeues.json").read_text())
    assert counts == {"stalled": 1}, job.log()[-3000:]
    check_ledger(job.record.run_dir, STEPS, ranks=2, run_id=job.run_id, interruptions=1, max_redo=EVERY)
    assert_left_no_process(slurm, job)
    # bench 7's figure (its JUnit properties): from the stop to the watch's requeue and to the resumed step
    for name, kind in (("stop_to_requeue_s", "stall_requeued"), ("stop_to_resumed_s", "resumed")):
        first = next(e for e in said if e["event"] == kind and e["job_id"] == str(job.job_id))
        record_property(name, round(_epoch(first["time"]) - stopped_at, 1))
    stall = next((e for e in said if e["event"] == "stalled" and e["job_id"] == str(job.job_id)), None)
    record_property("stall_limit_s", stall["limit_s"] if stall else None)


def _epoch(iso: str) -> float:
    """An event's time (``2026-12-06T14:24:03Z``) in epoch seconds."""
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
