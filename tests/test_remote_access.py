"""The user the jobs run as must be able to read the repository's remote: `roach submit` refuses, and `roach doctor`
fails, before any job clones from a remote that user's git refuses (here: one root owns, "dubious ownership")."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner, Result

from roach.cli.app import cli
from roach.lab.config import LAB_USER
from roach.records.error_line import git_error_line
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from tests.conftest import wait_until
from tests.support.gitrepo import GitRepo
from tests.support.submitting import submit_to_lab

PKG = {"pkg/__init__.py": "", "pkg/funcs.py": "def f():\n    return 1\n"}  # what the repo fixture commits


def _roach(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _git_as_user(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", LAB_USER, "--", "git", *argv], capture_output=True, text=True, cwd="/")


@pytest.fixture
def root_owned(repo: GitRepo) -> GitRepo:
    """The repo fixture with its remote given back to root: Debian 12's git (2.39) refuses it to the lab user
    ("dubious ownership"); a git that accepts it skips the test."""
    subprocess.run(["chown", "-R", "root", str(repo.remote)], check=True)
    if _git_as_user("ls-remote", "--", str(repo.remote), "HEAD").returncode == 0:
        pytest.skip("this git lets a user read a local repository another user owns")
    return repo


def close_remote(repo: GitRepo) -> GitRepo:
    """``repo`` with its remote root's and closed to others: every git refuses it to the lab user."""
    subprocess.run(["chown", "-R", "root", str(repo.remote)], check=True)
    subprocess.run(["chmod", "-R", "go-rwx", str(repo.remote)], check=True)
    return repo


@pytest.fixture(name="unreadable")
def unreadable_repo(repo: GitRepo) -> GitRepo:
    """The repo fixture's remote closed to the lab user (:func:`close_remote`)."""
    return close_remote(repo)


def _submit_unreadable(repo: GitRepo, roots) -> Result:
    return _roach(
        "submit", "pkg.funcs:f", "--cluster", "lab", "--resources", "GPU1", "--run-as", LAB_USER,
        "--repo-root", str(repo.work), "--log-root", roots["log_root"], "--clone-root", roots["clone_root"],
        "--name", "unreadable-remote",
    )  # fmt: skip


@pytest.mark.lab
def test_submit_refuses_a_remote_the_jobs_user_cannot_read(
    lab, unreadable, store: Store, roots, user_slurm: SlurmClient, monkeypatch
):
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    said = git_error_line(_git_as_user("ls-remote", "--", str(unreadable.remote), "HEAD").stderr)
    res = _submit_unreadable(unreadable, roots)
    assert res.exit_code == 7, res.output
    assert said in res.output
    assert f"let {LAB_USER} read it" in res.output
    assert store.recent(10) == []
    assert not [q for q in user_slurm.squeue() if q.name == "unreadable-remote"]


@pytest.mark.lab
def test_submit_quotes_gits_dubious_ownership_with_its_fix(lab, root_owned, store: Store, roots, monkeypatch):
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    res = _submit_unreadable(root_owned, roots)
    assert res.exit_code == 7, res.output
    assert "fatal: detected dubious ownership" in res.output
    assert f"git config --global --add safe.directory {root_owned.remote}" in res.output


@pytest.mark.lab
def test_doctor_fails_when_the_jobs_user_cannot_read_the_remote(lab, unreadable):
    args = ["doctor", "--cluster", "lab", "--run-as", LAB_USER, "--repo-root", str(unreadable.work), "--json"]
    refused = _roach(*args)
    assert refused.exit_code == 7, refused.output
    check = {c["name"]: c for c in json.loads(refused.output)["checks"]}["repo-remote"]
    assert not check["ok"]
    assert f"{LAB_USER}, whom the jobs run as, cannot read file://{unreadable.remote}" in check["detail"]
    subprocess.run(["chown", "-R", LAB_USER, str(unreadable.remote)], check=True)
    passed = _roach(*args)
    assert passed.exit_code == 0, passed.output


@pytest.fixture
def refused_clone(lab, repo: GitRepo, store: Store, roots, user_slurm: SlurmClient, jobs: list[int], monkeypatch):
    """A job queued behind fillers while its remote was readable, started once the remote is closed to the lab
    user: its clone is refused on the node. ``roach watch`` saw it end; returns its record, the watch's JSON
    lines and git's line (what git says to the lab user's clone of that remote)."""
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    opts = ["--time=5", "--output=/dev/null", "--gres=gpu:4", "--job-name=refused-filler"]
    fillers = [user_slurm.sbatch([*opts, f"--nodelist={n}"], "#!/bin/bash\nsleep 300\n") for n in ("n1", "n2")]
    jobs += fillers
    wait_until("the fillers to run", lambda: all(q.state.is_running for q in user_slurm.squeue(job_ids=fillers)), 60)
    job = submit_to_lab(repo, store, roots, "pkg.funcs:f", name="refused")
    close_remote(repo)
    url = f"file://{repo.remote}"  # as the job clones it
    probe = f"/tmp/roach-clone-probe-{os.getpid()}"  # where the lab user may write; git removes it as it fails
    said = git_error_line(_git_as_user("clone", "--quiet", "--no-checkout", url, probe).stderr)
    user_slurm.scancel(fillers)
    watched = _roach("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--json")
    assert watched.exit_code == 6, watched.output
    return store.get("lab", job.record.job_id), [json.loads(ln) for ln in watched.stdout.splitlines()], said


@pytest.mark.lab
def test_a_refused_clones_finished_event_says_gits_line(refused_clone):
    rec, events, said = refused_clone
    (done,) = [e for e in events if e["event"] == "finished"]
    assert done["error_line"] == said


@pytest.mark.lab
def test_a_refused_clones_status_says_gits_line(refused_clone):
    rec, _, said = refused_clone
    got = _roach("status", rec.run_id, "--run-as", LAB_USER, "--json")
    assert json.loads(got.stdout)["error_line"] == said


@pytest.mark.lab
def test_a_refused_clones_report_says_gits_line(refused_clone):
    rec, _, said = refused_clone
    got = _roach("report", rec.run_id, "--run-as", LAB_USER, "--json")
    (run,) = json.loads(got.stdout)["runs"]
    assert run["error_line"] == said


# -- pure: which remotes are local, and git's telling line -------------------------------------------------------
def test_a_path_or_file_url_is_local_and_a_host_is_not():
    from roach.launch.remote_access import is_local_url

    assert is_local_url("file:///srv/git/repo.git")
    assert is_local_url("/srv/git/repo.git")
    assert not is_local_url("git@github.com:me/repo.git")
    assert not is_local_url("https://github.com/me/repo.git")
    assert not is_local_url("ssh://host/srv/repo.git")


def test_git_error_line_is_the_cause_not_the_generic_follow_up():
    from roach.records.error_line import git_error_line

    said = (
        "fatal: detected dubious ownership in repository at '/r.git'\n"
        "To add an exception for this directory, call:\n\n"
        "\tgit config --global --add safe.directory /r.git\n"
        "fatal: Could not read from remote repository.\n\n"
        "Please make sure you have the correct access rights\n"
    )
    assert git_error_line(said) == "fatal: detected dubious ownership in repository at '/r.git'"
