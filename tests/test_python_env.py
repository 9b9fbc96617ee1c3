"""Which Python a job runs (the commit's lock file, clusters.toml, --python-env, the site file) and node.sh building it
once in the clone: everything that needs no Slurm. pixi is a script of the test's own here (conda-forge is not
reachable from this machine); the same steps with the real uv on the lab are tests/test_uv_project.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.errors import UsageError
from roach.fleet.userconfig import ConfigError, configured, load
from roach.launch.pyenv import lock_files, python_env_of
from roach.launch.shipping import node_script
from roach.model.python_env import EnvSource, PythonEnv, choose
from roach.records.bundle import JobJson
from roach.slurm.clusters.ilc import ILC
from roach.slurm.clusters.lab import LAB
from roach.watch.ends import env_failed_text
from roach.watch.jobs import JobWatch
from roach.watch.logs import INTEREST, read_facts
from tests.support.gitrepo import GitRepo

COMMIT = "0123456789abcdef0123456789abcdef01234567"


# -- the choice ------------------------------------------------------------------------------------------------
def _choose(**kw):
    values = dict(asked=None, configured=None, locks=(), site=PythonEnv.PIXI, cluster="ilc", commit=COMMIT)
    return choose(**{**values, **kw})


def test_the_commits_lock_file_chooses_over_the_site_file():
    uv = _choose(locks={"uv.lock"})
    assert (uv.env, uv.source) == (PythonEnv.UV, EnvSource.LOCK)
    assert uv.why == "commit 0123456789ab has uv.lock: `uv sync --frozen` in the clone"
    assert _choose(locks={"pixi.lock"}).env is PythonEnv.PIXI
    site = _choose(site=PythonEnv.VENV, cluster="lab")
    assert (site.env, site.source) == (PythonEnv.VENV, EnvSource.SITE)
    assert site.why == "commit 0123456789ab has no uv.lock or pixi.lock: lab's site file says venv"
    both = _choose(locks={"uv.lock", "pixi.lock"})
    assert both.env is PythonEnv.PIXI and "pixi.lock and uv.lock both there" in both.why


def test_what_is_asked_overrides_clusters_toml_which_overrides_the_lock():
    toml = _choose(configured=PythonEnv.SYSTEM, locks={"uv.lock"})
    assert (toml.env, toml.source) == (PythonEnv.SYSTEM, EnvSource.CLUSTERS_TOML)
    assert toml.why == "clusters.toml sets python_env = 'system' for ilc"
    asked = _choose(asked=PythonEnv.VENV, configured=PythonEnv.SYSTEM, locks={"uv.lock"})
    assert (asked.env, asked.source) == (PythonEnv.VENV, EnvSource.ASKED)
    assert asked.to_json() == {"env": "venv", "source": "asked", "why": asked.why}


def test_an_unknown_environment_is_refused_with_the_valid_ones():
    with pytest.raises(UsageError, match="'conda' is not a Python environment") as e:
        PythonEnv.parse("conda")
    assert e.value.hint == "valid: uv, pixi, venv, system"


def test_each_site_file_says_its_environment():
    assert ILC.site_python_env() is PythonEnv.PIXI and not ILC.site_has_venv()
    assert LAB.site_python_env() is PythonEnv.VENV and LAB.site_has_venv()


def test_a_commits_lock_files_are_read_from_the_commit_not_the_working_tree(tmp_path: Path):
    repo = GitRepo(tmp_path)
    first = repo.commit({"pkg/__init__.py": "", "uv.lock": "version = 1\n"}, push=False)
    (repo.work / "uv.lock").unlink()
    repo.git("rm", "-q", "--cached", "uv.lock")
    second = repo.commit({"pixi.lock": "x\n", "sub/uv.lock": ""}, push=False)
    (repo.work / "uv.lock").write_text("not committed\n")
    assert lock_files(repo.work, first) == {"uv.lock"}
    assert lock_files(repo.work, second) == {"pixi.lock"}  # sub/uv.lock is not the project's
    assert python_env_of(ILC, None, repo.work, first).env is PythonEnv.UV
    assert python_env_of(ILC, None, repo.work, second).env is PythonEnv.PIXI
    assert python_env_of(ILC, "system", repo.work, second).source is EnvSource.ASKED


def test_a_venv_the_site_has_none_of_is_refused_naming_the_valid_choices(tmp_path: Path):
    repo = GitRepo(tmp_path)
    commit = repo.commit({"pkg/__init__.py": ""}, push=False)
    with pytest.raises(UsageError, match="its site file names no venv") as e:
        python_env_of(ILC, "venv", repo.work, commit)
    assert e.value.hint == "valid on ilc: uv, pixi, system"
    with pytest.raises(UsageError, match="'conda' is not a Python environment"):
        python_env_of(ILC, "conda", repo.work, commit)


def test_clusters_toml_python_env_is_applied_and_a_wrong_one_refused(tmp_path: Path):
    path = tmp_path / "clusters.toml"
    path.write_text('[clusters.ilc]\npython_env = "uv"\n')
    assert configured("ilc", load(path)).python_env is PythonEnv.UV
    path.write_text('[clusters.ilc]\npython_env = "conda"\n')
    with pytest.raises(ConfigError, match="'conda' is not one of uv, pixi, venv, system"):
        load(path)


def test_python_env_conda_on_the_command_line_exits_2_naming_the_choices(tmp_path: Path, monkeypatch):
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("ROACH_STORE", str(store))
    r = CliRunner().invoke(cli, ["submit", "pkg.m:f", "--resources", "CPU", "--python-env", "conda"])
    assert r.exit_code == 2
    assert "'conda' is not one of 'uv', 'pixi', 'venv', 'system'" in r.output
    assert not store.exists()


def test_job_json_keeps_the_choice_and_reads_one_written_without_it():
    base = dict(job_id="1", script="s", submitted_at_utc="t", cluster="ilc", run_id="r", commit=COMMIT, name="n")
    jj = JobJson(**base, target="p.m:f", python_env=_choose(locks={"uv.lock"}).to_json())
    back = JobJson.from_json(jj.to_json())
    assert back.python_env["env"] == "uv" and back.failure is None
    older = {k: v for k, v in json.loads(jj.to_json()).items() if k not in ("python_env", "failure")}
    assert JobJson.from_json(json.dumps(older)).python_env == {}


# -- node.sh building the environment in the clone -------------------------------------------------------------
# A pixi of the test's own: `pixi install --frozen -e E` makes .pixi/envs/E/bin/python (this Python, or $PIXI_PYTHON), or, while the
# file $PIXI_FAIL exists, fails as pixi does, with its message on stderr and a half-made .pixi. It logs its runs.
FAKE_PIXI = """#!/bin/bash
echo "pixi $*" >> "$PIXI_RUNS"
[ "$1 $2" = "install --frozen" ] || { echo "fake pixi: unexpected $*" >&2; exit 2; }
if [ -e "$PIXI_FULL" ]; then
  echo "  x failed to link python: No space left on device (os error 28)" >&2
  mkdir -p .pixi/envs/default && echo half > .pixi/envs/default/partial
  exit 1
