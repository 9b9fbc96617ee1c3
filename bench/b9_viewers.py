"""Benchmark 9, viewers: the Slurm RPCs per minute of the bench user while 1, 5 or 20 viewers follow its jobs.

The queue holds one held array of N tasks (default 1,000). roach: that many `roach watch --job <array>` processes,
each its own process with one store, its Slurm commands run as the bench user, as people and agents start them; one of them polls and the
others read its rounds. submitit: as many processes, each with its own ``SlurmInfoWatcher`` over the N tasks and
an ``update()`` every interval, which is what a process waiting on its own jobs (``job.wait()``, ``job.done()``)
does (its commands run as the bench user too). Each configuration runs for a window after a warm-up, between two snapshots of slurmctld's and slurmdbd's
per-user counters. Then the time from a job's end in Slurm to the last of the viewers printing it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.labenv import PYLIB, ROOT, Jobs, Lab, submit_held_array
from bench.report import Section
from bench.stats import target_row

SUBMITIT_LOOP = """
import sys, time
import submitit
ids, interval, user = sys.argv[1].split(","), float(sys.argv[2]), sys.argv[3]

class AsUser(submitit.slurm.slurm.SlurmInfoWatcher):
    def _make_command(self):
        cmd = super()._make_command()
        return None if cmd is None else ["runuser", "-u", user, "--", *cmd]

w = AsUser(delay_s=interval)
for i in ids:
    w.register_job(i)
while True:
    w.update()
    time.sleep(interval)
"""


def _start(lab: Lab, argv: list[str], store: Path) -> subprocess.Popen[bytes]:
    """``argv`` as a process of its own; its Slurm commands run as the bench user (``--run-as``, ``runuser``)."""
    env = {
        **os.environ,
        **lab.env,
        "PYTHONPATH": f"{ROOT}:{PYLIB}",
        "ROACH_LAB_DIR": str(lab.cfg.state),
        "ROACH_STORE": str(store),
    }
    return subprocess.Popen(argv, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _per_minute(lab: Lab, procs: list[subprocess.Popen[bytes]], warmup_s: float, window_s: float) -> tuple[int, int]:
    """The bench user's (slurmctld, slurmdbd) RPCs per minute while ``procs`` run, after ``warmup_s``."""
    try:
        time.sleep(warmup_s)
        before = lab.snapshot()
        time.sleep(window_s)
        after = lab.snapshot()
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a viewer exited during the window")
    finally:
        for p in procs:
            p.kill()
            p.wait()
    per = 60.0 / window_s
    ctld, dbd = after[0].minus(before[0]), after[1].minus(before[1])
    return round(ctld.user(lab.user) * per), round(dbd.user(lab.user) * per)


def _seen_at(p: subprocess.Popen[str], job: str, out: dict[int, float]) -> None:
    """When ``p`` printed ``job``'s finished event (epoch seconds), into ``out`` under its pid."""
    assert p.stdout is not None
    for line in p.stdout:
        e = json.loads(line)
        if e.get("event") == "finished" and e.get("job_id") == job:
            out[p.pid] = time.time()


def end_to_shown(lab: Lab, jobs: Jobs, k: int, interval_s: float, work: Path) -> float:
    """Seconds from a job's end in Slurm (sacct's End) to the last of ``k`` viewers showing it."""
    job = str(lab.user_client().sbatch(["--hold", "--output=/dev/null", "--time=1"], "#!/bin/bash\nsleep 2\n"))
    jobs.add([job])
    argv = [sys.executable, "-m", "roach", "watch", "--cluster", "lab", "--run-as", lab.user, "--json", "--job", job]
    env = {**os.environ, **lab.env, "ROACH_LAB_DIR": str(lab.cfg.state), "ROACH_STORE": str(work / "end.sqlite")}
    viewers = [
        subprocess.Popen([*argv, "--interval", str(interval_s)], env=env, stdout=subprocess.PIPE, text=True, cwd="/")
        for _ in range(k)
    ]
    seen: dict[int, float] = {}
    readers = [threading.Thread(target=_seen_at, args=(v, job, seen), daemon=True) for v in viewers]
    for t in readers:
        t.start()
    try:
        time.sleep(3)  # every viewer started: one polls, the others read
        lab.user_client().release(job)
        for t in readers:
            t.join(timeout=120)
    finally:
        for v in viewers:
            v.kill()
            v.wait()
    if len(seen) != k:
        raise RuntimeError(f"{k - len(seen)} of {k} viewers never showed the job's end")
    (end,) = [a.end_time for a in lab.user_client().ends([job]) if a.step is None and a.end_time is not None]
    return max(seen.values()) - end.timestamp()


