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
from bench.stats import Row, comparison_table, load_sentence, target_row

METHODS = ("roach", "submitit map_array", "sbatch loop")


def run(
    lab: Lab, jobs: Jobs, n: int, reps: int, log=print, big: int = 10000, max_array_size: int | None = 1001
) -> Section:
    """``n`` runs by each method, then (``big`` > 0) roach's sweep of ``big`` runs, in every repetition; roach's
    sweeps split at ``max_array_size`` (sweep()'s, where below the lab's MaxArraySize) or else the lab's."""
    wd = lab.workdir("sweep")
    for sub in ("submitit", "marks", "logs"):
        (wd / sub).mkdir()
        shutil.chown(wd / sub, lab.user, lab.user)
    lab_limit = lab.root_client().max_array_size()  # `scontrol show config`, fresh
    load = os.getloadavg()[0]  # the machine's load as the benchmark starts (a test suite may run beside it)
    limit = min(lab_limit, max_array_size) if max_array_size else lab_limit
    got: dict[str, list[rounds.Cost]] = {m: [] for m in (*METHODS, "big")}
    walls: dict[str, list[float]] = {"roach": [], "submitit map_array": [], "big": []}  # the calls' own times (not
    # their driver processes' start)
    checks: dict[str, list[dict]] = {"roach": [], "big": []}  # what each roach sweep wrote (the driver's counts)
    work = _roach_repo(lab, wd)
    methods = {
        "submitit map_array": lambda: _submitit_map(lab, wd, n, walls["submitit map_array"]),
        "sbatch loop": lambda: submit_held(lab, n, "sweep-sbatch"),
        "roach": _roach_sweep(lab, wd, work, n, walls["roach"], checks["roach"], max_array_size, "roach"),
        "big": _roach_sweep(lab, wd, work, big, walls["big"], checks["big"], max_array_size, "big"),
    }
    order = [*METHODS, "big"] if big > 0 else list(METHODS)
    busy = _hold_nodes(lab, jobs, log)  # no released task starts inside a measured window
    for rep in range(reps):
        for m in order:
            if m in ("roach", "big"):  # the cancelled tasks of before purged (MaxJobCount; a quiet slurmctld)
                _settle(lab, log)
            ids: list[str] = []
            try:
                got[m].append(rounds.measure(lab, lambda ids=ids, m=m: ids.extend(methods[m]())))
                if m in walls:
                    got[m][-1].wall_s = walls[m][-1]
            finally:
                jobs.add(ids)
                jobs.cancel(ids, wait_s=120)
        log(
            f"bench 4: rep {rep + 1}: "
            + ", ".join(f"{m} {got[m][-1].wall_s:.2f}s {got[m][-1].rpcs} RPCs" for m in order if got[m])
            + (f" ({big} runs, {len(checks['big'][-1]['job_ids'])} arrays)" if big > 0 else "")
        )
    lab.root_client().scancel(busy)  # the nodes free again for the sweep that runs to the end
    rows = [
        Row(f"{n} runs: wall time of the submission", {m: [c.wall_s for c in got[m]] for m in METHODS}, "s"),
        Row(f"{n} runs: RPCs (slurmctld + slurmdbd)", {m: [c.rpcs for c in got[m]] for m in METHODS}),
    ]
    split = (
        f"below the lab's MaxArraySize ({lab_limit}, `scontrol show config`) roach's sweeps pass "
        f"`max_array_size={limit}` (Slurm's default MaxArraySize is 1001; `--sweep-max-array-size`), so that "
        "a large sweep is split as it would be at such a site"
        if limit < lab_limit
        else f"roach's sweeps split at the lab's MaxArraySize ({lab_limit}, `scontrol show config`)"
    )
    body = [
        f"Submitting {n} runs of a trivial function: the baselines held (then cancelled), roach's sweep "
        "as it always submits (held, bundle and records written, released; then cancelled); "
        f"{split}. While they submit, every node of the lab runs a job of root's (exclusive, normal QOS): a "
        "released task stays pending, so none starts inside a measured window (its `srun` would count as "
        "the bench user's RPCs), as on a busy cluster; before each roach sweep the cancelled tasks of the "
        "last ones are left to leave slurmctld (MinJobAge; until at most 1000 records remain), so that they "
        "neither fill MaxJobCount nor keep it busy. " + load_sentence(load, os.cpu_count()),
        "",
        comparison_table(rows, METHODS),
    ]
    if big > 0:
        body.append(_big_table(n, big, got, checks, limit))
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
    if big > 0:
        summary.append(
            target_row(
                f"a {big:,}-run sweep submitted: wall, as a multiple of the {n:,}-run sweep",
                [c.wall_s for c in got["big"]],
                [c.wall_s for c in got["roach"]],
                f"roach, {n} runs",
                "s",
                max_ratio=10.0,
            )
        )
        summary[-1]["target"] = "<= 10x"
    params = {"runs": n, "big_runs": big, "max_array_size": limit, "reps": reps, "load": round(load, 1)}
    return Section(4, "Sweep submission", "\n".join(body), params, summary=summary)


