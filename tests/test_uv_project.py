"""A uv project (its ``uv.lock``) runs on the lab as it is: the real uv from PyPI builds its environment once per node
and commit in the read-only clone, every later job reuses it, and a lock that cannot be installed ends the job as
env_failed (exit 7) with uv's own message, leaving nothing half-made.

The lab here has node-local homes (ILC's layout: ``~`` is each node's, ``~/scratch`` is shared), so a clone under
``~`` is made on each node and one under ``~/scratch`` is shared by both. Its jobs reach PyPI as this machine does.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.lab import lab as lablib
from roach.lab.config import LAB_USER, NODES, LabConfig, LabLayout
from roach.lab.python import TOOLS_DIR
from roach.launch.job import Job
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import submit, sweep
from roach.slurm.clusters.lab import GPU1, LAB, NODES2_GPU2
from tests.conftest import slack
from tests.support.gitrepo import GitRepo
from tests.support.labs import MAIN_JOB_VENV, SHARED_TMP, private_port_base
from tests.support.schemas import validate_output

PORT_BASE = private_port_base(11)

PROBE = """
import json, os, socket, sys

def probe(run, tag=None):
    import six  # only the project's uv.lock names it: the lab's own venv has no six
    info = dict(rank=run.rank, hostname=socket.gethostname(), python=sys.executable, six=six.__version__,
                six_file=six.__file__,
                compiled=[os.path.exists(m.__cached__) for m in (six, sys.modules[__name__])])
    (run.run_dir / f"rank{run.rank}.json").write_text(json.dumps(info))
    run.log("six %s from %s", six.__version__, six.__file__)
    return six.__version__
"""


def pyproject(six: str) -> str:
    return f"""[project]
name = "uvproj"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["six=={six}"]
"""


@pytest.fixture(scope="module")
def homes_lab(lab):  # through the lab fixture: the lab marker holds for private labs too
    state = Path(tempfile.mkdtemp(prefix="roach-uv-lab-", dir=SHARED_TMP))
    os.chmod(state, 0o755)
    if MAIN_JOB_VENV.exists():
        (state / "pyenv").symlink_to(MAIN_JOB_VENV)
    try:
        yield lablib.up(
            str(state), log=lambda *_: None, port_base=PORT_BASE, layout=LabLayout.HOSTS.value, node_homes=True
        )
    finally:
        lablib.down(str(state), log=lambda *_: None)
        subprocess.run(["rm", "-rf", str(state)])


@pytest.fixture(scope="module")
def project(homes_lab: LabConfig):
    repo = GitRepo(Path(tempfile.mkdtemp(prefix="roach-uv-project-", dir=SHARED_TMP)))
    os.chmod(repo.base, 0o777)
    yield repo
    subprocess.run(["rm", "-rf", str(repo.base)])


@pytest.fixture
def expt(homes_lab: LabConfig):
    """A folder of this test's in the shared ~/scratch, removed afterwards."""
    home = Path(pwd.getpwnam(LAB_USER).pw_dir)
    d = home / "scratch" / f"roach-uv-{os.getpid()}-{os.urandom(3).hex()}"
    yield d
    subprocess.run(["rm", "-rf", str(d)])


