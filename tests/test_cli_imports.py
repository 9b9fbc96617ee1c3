"""What `roach ls --json` and `roach status --json` load, as a user runs them (a process of their own): the store,
the views and the cluster's client, not the watch, the job handles or the other commands (issue 18: each
starts in under 150 ms with 10,000 records in the store; bench 8 measures it, this checks what it rests on).

No lab: the store's job is on the lab cluster, but ``ROACH_LAB_DIR`` is a folder of the test's and ``squeue`` a
script of its own on PATH that lists no job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roach.records.job_record import JobRecord
from roach.records.store import Store

REPO = Path(__file__).resolve().parent.parent

# Runs `roach ARGS...` as `python -m roach` does, then writes the names of every module it loaded.
WRAPPER = """
import json, os, runpy, sys
sys.argv = ["roach", *sys.argv[1:]]
try:
    runpy.run_module("roach", run_name="__main__", alter_sys=True)
finally:
    with open(os.environ["ROACH_TEST_MODULES"], "w") as f:
        json.dump(sorted(sys.modules), f)
"""

# Loaded by neither command.
NOT_LOADED = (
    "roach.watch",
    "roach.ops.events",
    "roach.launch.hold.start",
    "roach.launch.hold.holder",
    "roach.launch.hold.attempt_start",
    "roach.launch.job",
    "roach.launch.submit",
    "roach.workspace.backend",
    "roach.cli.inspect",
    "roach.cli.jobs",
    "roach.cli.watch",
    "roach.cli.top",
    "roach.cli.hold",
    "roach.cli.agent",
    "roach.cli.workspace",
    "roach.cli.schemas",
    "roach.lab.lab",
    "roach.slurm.clusters.ilc",
    "importlib.resources",
    "rich",  # an error's red line, ls's table and status's lines are plain click (roach.cli.columns)
    "roach.scheduler.clusterfs",  # the attempts' bundles are read through the client's transport
    "tarfile",
    "hashlib",  # and OpenSSL: the site cache's file name is a checksum (zlib)
    "tempfile",  # roach._fs makes its temporary files itself
    "shutil",  # (and bz2, lzma)
    "random",  # the store's jittered retry takes os.urandom
    "roach.scheduler.rest",  # a cluster reached by its commands: slurmrestd's client loads only for a REST one
    "roach.launch.hold.attempts",  # a holder's attempts: loaded only where the listed jobs include some
    "roach.launch.hold.steps",  # and a running holder's steps
    "difflib",  # the closest name to an unknown cluster or preset
    "tomllib",  # no clusters.toml: nothing to parse
    "roach.records.watch_log",  # the watch's log in the store
    "roach.records.job_json_end",  # an end to record: none here (the job's is recorded, its job.json written)
    "roach.records.error_line",
    "roach.model.reason_rules",  # what a pending reason means: no job is asked
    "roach.model.reason_table",
    "roach.lab.hosts",  # the lab's namespaces: its site module reads lab.json only
    "roach.lab.config",  # and not as the lab's settings (roach.lab.saved)
    "roach.scheduler.parse_control",  # sinfo, scontrol show, sacctmgr and sbatch: a listing reads squeue and sacct
    "roach.scheduler.capabilities",  # what the cluster's Slurm can do: nothing here asks
    "roach.scheduler.accounting",  # the GPU-hour ledger's sacct
)
# Each command's module loads neither the other's nor what only the other needs.
ALSO_NOT = {
    "ls": (
        "roach.cli.show",
        "roach.workspace",
        "roach.records.workspace_job",  # a remote-workspace job's end: read only where an end is read from accounting
        "roach.records.bundle",  # job.json: written only where an end is recorded
    ),
    "status": ("roach.cli.listing", "roach.workspace.file"),  # an ended stage's bundle: roach.workspace.stage
}


def _ended_job() -> JobRecord:
    return JobRecord(
        cluster="lab",
        job_id=4242,
        run_id="imports-000001",
        name="imports",
        target="pkg.jobfns:first_line",
        commit="0" * 40,
        repo="imports",
        log_path="/tmp/roach-imports/logs/imports-000001_4242.out",
        bundle_dir="/tmp/roach-imports/logs/bundles/4242",
        run_dir="/tmp/roach-imports/runs/imports-000001",
        submitted_at="2026-11-01T00:00:00Z",
        resources={"nodes": 1, "gpus_per_node": 0},
        status="completed",
        slurm_state="COMPLETED",
        exit_code="0:0",
        recorded_at="2026-11-30T00:00:00Z",
        job_json_at="2026-11-30T00:00:00Z",
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A store with one ended job on the lab, a lab directory of the test's, and an squeue that lists nothing."""
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "lab.json").write_text(json.dumps({"state_dir": str(lab)}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    with Store(tmp_path / "store.sqlite") as store:
        store.add_many([_ended_job()])
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "ROACH_LAB_DIR": str(lab),
        "ROACH_STORE": str(tmp_path / "store.sqlite"),
        "ROACH_CLUSTERS_TOML": str(tmp_path / "no-clusters.toml"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "ROACH_TEST_MODULES": str(tmp_path / "modules.json"),
    }


def _loaded(env: dict[str, str], *args: str, rc: int = 0) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`roach ARGS` in a process of its own: what it printed, and the modules it loaded (it exits ``rc``)."""
    listed = Path(env["ROACH_TEST_MODULES"])
    r = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args], env=env, cwd=listed.parent, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == rc, r.stderr
    return r, set(json.loads(listed.read_text()))


def _of(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [("ls", "--json"), ("status", "imports-000001", "--json")])
def test_ls_and_status_json_load_none_of_the_other_commands(env, args):
    r, modules = _loaded(env, *args)
    out = json.loads(r.stdout)
    (view,) = out if isinstance(out, list) else [out]
    assert (view["job_id"], view["status"], view["state"]) == (4242, "completed", "COMPLETED")  # the path ran
    assert "roach.launch.job_view" in modules and "roach.slurm.clusters.lab" in modules
    assert _of(modules, (*NOT_LOADED, *ALSO_NOT[args[0]])) == []


@pytest.mark.parametrize("args", [("ls",), ("status", "imports-000001")])
def test_ls_and_status_text_load_none_of_the_other_commands(env, args):
    r, modules = _loaded(env, *args)
    assert "imports-000001" in r.stdout and "COMPLETED" in r.stdout
    assert "roach.cli.view_text" in modules
    assert _of(modules, (*NOT_LOADED, *ALSO_NOT[args[0]])) == []


@pytest.mark.parametrize("args", [("status", "nosuch"), ("status", "nosuch", "--json")])
def test_an_error_is_its_red_line_without_rich(env, args):
    r, modules = _loaded(env, *args, rc=2)
    assert r.stderr.startswith("roach: error: no job id or run id 'nosuch' in the store "), r.stderr
    assert "\n  hint: `roach ls` lists recent jobs and their run ids\n" in r.stderr
    assert _of(modules, (*NOT_LOADED, *ALSO_NOT["status"])) == []
