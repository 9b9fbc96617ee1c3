"""roach runs over SSH: submit() to the lab through a real sshd on 127.0.0.1, as the lab's user, with nothing
changed in submit: the bundle, the shipped roach and the clone all go through the transport."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.cli.inspect import logs
from roach.cli.views import follow_log
from roach.errors import TransportError
from roach.lab.config import LAB_USER
from roach.launch.job import Job
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.scheduler.ssh import SSHTransport
from roach.scheduler.transport import LocalTransport
from roach.slurm import submit
from tests.conftest import slack, wait_until
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)

PKG = {
    "pkg/__init__.py": "",
    "pkg/jobs.py": """
import getpass

def hello(run, who="world"):
    run.log("hello %s from %s as %s", who, run.node, getpass.getuser())
    return {"who": who}


def nap(seconds):
    import time
    time.sleep(seconds)
""",
}


@pytest.mark.lab
def test_a_function_submitted_over_ssh_runs_and_its_log_reads_back(
    git_repo, shared_tmp: Path, tmp_path, cluster, sshd: SSHServer, monkeypatch, capsys
):
    git_repo.commit(PKG, "the test package")
    store = Store(tmp_path / "store.sqlite")
    roots = {"log_root": str(shared_tmp / "logs"), "clone_root": str(shared_tmp / "clones")}
    before = sshd.accepted_connections()
    job = submit(
        "pkg.jobs:hello",
        {"who": "ssh"},
        resources="CPU",
        cluster=cluster,
        repo_root=git_repo.work,
        store=store,
        description="over ssh",
        **roots,
    )
    try:
        rec = job.wait(timeout=slack(120))
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

    # `roach logs RUN` reads through the alias the job was submitted through (the store's via), given the
    # config file that defines it
    assert store.find(job.run_id).via == sshd.alias
    assert Job.from_ref(job.run_id, store=store).cluster.ssh_alias == sshd.alias  # rebuilt: the same way in
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    res = CliRunner().invoke(logs, [job.run_id, "--ssh-config", str(sshd.config_path)])
    assert res.exit_code == 0, res.output
    assert "hello ssh from" in res.output
    assert os.path.exists(job.paths.job_json)


@pytest.mark.lab
def test_a_commit_reaches_a_cluster_without_the_remote_as_an_incremental_git_bundle(
    git_repo, shared_tmp: Path, cluster, sshd: SSHServer
):
    from roach.launch.gitpush import push_commit

    data = {"data/table.txt": os.urandom(100_000).hex()}  # so that what a second commit adds is small beside it
    first = git_repo.commit({**PKG, **data}, "the package", push=False)  # not pushed: the cluster could not fetch it
    mirrors = str(shared_tmp / "mirrors")
    t = sshd.transport(env={})
    before = sshd.accepted_connections()
    p1 = push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t)
    assert (p1.commit, p1.basis) == (first, ()) and p1.sent_bytes > 0
    assert p1.url == f"{mirrors}/work.git" and Path(p1.url).owner() == LAB_USER

    def clone_at(commit: str, dest: str) -> str:
        res = t.run(
            [
                "sh",
                "-c",
                'git clone -q --no-checkout "$1" "$2" && git -C "$2" -c advice.detachedHead=false '
                'checkout -q --detach "$3" && git -C "$2" rev-parse HEAD && cat "$2/pkg/jobs.py"',
                "sh",
                p1.url,
                dest,
                commit,
            ]
        )
        assert res.ok, res.stderr
        return res.stdout

    assert clone_at(first, str(shared_tmp / "c1")).startswith(first + "\n")  # the clone protocol's own steps

    second = git_repo.commit({"pkg/jobs.py": PKG["pkg/jobs.py"] + "\nSECOND = 2\n"}, "a small change", push=False)
    p2 = push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t)
    assert p2.basis == (first,) and 0 < p2.sent_bytes < p1.sent_bytes / 10  # only what the mirror lacked
    assert "SECOND = 2" in clone_at(second, str(shared_tmp / "c2"))
    assert push_commit(cluster, git_repo.work, mirror_root=mirrors, transport=t).sent_bytes == 0  # had it
    assert sshd.accepted_connections() <= before + 1


# -- the CLI reads a job back the way it was submitted ------------------------------------------------------
def roach(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def no_local_slurm(monkeypatch):
    """Call it to make every command roach runs on this machine (the lab's own way in) fail, and be noted:
    what still works went through ssh."""
    used: list[list[str]] = []

    def refuse(self, argv, **kw):
        used.append(list(argv))
        raise TransportError(f"the test forbids local commands here: {argv[0]}", argv)

    def off() -> list[list[str]]:
        monkeypatch.setattr(LocalTransport, "run", refuse)
        return used

    return off


@pytest.fixture
def alias_cli(lab, sshd: SSHServer, git_repo, shared_tmp: Path, tmp_path, monkeypatch):
    """`roach` with a store of its own and a pushed package; the shared connection the CLI uses (in the
    default control directory) is closed before and after."""
    git_repo.commit(PKG, "the test package")
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    run = LocalTransport.run  # the real one, for the clean-up: a test may forbid local commands
    master = SSHTransport(sshd.alias, config_file=sshd.config_path)
    master.close()
    ns = type("AliasCLI", (), {})()
    ns.master, ns.jobs, ns.cfg, ns.work = master, [], str(sshd.config_path), str(git_repo.work)
    ns.common = [
        "--cluster",
        "lab",
        "--resources",
        "CPU",
        "--repo-root",
        str(git_repo.work),
        "--log-root",
        str(shared_tmp / "logs"),
        "--clone-root",
        str(shared_tmp / "clones"),
        "--json",
    ]
    yield ns
    if ns.jobs:
        run(LocalTransport(env=lab.env(), user=LAB_USER), ["scancel", *map(str, ns.jobs)])
    master.close()


@pytest.mark.lab
def test_a_job_submitted_through_an_alias_is_read_back_and_listed_through_it(
    alias_cli, sshd: SSHServer, no_local_slurm
):
    cfg = alias_cli.cfg
    r = roach(
        "submit",
        "pkg.jobs:hello",
        *alias_cli.common,
        "--arg",
        "who=alias",
        "--ssh-alias",
        sshd.alias,
        "--ssh-config",
        cfg,
        "--wait",
    )
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    alias_cli.jobs.append(job["job_id"])
    assert (job["state"], job["via"]) == ("COMPLETED", sshd.alias)
    with Store() as store:
        assert store.get("lab", job["job_id"]).via == sshd.alias

    used = no_local_slurm()  # from here on, the lab's own way in (this machine) is closed
    before = sshd.accepted_connections()
    r = roach("logs", job["run_id"], "--ssh-config", cfg)
    assert r.exit_code == 0, r.output
    assert f"hello alias from n1 as {LAB_USER}" in r.stdout or f"hello alias from n2 as {LAB_USER}" in r.stdout
    r = roach("logs", str(job["job_id"]), "-n", "1", "--ssh-config", cfg)
    assert r.exit_code == 0 and r.stdout.count("\n") == 1, r.output
    r = roach("status", str(job["job_id"]), "--json", "--ssh-config", cfg)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["state"], got["exit_code"], got["via"]) == ("COMPLETED", "0:0", sshd.alias)
    r = roach("status", job["run_id"], "--ssh-config", cfg)
    assert f"on lab (via ssh {sshd.alias}): COMPLETED" in r.stdout
    r = roach("ls", "--json", "--ssh-config", cfg)
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert (row["job_id"], row["state"], row["via"]) == (job["job_id"], "COMPLETED", sshd.alias)
    r = roach("cancel", job["run_id"], "--ssh-config", cfg, "--json")  # already ended: nothing to cancel
    assert r.exit_code == 0 and json.loads(r.stdout)["cancelled"] is False
    assert used == []  # nothing ran on this machine's Slurm
    assert alias_cli.master.master_running()  # every read rode on the one shared connection
    assert sshd.accepted_connections() == before

    # The alias and the file that defines it are both recorded: no --ssh-config needed later; a way that
    # does not work says which way the job was submitted.
    with Store() as store:
        assert store.get("lab", job["job_id"]).via_config == cfg
    r = roach("logs", job["run_id"])
    assert r.exit_code == 0 and "hello alias" in r.stdout, r.output
    r = roach("logs", job["run_id"], "--ssh-config", str(Path(cfg).parent / "missing_config"))
    assert r.exit_code == 4, r.output
    assert f"submitted through ssh alias {sshd.alias!r} (from {cfg})" in r.stderr and "--ssh-config FILE" in r.stderr

    # `roach resume` submits the run again the way it went (the completed run does not run again)
    r = roach("resume", job["run_id"], "--repo-root", alias_cli.work, "--ssh-config", cfg, "--wait", "--json")
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    alias_cli.jobs.append(again["job_id"])
    assert (again["run_id"], again["state"], again["via"]) == (job["run_id"], "COMPLETED", sshd.alias)
    assert again["job_id"] != job["job_id"] and used == []


@pytest.mark.lab
def test_cancel_and_ls_go_per_cluster_and_alias_and_an_explicit_alias_overrides(
    alias_cli, sshd: SSHServer, user_slurm, monkeypatch
):
    cfg = alias_cli.cfg
    submitted = {}
    for how, extra in (("alias", ["--ssh-alias", sshd.alias, "--ssh-config", cfg]), ("local", ["--run-as", LAB_USER])):
        r = roach("submit", "pkg.jobs:nap", *alias_cli.common, "--arg", "seconds=120", "--name", f"nap-{how}", *extra)
        assert r.exit_code == 0, r.output
        submitted[how] = json.loads(r.stdout)
        alias_cli.jobs.append(submitted[how]["job_id"])
    assert (submitted["alias"]["via"], submitted["local"]["via"]) == (sshd.alias, None)
    ids = [j["job_id"] for j in submitted.values()]
    wait_until(
        "both naps to run",
        lambda: len([q for q in user_slurm.squeue(job_ids=ids) if q.state.is_running]) == 2,
        timeout=120,
    )

    calls: list[tuple[str, str]] = []
    real_local, real_ssh = LocalTransport.run, SSHTransport.run

    def local(self, argv, **kw):
        calls.append(("local", argv[0]))
        return real_local(self, argv, **kw)

    def ssh(self, argv, **kw):
        calls.append(("ssh", argv[0]))
        return real_ssh(self, argv, **kw)

    monkeypatch.setattr(LocalTransport, "run", local)
    monkeypatch.setattr(SSHTransport, "run", ssh)
    r = roach("ls", "--json", "--run-as", LAB_USER, "--ssh-config", cfg)
    assert r.exit_code == 0, r.output
    rows = {row["job_id"]: row for row in json.loads(r.stdout)}
    assert {rows[i]["state"] for i in ids} == {"RUNNING"}
    assert sorted(calls) == [("local", "squeue"), ("ssh", "squeue")], calls  # one squeue per (cluster, alias)

    # An explicit --ssh-alias reaches a job another way than it was submitted: the local job, through ssh.
    calls.clear()
    r = roach("status", str(submitted["local"]["job_id"]), "--ssh-alias", sshd.alias, "--ssh-config", cfg, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "RUNNING", r.output
    assert calls == [("ssh", "squeue")]

    calls.clear()
    r = roach("cancel", submitted["alias"]["run_id"], "--ssh-config", cfg, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cancelled"] is True
    assert [c for c in calls if c[0] == "local"] == [] and ("ssh", "scancel") in calls
    r = roach("cancel", submitted["local"]["run_id"], "--run-as", LAB_USER, "--json")
    assert json.loads(r.stdout)["cancelled"] is True and ("local", "scancel") in calls
    wait_until(
        "both naps to leave the queue", lambda: not [q for q in user_slurm.squeue(job_ids=ids) if q.state.is_active]
    )
    # accounting records the cancellation a moment after the queue lets the job go
    wait_until(
        "status to say CANCELLED",
        lambda: (
            json.loads(roach("status", submitted["alias"]["run_id"], "--ssh-config", cfg, "--json").stdout)["state"]
            == "CANCELLED"
        ),
    )

    r = roach("ls", "--ssh-alias", sshd.alias)
    assert r.exit_code == 2 and "--cluster" in r.stderr
    r = roach("status", submitted["local"]["run_id"], "--ssh-config", cfg)
    assert r.exit_code == 2 and "--ssh-config needs an ssh alias" in r.stderr


@pytest.mark.lab
def test_roach_watch_reaches_a_sweep_through_the_alias_it_was_submitted_through(
    alias_cli, sshd: SSHServer, no_local_slurm, tmp_path
):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"who": f"w{i}"} for i in range(3)]))
    r = roach(
        "sweep",
        "pkg.jobs:hello",
        "--grid",
        str(grid),
        *alias_cli.common,
        "--ssh-alias",
        sshd.alias,
        "--ssh-config",
        alias_cli.cfg,
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    alias_cli.jobs += out["array_ids"]
    used = no_local_slurm()  # the watch must go through the recorded alias, not this machine's Slurm
    r = roach("watch", "--cluster", "lab", "--json", "--interval", "1", "--ssh-config", alias_cli.cfg)
    assert r.exit_code == 0, r.output
    events = [json.loads(line) for line in r.stdout.splitlines()]
    finished = sorted(e["run_id"] for e in events if e["event"] == "finished")
    assert finished == [f"{out['sweep_id']}-{i}" for i in range(3)] and events[-1]["event"] == "queue_empty"
    assert used == []


@pytest.mark.lab
def test_an_attempt_inside_a_holder_reached_over_ssh_runs_and_its_driver_outlives_the_call(
    alias_cli, sshd: SSHServer, no_local_slurm
):
    common = ["--cluster", "lab", "--ssh-alias", sshd.alias, "--ssh-config", alias_cli.cfg]
    r = roach(
        "hold",
        *common,
        "--resources",
        "GPU1",
        "--time",
        "5",
        "--log-root",
        alias_cli.common[alias_cli.common.index("--log-root") + 1],
        "--wait",
        "60",
        "--json",
    )
    assert r.exit_code == 0, r.output
    holder = json.loads(r.stdout)["job_id"]
    alias_cli.jobs.append(holder)
    used = no_local_slurm()  # the attempt's node step, ranks' step and driver all go through ssh
    r = roach(
        "submit",
        "pkg.jobs:hello",
        *alias_cli.common[:-1],
        "--resources",
        "GPU1",
        "--arg",
        "who=inside",
        "--inside",
        str(holder),
        "--ssh-alias",
        sshd.alias,
        "--ssh-config",
        alias_cli.cfg,
        "--json",
    )
    assert r.exit_code == 0, r.output
    run_id = json.loads(r.stdout)["run_id"]
    # the submitting call has returned: the driver runs on detached on the login host
    wait_until(
        "the attempt to complete",
        lambda: json.loads(roach("status", run_id, "--json").stdout)["state"] == "COMPLETED",
        timeout=90,
    )
    log = roach("logs", run_id).stdout
    got = json.loads(roach("status", run_id, "--json").stdout)
    assert "hello inside from n" in log and f"_{holder}.out" in got["log"]
    assert (got["holder"], got["attempt"], got["job_id"]) == (holder, 1, holder)  # roach.job/2: the holder's id
    row = next(v for v in json.loads(roach("ls", "--json").stdout) if v["run_id"] == run_id)
    assert (row["holder"], row["attempt"], row["job_id"]) == (holder, 1, holder)
    assert f"job {holder}/1 (run {run_id})" in roach("status", run_id).stdout  # the text names it by its holder
    assert re.search(rf"{run_id}\s+{holder}/1\s", roach("ls").stdout)
    assert used == []
    r = roach("release", str(holder), "--json")  # through the alias the holder was queued through
    assert r.exit_code == 0, r.output
