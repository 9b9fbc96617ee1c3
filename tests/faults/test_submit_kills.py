"""`roach submit`, `roach sweep` and `roach hold` killed (SIGKILL) at random moments: afterwards, once the next
command of the same kind has run, no job is in the queue that no record names, and no job ran without one.

Each command is first run whole to time it; the kills land uniformly over that time, so they fall before, in
and after the held sbatch, its record and its release alike. ``ROACH_KILL_SEED`` replays a run's moments."""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time

import pytest

from roach.lab.config import LAB_USER
from roach.records.store import Store
from tests.faults.conftest import TARGET

KILLS = 20  # per command


def _argv(kind: str, name: str, faults, grid: str) -> list[str]:
    roots = ["--log-root", faults.roots["log_root"]]
    code = ["--repo-root", str(faults.repo.work), *roots, "--clone-root", faults.roots["clone_root"]]
    common = ["--cluster", "lab", "--resources", "CPU", "--name", name, "--run-as", LAB_USER]
    if kind == "hold":
        return ["hold", *common, "--time", "1", *roots]
    if kind == "sweep":
        return ["sweep", TARGET, "--grid", grid, *common, *code]
    return ["submit", TARGET, "--arg", "steps=1", *common, *code]


def _run(argv: list[str], env: dict[str, str], kill_after: float | None = None) -> float:
    """Run ``roach ARGV``; with ``kill_after``, SIGKILL it then unless it ended. Returns the seconds it ran."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "roach", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        _, err = proc.communicate(timeout=kill_after if kill_after is not None else 120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        return time.monotonic() - t0
    assert kill_after is not None or proc.returncode == 0, err[-2000:]
    return time.monotonic() - t0


def _started(slurm, name: str) -> set[int]:
    """The jobs called ``name`` that accounting says started (a held job cancelled never did)."""
    r = slurm.run(["sacct", "-X", "-D", "-n", "-P", "-o", "JobID,JobName,Start", "-S", "now-1hours"], retry=False)
    rows = [line.split("|") for line in r.stdout.splitlines()]
    return {
        int(row[0].split("_")[0].split("[")[0])
        for row in rows
        if row[1:2] == [name] and row[2] not in ("Unknown", "None", "")
    }


@pytest.mark.lab
@pytest.mark.parametrize("kind", ["submit", "sweep", "hold"])
def test_a_command_killed_at_any_moment_leaves_no_job_that_no_record_names(kind, faults, user_slurm, lab, tmp_path):
    seed = int(os.environ.get("ROACH_KILL_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    name = f"kill-{kind}-{secrets.token_hex(3)}"
    store = Store(faults.base / f"{name}.sqlite")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"steps": 1}, {"steps": 2}]))
    env = {**os.environ, "ROACH_STORE": str(store.path)}
    argv = _argv(kind, name, faults, str(grid))
    try:
        whole = _run(argv, env)
        moments = sorted(rng.uniform(0.05, whole) for _ in range(KILLS))
        for at in moments:
            _run(argv, env, kill_after=at)
        _run(argv, env)  # the next command of the same kind settles what the kills left

        recorded = {r.job_id for r in store.recent(10_000) if r.name == name}
        queued = {q.ref.job for q in user_slurm.squeue() if q.name == name and q.state.is_active}
        context = f"seed {seed}, moments {[round(m, 2) for m in moments]} of {whole:.2f} s"
        assert queued <= recorded, f"queued without a record: {sorted(queued - recorded)}; {context}"
        assert _started(user_slurm, name) <= recorded, f"ran without a record; {context}"
    finally:
        ids = sorted({q.ref.job for q in user_slurm.squeue() if q.name == name})
        if ids:
            user_slurm.scancel(ids)
