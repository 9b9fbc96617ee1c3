"""Waiters read one poller, on the lab: ``Job.wait`` with no viewer running starts ``roach watch --serve``, which
any number of waits share and which ends a while after the last; killed, it is started again by a waiter; a
``roach watch`` that starts takes the rounds from it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.launch import poller
from roach.model.job_state import JobState
from roach.records.poller.lock import WatchLock, polled
from roach.records.results import JOB_NOT_COMPLETED
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.slurm.clusters.lab import LAB
from tests.conftest import slack, wait_until
from tests.support.pane import roach_argv, roach_env
from tests.support.submitting import submit_to_lab
from tests.support.watch import TRAIN

PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits
CLUSTER = LAB.with_(run_as=LAB_USER)
TRAINING = {"steps": 12, "step_s": 0.5}
HANGING = {"steps": 10, "step_s": 0.2, "hang_at": 3}  # runs until cancelled


def _poller(store: Store) -> int | None:
    """The pid of the process that polls ``store``'s lab now, else None."""
    return WatchLock(store.path, "lab").holder() if polled(store.path, "lab") else None


def _serves(pid: int | None) -> bool:
    try:
        return pid is not None and b"--serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _recording(job):
    """Every Slurm command the job's own handle runs from here on (the real Slurm behind it)."""
    transport = MockTransport(inner=CLUSTER.transport())
    job._client = SlurmClient(transport)
    return transport


def _wait(job, timeout: float = 180):
    """``job.wait`` in a thread of its own, with a store of its own (SQLite's connections stay in their thread)."""
    with Store(job.store.path) as mine:
        job.store = mine
        return job.wait(timeout=slack(timeout))


def _log_kinds(store: Store, job_id: int) -> list[str]:
    return [x.data["kind"] for x in store.watch_log("lab") if x.data.get("job_id") == str(job_id)]


@pytest.mark.lab
def test_waits_with_no_viewer_share_one_poller_that_ends_a_linger_after_them(lab, repo, store, roots, monkeypatch):
    monkeypatch.setattr(poller, "SERVE_LINGER_S", 3.0)
    jobs = [submit_to_lab(repo, store, roots, "pkg.train:train", TRAINING, cluster=CLUSTER) for _ in range(2)]
    calls = [_recording(j) for j in jobs]
    pids: dict[int, bool] = {}  # each poller seen, and whether it is `roach watch --serve`
    done = threading.Event()

    def spy() -> None:
        while not done.is_set():
            pid = _poller(store)
            if pid is not None and pid not in pids:
                pids[pid] = _serves(pid)
            time.sleep(0.1)

    threading.Thread(target=spy, daemon=True).start()
    with ThreadPoolExecutor(2) as waits:  # at the same instant: both may start a poller, one of them polls
        ends = list(waits.map(_wait, jobs))
    done.set()
    assert [e.state for e in ends] == [JobState.COMPLETED] * 2
    assert [[c.argv[0] for c in t.calls] for t in calls] == [["sacct"]] * 2  # each wait asked Slurm once
    assert list(pids.values()) == [True], pids  # one poller, `roach watch --serve`
    for j in jobs:
        assert _log_kinds(store, j.job_id).count("finished") == 1  # its end recorded once, by the poller
    kinds = [x.data["kind"] for x in store.watch_log("lab")]
    assert kinds.count("heartbeat") == 1  # one poller's start
    (pid,) = pids
    wait_until("the poller ends after its linger", lambda: not polled(store.path, "lab"), timeout=slack(15))
    wait_until("its process is gone", lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=10)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


@pytest.mark.lab
def test_a_killed_serving_poller_is_started_again_by_its_waiter_and_nothing_is_lost(
    lab, repo, store, roots, monkeypatch
):
    monkeypatch.setattr(poller, "SERVE_LINGER_S", 1.0)
    job = submit_to_lab(repo, store, roots, "pkg.train:train", HANGING, cluster=CLUSTER)
    with ThreadPoolExecutor(1) as waits:
        end = waits.submit(_wait, job)
        wait_until("a serving poller polls", lambda: _serves(_poller(store)), timeout=slack(30), every=0.1)
        first = _poller(store)
        assert first is not None
        wait_until("it took a round", lambda: store.watch_round("lab")[0] is not None, timeout=slack(10))
        os.kill(first, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(
            "another poller polls",
            lambda: _poller(store) not in (None, first),
            timeout=slack(30),
            every=0.1,
            explain=lambda: f"the wait: {end.done() and end.result()!r}",
        )
        took = time.monotonic() - killed
        job.cancel()
        assert end.result().state is JobState.CANCELLED
    assert _serves(_poller(store)) or not polled(store.path, "lab")
    seqs = [x.seq for x in store.watch_log("lab")]
    assert seqs == list(range(seqs[0], seqs[-1] + 1))  # numbered on from the killed poller's, none twice
    assert _log_kinds(store, job.job_id).count("finished") == 1
    print(f"a killed serving poller replaced after {took:.2f} s")  # bench/'s figure is measured, not asserted


@pytest.mark.lab
def test_a_watch_takes_the_rounds_from_a_serving_poller(lab, repo, store, roots, monkeypatch):
    monkeypatch.setattr(poller, "SERVE_LINGER_S", 60.0)  # it would poll on for a minute: the watch ends it sooner
    job = submit_to_lab(repo, store, roots, "pkg.train:train", HANGING, cluster=CLUSTER)
    with ThreadPoolExecutor(1) as waits:
        end = waits.submit(_wait, job)
        wait_until("a serving poller polls", lambda: _serves(_poller(store)), timeout=slack(30), every=0.1)
        server = _poller(store)
        argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json")
        watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=roach_env(store))
        try:
            wait_until("the watch polls", lambda: _poller(store) == watch.pid, timeout=slack(15), every=0.1)
            assert server is not None
            wait_until("the server left", lambda: _zombie(server), timeout=slack(5), every=0.1)
            job.cancel()
            assert end.result().state is JobState.CANCELLED
            out, err = watch.communicate(timeout=slack(60))
        finally:
            watch.kill()
    assert watch.returncode == JOB_NOT_COMPLETED, err
    assert '"event": "finished"' in out
    assert _log_kinds(store, job.job_id).count("finished") == 1
