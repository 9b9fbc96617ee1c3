"""submit() on the lab: ranks, the clone protocol, refusals that leave nothing behind, failures, secrets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.bundle import JobJson
from roach.slurm import Resources, submit
from roach.slurm.clusters.lab import GPU1, LAB, NODES2_GPU2
from tests.conftest import slack
from tests.support.gitrepo import GIT
from tests.support.packages import PKG as JOBS_PKG
from tests.support.submitting import submit_to_lab

CLUSTER = LAB.with_(run_as=LAB_USER)

FIT = """
def train(run, lr, width=64, steps=60, seed=0):
    return lr * width
"""
PKG = {**JOBS_PKG, "pkg/fit.py": FIT}  # what the repo fixture commits


def _cleanup(jobs):
    for j in jobs:
        try:
            j.cancel()
        except Exception:
            pass


@pytest.mark.lab
def test_four_ranks_on_two_nodes_all_reduce(repo, store, roots):
    job = submit_to_lab(repo, store, roots, "pkg.dist:allreduce", resources=NODES2_GPU2, name="allreduce")
    rec = job.wait(timeout=slack(180))
    assert rec.state is JobState.COMPLETED, job.log()
    run_dir = Path(roots["log_root"]).parent / "runs" / job.run_id
    infos = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(4)]
    assert [i["RANK"] for i in infos] == ["0", "1", "2", "3"]
    assert all(i["WORLD_SIZE"] == "4" and i["LOCAL_WORLD_SIZE"] == "2" for i in infos)
    assert all(i["sum"] == 10.0 for i in infos)  # 1+2+3+4 through gloo
    by_node: dict[str, list[dict]] = {}
    for i in infos:
        by_node.setdefault(i["node"], []).append(i)
    assert sorted(by_node) == ["n1", "n2"]
    for ranks in by_node.values():
        assert sorted(i["LOCAL_RANK"] for i in ranks) == ["0", "1"]
        assert len({i["CUDA_VISIBLE_DEVICES"] for i in ranks}) == 2  # distinct GPUs on a node
    assert json.loads((run_dir / "result.json").read_text()) == 10.0
    log = job.log()
    assert "0: " in log and "3: " in log and "all_reduce gave 10.0" in log
    assert Path(job.paths.log).name == f"{job.run_id}_{job.job_id}.out"


@pytest.mark.lab
def test_job_json_store_and_bundle_after_success(repo, store, roots):
    job = submit_to_lab(repo, store, roots, "pkg.jobs:hello", args={"who": "lab"}, description="hello probe")
    rec = job.wait(timeout=slack(120))
    assert rec.state is JobState.COMPLETED
    jj = JobJson.from_json(Path(job.paths.job_json).read_text())
    assert (jj.job_id, jj.status, jj.slurm_state, jj.exit_code) == (str(job.job_id), "completed", "COMPLETED", "0:0")
    assert jj.description == "hello probe" and jj.commit == repo.git("rev-parse", "HEAD").strip()
    assert jj.resources["gpus_per_node"] == 1 and jj.script == job.paths.script
    assert Path(job.paths.script).read_text().startswith("#!/bin/bash\n#SBATCH --job-name=hello")
    assert store.find(job.run_id).status == "completed"
    assert "hello lab from n" in job.log()


@pytest.mark.lab
def test_clone_is_shared_read_only_at_the_commit_and_made_once_under_concurrency(repo, store, roots):
    commit = repo.git("rev-parse", "HEAD").strip()
    on_n1 = GPU1.replace(extra=("--nodelist=n1",))
    jobs = [
        submit_to_lab(repo, store, roots, "pkg.jobs:try_write_clone", resources=on_n1, name=f"c{i}") for i in range(3)
    ]
    try:
        recs = [j.wait(timeout=slack(180)) for j in jobs]
    finally:
        _cleanup(jobs)
    assert all(r.state is JobState.COMPLETED for r in recs), [j.log() for j in jobs]
    logs = [j.log() for j in jobs]
    assert sum(log.count("cloned ") for log in logs) == 1, logs  # one clone, made once
    clone = Path(roots["clone_root"]) / f"work-{commit}"
    assert (
        subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        == commit
    )
    results = {
        json.loads((Path(roots["log_root"]).parent / "runs" / j.run_id / "result.json").read_text()) for j in jobs
    }
    assert results == {"refused: PermissionError"}
    assert not os.stat(clone).st_mode & 0o222
    assert [p.name for p in Path(roots["clone_root"]).iterdir() if not p.name.startswith(".")] == [f"work-{commit}"]


@pytest.mark.lab
def test_half_made_clone_is_rebuilt_not_used(repo, store, roots):
    commit = repo.git("rev-parse", "HEAD").strip()
    half = Path(roots["clone_root"]) / f"work-{commit}"
    half.mkdir(parents=True)
    (half / "partial").write_text("a killed clone")
    subprocess.run(["chown", "-R", LAB_USER, roots["clone_root"]], check=True)
    job = submit_to_lab(repo, store, roots, "pkg.jobs:hello")
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()
    assert "removing half-made clone" in job.log()
    assert not (half / "partial").exists() and (half / "pkg" / "jobs.py").exists()


@pytest.mark.lab
def test_failing_rank_fails_the_job_and_stops_the_others(repo, store, roots):
    job = submit_to_lab(repo, store, roots, "pkg.jobs:boom", resources=NODES2_GPU2)
    try:
        rec = job.wait(timeout=slack(180))
    finally:
        _cleanup([job])
    assert rec.state is JobState.FAILED and rec.exit_code != 0
    log = job.log()
    assert "Traceback (most recent call last)" in log and "ValueError: rank 1 exploded on purpose" in log
    jj = JobJson.from_json(Path(job.paths.job_json).read_text())
    assert jj.status == "failed" and jj.exit_code == f"{rec.exit_code}:{rec.exit_signal}" and jj.exit_code != "0:0"
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert job.paths.spec not in ps  # no rank of the job is left running


@pytest.mark.lab
def test_secrets_reach_the_function_and_no_file_roach_wrote(repo, store, roots, shared_tmp, tmp_path):
    secret = "s3cr3t-Value-that-must-not-leak"
    sdir = shared_tmp / "secrets"
    sdir.mkdir(mode=0o700)
    (sdir / "API_TOKEN").write_text(secret + "\n")
    os.chmod(sdir / "API_TOKEN", 0o600)
    subprocess.run(["chown", "-R", LAB_USER, str(sdir)], check=True)
    job = submit_to_lab(repo, store, roots, "pkg.jobs:uses_secret", secrets_dir=str(sdir), job_env={"MODE": "offline"})
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()
    assert "token present: True (31 chars)" in job.log()
    leaks = subprocess.run(
        [
            "grep",
            "-rl",
            "--",
            secret,
            roots["log_root"],
            str(Path(roots["log_root"]).parent / "runs"),
            str(store.path.parent),
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert leaks == ""


@pytest.mark.lab
def test_secrets_readable_by_others_are_refused_before_submitting(repo, store, roots, shared_tmp, user_slurm):
    sdir = shared_tmp / "loose"
    sdir.mkdir()
    (sdir / "API_TOKEN").write_text("x")
    os.chmod(sdir / "API_TOKEN", 0o644)
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(UsageError, match="secrets files readable by others: .*API_TOKEN"):
        submit_to_lab(repo, store, roots, "pkg.jobs:uses_secret", secrets_dir=str(sdir))
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert not Path(roots["log_root"]).exists()


@pytest.mark.lab
@pytest.mark.parametrize("case", ["dirty", "unpushed", "no_module", "no_function", "non_json", "preset", "resources"])
def test_bad_input_is_refused_and_nothing_is_submitted_or_written(case, repo, store, roots, user_slurm):
    target, kw = "pkg.jobs:hello", {}
    expect = {
        "dirty": "uncommitted|untracked|modified",
        "unpushed": "not on origin/main",
        "no_module": "pkg.missing",
        "no_function": "nosuch",
        "non_json": "not JSON-serialisable",
        "preset": "no preset 'GPU9'(.|\n)*GPU1",
        "resources": "invalid Resources",
    }[case]
    if case == "dirty":
        repo.write({"pkg/new.py": "x = 1\n"})
    elif case == "unpushed":
        repo.commit({"pkg/more.py": "y = 2\n"}, "not pushed", push=False)
    elif case == "no_module":
        target = "pkg.missing:hello"
    elif case == "no_function":
        target = "pkg.jobs:nosuch"
    elif case == "non_json":
        kw["args"] = {"who": object()}
    elif case == "preset":
        kw["resources"] = "GPU9"
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(UsageError, match=expect):
        if case == "resources":
            Resources(gpus_per_node=-1)
        submit_to_lab(repo, store, roots, target, **kw)
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert not Path(roots["log_root"]).exists() and not Path(roots["clone_root"]).exists()
    assert store.recent() == []


def _submit_cli(repo, roots, *args: str):
    from click.testing import CliRunner

    from roach.cli.app import cli

    common = ["--cluster", "lab", "--run-as", LAB_USER, "--resources", "GPU1", "--repo-root", str(repo.work)]
    common += ["--log-root", roots["log_root"], "--clone-root", roots["clone_root"]]
    return CliRunner().invoke(cli, ["submit", "pkg.fit:train", *common, *args], catch_exceptions=False)


@pytest.mark.lab
def test_an_argument_the_function_does_not_take_is_refused_exit_2_and_nothing_is_queued(
    repo, store, roots, tmp_path, monkeypatch, user_slurm
):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))  # the store fixture's file
    before = {r.raw_id for r in user_slurm.squeue()}
    r = _submit_cli(repo, roots, "--arg", "learning_rate=0.1")
    assert r.exit_code == 2, r.output
    assert "pkg.fit:train at commit " in r.stderr
    assert "train takes no argument 'learning_rate'; it is train(run, lr, width=64, steps=60, seed=0)" in r.stderr
    assert "hint: did you mean 'lr'? its arguments are: lr, width, steps, seed" in r.stderr
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert not Path(roots["log_root"]).exists()
    assert store.recent() == []


@pytest.mark.lab
def test_a_dry_run_checks_the_arguments_as_submit_does(repo, store, roots, tmp_path, monkeypatch, user_slurm):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    before = {r.raw_id for r in user_slurm.squeue()}
    unknown = _submit_cli(repo, roots, "--arg", "learning_rate=0.1", "--dry-run")
    assert unknown.exit_code == 2, unknown.output
    assert "train takes no argument 'learning_rate'" in unknown.stderr
    missing = _submit_cli(repo, roots, "--arg", "width=32", "--dry-run")
    assert missing.exit_code == 2, missing.output
    assert "train needs argument lr, not given" in missing.stderr
    good = _submit_cli(repo, roots, "--arg", "lr=0.1", "--dry-run")
    assert good.exit_code == 0, good.output
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert store.recent() == []


@pytest.mark.lab
def test_job_can_be_rebuilt_from_its_run_id_or_job_id(repo, store, roots):
    from roach.launch.job import Job

    job = submit_to_lab(repo, store, roots, "pkg.jobs:hello")
    job.wait(timeout=slack(120))
    by_run = Job.from_ref(job.run_id, cluster=CLUSTER, store=store)
    by_id = Job.from_ref(str(job.job_id), cluster=CLUSTER, store=store)
    assert by_run.job_id == by_id.job_id == job.job_id
    assert by_run.state() is JobState.COMPLETED
    assert "hello world" in by_id.tail(5)


@pytest.mark.lab
def test_a_failure_between_hold_and_release_cancels_the_held_job_and_records_nothing(repo, store, roots, user_slurm):
    # The lab user cannot write under /root: the bundle fails after `sbatch --hold` queued the job.
    import secrets

    name = f"rollback-{secrets.token_hex(3)}"
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(Exception) as err:
        submit_to_lab(repo, store, {**roots, "log_root": "/root/roach-forbidden/logs"}, "pkg.jobs:hello", name=name)
    assert "/root/roach-forbidden/logs" in str(err.value)
    assert {r.raw_id for r in user_slurm.squeue()} == before  # nothing left queued
    # A held job cancelled before its release never reaches accounting; the controller still knows it.
    states = user_slurm.run(["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%T"]).stdout.split()
    assert states == ["CANCELLED"]  # it was queued held, then cancelled
    assert store.recent() == []


@pytest.mark.lab
def test_a_cluster_that_cannot_reach_the_git_remote_gets_the_commit_as_a_bundle(store, roots, tmp_path):
    # The remote lives under /root: the lab user's jobs cannot read it, as a cluster behind a firewall.
    base = Path(tempfile.mkdtemp(prefix="roach-unreachable-", dir="/root"))
    try:
        remote, work = base / "remote.git", base / "work"
        subprocess.run([*GIT, "init", "-q", "--bare", str(remote)], check=True)
        subprocess.run([*GIT, "clone", "-q", f"file://{remote}", str(work)], check=True, capture_output=True)
        for rel, text in PKG.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        for args in (["add", "-A"], ["commit", "-q", "-m", "pkg"], ["push", "-q", "-u", "origin", "HEAD:main"]):
            subprocess.run([*GIT, "-C", str(work), *args], check=True, capture_output=True)
        cluster = CLUSTER.with_(git_reachable=False)
        job = submit(
            "pkg.jobs:hello",
            args={"who": "mirror"},
            resources=GPU1,
            cluster=cluster,
            repo_root=work,
            store=store,
            **roots,
        )
        assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()
        assert (
            "hello mirror" in job.log()
            and f"{roots['log_root']}/bundles/git/work.git" in Path(job.paths.spec).read_text()
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
