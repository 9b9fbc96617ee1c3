"""Cluster paths with characters Slurm or a shell reads are refused before anything is written or queued;
a local repository at such a path works (its path never reaches the cluster, its name is sanitised)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.fleet.paths import check_cluster_path, unsafe_characters
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import hold, submit, sweep
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import slack
from tests.support.gitrepo import GitRepo

CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {"pkg/__init__.py": "", "pkg/jobs.py": "def hello(run):\n    run.log('hello from %s', run.node)\n    return 1\n"}

# One of each class: whitespace, Slurm's pattern and comment characters, quotes, shell expansion, escapes.
CHARACTERS = {
    "space": " ",
    "tab": "\t",
    "newline": "\n",
    "percent": "%",
    "hash": "#",
    "single quote": "'",
    "double quote": '"',
    "dollar": "$",
    "backtick": "`",
    "backslash": "\\",
    "semicolon": ";",
    "glob": "*",
    "parenthesis": "(",
}
OPTIONS = ("log_root", "run_root", "clone_root", "secrets_dir")


@pytest.mark.parametrize("char", CHARACTERS.values(), ids=CHARACTERS.keys())
def test_each_character_class_is_named_in_the_refusal(char):
    path = f"~/my{char}expts/logs"
    assert unsafe_characters(path) == [char]
    with pytest.raises(UsageError, match="has characters roach does not put") as err:
        check_cluster_path("log_root", path)
    assert repr(char) in str(err.value) and "log_root" in str(err.value)


@pytest.mark.parametrize("path", ["~/scratch/my-repo/expt_1/slurm-logs", "/gpfs/u/a.b+c,d=e@f:g", "~", "~/données"])
def test_plain_paths_pass(path):
    check_cluster_path("log_root", path)


def test_a_relative_path_is_still_refused():
    with pytest.raises(UsageError, match="must be absolute"):
        check_cluster_path("clone_root", "logs/here")


@pytest.mark.lab
@pytest.mark.parametrize("char", CHARACTERS.values(), ids=CHARACTERS.keys())
@pytest.mark.parametrize("option", OPTIONS)
def test_submit_refuses_each_option_with_each_character_and_leaves_nothing(
    option, char, repo, shared_tmp, tmp_path, user_slurm
):
    store = Store(tmp_path / "store.sqlite")
    roots = {"log_root": str(shared_tmp / "logs"), "clone_root": str(shared_tmp / "clones")}
    bad = str(shared_tmp / f"my{char}dir")
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(UsageError, match=f"{option} .* has characters") as err:
        submit(
            "pkg.jobs:hello",
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            resources=GPU1,
            **{**roots, option: bad},
        )
    assert repr(char) in str(err.value)
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert not Path(roots["log_root"]).exists() and not Path(roots["clone_root"]).exists() and not Path(bad).exists()
    assert store.recent() == []


@pytest.mark.lab
def test_sweep_and_hold_refuse_the_same_way(repo, shared_tmp, tmp_path, user_slurm):
    store = Store(tmp_path / "store.sqlite")
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(UsageError, match="run_root .* has characters"):
        sweep(
            "pkg.jobs:hello",
            [{}, {}],
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            resources=GPU1,
            log_root=str(shared_tmp / "logs"),
            run_root=str(shared_tmp / "my runs"),
        )
    with pytest.raises(UsageError, match="log_root .* has characters"):
        sweep(
            "pkg.jobs:hello",
            [{}],
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            resources=GPU1,
            log_root=str(shared_tmp / "100%"),
        )
    with pytest.raises(UsageError, match="log_root .* has characters"):
        hold(resources=GPU1, cluster=CLUSTER, log_root="~/my holders", store=store)
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert store.recent() == []


@pytest.mark.lab
def test_a_repository_at_a_path_with_a_space_and_a_dollar_runs(shared_tmp, tmp_path):
    base = shared_tmp / "my repo $HOME"
    base.mkdir()
    repo = GitRepo(base)
    repo.commit(PKG, "hello")
    job = submit(
        "pkg.jobs:hello",
        cluster=CLUSTER,
        repo_root=repo.work,
        store=Store(tmp_path / "s.db"),
        resources=GPU1,
        log_root=str(shared_tmp / "logs"),
        clone_root=str(shared_tmp / "clones"),
    )
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()
    assert "hello from n" in job.log()
