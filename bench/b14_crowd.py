"""Benchmark 14, a sweep on a crowded cluster: the same sweep run to its end by each method on a lab of at least 16
nodes while other people's load, a real trace (`roach lab load`), fills it; the same trace, offset and seed for
every method, the queue emptied between them.

Methods, each the bench user's sweep of ``runs`` checkpointing one-GPU runs of heavy-tailed lengths
(``bench/jobfns.py`` ``paced``: steps of ``step_s`` seconds, a checkpoint every 5), watched by `roach watch` to the
end:

* ``roach``: `roach sweep --tier auto` (the plan's placement at submit), then `roach watch --rebalance`;
* ``static-low``: every run on the lowest tier, no rebalancing;
* ``static-normal``: every run at the default QOS (no tier), no rebalancing;
* ``slurm-native``: one array naming every QOS (``--qos=high,normal,low``), so that Slurm picks, where the release
  takes a list (24.11 on; 22.05 refuses it, and the section says so); submitted with submitit, the job below;
* ``submitit``: submitit's ``map_array`` at QOS low, the same run as a ``Checkpointable`` (its step kept on the
  object, which submitit pickles on its USR2 signal and requeues).

Figures: the makespan (submit to the last run's end), the mean completion of a run, GPU-hours allocated and
useful and steps recomputed (`roach report`), the most GPUs the sweep held on the capped tier (sampled every few
seconds; never over its cap), other users' jobs the sweep's commands cancelled (none), and the promotion latency:
from a run of the sweep ending on the capped tier while another waits below, to the next start of a run of the
sweep there.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.b14_rounds import measure_rounds, section_text
from bench.labenv import BenchError, Jobs, Lab, ensure_submitit, wait_for
from bench.repo import make_repo
from bench.report import Section
from bench.stats import Row, comparison_table, target_row
from roach.lab.load import LoadSpec, load_dir, played_ids
from roach.lab.load import start as start_load
from roach.lab.load import stop as stop_load
from roach.scheduler.fields import parse_gres_gpus

if TYPE_CHECKING:
    from bench.b14_labs import SideBySide


def lab_release(lab: Lab) -> str:
    """The lab's Slurm release, as sbatch says it (``22.05.8``)."""
    return lab.root_client().run(["sbatch", "--version"]).stdout.split()[-1]


TITLE = "A sweep on a crowded cluster"
LS_TARGET_MS = 150  # `roach ls` beside the crowd, a whole process as a user runs it
# the targets' methods first; roach-low (every run on the lowest tier, `watch --rebalance` promoting them) is the one
# where the rebalancer has runs below the capped tier to promote, so it measures the promotion latency
METHODS = ("roach", "slurm-native", "static-low", "submitit", "static-normal", "roach-low")
ROACH_METHODS = ("roach", "static-low", "static-normal", "roach-low")
SUBMITIT_METHODS = ("slurm-native", "submitit")
REBALANCED = ("roach", "roach-low")
EVERY_QOS = "high,normal,low"  # slurm-native's one submission, top down
MIN_NODES = 16
CAPPED = "high"  # the lab's capped tier
WATCH_INTERVAL_S = 5.0
LOAD_LOCK = Path("/var/tmp/roach-bench-load.lock")


@dataclass(frozen=True)
class Crowd:
    """The load every method runs beside."""

    trace: str
    offset_s: float = 0.0
    speed: float = 60.0
    seed: int = 1
    load: float = 0.9
    users: int = 8
    warmup_s: float = 120.0
    deadline_s: float | None = None  # a method's sweep still running this long after its submission is cancelled


@dataclass
class Samples:
    """What the sampler saw every few seconds: the sweep's running GPUs per QOS, and the lab's free GPUs."""

    t: list[float] = field(default_factory=list)
    mine: list[dict[str, int]] = field(default_factory=list)
    free: list[int] = field(default_factory=list)


def lengths(runs: int, seed: int, smallest: int = 10, most: int = 240) -> list[int]:
    """Each run's steps: a Pareto tail (shape 1.5) from ``smallest``, cut at ``most``, the same for every method."""
    rng = random.Random(seed)
    return [min(most, int(smallest * rng.paretovariate(1.5))) for _ in range(runs)]