def locked(repo: GitRepo, lab: LabConfig, six: str, spoil: bool = False) -> str:
    """Commit and push the project with six==``six`` and the uv.lock `uv lock` makes of it (with the wheel's hash
    spoiled where ``spoil``: a lock no install can satisfy); returns the commit."""
    stamp = os.urandom(4).hex()  # each call a commit of its own, a clone of its own
    repo.write({"pyproject.toml": pyproject(six), "uvproj/__init__.py": "", "uvproj/probe.py": PROBE, "stamp": stamp})
    (repo.work / "uv.lock").unlink(missing_ok=True)  # `uv lock` keeps what a lock says, a spoiled hash too
    uv = str(lab.state / TOOLS_DIR / "uv")
    r = subprocess.run([uv, "lock", "--quiet"], cwd=repo.work, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lock = (repo.work / "uv.lock").read_text()
    assert f'version = "{six}"' in lock
    if spoil:
        start = lock.index('hash = "sha256:', lock.index("-none-any.whl")) + len('hash = "sha256:')
        lock = lock[:start] + "0" * 64 + lock[start + 64 :]
        (repo.work / "uv.lock").write_text(lock)
    return repo.commit({}, f"six {six}{' (spoiled)' if spoil else ''}")


def run(repo: GitRepo, store: Store, expt: Path, clone_root: str, name: str, commit: str | None = None) -> Job:
    return submit(
        "uvproj.probe:probe",
        cluster=LAB.with_(run_as=LAB_USER),
        repo_root=repo.work,
        store=store,
        resources=NODES2_GPU2,
        name=name,
        log_root=f"~/scratch/{expt.name}/logs",
        clone_root=clone_root,
        commit=commit,
    )


def ranks(expt: Path, job: Job) -> list[dict]:
    return [json.loads((expt / "runs" / job.run_id / f"rank{r}.json").read_text()) for r in range(4)]


def job_json(job: Job) -> dict:
    return json.loads(Path(job.record.bundle_dir, "job.json").read_text())


@pytest.mark.lab
def test_a_uv_project_runs_on_two_nodes_in_its_own_environment_built_once_per_node(
    homes_lab: LabConfig, project: GitRepo, expt: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    commit = locked(project, homes_lab, "1.17.0")
    store = Store(tmp_path / "s.db")
    first = run(project, store, expt, "~/roach_clones", "uv-1")
    assert first.wait(timeout=slack(180)).state is JobState.COMPLETED, first.log()
    home = pwd.getpwnam(LAB_USER).pw_dir
    venv = f"{home}/roach_clones/work-{commit}/.venv"
    got = ranks(expt, first)
    assert [r["hostname"] for r in got] == ["n1", "n1", "n2", "n2"]
    assert {r["python"] for r in got} == {f"{venv}/bin/python"}  # the clone's environment, each node's own
    assert {r["six"] for r in got} == {"1.17.0"} and all(r["six_file"].startswith(venv) for r in got)
    # the bytecode of six (the environment's) and of the probe (the clone's) was made by the prepare: the ranks, as
    # roachlab in a read-only tree, could not have written it
    assert [r["compiled"] for r in got] == [[True, True]] * 4
    log = first.log()
    for n in NODES:
        assert f"roach: {n}: built the uv environment of {commit} in " in log
        assert f"roach: {n}: compiled {home}/roach_clones/work-{commit}'s Python to bytecode in " in log
        clone = homes_lab.node_home(n) / "roach_clones" / f"work-{commit}"
        assert (clone / ".roach-env-uv").read_text().split()[2] == n
        assert not (clone / ".venv").stat().st_mode & 0o222  # made read-only with the clone
    assert "ModuleNotFoundError" not in log
    chosen = job_json(first)["python_env"]
    assert (chosen["env"], chosen["source"]) == ("uv", "lock")
    assert chosen["why"] == f"commit {commit[:12]} has uv.lock: `uv sync --frozen` in the clone"

    second = run(project, store, expt, "~/roach_clones", "uv-2")
    assert second.wait(timeout=slack(180)).state is JobState.COMPLETED, second.log()
    log = second.log()
    assert "built the uv environment" not in log
    for n in NODES:
        took = (homes_lab.node_home(n) / "roach_clones" / f"work-{commit}" / ".roach-env-uv").read_text().split()[0]
        assert f"roach: {n}: reused the uv environment of {commit} in {home}/roach_clones/work-{commit} " in log
        assert f"(built in {took} s on {n} at " in log and f": {took} s saved)" in log


@pytest.mark.lab
def test_a_clone_on_shared_storage_has_one_environment_for_both_nodes(
    homes_lab: LabConfig, project: GitRepo, expt: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    commit = locked(project, homes_lab, "1.17.0")
    job = run(project, Store(tmp_path / "s.db"), expt, f"~/scratch/{expt.name}/clones", "uv-shared")
    assert job.wait(timeout=slack(180)).state is JobState.COMPLETED, job.log()
    log = job.log()
    assert log.count(f"built the uv environment of {commit} in ") == 1  # under the clone's lock, by one node
    assert log.count(f"reused the uv environment of {commit}") == 1  # the other, once the lock was free
    assert {r["six"] for r in ranks(expt, job)} == {"1.17.0"}


@pytest.mark.lab
def test_a_uv_lock_that_changes_between_commits_gives_two_environments_both_working(
    homes_lab: LabConfig, project: GitRepo, expt: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    store = Store(tmp_path / "s.db")
    old = locked(project, homes_lab, "1.17.0")
    new = locked(project, homes_lab, "1.16.0")
    jobs = {c: run(project, store, expt, "~/roach_clones", f"uv-{c[:6]}", commit=c) for c in (new, old)}
    for commit, six in ((new, "1.16.0"), (old, "1.17.0")):
        job = jobs[commit]
        assert job.wait(timeout=slack(180)).state is JobState.COMPLETED, job.log()
        assert {r["six"] for r in ranks(expt, job)} == {six}
        for n in NODES:
            assert (homes_lab.node_home(n) / "roach_clones" / f"work-{commit}" / ".roach-env-uv").exists()


@pytest.mark.lab
def test_a_lock_that_cannot_be_installed_ends_as_env_failed_within_a_minute_leaving_nothing(
    homes_lab: LabConfig, project: GitRepo, expt: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    store_path = tmp_path / "s.db"
    commit = locked(project, homes_lab, "1.17.0", spoil=True)
    job = run(project, Store(store_path), expt, "~/roach_clones", "uv-bad")
    end = job.wait(timeout=slack(60))
    log = job.log()
    assert (end.state, end.exit_code) == (JobState.FAILED, 7), log
    assert "Hash mismatch for `six==1.17.0`" in log  # uv's own message
    assert f"`uv sync --frozen` exited 1 building the uv environment of {commit}" in log
    assert "roach: env_failed: the job's uv environment could not be built; no rank started (exit 7)" in log
    assert "ModuleNotFoundError" not in log and "roach rank" not in log
    record = job_json(job)
    assert record["exit_code"] == "7:0" and record["status"] == "failed"
    assert record["failure"]["kind"] == "env_failed" and "Hash mismatch" in record["failure"]["output"]
    for n in NODES:  # nothing half-made: the clone is whole and read-only, no environment, no mark
        clone = homes_lab.node_home(n) / "roach_clones" / f"work-{commit}"
        if clone.exists():  # a node whose prepare was stopped by the other's failure may not have cloned
            assert (clone / ".roach-clone-complete").exists()
            assert not (clone / ".venv").exists() and not (clone / ".roach-env-uv").exists()
            assert not clone.stat().st_mode & 0o222, log
    monkeypatch.setenv("ROACH_STORE", str(store_path))
    why = CliRunner().invoke(cli, ["why", job.run_id], catch_exceptions=False)
    assert why.exit_code == 0, why.output
    assert "ended before its ranks ran: env_failed, its Python environment could not be built" in why.output
    assert "Hash mismatch" in why.output
    status = CliRunner().invoke(cli, ["status", job.run_id, "--json"], catch_exceptions=False)
    said = rf"roach: env_failed: n\d: `uv sync --frozen` exited 1 building the uv environment of {commit}"
    assert re.match(said, json.loads(status.stdout)["error_line"]), status.output
    again = run(project, Store(store_path), expt, "~/roach_clones", "uv-bad-2")
    end = again.wait(timeout=slack(60))
    assert (end.state, end.exit_code) == (JobState.FAILED, 7), again.log()
    assert "Hash mismatch" in again.log() and "half-made" not in again.log()  # built again, nothing tripped on


@pytest.mark.lab
def test_submit_dry_run_and_plan_say_which_environment_and_why_and_queue_nothing(
    homes_lab: LabConfig, project: GitRepo, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    store = tmp_path / "s.db"
    monkeypatch.setenv("ROACH_STORE", str(store))
    commit = locked(project, homes_lab, "1.17.0")
    common = ["submit", "uvproj.probe:probe", "--cluster", "lab", "--run-as", LAB_USER, "--resources", "CPU"]
    common += ["--repo-root", str(project.work), "--dry-run"]
    text = CliRunner().invoke(cli, common, catch_exceptions=False)
    assert text.exit_code == 0, text.output
    assert f"would run uvproj.probe:probe of work at {commit[:12]} on lab" in text.output
    assert f"  python:    uv (commit {commit[:12]} has uv.lock: `uv sync --frozen` in the clone)" in text.output
    asked = CliRunner().invoke(cli, [*common, "--python-env", "venv", "--json"], catch_exceptions=False)
    assert asked.exit_code == 0, asked.output
    data = json.loads(asked.stdout)
    validate_output("submit --dry-run", data)
    assert data["schema"] == "roach.dry_run/1" and data["queued"] is False and data["commit"] == commit
    assert data["python_env"] == {
        "env": "venv",
        "source": "asked",
        "why": "asked for with python_env=venv (--python-env)",
    }
    if store.exists():
        with Store(store) as s:
            assert s.all_jobs() == []  # nothing recorded
    plan = CliRunner().invoke(
        cli,
        ["plan", "--cluster", "lab", "--run-as", LAB_USER, "--gpus", "1", "--repo-root", str(project.work), "--json"],
        catch_exceptions=False,
    )
    assert plan.exit_code == 0, plan.output
    planned = json.loads(plan.stdout)
    validate_output("plan", planned)
    assert (planned["python_env"]["env"], planned["python_env"]["source"]) == ("uv", "lock")
    queue = subprocess.run(
        ["squeue", "-h", "-u", LAB_USER, "-o", "%j"],
        capture_output=True,
        text=True,
        env={**os.environ, **homes_lab.env()},
    )
    assert "probe" not in queue.stdout


@pytest.mark.lab
def test_a_sweeps_runs_share_the_environment_of_their_commit(
    homes_lab: LabConfig, project: GitRepo, expt: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("ROACH_LAB_DIR", str(homes_lab.state))
    commit = locked(project, homes_lab, "1.17.0")
    runs = sweep(
        "uvproj.probe:probe",
        [{"tag": i} for i in range(3)],
        cluster=LAB.with_(run_as=LAB_USER),
        repo_root=project.work,
        store=Store(tmp_path / "s.db"),
        resources=GPU1,
        log_root=f"~/scratch/{expt.name}/logs",
        clone_root="~/roach_clones",
    )
    assert runs.results(timeout=slack(180)) == ["1.17.0"] * 3
    built = [
        n for n in NODES if (homes_lab.node_home(n) / "roach_clones" / f"work-{commit}" / ".roach-env-uv").exists()
    ]
    assert built  # each node a run landed on built it once, under the clone's lock