def run(
    lab: Lab,
    jobs: Jobs,
    counts: list[int],
    n_tasks: int,
    log,
    interval_s: float = 5.0,
    warmup_s: float = 8.0,
    window_s: float = 60.0,
) -> Section:
    array = submit_held_array(lab, n_tasks, name="bench-viewers")
    jobs.add([array])
    tasks = ",".join(f"{array}_{t}" for t in range(n_tasks))
    work = Path(tempfile.mkdtemp(prefix="roach-bench-viewers-", dir="/tmp"))
    watch = [sys.executable, "-m", "roach", "watch", "--cluster", "lab", "--run-as", lab.user, "--job", array]
    watch += ["--interval", str(interval_s)]
    got: dict[str, dict[int, tuple[int, int]]] = {"roach": {}, "submitit": {}}
    try:
        for k in counts:
            store = work / f"store-{k}.sqlite"
            log(f"  {k} roach viewer(s) over {n_tasks} tasks")
            got["roach"][k] = _per_minute(lab, [_start(lab, watch, store) for _ in range(k)], warmup_s, window_s)
            log(f"  {k} submitit process(es) over {n_tasks} tasks")
            loop = [sys.executable, "-c", SUBMITIT_LOOP, tasks, str(interval_s), lab.user]
            got["submitit"][k] = _per_minute(lab, [_start(lab, loop, store) for _ in range(k)], warmup_s, window_s)
        log(f"  a job's end, shown by {counts[-1]} viewers")
        latency = end_to_shown(lab, jobs, counts[-1], interval_s, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = [
        f"RPCs per minute the bench user sent while k viewers followed one held array of {n_tasks} tasks, each "
        f"viewer its own process, a round every {interval_s:g} s (roach: `roach watch`, one store; submitit: a "
        "`SlurmInfoWatcher` per process). slurmctld / slurmdbd, from sdiag's and sacctmgr's per-user counts.",
        "",
        "| viewers | roach slurmctld | roach slurmdbd | submitit slurmctld | submitit slurmdbd |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in counts:
        (rc, rd), (sc, sd) = got["roach"][k], got["submitit"][k]
        body.append(f"| {k} | {rc} | {rd} | {sc} | {sd} |")
    body += [
        "",
        f"From a job's end (sacct's End, to the second) to the last of {counts[-1]} viewers printing its `finished` "
        f"line: {latency:.1f} s (a round every {interval_s:g} s; the viewers look at the store twice a second).",
    ]
    one, most = counts[0], counts[-1]
    total = {m: {k: sum(v) for k, v in got[m].items()} for m in got}
    summary = [
        target_row(
            f"Slurm RPCs per minute with {most} viewers, as a multiple of {one} viewer",
            [total["roach"][most] / max(total["roach"][one], 1)],
            [total["submitit"][most] / max(total["submitit"][one], 1)],
            "submitit",
            "x",
            max_value=1.1,
        ),
        target_row(
            f"a job's end to all {most} viewers showing it",
            [latency],
            None,
            "",
            "s",
            max_value=interval_s + 1.0,
        ),
    ]
    return Section(
        9,
        "Viewers: Slurm RPCs per minute with 1, 5 and 20 viewers",
        "\n".join(body),
        {"tasks": n_tasks, "viewers": ",".join(map(str, counts)), "interval_s": interval_s, "window_s": window_s},
        summary=summary,
    )
