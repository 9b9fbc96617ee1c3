"""roach runs over SSH: submit() to the lab through a real sshd on 127.0.0.1, as the lab's user, with nothing
changed in submit: the bundle, the shipped roach and the clone all go through the transport."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli_jobs import follow_log, logs
from roach.lab.config import LAB_USER
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB
from roach.slurm.states import JobState
from roach.slurm.store import Store
from tests.sshd import SSHServer, sshd, sshd_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.lab

PKG = {
    "pkg/__init__.py": "",
    "pkg/jobs.py": '''
import getpass

def hello(run, who="world"):
    run.log("hello %s from %s as %s", who, run.node, getpass.getuser())
    return {"who": who}
''',
}


@pytest.fixture
def cluster(lab, sshd: SSHServer):
    env = lab.env()
    return LAB.with_(ssh_alias=sshd.alias, ssh_config=str(sshd.config_path), env_factory=lambda: env)


def test_a_function_submitted_over_ssh_runs_and_its_log_reads_back(git_repo, shared_tmp: Path, tmp_path, cluster,
                                                                   sshd: SSHServer, monkeypatch, capsys):
    git_repo.commit(PKG, "the test package")
    store = Store(tmp_path / "store.sqlite")
    roots = {"log_root": str(shared_tmp / "logs"), "clone_root": str(shared_tmp / "clones")}
    before = sshd.accepted_connections()
    job = submit("pkg.jobs:hello", {"who": "ssh"}, resources="CPU", cluster=cluster, repo_root=git_repo.work,
                 store=store, description="over ssh", **roots)
    try:
        rec = job.wait(timeout=120)
    finally:
        if not job.record.is_final:
            job.cancel()
    assert rec.state is JobState.COMPLETED, job.log()
    # everything went over the one shared connection, logged in as the lab user
    assert sshd.accepted_connections() <= before + 1
    assert Path(job.paths.bundle_dir).owner() == LAB_USER and Path(job.paths.log).owner() == LAB_USER
    log = job.log()
    assert f"hello ssh from n1 as {LAB_USER}" in log or f"hello ssh from n2 as {LAB_USER}" in log
    assert job.tail(5).strip() and store.find(job.run_id).status == "completed"

    # `roach logs -f` reads through the job's transport (here: the SSH one) and stops at the end
    assert follow_log(job, None) is JobState.COMPLETED
    assert "hello ssh from" in capsys.readouterr().out

    # `roach logs RUN` (the store records the cluster by name; see the report on --ssh-alias for `logs`)
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    res = CliRunner().invoke(logs, [job.run_id, "--run-as", LAB_USER])
    assert res.exit_code == 0, res.output
    assert "hello ssh from" in res.output
    assert os.path.exists(job.paths.job_json)


def test_a_commit_reaches_a_cluster_without_the_remote_as_an_incremental_git_bundle(git_repo, shared_tmp: Path,
                                                                                     cluster, sshd: SSHServer):
    from roach.slurm.workspace_gitpush import push_commit

    data = {"data/table.txt": os.urandom(100_000).hex()}  # so that what a second commit adds is small beside it
    first = git_repo.commit({**PKG, **data}, "the package", push=False)  # not pushed: the cluster could not fetch it
    mirrors = str(shared_tmp / "mirrors")
    t = sshd.transport(env={})
    before = sshd.accepted_connections()
    p1 = push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t)
    assert (p1.commit, p1.basis) == (first, ()) and p1.sent_bytes > 0
    assert p1.url == f"{mirrors}/work.git" and Path(p1.url).owner() == LAB_USER

    def clone_at(commit: str, dest: str) -> str:
        res = t.run(["sh", "-c", 'git clone -q --no-checkout "$1" "$2" && git -C "$2" -c advice.detachedHead=false '
                     'checkout -q --detach "$3" && git -C "$2" rev-parse HEAD && cat "$2/pkg/jobs.py"',
                     "sh", p1.url, dest, commit])
        assert res.ok, res.stderr
        return res.stdout

    assert clone_at(first, str(shared_tmp / "c1")).startswith(first + "\n")  # the clone protocol's own steps

    second = git_repo.commit({"pkg/jobs.py": PKG["pkg/jobs.py"] + "\nSECOND = 2\n"}, "a small change", push=False)
    p2 = push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t)
    assert p2.basis == (first,) and 0 < p2.sent_bytes < p1.sent_bytes / 10  # only what the mirror lacked
    assert "SECOND = 2" in clone_at(second, str(shared_tmp / "c2"))
    assert push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t).sent_bytes == 0  # had it
    assert sshd.accepted_connections() <= before + 1
