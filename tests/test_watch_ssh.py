"""`roach watch` over SSH: the watcher's rounds through a real sshd on 127.0.0.1 as the lab's user, on one
multiplexed connection. The remote commands are counted by sshd itself (one session per command)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from roach.records.bundle import JobJson
from roach.slurm.clusters.lab import GPU1
from roach.watch.watcher import Watcher
from tests.conftest import slack
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.submitting import submit_to_lab
from tests.support.watch import TRAIN, kinds

PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits


def _sessions(server: SSHServer) -> int:
    """Remote commands sshd has run so far: each is a session of its own on a connection."""
    return server.log.read_text(errors="replace").count("Starting session: command")


def _submitted_over_ssh(repo, store, roots, cluster, steps: int):
    """A training run of ``steps`` steps submitted to the lab through the test sshd (``cluster``)."""
    args = {"steps": steps, "step_s": 0.3}
    return submit_to_lab(
        repo, store, roots, "pkg.train:train", args, resources=GPU1.replace(time="00:05:00"), cluster=cluster
    )


@pytest.mark.lab
def test_watch_rounds_over_ssh_are_a_fixed_few_remote_commands_on_one_connection(
    repo, store, roots, cluster, sshd: SSHServer
):
    job = _submitted_over_ssh(repo, store, roots, cluster, steps=15)
    w = Watcher(cluster, cluster.client(), store, interval_s=1.0, heartbeat_s=1e9)
    connections = sshd.accepted_connections()
    rounds: list[tuple[int, list[str]]] = []  # remote commands, and what the round said
    deadline = time.monotonic() + slack(120)
    try:
        while not w.finished:
            assert time.monotonic() < deadline, rounds
            before = _sessions(sshd)
            said = w.round()
            rounds.append((_sessions(sshd) - before, kinds(said)))
            time.sleep(1.0)
    finally:
        if not w.finished:
            job.cancel()
    said = [k for _, ks in rounds for k in ks]
    assert said.count("started") == 1 and said.count("finished") == 1 and said[-1] == "queue_empty", rounds
    assert sshd.accepted_connections() <= connections + 1  # every round on the one shared connection
    # a round is one squeue, and one look at the running run's log; at most once a minute while a job runs, one
    # sinfo for the nodes not responding; the round that sees it end adds one sacct and one command writing its
    # job.json
    assert all(n <= 3 for n, ks in rounds if "finished" not in ks), rounds
    assert sum(n == 3 for n, ks in rounds if "finished" not in ks) <= 1 + len(rounds) // 60, rounds
    assert [n for n, ks in rounds if "finished" in ks] == [4], rounds
    assert any(n == 2 for n, ks in rounds if "finished" not in ks), rounds  # the look ran while it ran
    rec = store.get("lab", job.job_id)
    assert rec.status == "completed"
    on_cluster = JobJson.from_json(Path(job.paths.job_json).read_text())
    assert (on_cluster.status, on_cluster.exit_code, on_cluster.recorded_at_utc) == (
        "completed",
        "0:0",
        rec.recorded_at,
    )
    assert "outage" not in said


@pytest.mark.lab
def test_killing_sshd_mid_watch_is_one_outage_a_backoff_then_recovery_and_no_job_marked_ended(
    repo, store, roots, cluster, lab, sshd: SSHServer
):
    from roach.scheduler.client import SlurmClient

    job = _submitted_over_ssh(repo, store, roots, cluster, steps=40)
    transport = sshd.transport(env=lab.env(), backoff_s=4.0, min_interval_s=0.2)
    w = Watcher(cluster, SlurmClient(transport), store, interval_s=1.0, heartbeat_s=1e9)
    said: list[str] = []
    try:
        deadline = time.monotonic() + slack(60)
        while "started" not in said:
            assert time.monotonic() < deadline, said
            said += kinds(w.round())
            time.sleep(1.0)
        sshd.stop()
        transport.close()  # the master went with the server's sessions
        down_at = time.monotonic()
        during = []
        while time.monotonic() - down_at < 3.0:  # within the backoff: no new connection is even tried
            during += kinds(w.round())
            time.sleep(0.3)
        assert during.count("outage") == 1 and "finished" not in during, during
        sshd.start()
        tried = sshd.accepted_connections()
        during = kinds(w.round())
        assert during == [] and sshd.accepted_connections() == tried, during  # still backing off, silently
        time.sleep(4.5)
        deadline = time.monotonic() + slack(90)
        after: list[str] = []
        while not w.finished:
            assert time.monotonic() < deadline, after
            after += kinds(w.round())
            time.sleep(1.0)
        assert after[0] == "recovered" and after.count("finished") == 1 and after[-1] == "queue_empty", after
        assert "outage" not in after
    finally:
        if not w.finished:
            job.cancel()
        if not sshd.running:
            sshd.start()
    assert store.get("lab", job.job_id).status == "completed"
