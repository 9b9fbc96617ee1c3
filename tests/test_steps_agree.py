"""One meaning of "step N" (N steps done) in a preempted and resumed run's log and in the watch's lines."""

from __future__ import annotations

import re
import time

import pytest

from roach.lab.config import LAB_USER
from roach.ops.events import Event, EventKind
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.support.submitting import submit_to_lab
from tests.support.watch import TRAIN

CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits


def _rounds_until(w: Watcher, events: list[Event], what: str, kind: EventKind, timeout: float = 90.0) -> Event:
    deadline = time.monotonic() + slack(timeout)
    while time.monotonic() < deadline:
        events += w.round()
        hit = [e for e in events if e.kind is kind]
        if hit:
            return hit[0]
        time.sleep(1.0)
    pytest.fail(f"no {what} within {timeout:.0f}s: {[e.line() for e in events]}")


def _preempt(slurm) -> int:
    """A short high-tier job as root, pinned to n1 and asking one GPU more than n1 has free: it starts only by
    preempting the low run there."""
    n1 = next(n for n in slurm.nodes() if n.name == "n1")
    gpus = min(n1.gpus_total, n1.gpus_total - n1.gpus_used + 1)
    return slurm.sbatch(
        ["--qos=high", "--nodelist=n1", f"--gres=gpu:{gpus}", "--time=1", "--output=/dev/null", "--job-name=preemptor"],
        "#!/bin/bash\nsleep 2\n",
    )


@pytest.mark.slow
@pytest.mark.lab
def test_watch_and_log_name_the_same_step_for_a_preemption_and_its_resume(lab, slurm, repo, store, roots):
    job = submit_to_lab(
        repo,
        store,
        roots,
        "pkg.train:train",
        {"steps": 400, "step_s": 0.2},
        cluster=CLUSTER,
        name="steps-agree",
        resources=GPU1.replace(qos="low", time="00:05:00", extra=("--nodelist=n1",)),
    )
    try:
        w = Watcher(CLUSTER, CLUSTER.client(), store, interval_s=1.0, heartbeat_s=1e9)
        events: list[Event] = []
        _rounds_until(w, events, "the run to start", EventKind.STARTED)
        wait_until("progress", lambda: "step 20/400" in job.log(), timeout=60)
        w.round()
        _preempt(slurm)
        resumed = _rounds_until(w, events, "the run to resume", EventKind.RESUMED, timeout=180)
        preempted = [e for e in events if e.kind is EventKind.PREEMPTED]
        log = job.log()
        left = [int(n) for n in re.findall(r"roach rank 0: preempted at step (\d+)", log)]
        back = [int(n) for n in re.findall(r"roach rank 0: resumed at step (\d+)", log)]
        assert len(left) == 1, log[-3000:]
        assert back == left, log[-3000:]
        assert len(preempted) == 1, [e.line() for e in events]
        assert preempted[0].data["step"] == left[0], [e.line() for e in events]
        assert f"preempted at step {left[0]} on tier low" in preempted[0].message
        assert resumed.data["step"] == left[0]
    finally:
        slurm.scancel([job.job_id])
