"""Benchmark 4, sweep submission: N runs submitted, wall time and Slurm RPCs of the submission.

* roach: ``roach.launch.sweep.sweep("pkg.jobfns:first_line", grid=[{"out": ...}, ...], ...)`` (one job
  array per MaxArraySize, submitted held, bundled, recorded, released), in a process of the bench user
  (bench/roach_driver.py ``sweep``: the time of the call alone, the process's first), as submitit's.
* submitit: ``AutoExecutor.map_array(first_line, ...)`` (one sbatch of an array), in a process of the bench
  user (bench/submitit_driver.py ``map``: the time of the call alone).
* sbatch loop: one ``sbatch`` per run (a shell loop).

Baselines submit held (``--hold``) and are cancelled at once: only submission is measured, nothing runs.

Then one roach sweep of N runs runs to completion with ``roach watch --json`` (as root, ``--run-as`` the
bench user) watching it: the time to the last run's end, what the watch reported, and the runs' job.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench import rounds
from bench.labenv import BenchError, Jobs, Lab, submit_held
from bench.report import Section
from bench.stats import Row, comparison_table, target_row

METHODS = ("roach", "submitit map_array", "sbatch loop")


def run(lab: Lab, jobs: Jobs, n: int, reps: int, log=print) -> Section:
    wd = lab.workdir("sweep")
    for sub in ("submitit", "marks", "logs"):
        (wd / sub).mkdir()
        shutil.chown(wd / sub, lab.user, lab.user)
    got: dict[str, list[rounds.Cost]] = {m: [] for m in METHODS}
    walls: dict[str, list[float]] = {"roach": [], "submitit map_array": []}  # the calls' own times (not their
    # driver processes' start)
    methods = {
        "submitit map_array": lambda: _submitit_map(lab, wd, n, walls["submitit map_array"]),
        "sbatch loop": lambda: submit_held(lab, n, "sweep-sbatch"),
        "roach": _roach_sweep(lab, wd, n, walls["roach"]),
    }
    for rep in range(reps):
        for m in METHODS:
            ids: list[str] = []
            try:
                got[m].append(rounds.measure(lab, lambda ids=ids, m=m: ids.extend(methods[m]())))
                if m in walls:
                    got[m][-1].wall_s = walls[m][-1]
            finally:
                jobs.add(ids)
                jobs.cancel(ids)
        log(
            f"bench 4: rep {rep + 1}: "
            + ", ".join(f"{m} {got[m][-1].wall_s:.2f}s {got[m][-1].rpcs} RPCs" for m in METHODS if got[m])
        )
    rows = [
        Row(f"{n} runs: wall time of the submission", {m: [c.wall_s for c in got[m]] for m in METHODS}, "s"),
        Row(f"{n} runs: RPCs (slurmctld + slurmdbd)", {m: [c.rpcs for c in got[m]] for m in METHODS}),
    ]
    body = [
        f"Submitting {n} runs of a trivial function: the baselines held (then cancelled), roach's sweep "
        "as it always submits (held, bundle and records written, released; then cancelled).",
        comparison_table(rows, METHODS),
    ]
    body.append(_completion(lab, wd, n, jobs, log))
    sub = "submitit map_array"
    summary = [
        target_row(
            f"a {n}-run sweep submitted: wall",
            [c.wall_s for c in got["roach"]],
            [c.wall_s for c in got[sub]],
            "submitit map_array",
            "s",
            max_ratio=1.0,
        ),
        target_row(
            f"a {n}-run sweep submitted: Slurm RPCs",
            [c.rpcs for c in got["roach"]],
            [c.rpcs for c in got[sub]],
            "submitit map_array",
            "RPCs",
            max_value=3,
        ),
    ]
    return Section(4, "Sweep submission", "\n".join(body), {"runs": n, "reps": reps}, summary=summary)


def _completion(lab: Lab, wd: Path, n: int, jobs: Jobs, log=print) -> str:
    """One sweep of ``n`` runs to the end, watched by ``roach watch``; a Markdown paragraph of the outcome."""
    from bench.b1_latency import ONE_CPU
    from bench.repo import make_repo
    from roach.launch.sweep import sweep
    from roach.records.bundle import JobJson
    from roach.records.store import Store
    from roach.slurm.clusters.lab import LAB

    work = make_repo(lab, wd / "repo-run")
    store_path = wd / "run-store.sqlite"
    grid = [{"out": str(wd / "marks" / f"run-{i}.t")} for i in range(n)]
    t0 = time.monotonic()
    sw = sweep(
        "pkg.jobfns:first_line",
        grid=grid,
        resources=ONE_CPU,
        cluster=LAB.with_(run_as=lab.user),
        name="sweep-run",
        repo_root=work,
        store=Store(store_path),
        log_root=str(wd / "logs"),
        clone_root=str(wd / "clones"),
        run_root=str(wd / "runs"),
        experiment="bench-sweep",
    )
    submitted_s = time.monotonic() - t0
    jobs.add([str(i) for i in sw.array_ids])
    env = {**os.environ, **lab.env, "ROACH_STORE": str(store_path)}
    watch = subprocess.run(
        [
            sys.executable,
            "-m",
            "roach",
            "watch",
            "--cluster",
            "lab",
            "--run-as",
            lab.user,
            "--json",
            "--interval",
            "5",
            "--heartbeat",
            "60",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    took = time.monotonic() - t0
    events = [json.loads(line) for line in watch.stdout.splitlines() if line.startswith("{")]
    kinds = Counter(e.get("event") for e in events)
    started = {e.get("job_id") for e in events if e.get("event") == "started"}
    finished = {e.get("job_id") for e in events if e.get("event") == "finished"}
    jj = [JobJson.from_json(Path(j.paths.job_json).read_text()) for j in sw if Path(j.paths.job_json).exists()]
    statuses = Counter(j.status for j in jj)
    log(
        f"bench 4: {n} runs completed in {took:.0f}s; watch exit {watch.returncode}, {dict(kinds)}; job.json {dict(statuses)}"
    )
    ours = {j.slurm_id for j in sw}
    return "\n".join(
        [
            "",
            f"**A sweep of {n} runs to the end** (the trivial function, 1 CPU each, no parallelism limit), watched "
            "by `roach watch --json` from the submission on:",
            "",
            "| measure | value |",
            "| --- | --- |",
            f"| submission (sbatch --hold per array, bundle, records, release) | {submitted_s:.1f} s, {len(sw.array_ids)} array(s) |",
            f"| submission to the watch's exit (queue empty) | {took:.0f} s |",
            f"| watch exit code (0: every watched job COMPLETED) | {watch.returncode} |",
            f"| runs the watch reported started / finished | {len(started & ours)} / {len(finished & ours)} of {n} |",
            f"| watch events by kind | {', '.join(f'{k} {v}' for k, v in sorted(kinds.items(), key=lambda kv: str(kv[0])))} |",
            f"| runs' job.json files / by status | {len(jj)} of {n} / {', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))} |",
            "",
        ]
    )


def _submitit_map(lab: Lab, wd, n: int, walls: list[float]) -> list[str]:
    proc = lab.as_user(
        [
            lab.python,
            "-m",
            "bench.submitit_driver",
            "map",
            "--folder",
            str(wd / "submitit" / "%j"),
            "--n",
            str(n),
            "--out-dir",
            str(wd / "marks"),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BenchError(f"submitit driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    walls.append(got["wall"])
    return got["job_ids"]


def _roach_sweep(lab: Lab, wd, n: int, walls: list[float]):
    """One roach sweep of ``n`` runs per call, in a process of the bench user (bench/roach_driver.py ``sweep``),
    returning its arrays' job ids; its own time goes to ``walls``. Its tasks are cancelled by the caller after the
    submission is measured. (Until issue 18 the sweep ran in the benchmark's root process with ``run_as``, each
    of its commands wrapped in ``runuser``: a cost no user pays, and not submitit's way.)"""
    from bench.repo import make_repo

    work = make_repo(lab, wd / "repo")
    subprocess.run(["chown", "-R", lab.user, str(wd / "repo")], check=True)  # the bench user's own repository
    count = [0]

    def once() -> list[str]:
        count[0] += 1
        argv = [lab.python, "-m", "bench.roach_driver", "sweep", "--work", str(work), "--wd", str(wd)]
        argv += ["--out-dir", str(wd / "marks"), "--runs", str(n), "--tag", f"roach-{count[0]}"]
        proc = lab.as_user(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchError(f"roach driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        walls.append(got["wall"])
        return got["job_ids"]

    return once
