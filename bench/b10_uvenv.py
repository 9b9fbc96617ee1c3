"""Benchmark 10, a uv project's environment once built: a warm job's start under it beside the lab's venv.

One pushed commit holds bench/jobfns.py as ``pkg/jobfns.py`` and a uv project around it (``pyproject.toml`` and the
``uv.lock`` that ``uv lock`` makes of it, with one dependency: sympy, at the version the lab's venv has, a pure-Python
package of some 1,000 modules). Two warm-up jobs, uncounted, make the commit's clone and its uv environment. Then each
repetition submits ``pkg.jobfns:first_line_then_import`` (1 CPU) twice, in turn: with ``python_env="uv"`` (the clone's
``.venv``, reused: node.sh reads its mark and says so) and ``python_env="venv"`` (the lab's job venv, the site's
choice), and reads from the function's mark the batch shell's start, the first line (``/proc`` start times: the
kernel's 10 ms tick) and the end of ``import sympy``. Both run as the bench user, who cannot write into the read-only
clone; root submits for it (``run_as``), which costs the submit call, not the start measured.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from bench.labenv import BenchError, Jobs, Lab
from bench.repo import GIT, make_repo
from bench.report import Section
from bench.stats import Row, comparison_table, target_row
from roach.lab.python import TOOLS_DIR
from roach.model.resources import Resources
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB

METHODS = ("uv", "venv")
ONE_CPU = Resources(gpus_per_node=0, cpus_per_task=1, time="00:05:00")
PYPROJECT = """[project]
name = "bench-uv"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["sympy==1.14.0"]
"""


def _uv_project(lab: Lab, work: Path) -> None:
    """The repository made a uv project: pyproject.toml and the uv.lock `uv lock` makes of it, pushed."""
    (work / "pyproject.toml").write_text(PYPROJECT)
    uv = str(lab.cfg.state / TOOLS_DIR / "uv")
    subprocess.run([uv, "lock", "--quiet"], cwd=work, check=True, capture_output=True, timeout=120)
    for args in (
        ["add", "-A"],
        ["commit", "-q", "-m", "a uv project"],
        ["push", "-q", "--receive-pack=git -c safe.directory=* receive-pack", "origin", "HEAD:main"],
    ):
        subprocess.run([*GIT, "-C", str(work), *args], check=True, capture_output=True)
    subprocess.run(["chown", "-R", lab.user, str(work.parent / "remote.git")], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(work.parent)], check=True)


def _wait_file(path: Path, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.02)
    raise BenchError(f"the function's first line did not run within {timeout:.0f}s (no {path})")


def run(lab: Lab, jobs: Jobs, reps: int, log=print) -> Section:
    wd = lab.workdir("uvenv")
    base = wd / "repo"
    work = make_repo(lab, base)
    _uv_project(lab, work)
    (wd / "marks").mkdir()
    subprocess.run(["chown", lab.user, str(wd / "marks")], check=True)
    store = Store(wd / "store.sqlite")
    cluster = LAB.with_(run_as=lab.user)
    n = 0

    def start(env: str) -> dict:
        nonlocal n
        n += 1
        out = wd / "marks" / f"{env}-{n}.json"
        job = submit(
            "pkg.jobfns:first_line_then_import",
            {"out": str(out)},
            resources=ONE_CPU,
            cluster=cluster,
            repo_root=work,
            store=store,
            log_root=str(wd / "logs"),
            python_env=env,
            name=f"bench-uv-{env}",
        )
        jobs.add([job.record.job_id])
        mark = _wait_file(out)
        job.wait(timeout=120)
        return {**mark, "log": job.log()}

    first = start("uv")  # builds the commit's clone and its environment
    built = re.search(r"built the uv environment of \w+ in ([\d.]+) s", first["log"])
    compiled = re.search(r"Python to bytecode in ([\d.]+) s", first["log"])
    if built is None:
        raise BenchError(f"the warm-up job built no uv environment:\n{first['log']}")
    start("venv")
    samples: dict[str, list[float]] = {m: [] for m in METHODS}
    imports: dict[str, list[float]] = {m: [] for m in METHODS}
    for rep in range(reps):
        for env in METHODS if rep % 2 == 0 else reversed(METHODS):
            mark = start(env)
            if env == "uv" and "reused the uv environment" not in mark["log"]:
                raise BenchError(f"a warm uv job did not reuse the environment:\n{mark['log']}")
            if mark.get("batch") is None:
                raise BenchError("the function found no batch shell to time its start from")
            samples[env].append(mark["t"] - mark["batch"])
            imports[env].append(mark["imported"] - mark["batch"])
        log(
            f"  rep {rep + 1}/{reps}: first line uv {samples['uv'][-1] * 1000:.0f} ms, venv "
            f"{samples['venv'][-1] * 1000:.0f} ms; sympy imported uv {imports['uv'][-1] * 1000:.0f} ms, venv "
            f"{imports['venv'][-1] * 1000:.0f} ms"
        )
    store.close()
    body = [
        "A warm job's start (1 CPU): from its batch shell's start to the function's first line, then to the end of its "
        "`import sympy` (1.14.0), with the project's uv environment (built once by the first, uncounted job, its "
        "bytecode compiled then; reused, node.sh's one file read and log line) and with the lab's venv (the site's "
        "own, sympy's bytecode there); `/proc` start times, the kernel's 10 ms tick. Paired per repetition, in "
        "alternating order; venv / uv below 1 means the uv environment's start is the slower. The warm-up job's prepare "
        f"built the environment in {built.group(1)} s, {compiled.group(1) if compiled else '(not said)'} s of it "
        "compiling the clone's and the environment's Python to bytecode, once for the commit on the node.",
        "",
        comparison_table(
            [
                Row("batch script start -> first line", samples, "s"),
                Row("batch script start -> sympy imported", imports, "s"),
            ],
            METHODS,
            roach="uv",
        ),
    ]
    summary = [
        target_row(
            "a warm job's start with the uv environment, as a multiple of the lab's venv",
            samples["uv"],
            samples["venv"],
            "venv",
            "ms",
            max_ratio=1.1,
            scale=1000,
        ),
        target_row(
            "a warm job's `import sympy` with the uv environment, as a multiple of the lab's venv",
            imports["uv"],
            imports["venv"],
            "venv",
            "ms",
            max_ratio=1.1,
            scale=1000,
        ),
    ]
    return Section(
        10, "A uv environment once built: a warm job's start", "\n".join(body), {"reps": reps}, summary=summary
    )
