"""Other people's load on the lab: a real trace's jobs played by users of their own (`roach lab load`).

:func:`start` reads the trace (a bad line refuses it before anything is queued), makes the load's users (never the
lab's user nor the bench's), writes the plan into ``<state>/load/`` and starts the player, a process of its own
(``python -m roach.lab.load``) that submits each job at its time as its user and appends its id to
``played.jsonl``. Each job is a batch script that holds its GPUs for its run (``sleep``), at its QOS, with its time
limit; a low job requeues when preempted, as Slurm does it. :func:`status` counts the played jobs from one
``squeue``; :func:`stop` ends the player and cancels only the jobs it played.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError, UsageError
from roach.lab import accounting
from roach.lab.config import LabConfig
from roach.lab.trace import Lab, Played, TraceFormat, plan_load, read_trace

USER_PREFIX = "roachload"  # the load's users, roachload1, roachload2, ...: never the lab's user nor the bench's


def users(k: int) -> list[str]:
    return [f"{USER_PREFIX}{i}" for i in range(1, k + 1)]


def load_dir(cfg: LabConfig) -> Path:
    return cfg.state / "load"


@dataclass(frozen=True)
class LoadSpec:
    """What `roach lab load start` was asked for."""

    trace: str
    format: str
    offset_s: float
    speed: float
    load: float
    users: int
    seed: int


def start(cfg: LabConfig, spec: LoadSpec) -> list[Played]:
    """Plan the load and start its player; refuses a load already playing, and a trace it cannot read."""
    d = load_dir(cfg)
    if _player_alive(d):
        raise UsageError(f"a load is already playing on the lab in {cfg.state}", hint="`roach lab load stop` first")
    jobs = read_trace(Path(spec.trace), TraceFormat(spec.format) if spec.format else None)
    plan = plan_load(
        jobs, Lab(cfg.nodes, cfg.gpus_per_node), offset_s=spec.offset_s, speed=spec.speed, load=spec.load,
        users=spec.users, seed=spec.seed,
    )  # fmt: skip
    names = users(spec.users)
    for name in names:
        ensure_unix_user(name)
        accounting.ensure_user(cfg, name)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write(d / "spec.json", json.dumps(asdict(spec), indent=2) + "\n")
    atomic_write(d / "plan.json", json.dumps([asdict(p) for p in plan]) + "\n")
    (d / "played.jsonl").write_text("")
    argv = [sys.executable, "-m", "roach.lab.load", str(cfg.state)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with open(d / "player.log", "ab") as log:
        p = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    atomic_write(d / "player.pid", f"{p.pid}\n")
    return plan


def ensure_unix_user(name: str) -> None:
    if subprocess.run(["id", "-u", name], capture_output=True).returncode == 0:
        return
    r = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise LabError(f"could not create the load's user {name}: {r.stderr.strip()}", hint=f"useradd {name}")


def _player_pid(d: Path) -> int | None:
    try:
        return int((d / "player.pid").read_text())
    except (OSError, ValueError):
        return None


def playing(cfg: LabConfig) -> bool:
    """Whether the lab's load player is still submitting."""
    return _player_alive(load_dir(cfg))