def _hold_nodes(lab: Lab, jobs: Jobs, log=print, timeout: float = 120) -> list[str]:
    """Every node of the lab taken by a job of root's (exclusive; normal QOS, which the sweeps' normal tasks do not
    preempt, and the high one's GPU cap would refuse), once they run."""
    root = lab.root_client()
    nodes = sorted({nd.name for nd in root.nodes()})
    ids = []
    for node in nodes:
        opts = ["--qos=normal", f"--nodelist={node}", "--exclusive", "--time=60", "--output=/dev/null"]
        ids.append(str(root.sbatch([*opts, "--job-name=bench-sweep-busy"], "#!/bin/bash\nsleep 3600\n")))
    jobs.add(ids, root=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = {str(r.ref.job) for r in root.squeue(job_ids=ids) if r.state.name == "RUNNING"}
        if running >= set(ids):
            return ids
        time.sleep(1)
    raise BenchError(f"the jobs holding the nodes {', '.join(nodes)} did not start within {timeout:.0f}s")


def _settle(lab: Lab, log=print, keep: int = 1000, timeout: float = 240) -> None:
    """Wait until slurmctld holds at most ``keep`` job records of the bench user's (``squeue -t all``: its ended
    jobs stay until MinJobAge has passed; a cancelled task of a released array is a record of its own)."""
    root = lab.root_client()
    argv = ["squeue", "--noheader", "--states=all", f"--user={lab.user}", "-o", "%i"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if len(root.run(argv).stdout.split()) <= keep:
            return
        time.sleep(2)
    log(f"bench 4: over {keep} of the bench user's job records still in slurmctld after {timeout:.0f}s; going on")


def _big_table(n: int, big: int, got: dict[str, list[rounds.Cost]], checks: dict[str, list[dict]], limit: int) -> str:
    """roach's sweep of ``big`` runs beside its ``n``-run sweep, repetition by repetition; what both wrote."""
    small_label, big_label = f"roach, {n} runs", f"roach, {big} runs"
    pair = {small_label: "roach", big_label: "big"}
    rows = [
        Row("wall time of the submission", {k: [c.wall_s for c in got[m]] for k, m in pair.items()}, "s"),
        Row("RPCs (slurmctld + slurmdbd)", {k: [c.rpcs for c in got[m]] for k, m in pair.items()}),
        Row("arrays made", {k: [len(c["job_ids"]) for c in checks[m]] for k, m in pair.items()}),
    ]
    per_rep = "; ".join(
        f"repetition {i + 1}: {s.wall_s:.2f} s and {b.wall_s:.2f} s ({b.wall_s / s.wall_s:.1f}x), "
        f"{s.rpcs} and {b.rpcs} RPCs"
        for i, (s, b) in enumerate(zip(got["roach"], got["big"]))
    )
    wrote = "; ".join(
        f"{label}: " + ", ".join(f"{c['bundles']}/{c['job_json']}/{c['array_scripts']}" for c in checks[m])
        for label, m in pair.items()
    )
    ok = all(
        c["runs"] == size and c["bundles"] == size and c["job_json"] == size and c["array_scripts"] == len(c["job_ids"])
        for m, size in (("roach", n), ("big", big))
        for c in checks[m]
    )
    arrays = sorted({len(c["job_ids"]) for c in checks["big"]})
    return "\n".join(
        [
            "",
            f"**{big} runs beside {n}**: roach's sweep of {big} runs, submitted the same way right after the {n}-run "
            f"one in each repetition (held, bundles and records written, released, then cancelled). At "
            f"`max_array_size={limit}` it made {' or '.join(map(str, arrays))} arrays (one `sbatch --hold` each, "
            "then one `scontrol release` command naming them all); the last column is the big sweep over the small one, paired by repetition.",
            "",
            comparison_table(rows, (small_label, big_label), roach=small_label),
            f"By repetition ({n} runs, then {big}): {per_rep}.",
            "",
            "What each sweep wrote, counted after its clock stopped (runs' bundle directories / runs' job.json / "
            f"arrays' job.sh, per repetition): {wrote}. "
            + ("Every run had its bundle and job.json." if ok else "**Some runs lacked their bundle or job.json.**"),
            "",
        ]
    )


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


def _roach_repo(lab: Lab, wd: Path) -> Path:
    """The bench user's own pushed repository, which roach's sweeps submit from."""
    from bench.repo import make_repo

    work = make_repo(lab, wd / "repo")
    subprocess.run(["chown", "-R", lab.user, str(wd / "repo")], check=True)
    return work


def _roach_sweep(
    lab: Lab, wd: Path, work: Path, n: int, walls: list[float], checks: list[dict], max_array: int | None, tag: str
):
    """One roach sweep of ``n`` runs per call, in a process of the bench user (bench/roach_driver.py ``sweep``),
    returning its arrays' job ids; its own time goes to ``walls``, what it wrote (the driver's counts) to
    ``checks``. Its tasks are cancelled by the caller after the submission is measured. (Until issue 18 the sweep
    ran in the benchmark's root process with ``run_as``, each of its commands wrapped in ``runuser``: a cost no
    user pays, and not submitit's way.)"""
    count = [0]

    def once() -> list[str]:
        count[0] += 1
        argv = [lab.python, "-m", "bench.roach_driver", "sweep", "--work", str(work), "--wd", str(wd)]
        argv += ["--out-dir", str(wd / "marks"), "--runs", str(n), "--tag", f"{tag}-{count[0]}"]
        if max_array:
            argv += ["--max-array-size", str(max_array)]
        proc = lab.as_user(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchError(f"roach driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        walls.append(got["wall"])
        checks.append(got)
        return got["job_ids"]

    return once