def run(
    lab: Lab,
    jobs: Jobs,
    log,
    *,
    crowd: Crowd,
    runs: int,
    step_s: float,
    methods: tuple[str, ...] = METHODS,
    rounds: bool = True,
    labs: SideBySide | None = None,
) -> Section:
    """The section: every method of ``methods`` one after another on ``lab`` (``labs`` None), or side by side,
    each on a fresh lab of its own that the bench starts (bench/b14_labs.py); a method not run takes the figures
    an earlier run kept for the same crowd and sweep."""
    if lab.cfg.nodes < MIN_NODES:
        raise BenchError(
            f"benchmark 14 needs a lab of at least {MIN_NODES} nodes; this one has {lab.cfg.nodes} "
            f"(`roach lab down`, then `roach lab up --nodes {MIN_NODES}`)"
        )
    refused = _several_qos_refused(lab)
    wanted = [m for m in METHODS if m in methods]
    if labs is not None:
        from bench.b14_labs import side_by_side

        out = side_by_side(lab, labs, wanted, crowd, runs, step_s, refused, log)
    else:
        out = _one_after_another(lab, jobs, wanted, crowd, runs, step_s, refused, log)
    for method in METHODS:
        kept = _kept(method, crowd, runs) if method not in out else None
        if kept is not None:
            log(f"  {method}: not run; its figures kept from an earlier run of the same crowd and sweep")
            out[method] = kept
    out = {m: out[m] for m in METHODS if m in out}  # the section's order, not the order they ended in
    _empty_queue(lab)
    how = "side by side, each method on a fresh lab of its own" if labs else "one after another on this lab"
    section = _section(lab, out, crowd, runs, step_s, None if "slurm-native" in out else refused, how)
    if rounds:  # the load at 5000x: minutes of both cores
        section.body += section_text(measure_rounds(lab, crowd.trace, seed=crowd.seed, log=log), crowd.trace)
    return section


def _one_after_another(
    lab: Lab, jobs: Jobs, methods: list[str], crowd: Crowd, runs: int, step_s: float, refused: str | None, log
) -> dict[str, dict]:
    """Each method in turn on ``lab``, its load restarted on an empty queue; each method's figures kept as it ends."""
    out: dict[str, dict] = {}
    steps = lengths(runs, crowd.seed)
    for method in methods:
        if method == "slurm-native" and refused:
            log(f"  {method}: not run: {refused}")
            continue
        if method in SUBMITIT_METHODS:
            ensure_submitit(lab, log)
        out[method] = measure(lab, jobs, method, crowd, steps, step_s, log)
        keep(method, out[method], log)
    return out


def measure(lab: Lab, jobs: Jobs, method: str, crowd: Crowd, steps: list[int], step_s: float, log) -> dict:
    """One method's sweep of ``steps`` run to its end on ``lab`` beside a fresh crowd: its figures, with the crowd
    and sweep they were of and the lab's release."""
    log(f"  {method}: {len(steps)} runs beside {Path(crowd.trace).name} at {crowd.speed}x")
    figures = _once(lab, jobs, method, crowd, steps, step_s, log)
    return {**figures, "crowd": _same(crowd, len(steps)), "slurm": lab_release(lab)}


def _once(lab: Lab, jobs: Jobs, method: str, crowd: Crowd, steps: list[int], step_s: float, log) -> dict:
    wd = lab.workdir(f"crowd-{method}")
    for sub in ("logs", "runs", "clones", "progress"):
        (wd / sub).mkdir()
        os.chown(wd / sub, *_ids(lab))
    grid = wd / "grid.json"
    grid.write_text(json.dumps([{"steps": s, "step_s": step_s} for s in steps]))
    os.chmod(grid, 0o644)
    stop_load(lab.cfg)
    _empty_queue(lab)
    with _alone(LOAD_LOCK):  # labs side by side: the load's Unix users are made by one of them at a time
        start_load(lab.cfg, LoadSpec(crowd.trace, "", crowd.offset_s, crowd.speed, crowd.load, crowd.users, crowd.seed))
    samples, stop = Samples(), threading.Event()
    try:
        time.sleep(crowd.warmup_s)
        sampler = threading.Thread(target=_sample, args=(lab, samples, stop), daemon=True)
        sampler.start()
        t0 = time.time()
        if method in ROACH_METHODS:
            figures = _roach_sweep(lab, jobs, method, wd, grid, crowd.deadline_s)
        else:
            figures = _submitit_sweep(lab, jobs, method, wd, grid, steps, step_s, crowd.deadline_s)
        stop.set()
        sampler.join()
        load_ids = played_ids(load_dir(lab.cfg))
    finally:
        stop.set()
        stop_load(lab.cfg)
    allocs, ends = figures.pop("allocs"), figures.pop("ends")
    return {
        **figures,
        "t0": t0,
        **_completion(ends, t0, len(steps), figures.get("censored_s")),
        "max_capped_gpus": max((m.get(CAPPED, 0) for m in samples.mine), default=0),
        "promotion_latency_s": _promotion_latencies(allocs),
        "others_touched": _others_cancelled_by_bench(lab, load_ids),
        "samples": {"t": [x - t0 for x in samples.t], "mine": samples.mine, "free": samples.free},
    }