fi
if [ -e "$PIXI_FAIL" ]; then
  echo "  x failed to solve the environment: nothing provides torch ==9.9 needed by the project" >&2
  mkdir -p .pixi/envs/default && echo half > .pixi/envs/default/partial
  exit 1
fi
mkdir -p ".pixi/envs/$4/bin" && ln -s "${PIXI_PYTHON:-$(command -v python3)}" ".pixi/envs/$4/bin/python"
echo "installed"
"""


def _pushed(tmp_path: Path, files: dict[str, str]) -> tuple[GitRepo, str]:
    """A repository with ``files`` committed and pushed to its remote, both this user's."""
    repo = GitRepo(tmp_path / "repo")
    commit = repo.commit(files, push=False)
    repo.git("push", "-q", "-u", "origin", "HEAD:main")
    return repo, commit


def _prepare(tmp_path: Path, repo: GitRepo, commit: str, **more: str) -> subprocess.CompletedProcess:
    bin_dir, bundle = tmp_path / "bin", tmp_path / "bundle"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "pixi").write_text(FAKE_PIXI)
    (bin_dir / "pixi").chmod(0o755)
    bundle.mkdir(exist_ok=True)
    (bundle / "node.sh").write_text(node_script())
    jj = JobJson(
        job_id="1", script="s", submitted_at_utc="t", cluster="ilc", run_id="r", commit=commit, name="n", target="t"
    )
    (bundle / "job.json").write_text(jj.to_json())
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIXI_RUNS": str(tmp_path / "pixi-runs"),
        "PIXI_FAIL": str(tmp_path / "pixi-fails"),
        "PIXI_FULL": str(tmp_path / "pixi-full"),
        "ROACH_REPO_URL": f"file://{repo.remote}",
        "ROACH_COMMIT": commit,
        "ROACH_REPO_NAME": "proj",
        "ROACH_CLONE_ROOT": str(tmp_path / "clones"),
        "ROACH_BUNDLE": str(bundle),
        "ROACH_ENV": "pixi",
        "ROACH_SCRATCH": str(tmp_path / "scratch"),
        "SLURMD_NODENAME": "n1",
        **more,
    }
    return subprocess.run(["bash", str(bundle / "node.sh"), "prepare"], env=env, capture_output=True, text=True)


