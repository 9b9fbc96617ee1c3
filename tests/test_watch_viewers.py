"""One poller, every viewer, on the lab: two `roach watch`es, a `roach top` in tmux and an agent's MCP
`watch_events` follow one job at once, each sees its start and end with the same numbers, and the edges are
taken once; a poller killed with SIGKILL is replaced by a reader, nothing lost or said twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.poller.lock import lock_path
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.slurm.clusters.lab import LAB
from tests.conftest import slack, wait_until
from tests.support.mcp import Agent
from tests.support.pane import Pane, roach_argv, roach_env
from tests.support.submitting import pending_below_room, submit_to_lab
from tests.support.watch import TRAIN

PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits
CLUSTER = LAB.with_(run_as=LAB_USER)
HELD = ["--hold", "--time=2", "--output=/dev/null", "--job-name=viewers"]


def _watch(store: Store, job: int | None = None) -> subprocess.Popen[str]:
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json")
    argv += ["--job", str(job)] if job is not None else []
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=roach_env(store))


def _said(p: subprocess.Popen[str], timeout: float = 120) -> list[dict]:
    out, err = p.communicate(timeout=slack(timeout))
    assert p.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _edges(events: list[dict], job: int) -> list[tuple[str, int]]:
    return [(e["event"], e["seq"]) for e in events if e["job_id"] == str(job) and e["event"] in ("started", "finished")]


def _polls(store: Store) -> int | None:
    try:
        text = lock_path(store.path, "lab").read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


@pytest.mark.lab
def test_two_watches_a_top_and_an_agent_follow_one_pollers_rounds(lab, store, user_slurm, jobs, tmp_path):
    job = user_slurm.sbatch(HELD, "#!/bin/bash\nsleep 3\n")
    jobs.append(job)
    first, second = _watch(store, job), _watch(store, job)  # at the same instant: one of them polls
    wait_until("one of the watches polls", lambda: _polls(store) in (first.pid, second.pid), timeout=30)
    poller = _polls(store)
    top = Pane(
        "viewers", roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--job", str(job)), roach_env(store)
    )
    try:
        with Agent("--run-as", LAB_USER, env={"ROACH_STORE": str(store.path)}) as agent:
            top.wait("top shows the job", lambda lines: any(f"{job} " in ln for ln in lines[2:]))
            user_slurm.release(str(job))
            cursor, seen = 0, []

            def agent_saw_the_end() -> bool:
                nonlocal cursor
                got = agent.call("watch_events", cursor=cursor, cluster="lab", jobs=[str(job)])
                seen.extend(got["events"])
                cursor = got["cursor"]
                return any(e["event"] == "finished" and e["job_id"] == str(job) for e in seen)

            wait_until("the agent sees the job end", agent_saw_the_end, timeout=120, every=1.0)
        said = [_said(first), _said(second)]
        top.wait("top shows the end", lambda lines: any(f"{job} " in ln and "COMPLETED" in ln for ln in lines))
        top.keys("q")
        top.wait("top quits", lambda lines: any(ln.startswith("exit status 0") for ln in lines))
    finally:
        top.close()
        for p in (first, second):
            p.kill()
    logged = [(x.data["kind"], x.seq) for x in store.watch_log("lab")]
    started = [seq for kind, seq in logged if kind == "started"]
    finished = [seq for kind, seq in logged if kind == "finished"]
    assert len(started) == len(finished) == 1  # each edge taken once, whatever the number of viewers
    expected = [("started", started[0]), ("finished", finished[0])]
    assert _edges(said[0], job) == _edges(said[1], job) == _edges(seen, job) == expected
    assert poller in (first.pid, second.pid)
    assert [e["event"] for e in said[0]][-1] == [e["event"] for e in said[1]][-1] == "queue_empty"
    assert sum(1 for kind, _ in logged if kind == "heartbeat") == 1  # the one poller's start, not one per viewer


@pytest.mark.lab
def test_a_killed_poller_is_replaced_by_a_reader_and_nothing_is_lost(lab, store, user_slurm, jobs):
    job = user_slurm.sbatch(HELD, "#!/bin/bash\nsleep 2\n")
    jobs.append(job)
    first = _watch(store, job)
    try:
        wait_until("the first watch polls", lambda: _polls(store) == first.pid, timeout=30)
        second = _watch(store, job)
        wait_until("the second watch reads", lambda: second.poll() is None and store.watch_round("lab")[0], timeout=30)
        time.sleep(1.5)  # the reader has started and looked at the log
        os.kill(first.pid, signal.SIGKILL)
        wait_until("the reader takes the rounds", lambda: _polls(store) == second.pid, timeout=10, every=0.1)
        user_slurm.release(str(job))
        events = _said(second)
    finally:
        first.kill()
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs == list(range(seqs[0], seqs[-1] + 1))  # none lost, none twice
    assert [e for e, _ in _edges(events, job)] == ["started", "finished"] and events[-1]["event"] == "queue_empty"


@pytest.mark.lab
def test_a_wait_beside_a_watch_reads_the_end_it_records_and_asks_slurm_once(lab, repo, store, roots):
    job = submit_to_lab(repo, store, roots, "pkg.train:train", {"steps": 20, "step_s": 0.5}, cluster=CLUSTER)
    watch = _watch(store)
    try:
        wait_until("the watch polls", lambda: _polls(store) == watch.pid, timeout=30)
        transport = MockTransport(inner=CLUSTER.transport())
        job._client = SlurmClient(transport)
        rec = job.wait(timeout=slack(120))
        events = _said(watch)
    finally:
        watch.kill()
    assert rec.state is JobState.COMPLETED and job.record.status == "completed"
    assert [c.argv[0] for c in transport.calls] == ["sacct"]  # the end's record, once: no squeue a round
    assert [e["event"] for e in events if e["job_id"] == str(job.job_id)][-1] == "finished"


@pytest.mark.lab
def test_two_rebalancing_watches_make_one_promotion(lab, repo, store, roots, user_slurm, jobs):
    job = pending_below_room(repo, store, roots, user_slurm, jobs, "wants-high")
    argv = roach_argv("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json", "--rebalance") + [
        "--repo-root",
        str(repo.work),
    ]
    watches = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=roach_env(store)) for _ in range(2)]
    try:
        promoted = lambda: [x for x in store.watch_log("lab") if x.data["kind"] == "promoted"]  # noqa: E731
        wait_until("a promotion", promoted, timeout=90)
        time.sleep(3)  # three more rounds: a second promotion of the run would be made by now
        runs = [r for r in store.recent(100) if r.run_id == job.run_id]
        jobs += [r.job_id for r in runs]
        assert len(promoted()) == 1 and len(runs) == 2, (promoted(), runs)  # the run moved once, by one viewer
    finally:
        for w in watches:
            w.kill()
        out = [w.communicate()[0] for w in watches]
        job.cancel()
    seen = [[json.loads(line) for line in text.splitlines() if line.strip()] for text in out]
    said = [[(e["event"], e["seq"]) for e in one if e["event"] == "promoted"] for one in seen]
    assert said[0] == said[1] and len(said[0]) == 1  # both viewers show it, with one number