@contextmanager
def _alone(path: Path) -> Iterator[None]:
    """Held by one process at a time (an exclusive lock on ``path``)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _same(crowd: Crowd, runs: int) -> dict:
    """What makes two runs of a method comparable: the crowd and the sweep."""
    return {"trace": Path(crowd.trace).name, "offset_s": crowd.offset_s, "speed": crowd.speed, "seed": crowd.seed,
            "load": crowd.load, "users": crowd.users, "warmup_s": crowd.warmup_s, "runs": runs}  # fmt: skip


def _kept(method: str, crowd: Crowd, runs: int) -> dict | None:
    """A method's figures kept by an earlier run (bench/out/b14-<method>.json) of the same crowd and sweep; None
    where there are none, or they were of another."""
    from bench.labenv import OUT

    try:
        figures = json.loads((OUT / f"b14-{method}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return figures if figures.get("crowd") == _same(crowd, runs) else None


def keep(method: str, figures: dict, log) -> None:
    """One method's figures in bench/out as soon as it ends, so a run stopped later keeps them."""
    from bench.labenv import OUT

    path = OUT / f"b14-{method}.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # bench/out is not in a fresh clone
    path.write_text(json.dumps(figures, indent=1))
    log(f"  {method}: makespan {figures['makespan_s']:.0f} s, {figures['completed']} completed ({path})")


def _time_views(lab: Lab, store: Path, stop: threading.Event, seen: dict[str, list[float]], every_s=20.0) -> None:
    """While the sweep runs: the wall time of `roach ls` and of one `roach top --once` frame, as the user runs them
    (whole processes, Python's start included), and the CPU each took (``<name> cpu``): the two apart are the
    time it waited, on Slurm or for a core."""
    views = {"ls": ["ls", "--cluster", "lab", "--limit", "20"], "top": ["top", "--once", "--cluster", "lab"]}
    while not stop.wait(every_s):
        for name, argv in views.items():
            timed = _timed_roach(lab, store, *argv)
            if timed is not None:
                seen.setdefault(name, []).append(timed[0])
                seen.setdefault(f"{name} cpu", []).append(timed[1])


def _timed_roach(lab: Lab, store: Path, *args: str) -> tuple[float, float] | None:
    """`roach ARGS` as :func:`_roach` runs it: its wall and CPU seconds (its own and its children's, from the
    kernel's accounting of that one process), or None where it failed."""
    argv, env = _roach_argv(lab, store, *args)
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    return (wall, usage.ru_utime + usage.ru_stime) if p.returncode == 0 else None


def _completion(ends: dict[str, dict], t0: float, runs: int, censored_s: float | None) -> dict:
    """The makespan, the mean completion of a run and the runs completed; where the sweep was stopped at a deadline,
    each run not completed by then counts as ending at the deadline (both figures then lower bounds)."""
    done = [e["end"] - t0 for e in ends.values() if e["state"] == "COMPLETED"]
    if censored_s is None:
        times = [e["end"] - t0 for e in ends.values()]
    else:
        times = done + [max(censored_s, max(done, default=0.0))] * (runs - len(done))
    return {"makespan_s": max(times), "mean_completion_s": statistics.mean(times), "completed": len(done)}