def test_a_pixi_environment_is_built_once_in_the_read_only_clone_and_reused(tmp_path: Path):
    repo, commit = _pushed(tmp_path, {"pkg/__init__.py": "", "pixi.lock": "ok\n"})
    first = _prepare(tmp_path, repo, commit)
    assert first.returncode == 0, first.stderr
    clone = tmp_path / "clones" / f"proj-{commit}"
    assert (clone / ".pixi/envs/default/bin/python").exists()
    assert f"roach: n1: built the pixi environment of {commit} in " in first.stdout
    took, _, node = (clone / ".roach-env-pixi").read_text().split()
    assert node == "n1" and float(took) >= 0
    for made in (clone, clone / ".pixi", clone / ".pixi/envs/default/bin"):  # read-only, the environment too
        assert not made.stat().st_mode & 0o222, made
    second = _prepare(tmp_path, repo, commit)
    assert second.returncode == 0, second.stderr
    assert f"roach: n1: reused the pixi environment of {commit} in {clone} (built in {took} s on n1" in second.stdout
    assert (tmp_path / "pixi-runs").read_text().splitlines() == ["pixi install --frozen -e default"]


def test_the_prepare_compiles_the_clones_modules_before_making_it_read_only(tmp_path: Path):
    # A rank cannot write the bytecode of what it imports from the read-only clone: it would compile each module
    # again at every start, so the prepare compiles them while the clone is writable.
    repo, commit = _pushed(
        tmp_path, {"pkg/__init__.py": "", "pkg/train.py": "def train():\n    return 1\n", "pixi.lock": "ok\n"}
    )
    made = _prepare(tmp_path, repo, commit)
    assert made.returncode == 0, made.stderr
    clone = tmp_path / "clones" / f"proj-{commit}"
    compiled = sorted(p.name.split(".")[0] for p in (clone / "pkg" / "__pycache__").glob("*.pyc"))
    assert compiled == ["__init__", "train"]
    assert f"roach: n1: compiled {clone}'s Python to bytecode in " in made.stdout
    assert not (clone / "pkg" / "__pycache__").stat().st_mode & 0o222  # read-only with the rest


def test_a_pixi_that_fails_ends_with_exit_7_its_message_in_job_json_and_nothing_half_made(tmp_path: Path):
    files = {"pkg/__init__.py": "", "pixi.lock": "torch ==9.9\n", ".pixi/config.toml": "[pypi-config]\n"}
    repo, commit = _pushed(tmp_path, files)
    (tmp_path / "pixi-fails").touch()
    failed = _prepare(tmp_path, repo, commit)
    assert failed.returncode == 7, failed.stderr
    assert "nothing provides torch ==9.9" in failed.stderr  # the tool's own message, in the log
    assert (
        f"roach: env_failed: n1: `pixi install --frozen -e default` exited 1 building the pixi environment of {commit}"
        in failed.stderr
    )
    clone = tmp_path / "clones" / f"proj-{commit}"
    assert not (clone / ".pixi/envs").exists() and not (clone / ".roach-env-pixi").exists()
    assert (clone / ".pixi/config.toml").read_text() == "[pypi-config]\n"  # the project's own, kept
    failure = json.loads((tmp_path / "bundle" / "job.json").read_text())["failure"]
    assert failure["kind"] == "env_failed" and failure["node"] == "n1" and failure["exit_code"] == 1
    assert "nothing provides torch ==9.9" in failure["output"]
    assert (
        (tmp_path / "bundle" / "env_failed").read_text().startswith("n1: `pixi install --frozen -e default` exited 1")
    )
    # the next job at that commit builds it again and is not tripped by what the failure left
    (tmp_path / "pixi-fails").unlink()
    again = _prepare(tmp_path, repo, commit)
    assert again.returncode == 0, again.stderr
    assert (clone / ".pixi/envs/default/bin/python").exists() and (clone / ".roach-env-pixi").exists()
    assert "removing half-made" not in again.stdout
    assert len((tmp_path / "pixi-runs").read_text().splitlines()) == 2


