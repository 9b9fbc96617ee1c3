"""Benchmark 14's methods side by side (``--crowd-labs``): each on a fresh lab of its own that the bench starts with
the named lab's size and settings, all at once, so the section's full size fits in an hour.

One after another the methods take about two hours: the static ones wait half an hour on ``low`` behind the crowd's
big jobs. Side by side each still runs beside its own crowd on its own 16+ nodes (the same trace, offset, speed and
seed), so no method's load or queue is another's; the crowd's jobs sleep, so the daemons of six labs leave most of
this machine's two cores idle. Each method runs as ``python -m bench.b14_method`` on its lab; the one whose Slurm
must take a QOS list (slurm-native, where the system's release refuses one) runs in a release lab's root, started
with ``roach lab up --slurm V``. The labs are taken down at the end; their state directories stay, for the next
run's start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from bench.b14_crowd import SUBMITIT_METHODS, Crowd, keep
from bench.labenv import OUT, ROOT, BenchError, Lab, ensure_submitit
from roach.lab.python import link_job_venv
from roach.lab.release_root import ReleaseLab, SlurmRelease

PORT_STEP = 10  # a lab binds six ports from its base
FIRST_PORT = 1000  # the first method's lab: the named lab's port base + this
INSIDE_OUT = "/var/tmp"  # where a method in a release root writes its figures, as seen inside the root


@dataclass(frozen=True)
class SideBySide:
    """How the methods run side by side: ``native_release`` (``26.05``) is the release lab slurm-native runs on
    where the system's Slurm refuses a QOS list (None: it is not run then); ``native_state`` that lab's state
    directory (None: its default)."""

    native_release: str | None = None
    native_state: str | None = None


@dataclass(frozen=True)
class MethodLab:
    """Where one method runs: a lab of the system's Slurm (``release`` None) or one in a release root."""

    method: str
    state: Path
    port_base: int
    release: ReleaseLab | None = None


def side_by_side(
    lab: Lab, how: SideBySide, methods: list[str], crowd: Crowd, runs: int, step_s: float, refused: str | None, log
) -> dict[str, dict]:
    """Every method of ``methods`` at once, each on its own fresh lab; their figures, each kept as it ends."""
    plan = _plan(lab, how, methods, refused, log)
    if any(ml.method in SUBMITIT_METHODS for ml in plan):
        ensure_submitit(lab, log)  # once, here: a release root binds bench/out in read-only
    out: dict[str, dict] = {}
    try:
        for ml in plan:
            _start(lab, ml, log)
        threads = [threading.Thread(target=_run_one, args=(ml, crowd, runs, step_s, out, log)) for ml in plan]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for ml in plan:
            _stop(ml, log)
    missing = [ml.method for ml in plan if ml.method not in out]
    if missing:
        raise BenchError(f"benchmark 14: {', '.join(missing)} did not finish (their logs are above)")
    return out


def _plan(lab: Lab, how: SideBySide, methods: list[str], refused: str | None, log) -> list[MethodLab]:
    plan = []
    for i, method in enumerate(methods):
        port = lab.cfg.port_base + FIRST_PORT + PORT_STEP * i
        state = lab.cfg.state.parent / f"{lab.cfg.state.name}-crowd-{method}"
        if method != "slurm-native" or not refused:
            plan.append(MethodLab(method, state, port))
        elif how.native_release is None:
            log(f"  {method}: not run: {refused} (--crowd-native-slurm names a release lab that takes it)")
        else:
            release = SlurmRelease.parse(how.native_release)
            plan.append(MethodLab(method, state, port, ReleaseLab.resolve(release, how.native_state, None, None)))
    return plan