def _cancel_at_deadline(lab: Lab, ids: list[str], deadline_s: float) -> dict:
    """The method's jobs cancelled (as the bench user) once its sweep ran ``deadline_s``: its figures are then lower
    bounds, said so in the section."""
    lab.user_client().run(["scancel", *ids], ok_codes=(0, 1))
    time.sleep(15)  # the cancelled jobs' ends reach accounting, which the figures read
    return {"censored_s": deadline_s}


def _roach_sweep(lab: Lab, jobs: Jobs, method: str, wd: Path, grid: Path, deadline_s: float | None = None) -> dict:
    """roach's sweep on the method's tier, watched to its end (``roach``: rebalanced); its figures from `roach
    report` and one sacct."""
    work = make_repo(lab, wd / "repo")
    store = wd / "store.sqlite"
    tier = {
        "roach": ["--tier", "auto"],
        "static-low": ["--tier", "low"],
        "static-normal": [],
        "roach-low": ["--tier", "low"],
    }[method]
    common = ["--repo-root", str(work), "--log-root", str(wd / "logs"), "--clone-root", str(wd / "clones")]
    sw = _roach(lab, store, "sweep", "pkg.jobfns:paced", "--grid", str(grid), "--cluster", "lab", "--resources",
                "GPU1", *tier, "--experiment", method, *common, "--run-root", str(wd / "runs"), "--json")  # fmt: skip
    jobs.add(json.loads(sw.stdout)["array_ids"])
    watch = ["watch", "--cluster", "lab", "--interval", str(WATCH_INTERVAL_S), "--json"]
    watch += ["--rebalance", "--repo-root", str(work)] if method in REBALANCED else []
    views: dict[str, list[float]] = {}
    stop = threading.Event()
    timer = threading.Thread(target=_time_views, args=(lab, store, stop, views), daemon=True)
    if method in REBALANCED:
        timer.start()
    censored: dict = {}
    try:
        watched = _roach(lab, store, *watch, check=False, timeout=deadline_s)
    except subprocess.TimeoutExpired:
        censored = _cancel_at_deadline(lab, [str(i) for i in json.loads(sw.stdout)["array_ids"]], deadline_s or 0)
        watched = subprocess.CompletedProcess([], -1)
    stop.set()
    report = json.loads(_roach(lab, store, "report", method, "--json").stdout)
    from roach.records.store import Store

    with Store(store) as s:
        records = sorted(s.all_jobs(), key=lambda r: r.submitted_at)
    allocs = _allocations(lab, sorted({str(r.job_id) for r in records}))
    latest = {r.run_id: r.slurm_id for r in records}  # each run's latest job
    return {
        **censored,
        "watch_exit": watched.returncode,
        "views_s": views,
        "allocated_gpu_h": report["total"]["allocated_gpu_h"],
        "useful_gpu_h": report["total"]["useful_gpu_h"],
        "recomputed_steps": report["total"]["recomputed_steps"],
        "preemptions": report["total"]["preemptions"],
        "allocs": allocs,
        "ends": _ends(allocs, latest),
    }


def _submitit_sweep(
    lab: Lab, jobs: Jobs, method: str, wd: Path, grid: Path, steps: list[int], step_s: float, deadline_s=None
) -> dict:
    """submitit's map_array of the same runs (``submitit``: QOS low; ``slurm-native``: every QOS, Slurm picks),
    waited on with one squeue every few seconds; its figures from sacct and the runs' step files."""
    qos = EVERY_QOS if method == "slurm-native" else "low"
    argv = [lab.python, "-m", "bench.submitit_driver", "paced", "--folder", str(wd / "submitit" / "%j"),
            "--grid", str(grid), "--qos", qos, "--progress-dir", str(wd / "progress")]  # fmt: skip
    proc = lab.as_user(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"submitit driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    ids = json.loads(proc.stdout.strip().splitlines()[-1])["job_ids"]
    jobs.add(ids)
    user, t0, censored = lab.user_client(), time.time(), {}
    while user.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], ok_codes=(0, 1)).stdout.strip():
        if deadline_s is not None and time.time() - t0 > deadline_s:
            censored = _cancel_at_deadline(lab, ids, deadline_s)
            break
        time.sleep(WATCH_INTERVAL_S)
    allocs = _allocations(lab, ids)
    done = [len((wd / "progress" / f"{i}.steps").read_text().split()) if (wd / "progress" / f"{i}.steps").exists()
            else 0 for i in range(len(steps))]  # fmt: skip
    held = sum((a["end"] or time.time()) - a["start"] for a in allocs if a["start"] is not None)
    return {
        **censored,
        "watch_exit": None,
        "allocated_gpu_h": held / 3600,
        "useful_gpu_h": sum(steps) * step_s / 3600,
        "recomputed_steps": sum(max(d - s, 0) for d, s in zip(done, steps)),
        "preemptions": sum(a["state"] in ("PREEMPTED", "REQUEUED") for a in allocs),
        "allocs": allocs,
        "ends": _ends(allocs, {a["job"]: a["job"] for a in allocs}),
    }