def _player_alive(d: Path) -> bool:
    pid = _player_pid(d)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _played(d: Path) -> list[dict]:
    """What the player wrote for each job it submitted: its id, its trace line and its user."""
    try:
        text = (d / "played.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def played_ids(d: Path) -> list[int]:
    return [rec["job_id"] for rec in _played(d)]


# -- the player --------------------------------------------------------------------------------------------
def script(job: Played) -> str:
    """The batch script of one played job: it holds its GPUs for its run."""
    return f"#!/bin/sh\nsleep {job.run_s:.1f}\n"


def sbatch_argv(job: Played, cfg: LabConfig, user: str) -> list[str]:
    argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--job-name=load-{job.line}", "--output=/dev/null"]
    argv += [f"--qos={job.qos}", f"--nodes={job.nodes}", f"--gres=gpu:{job.gpus_per_node}", f"--time={job.time_min}"]
    argv += ["--cpus-per-task=1", "--mem=10M", "--chdir=/tmp", "--requeue"]
    return argv


def play(state: Path, clock=time.monotonic, sleep=time.sleep) -> None:
    """Submit each planned job at its time, as its user; stops when the plan ends or on TERM."""
    cfg = LabConfig.load(state)
    d = load_dir(cfg)
    plan = [Played(**p) for p in json.loads((d / "plan.json").read_text())]
    names = users(json.loads((d / "spec.json").read_text())["users"])
    env = {**os.environ, **cfg.env()}
    t0 = clock()
    with open(d / "played.jsonl", "a") as out:
        for job in plan:
            wait = job.at_s - (clock() - t0)
            if wait > 0:
                sleep(wait)
            user = names[job.user]
            r = subprocess.run(sbatch_argv(job, cfg, user), input=script(job), capture_output=True, text=True, env=env)
            if r.returncode != 0:  # said in player.log; the load goes on
                print(f"trace line {job.line}: sbatch as {user} failed: {r.stderr.strip()[-300:]}", flush=True)
                continue
            rec = {"job_id": int(r.stdout.strip().split(";")[0]), "line": job.line, "user": user}
            out.write(json.dumps(rec) + "\n")
            out.flush()


# -- status and stop ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadStatus:
    playing: bool  # the player is still submitting
    planned: int
    played: int
    running: int
    pending: int
    gpus_busy: int
    lab_gpus: int
    share: dict[str, int]  # each load user: GPUs its running jobs hold


def status(cfg: LabConfig) -> LoadStatus:
    """The load's jobs from one ``squeue``: played, running, pending, GPUs busy (each job's from the plan), each
    user's share."""
    d = load_dir(cfg)
    if not (d / "plan.json").exists():
        raise LabError(f"no load on the lab in {cfg.state}", hint="start one: `roach lab load start --trace FILE`")
    plan = {p["line"]: Played(**p) for p in json.loads((d / "plan.json").read_text())}
    line_of = {rec["job_id"]: rec["line"] for rec in _played(d)}
    names = users(json.loads((d / "spec.json").read_text())["users"])
    out = subprocess.run(
        ["squeue", "-h", "-u", ",".join(names), "-o", "%A|%T|%u"], capture_output=True, text=True,
        env={**os.environ, **cfg.env()},
    )  # fmt: skip
    if out.returncode != 0:
        raise LabError(f"squeue failed: {out.stderr.strip()}", hint="is the lab up? `roach lab status`")
    running = pending = busy = 0
    share = dict.fromkeys(names, 0)
    for row in out.stdout.splitlines():
        job, state, user = row.split("|")
        line = line_of.get(int(job)) if job.isdigit() else None
        if line is None:
            continue
        if state == "RUNNING":
            running, busy = running + 1, busy + plan[line].gpus
            share[user] = share.get(user, 0) + plan[line].gpus
        elif state == "PENDING":
            pending += 1
    return LoadStatus(_player_alive(d), len(plan), len(line_of), running, pending, busy, cfg.gpus, share)


def stop(cfg: LabConfig) -> int:
    """End the player and cancel the jobs it played (only those); returns how many ids were cancelled."""
    d = load_dir(cfg)
    pid = _player_pid(d)
    if pid is not None and _player_alive(d):
        os.kill(pid, signal.SIGTERM)
    ids = played_ids(d)
    for i in range(0, len(ids), 500):
        subprocess.run(["scancel", *map(str, ids[i : i + 500])], capture_output=True, env={**os.environ, **cfg.env()})
    (d / "player.pid").unlink(missing_ok=True)
    return len(ids)


if __name__ == "__main__":
    play(Path(sys.argv[1]))
