"""MASTER_PORT is a port free on the first node when the attempt starts, not only a function of the job id."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import GPU2, LAB, NODES2_GPU2
from tests.conftest import slack
from tests.support.labs import ports_held
from tests.support.packages import PKG  # pkg.dist:allreduce, a 4-rank gloo all_reduce

CLUSTER = LAB.with_(run_as=LAB_USER)
AHEAD = 40  # job ids the next submit may get: other ids can be taken between the probe and the submit


def _next_job_id(lab) -> int:
    """The id Slurm gives next, from a held job submitted and cancelled at once."""
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **lab.env()}
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--wrap", "true"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    subprocess.run(["scancel", out], env=env, check=True)
    return int(out.split(";")[0]) + 1


def _allreduce(git_repo, shared_tmp, tmp_path, resources, name: str):
    """Submit pkg.dist:allreduce; its job, submitted (:func:`_result` waits for its end)."""
    return submit(
        "pkg.dist:allreduce",
        cluster=CLUSTER,
        repo_root=git_repo.work,
        store=Store(tmp_path / "s.db"),
        resources=resources,
        name=name,
        log_root=str(shared_tmp / "logs"),
        clone_root=str(shared_tmp / "clones"),
    )


def _result(job, shared_tmp) -> float:
    """The job's end, which must be COMPLETED, and rank 0's result: the all_reduce of 1 + 2 (+ 3 + 4)."""
    rec = job.wait(timeout=slack(180))
    assert rec.state is JobState.COMPLETED, job.log()
    return json.loads((Path(shared_tmp / "runs" / job.run_id) / "result.json").read_text())


@pytest.mark.lab
@pytest.mark.parametrize(
    ("resources", "total"),
    [(NODES2_GPU2, 10.0), (GPU2, 3.0)],  # the batch script picks it (two nodes), rank 0 does (one node)
    ids=["two-nodes", "one-node"],
)
def test_a_taken_port_is_not_the_rendezvous(lab, git_repo, shared_tmp, tmp_path, resources, total):
    git_repo.commit(PKG, "all_reduce")
    first = _next_job_id(lab)
    with ports_held(lab, [20000 + job_id % 20000 for job_id in range(first, first + AHEAD)]):
        job = _allreduce(git_repo, shared_tmp, tmp_path, resources, "port")
        assert first <= job.job_id < first + AHEAD, "the lab gave an id outside the ports held"
        got = _result(job, shared_tmp)
    assert got == total
    said = re.search(r"roach: rendezvous at (\S+):(\d+) ", job.log())
    assert said, job.log()
    assert int(said.group(2)) != 20000 + job.job_id % 20000


def _node_queries(lab) -> int:
    """slurmctld's count of node queries (``scontrol show node``, ``sinfo``), from ``sdiag``."""
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **lab.env()}
    out = subprocess.run(["sdiag"], capture_output=True, text=True, env=env, check=True).stdout
    found = re.search(r"^\s*REQUEST_NODE_INFO\s+\(\s*\d+\)\s+count:(\d+)", out, re.MULTILINE)
    return int(found[1]) if found else 0


@pytest.mark.slow
@pytest.mark.lab
def test_a_one_node_job_meets_on_loopback_and_asks_slurmctld_nothing_for_it(lab, git_repo, shared_tmp, tmp_path):
    """Every rank of a one-node job runs where the batch script runs: the ranks meet on 127.0.0.1 (a real gloo
    all_reduce of two ranks), and the attempt sends slurmctld no node query on its way to the ranks (before, each
    start asked `scontrol show node` for the first node's NodeAddr, some 25 ms before the ranks could start)."""
    git_repo.commit(PKG, "all_reduce")
    CLUSTER.client().nodes()  # submit's guardrail reads the nodes through the site cache: fresh now, not counted
    before = _node_queries(lab)
    job = _allreduce(git_repo, shared_tmp, tmp_path, GPU2, "loopback")
    assert _result(job, shared_tmp) == 3.0
    assert re.search(r"roach: rendezvous at 127\.0\.0\.1:\d+ \(a port free on n[12] when", job.log()), job.log()
    assert _node_queries(lab) == before


@pytest.mark.lab
def test_a_job_submitted_from_a_one_node_job_keeps_its_own_rendezvous(lab, git_repo, shared_tmp, tmp_path, monkeypatch):
    """sbatch passes the submitter's environment on: a two-node job submitted from inside a one-node roach job (a
    sweep driver, an agent) sees ROACH_PORT_BY_RANK0=1. Its batch script picks the port, as for any two-node job;
    were rank 0 to pick it, the other node's ranks would wait for a file they may not see."""
    git_repo.commit(PKG, "all_reduce")
    monkeypatch.setenv("ROACH_PORT_BY_RANK0", "1")
    job = _allreduce(git_repo, shared_tmp, tmp_path, NODES2_GPU2, "nested")
    assert _result(job, shared_tmp) == 10.0
    said = re.findall(r"^(\d+: )?roach: rendezvous at ", job.log(), re.MULTILINE)
    assert said == [""], job.log()  # the batch script's line, none of rank 0's