def _several_qos_refused(lab: Lab) -> str | None:
    """Why this lab's Slurm refuses one submission naming several QOS (None: it takes it)."""
    res = lab.user_client().run(
        ["sbatch", "--test-only", f"--qos={EVERY_QOS}", "--gres=gpu:1", "--wrap=true"], ok_codes=(0, 1), retry=False
    )
    if res.returncode == 0:
        return None
    said = (res.stderr or res.stdout).strip().splitlines()
    return f"Slurm refuses `sbatch --qos={EVERY_QOS}` ({said[-1] if said else f'exit {res.returncode}'})"


def _ids(lab: Lab) -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(lab.user)
    return pw.pw_uid, pw.pw_gid


def _roach(
    lab: Lab, store: Path, *args: str, check: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """`roach ARGS --run-as <bench user>` with the method's own store: Slurm's commands are the bench user's, as a
    user's on a login host (the lab's job venv, which the bench user runs, has no roach command line)."""
    argv, env = _roach_argv(lab, store, *args)
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", timeout=timeout)
    if check and res.returncode != 0:
        raise BenchError(f"roach {args[0]} failed (exit {res.returncode}): {(res.stderr or res.stdout)[-1500:]}")
    return res


def _roach_argv(lab: Lab, store: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of :func:`_roach`."""
    env = {**os.environ, **lab.env, "ROACH_STORE": str(store), "ROACH_LAB_DIR": str(lab.cfg.state)}
    # as a user's machine runs it: Python keeps roach's bytecode (a shell that says not to made every timed `roach
    # ls` compile every module it imports: 351 ms against 130-190 ms with the bytecode kept)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return [sys.executable, "-m", "roach", *args, "--run-as", lab.user], env


def _sample(lab: Lab, samples: Samples, stop: threading.Event, every_s: float = 5.0) -> None:
    """One root squeue every ``every_s``: the bench user's running GPUs per QOS, and every user's."""
    root = lab.root_client()
    total = lab.cfg.gpus
    while not stop.is_set():
        out = root.run(["squeue", "-h", "-t", "RUNNING", "-o", "%u|%q|%b|%D"]).stdout
        mine: dict[str, int] = {}
        busy = 0
        for line in out.splitlines():
            user, qos, gres, nodes = line.split("|")
            gpus = parse_gres_gpus(gres) * int(nodes)
            busy += gpus
            if user == lab.user:
                mine[qos] = mine.get(qos, 0) + gpus
        samples.t.append(time.time())
        samples.mine.append(mine)
        samples.free.append(total - busy)
        stop.wait(every_s)


def _allocations(lab: Lab, ids: list[str]) -> list[dict]:
    """Every allocation of the method's jobs (`sacct -X -D`): QOS, eligible, start and end (epoch s)."""
    fmt = "JobID,QOS,Eligible,Start,End,State"
    out = lab.user_client().run(["sacct", "-X", "-D", "-n", "-P", f"--format={fmt}", "-j", ",".join(ids)]).stdout
    rows = []
    for line in out.splitlines():
        job, qos, eligible, start, end, state = line.split("|")
        rows.append(
            {"job": job, "qos": qos, "eligible": _t(eligible), "start": _t(start), "end": _t(end), "state": state}
        )
    return rows


def _t(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _ends(allocs: list[dict], latest: dict[str, str]) -> dict[str, dict]:
    """Each run's end and state: the last allocation of its latest job (``latest``: run: Slurm job id)."""
    by_job: dict[str, dict] = {}
    for a in allocs:
        if a["job"] not in by_job or (a["start"] or 0) >= (by_job[a["job"]]["start"] or 0):
            by_job[a["job"]] = a
    return {
        run: {"end": by_job[j]["end"] or time.time(), "state": by_job[j]["state"]}
        for run, j in latest.items()
        if j in by_job
    }


def _promotion_latencies(allocs: list[dict]) -> list[float]:
    """For each end of one of the sweep's runs on the capped tier while another of its runs waited on a lower
    one: the seconds to the next start of a run of the sweep on the capped tier."""
    capped = [a for a in allocs if a["qos"] == CAPPED]
    waiting = [a for a in allocs if a["qos"] != CAPPED and a["eligible"] is not None]
    out = []
    for a in capped:
        te = a["end"]
        if te is None:
            continue
        if not any(w["eligible"] <= te and (w["start"] is None or w["start"] > te) for w in waiting):
            continue
        later = [b["start"] for b in capped if b["start"] is not None and b["start"] >= te and b is not a]
        if later:
            out.append(min(later) - te)
    return out


def _others_cancelled_by_bench(lab: Lab, ids: list[int]) -> int:
    """The load's jobs whose end says the bench user cancelled them."""
    import pwd

    if not ids:
        return 0
    uid = pwd.getpwnam(lab.user).pw_uid
    out = lab.root_client().run(["sacct", "-X", "-n", "-P", "--format=State", "-j", ",".join(map(str, ids))]).stdout
    return sum(1 for line in out.splitlines() if line.strip() == f"CANCELLED by {uid}")


def _section(
    lab: Lab, out: dict[str, dict], crowd: Crowd, runs: int, step_s: float, refused: str | None, how: str
) -> Section:
    rows = [
        Row("makespan", {m: [o["makespan_s"]] for m, o in out.items()}, "s"),
        Row("mean completion of a run", {m: [o["mean_completion_s"]] for m, o in out.items()}, "s"),
        Row("GPU-hours allocated", {m: [o["allocated_gpu_h"]] for m, o in out.items()}),
        Row("GPU-hours useful", {m: [o["useful_gpu_h"]] for m, o in out.items()}),
        Row("steps recomputed", {m: [o["recomputed_steps"]] for m, o in out.items()}),
        Row("preemptions", {m: [o["preemptions"]] for m, o in out.items()}),
        Row(
            f"most GPUs held on {CAPPED} (cap {lab.cfg.high_gpu_cap})",
            {m: [o["max_capped_gpus"]] for m, o in out.items()},
        ),
        Row("runs completed", {m: [o["completed"]] for m, o in out.items()}),
        Row("other users' jobs cancelled", {m: [o["others_touched"]] for m, o in out.items()}),
    ]
    body = comparison_table(rows, [m for m in METHODS if m in out])
    release = lab_release(lab)
    if refused:
        body += f"\nslurm-native: not run on this lab's Slurm {release}: {refused}.\n"
    for m, o in out.items():
        if o.get("slurm", release) != release:
            body += f"\n{m}: on a lab of Slurm {o['slurm']} of the same size, beside the same crowd.\n"
    for m, o in out.items():
        if o.get("censored_s"):
            body += (
                f"\n{m}: stopped {o['censored_s']:.0f} s after its submission with {runs - o['completed']} of its "
                f"{runs} runs not completed (cancelled then): its makespan and mean completion are lower bounds.\n"
            )
    lats = {m: out[m]["promotion_latency_s"] for m in REBALANCED if m in out}
    for m, lat in lats.items():
        body += (
            f"\n\nPromotion latency ({m}, {len(lat)} promotions): "
            + (f"median {statistics.median(lat):.1f} s, max {max(lat):.1f} s" if lat else "none happened")
            + f"; the watch's interval {WATCH_INTERVAL_S:g} s.\n"
        )
    for m in (m for m in REBALANCED if m in out and out[m].get("views_s")):
        body += f"\n{m}: " + _views_text(out[m]["views_s"]).lstrip("\n")
    summary = []
    if "roach" in out:
        summary.append(target_row("crowd: most GPUs on the capped tier", [out["roach"]["max_capped_gpus"]], None, "",
                                  "GPUs", max_value=lab.cfg.high_gpu_cap))  # fmt: skip
    for other, name, most in (("static-low", "static lowest tier", 0.8),
                              ("slurm-native", "Slurm's own choice among every QOS", 1.0),
                              ("submitit", "submitit map_array", 1.0)):  # fmt: skip
        if "roach" in out and other in out:
            label = "crowd: makespan" if other == "static-low" else f"crowd: makespan beside {other}"
            summary.append(target_row(label, [out["roach"]["makespan_s"]], [out[other]["makespan_s"]], name, "s",
                                      max_ratio=most))  # fmt: skip
    looks = out.get("roach", {}).get("views_s", {}).get("ls")
    if looks:
        summary.append(ls_row(looks))
    every = [x for lat in lats.values() for x in lat]
    if every:
        summary.append(
            target_row(
                "crowd: promotion latency", [statistics.median(every)], None, "", "s", max_value=WATCH_INTERVAL_S + 5
            )
        )
    plot = _plot(out, lab)
    params = {"trace": Path(crowd.trace).name, "offset_s": crowd.offset_s, "speed": crowd.speed, "seed": crowd.seed,
              "load": crowd.load, "users": crowd.users, "runs": runs, "step_s": step_s, "nodes": lab.cfg.nodes, "slurm": release,
              "gpus_per_node": lab.cfg.gpus_per_node, "labs": how}  # fmt: skip
    return Section(14, TITLE, body, params, plot=plot, summary=summary)


def ls_row(looks: list[float]) -> dict:
    """The summary's line for `roach ls` beside the crowd: the median of its looks (seconds), at most 150 ms."""
    return target_row("crowd: `roach ls` with the sweep running", looks, None, "", "ms", scale=1000,
                      max_value=LS_TARGET_MS)  # fmt: skip


def _views_text(views: dict[str, list[float]]) -> str:
    """`roach ls` and `roach top --once` beside the crowd, as the roach method's sweep ran (whole processes)."""
    if not views:
        return "\n`roach ls` and `roach top --once` were not timed (the sweep ended before the first look).\n"
    cells = []
    for name, t in views.items():
        if name.endswith(" cpu"):
            continue
        cell = f"`roach {name}`: median {statistics.median(t) * 1000:.0f} ms, most {max(t) * 1000:.0f} ms"
        cpu = views.get(f"{name} cpu")
        cell += f" ({len(t)} looks" + (f"; CPU median {statistics.median(cpu) * 1000:.0f} ms)" if cpu else ")")
        cells.append(cell)
    return (
        "\nBeside the crowd, with the sweep running (each a whole process, Python's start included): "
        + "; ".join(cells)
        + ".\n"
    )


def _plot(out: dict[str, dict], lab: Lab) -> str | None:
    """Each method's GPUs held per QOS over time beside the lab's free GPUs: crowd.png beside results.md."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from bench.labenv import BENCH_DIR

    fig, grid = plt.subplots(len(out), 1, figsize=(8, 2.6 * len(out)), sharex=True, squeeze=False)
    axes = grid[:, 0]
    for ax, (method, o) in zip(axes, out.items()):
        s = o["samples"]
        for qos in ("high", "normal", "low"):
            ax.plot(s["t"], [m.get(qos, 0) for m in s["mine"]], label=f"sweep on {qos}")
        ax.plot(s["t"], s["free"], "k:", label="lab's free GPUs")
        ax.set_title(method)
        ax.set_ylabel("GPUs")
        ax.set_ylim(0, lab.cfg.gpus)
    axes[0].legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("seconds after the sweep's submission")
    fig.tight_layout()
    fig.savefig(BENCH_DIR / "crowd.png", dpi=90)
    plt.close(fig)
    return "crowd.png"


def _empty_queue(lab: Lab, timeout: float = 900) -> None:
    """The lab's queue empty, every user's (between methods: each starts on the same empty cluster). A load of
    thousands of jobs takes minutes to cancel on a busy 2-core machine; the error names what is left."""
    root = lab.root_client()
    wait_for(
        "the lab's queue to empty",
        lambda: not root.run(["squeue", "-h"]).stdout.strip(),
        timeout,
        5,
        explain=lambda: root.run(["squeue", "-h", "-o", "%i %u %T %r"]).stdout[:1500],
    )
