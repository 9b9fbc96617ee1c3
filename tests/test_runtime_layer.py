"""The runtime layer: a rank loads only roach/runtime/ (and the few files it imports), and a submit ships only those.

What a rank may load is written out here, not taken from roach: the test says what the layer is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roach
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import slack

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(roach.__file__).parent

# The modules a rank may load: the runtime, the pure model, the two leaf helpers, and the entry's import path.
ALLOWED_MODULES = {"roach", "roach._fs", "roach.errors", "roach.slurm", "roach.slurm.run"}
ALLOWED_PACKAGES = ("roach.runtime", "roach.model")
# Host-side modules a rank loaded before the runtime layer: none of them may come back.
HEAVY = ("roach.records.store", "roach.scheduler.ssh", "roach.launch.submit", "roach.records.job_json_end", "sqlite3")

# What the probe function returns from inside a rank: the roach modules loaded, where roach came from, sqlite3.
PROBE = """
import sys

def modules(run=None):
    import roach
    return {"modules": sorted(m for m in sys.modules if m.startswith("roach")), "roach": roach.__file__,
            "heavy": sorted(m for m in sys.modules if m == "sqlite3" or m.startswith("sqlite3."))}
"""


def _allowed(module: str) -> bool:
    return (
        module in ALLOWED_MODULES
        or module.startswith(tuple(p + "." for p in ALLOWED_PACKAGES))
        or module in ALLOWED_PACKAGES
    )


def _shippable(rel: str) -> bool:
    """A path relative to the directory holding ``roach/`` that the runtime's copy may contain."""
    parts = Path(rel).parts
    return rel in (
        "roach/__init__.py",
        "roach/_fs.py",
        "roach/errors.py",
        "roach/slurm/__init__.py",
        "roach/slurm/run.py",
    ) or parts[:2] in (("roach", "runtime"), ("roach", "model"))


def _package_bytes() -> int:
    """The whole roach package as a submit shipped it before: every file but bytecode."""
    return sum(
        p.stat().st_size
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def _python(*argv: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """This Python with this checkout's roach first, outside any Slurm job (no SLURM_* variables)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO), **env},
    )


def test_the_rank_entry_imports_only_the_runtime():
    # What `python -m roach.slurm.run` imports before main() runs: the package roach.slurm, then the module.
    code = textwrap.dedent("""
        import json, runpy, sys
        runpy.run_module("roach.slurm.run", run_name="roach_rank")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("roach") or m == "sqlite3")))
    """)
    r = _python("-c", code)
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
    assert sorted(m for m in loaded if not _allowed(m)) == []
    assert "roach.runtime.rank" in loaded


def test_the_facade_loads_nothing_and_keeps_every_public_name():
    code = textwrap.dedent("""
        import json, sys
        import roach.slurm
        bare = sorted(m for m in sys.modules if m.startswith("roach"))
        import roach.launch.submit, roach.launch.sweep, roach.launch.hold.start  # the submodules first: the names stay functions
        from roach.slurm import submit, sweep
        from roach.slurm import hold
        from roach.slurm import Resources
        from roach.slurm import *
        from roach.slurm.clusters.ilc import ILC, AMPERE
        kinds = {n: type(getattr(roach.slurm, n)).__name__ for n in ("submit", "sweep", "hold")}
        missing = [n for n in roach.slurm.__all__ if n not in globals() or n not in dir(roach.slurm)]
        print(json.dumps({"bare": bare, "kinds": kinds, "missing": missing, "same": submit is roach.launch.submit.submit}))
    """)
    r = _python("-c", code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["bare"] == ["roach", "roach.slurm"]
    assert out["kinds"] == {"submit": "function", "sweep": "function", "hold": "function"}
    assert out["missing"] == [] and out["same"]


def test_a_whole_rank_loads_only_runtime_modules(tmp_path):
    """A rank's whole life (spec, signals, the function, its result, the done marker), started as the batch
    script starts it, here without Slurm: rank 0 of one."""
    (tmp_path / "clone").mkdir()
    (tmp_path / "clone" / "probe.py").write_text(PROBE)
    spec = {
        "version": 1,
        "target": "probe:modules",
        "args": {},
        "run_id": "r1",
        "run_dir": str(tmp_path / "run"),
        "python_path": [""],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = _python(
        "-m", "roach.slurm.run", str(tmp_path / "spec.json"), cwd=tmp_path, ROACH_CLONE_DIR=str(tmp_path / "clone")
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["heavy"] == [] and set(result["modules"]).isdisjoint(HEAVY), result
    assert [m for m in result["modules"] if not _allowed(m)] == []
    assert "roach.runtime.attempts" in result["modules"]  # it ran as a rank: through the runtime's bookkeeping


@pytest.mark.lab
def test_a_submit_ships_only_the_runtime_and_the_rank_runs_from_it(git_repo, shared_tmp, tmp_path):
    git_repo.commit({"pkg/__init__.py": "", "pkg/probe.py": PROBE}, "the probe")
    log_root = shared_tmp / "logs"
    job = submit(
        "pkg.probe:modules",
        cluster=LAB.with_(run_as=LAB_USER),
        repo_root=git_repo.work,
        resources=GPU1,
        store=Store(tmp_path / "store.sqlite"),
        log_root=str(log_root),
        clone_root=str(shared_tmp / "clones"),
        name="runtime-probe",
    )
    rec = job.wait(timeout=slack(120))
    assert rec.state is JobState.COMPLETED, job.log()

    shipped = sorted(d for d in (log_root / "bundles").iterdir() if d.name.startswith("roach-"))
    assert len(shipped) == 1, shipped  # one copy, in the bundle root, named by its contents
    files = {
        str(p.relative_to(shipped[0])): p.stat().st_size
        for p in shipped[0].rglob("*")
        if p.is_file() and p.name != ".complete" and "__pycache__" not in p.parts
    }
    assert sorted(f for f in files if not _shippable(f)) == []
    assert "roach/runtime/rank.py" in files and "roach/slurm/run.py" in files
    whole = _package_bytes()
    assert sum(files.values()) < whole / 3, f"{sum(files.values())} bytes shipped of the package's {whole}"

    result = json.loads((shared_tmp / "runs" / job.run_id / "result.json").read_text())
    assert Path(result["roach"]).is_relative_to(shipped[0]), result["roach"]  # the rank ran the shipped copy
    assert [m for m in result["modules"] if not _allowed(m)] == [] and result["heavy"] == []
    for m in result["modules"]:  # and everything it loaded was shipped
        rel = m.replace(".", "/")
        assert f"{rel}.py" in files or f"{rel}/__init__.py" in files, m