# -- what the watch says of it -------------------------------------------------------------------------------
def test_the_watch_reads_the_nodes_env_failed_line_and_says_it_when_the_job_finishes():
    lines = [
        "roach: attempt 1 of run r: job 7 on n[1-2] (restart count 0) at 2026-12-05T11:32:39Z",
        "roach: env_failed: n2: `uv sync --frozen` exited 1 building the uv environment of abc in /c; its output ...",
        "roach: env_failed: the job's uv environment could not be built; no rank started (exit 7)",
    ]
    assert re.search(INTEREST, lines[1]) and re.search(INTEREST, lines[2])
    facts = read_facts(lines)
    assert facts.env_failed is not None and facts.env_failed.startswith("env_failed: n2: `uv sync --frozen` exited 1")
    seen = JobWatch(key="7", job_id=7, env_failed=facts.env_failed, exit_code="7:0")
    assert env_failed_text(seen) == f"; {facts.env_failed}"
    unseen = JobWatch(key="7", job_id=7, exit_code="7:0")  # it started and ended between two looks
    assert env_failed_text(unseen) == (
        "; exit 7: env_failed, its Python environment could not be built (`roach why 7` says why)"
    )
    assert env_failed_text(JobWatch(key="8", job_id=8, exit_code="1:0")) == ""


def test_an_environment_whose_python_roach_cannot_run_ends_as_env_failed_not_in_a_rank(tmp_path: Path):
    old = tmp_path / "python3.9"
    old.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "Python 3.9.2"; exit 0; }\nexit 1\n')
    old.chmod(0o755)
    repo, commit = _pushed(tmp_path, {"pkg/__init__.py": "", "pixi.lock": "python 3.9\n"})
    failed = _prepare(tmp_path, repo, commit, PIXI_PYTHON=str(old))
    assert failed.returncode == 7, failed.stderr
    clone = tmp_path / "clones" / f"proj-{commit}"
    said = f"its Python {clone}/.pixi/envs/default/bin/python (Python 3.9.2) is not the 3.11 or later roach runs on"
    assert f"roach: env_failed: n1: {said} building the pixi environment of {commit}" in failed.stderr
    assert 'add python = ">=3.11" to pixi.toml\'s dependencies' in failed.stderr
    assert not (clone / ".pixi/envs").exists() and not (clone / ".roach-env-pixi").exists()
    assert said in json.loads((tmp_path / "bundle" / "job.json").read_text())["failure"]["message"]


def test_a_sweep_tasks_env_failure_goes_into_the_tasks_own_job_json(tmp_path: Path):
    # an array task's ROACH_BUNDLE is the array's; its run's job.json is in <bundle>_<task>/
    repo, commit = _pushed(tmp_path, {"pkg/__init__.py": "", "pixi.lock": "torch ==9.9\n"})
    (tmp_path / "pixi-fails").touch()
    task_bundle = tmp_path / "bundle_3"
    task_bundle.mkdir()
    jj = JobJson(job_id="1_3", script="s", submitted_at_utc="t", cluster="ilc", run_id="r", commit=commit, name="n",
                 target="t")  # fmt: skip
    (task_bundle / "job.json").write_text(jj.to_json())
    failed = _prepare(tmp_path, repo, commit, SLURM_ARRAY_TASK_ID="3")
    assert failed.returncode == 7, failed.stderr
    assert json.loads((task_bundle / "job.json").read_text())["failure"]["kind"] == "env_failed"


def _full_disk_prepare(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    repo, commit = _pushed(tmp_path, {"pkg/__init__.py": "", "pixi.lock": "ok\n"})
    (tmp_path / "pixi-full").touch()
    return _prepare(tmp_path, repo, commit), tmp_path / "clones" / f"proj-{commit}"


def test_an_environment_a_full_disk_stops_is_the_nodes_failure_in_one_line(tmp_path: Path):
    failed, clone = _full_disk_prepare(tmp_path)
    assert failed.returncode == 8, failed.stderr
    (line,) = [ln for ln in failed.stdout.splitlines() if "node_failed" in ln]
    assert line.startswith("roach: node_failed: n1: no space left on device building the pixi environment of "), line
    assert line.endswith(f" in {clone}/.pixi/envs; no rank started"), line


def test_an_environment_a_full_disk_stops_is_recorded_for_the_exclusion_not_as_env_failed(tmp_path: Path):
    failed, clone = _full_disk_prepare(tmp_path)
    assert (tmp_path / "bundle" / "node_failed.0.n1").read_text().startswith("n1: no space left on device building ")
    assert not (tmp_path / "bundle" / "env_failed").exists()
    assert json.loads((tmp_path / "bundle" / "job.json").read_text())["failure"] is None
    assert not (clone / ".pixi/envs").exists()  # nothing half-made is left