def _start(lab: Lab, ml: MethodLab, log) -> None:
    """The method's lab up, with the named lab's size and settings (a release lab: its size); a lab of this
    machine's Slurm made afresh (its state directory is the bench's own), so no earlier run's job is in it."""
    size = ["--nodes", str(lab.cfg.nodes), "--gpus-per-node", str(lab.cfg.gpus_per_node)]
    if ml.release is not None:
        argv = ["lab", "up", "--slurm", ml.release.release.value, "--state-dir", str(ml.release.state), *size,
                "--job-package", "submitit"]  # fmt: skip
    else:
        _stop(ml, log)
        shutil.rmtree(ml.state, ignore_errors=True)
        link_job_venv(ml.state, lab.cfg.state)  # the named lab's job venv: torch installed once
        c = lab.cfg
        argv = ["lab", "up", "--state-dir", str(ml.state), "--port-base", str(ml.port_base), *size, "--hosts",
                "--high-gpu-cap", str(c.high_gpu_cap), "--low-grace-time", str(c.low_grace_time),
                "--min-job-age", str(c.min_job_age), "--max-job-count", str(c.max_job_count),
                "--cred-expire", str(c.cred_expire), "--slurmd-timeout", str(c.slurmd_timeout)]  # fmt: skip
    log(f"  {ml.method}: starting its lab ({ml.release.release.value if ml.release else 'this machine'}'s Slurm, "
        f"{lab.cfg.nodes} x {lab.cfg.gpus_per_node})")  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "roach", *argv], capture_output=True, text=True)
    if res.returncode != 0:
        raise BenchError(f"{ml.method}'s lab did not start (exit {res.returncode}): {res.stderr[-1500:]}")


def _stop(ml: MethodLab, log) -> None:
    r = ml.release
    argv = [
        "lab",
        "down",
        *(["--slurm", r.release.value, "--state-dir", str(r.state)] if r else ["--state-dir", str(ml.state)]),
    ]
    res = subprocess.run([sys.executable, "-m", "roach", *argv], capture_output=True, text=True)
    if res.returncode != 0:
        log(f"  {ml.method}: its lab did not stop (exit {res.returncode}): {res.stderr[-500:]}")


def _run_one(ml: MethodLab, crowd: Crowd, runs: int, step_s: float, out: dict[str, dict], log) -> None:
    """``bench.b14_method`` on the method's lab, its lines in the log; its figures into ``out`` and bench/out."""
    name = f"roach-bench-b14-{ml.method}.json"
    trace = Path(crowd.trace).resolve()
    if ml.release is not None:  # the root sees only its own files and the source tree: the trace is copied in
        inside = Path(INSIDE_OUT) / "roach-bench-trace" / trace.name  # its name kept: the figures name it
        (ml.release.root / inside.parent.relative_to("/")).mkdir(exist_ok=True)
        shutil.copyfile(trace, ml.release.root / inside.relative_to("/"))
        trace = inside
    args = ["-m", "bench.b14_method", ml.method, "--trace", str(trace), "--offset", str(crowd.offset_s),
            "--speed", str(crowd.speed), "--seed", str(crowd.seed), "--warmup", str(crowd.warmup_s),
            "--runs", str(runs), "--step-s", str(step_s)]  # fmt: skip
    args += ["--deadline", str(crowd.deadline_s)] if crowd.deadline_s is not None else []
    if ml.release is not None:  # in the root, with the root's roach venv
        argv = [sys.executable, "-m", "roach", "lab", "shell", "--slurm", ml.release.release.value, "--state-dir",
                str(ml.release.state), "--", "python", *args, "--out", f"{INSIDE_OUT}/{name}"]  # fmt: skip
        result = ml.release.root / INSIDE_OUT.lstrip("/") / name
    else:
        result = OUT / f"b14-{ml.method}.json"  # where the section looks for a method's figures
        argv = [sys.executable, *args, "--out", str(result)]
    result.unlink(missing_ok=True)
    env = {**os.environ, "ROACH_LAB_DIR": str(ml.state), "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as p:
        assert p.stdout is not None
        for line in p.stdout:
            log(f"  [{ml.method}] {line.rstrip()}")
    if p.returncode != 0 or not result.exists():
        log(f"  {ml.method}: failed (exit {p.returncode})")
        return
    out[ml.method] = json.loads(result.read_text())
    if ml.release is not None:
        keep(ml.method, out[ml.method], log)
