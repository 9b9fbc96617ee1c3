"""Benchmark 8, the store at scale: ``roach ls`` and ``roach status`` with N records in the store.

The store holds N recorded jobs on the lab (default 10,000: every one ended and recorded, so the commands
ask Slurm nothing and what is measured is roach's own start-up, the store's query and the rendering). Each
command runs as its own process, from its start to its exit, as a user types it: the ``roach`` of a throwaway venv
that has roach installed from a wheel of this tree (and the click and rich this interpreter has), as ``pip
install`` leaves it (the source tree's own venv holds an editable install, whose import finder, a ``.pth`` file run
at every start, is no part of an installed roach). The floor every Python command pays, ``python -c pass`` with
that venv's interpreter, runs beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

from bench.labenv import Jobs, Lab
from bench.report import Section
from bench.stats import Row, comparison_table, load_sentence, target_row
from roach.records.job_record import JobRecord
from roach.records.store import Store

METHODS = ("roach", "python -c pass")
REPO = Path(__file__).resolve().parent.parent
# What the wheel is not built from: the tree's clutter and its build outputs.
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "bench")


def _fill(store: Store, n: int) -> str:
    """N ended jobs on the lab, newest last; returns a run id in the middle."""
    recs = [
        JobRecord(
            cluster="lab",
            job_id=100_000 + i,
            run_id=f"bench-{i:06d}",
            name="bench",
            target="pkg.jobfns:first_line",
            commit="0" * 40,
            repo="bench",
            log_path=f"/tmp/roach-bench/logs/bench-{i:06d}_{100_000 + i}.out",
            bundle_dir=f"/tmp/roach-bench/logs/bundles/{100_000 + i}",
            run_dir=f"/tmp/roach-bench/runs/bench-{i:06d}",
            submitted_at=f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:00:00Z",
            resources={"nodes": 1, "gpus_per_node": 0},
            status="completed",
            slurm_state="COMPLETED",
            exit_code="0:0",
            recorded_at="2026-11-30T00:00:00Z",
            job_json_at="2026-11-30T00:00:00Z",
        )
        for i in range(n)
    ]
    for k in range(0, n, 5000):
        store.add_many(recs[k : k + 5000])
    return recs[n // 2].run_id


def _installed(wd: Path) -> Path:
    """The bin folder of a fresh venv in ``wd`` with roach installed from a wheel of this tree, beside the click
    and rich versions this interpreter has (from the package index, as a user's ``pip install``)."""
    src, dist, venv = wd / "src", wd / "dist", wd / "venv"
    for old in (src, dist, venv):
        shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(REPO, src, ignore=SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    steps = (
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        [sys.executable, "-m", "venv", str(venv)],
    )
    for argv in steps:
        subprocess.run(argv, env=env, check=True, capture_output=True, cwd=wd)
    (wheel,) = dist.glob("roach-*.whl")
    pins = [f"click=={version('click')}", f"rich=={version('rich')}"]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel), *pins]
    subprocess.run(pip, env=env, check=True, capture_output=True, cwd=wd)
    return venv / "bin"


def _wall(argv: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd="/")
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {r.returncode}): {r.stderr[-800:]}")
    return wall


def run(lab: Lab, jobs: Jobs, n: int, reps: int, log=print) -> Section:
    load = os.getloadavg()[0]  # the machine's load as the benchmark starts (a test suite may run beside it)
    wd = lab.workdir("store")
    store_path = Path(wd) / "store.sqlite"
    with Store(store_path) as store:
        run_id = _fill(store, n)
    bin_dir = _installed(Path(wd))
    roach = str(bin_dir / "roach")
    env = {**os.environ, **lab.env, "ROACH_STORE": str(store_path)}
    env.pop("PYTHONPATH", None)  # the wheel's roach, not the source tree's
    # Bytecode is written and then read, as an installed roach's is (pip compiles it), so repetition 0 warms it:
    # with PYTHONDONTWRITEBYTECODE set (some shells and sandboxes set it), every repetition compiled roach's
    # modules afresh (issue 18: ~150 ms of a ~530 ms `roach ls`), a cost no installed command pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = {"ls": [roach, "ls", "--json"], "status": [roach, "status", run_id, "--json"]}
    floor = [str(bin_dir / "python"), "-c", "pass"]
    got: dict[str, dict[str, list[float]]] = {c: {m: [] for m in METHODS} for c in cmds}
    for rep in range(reps + 1):  # repetition 0 warms the file cache and the .pyc files, not counted
        for c, argv in cmds.items():
            w, f = _wall(argv, env), _wall(floor, env)
            if rep:
                got[c]["roach"].append(w)
                got[c]["python -c pass"].append(f)
        log(f"bench 8: {'warm-up' if not rep else f'rep {rep}'}: status {w:.3f}s, python {f:.3f}s")
    rows = [Row(f"`roach {c} --json`, {n} records: wall time", got[c], "s") for c in cmds]
    body = [
        f"Wall time of one command, as its own process from start to exit, with {n} ended jobs in the store "
        "(their states are final: what is measured is roach's start-up, the store's query, one `squeue` and the "
        "output). roach is installed from a wheel of this tree in a venv of its own, as `pip install` leaves it "
        "(not the source tree's editable install, which runs an import finder at every start); "
        "`python -c pass` of that venv is the floor any Python command pays on this machine. "
        + load_sentence(load, os.cpu_count()),
        "",
        comparison_table(rows, METHODS),
    ]
    summary = [
        target_row(f"`roach {c}` with {n} records", got[c]["roach"], None, "", "ms", max_value=150, scale=1000)
        for c in cmds
    ]
    return Section(
        8,
        "The store at scale: ls and status",
        "\n".join(body),
        {"records": n, "reps": reps, "load": round(load, 1)},
        summary=summary,
    )
