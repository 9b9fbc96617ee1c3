"""Benchmark 13, start estimates: roach's estimate of when a pending job starts, beside Slurm's own ``squeue --start``,
scored against the real start.

A workload of N jobs (default 200) of mixed sizes (1, 2 or 4 GPUs), runs (10 to 45 s of paced steps,
``jobfns.paced``), time limits (3 to 8 minutes) and tiers (QOS high, normal and low; low is preempted by the
others) arrives on the lab over about a quarter of an hour, submitted with roach as the bench user. In that user's
process a watch round runs every few seconds (:class:`~roach.watch.watcher.Watcher`, the watch's own round: the
queue, the runs' logs and their pace), then the cluster's queue with priorities (the estimate's one extra read,
:func:`~roach.scheduler.cluster_queue.cluster_queue`) and Slurm's ``squeue --start`` for the pending jobs, at the
same moment. Each moment is kept (bench/out/b13/snapshots.jsonl): what the round knew, and Slurm's answer.

Scoring: for every pending job of every moment, roach's estimate from that moment's inputs
(:func:`~roach.ops.estimate.starts.estimate_queue`, what ``roach why``, the watch and ``roach top`` call) and Slurm's,
against the job's real start (sacct ``--duplicates``: the first start of an attempt at or after the moment): the
median absolute error of each, and how often the real start fell inside roach's interval.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.labenv import OUT, Jobs, Lab

TITLE = "Start estimates: roach's interval and Slurm's squeue --start against the real start"
SIZES = ((1, 0.45), (2, 0.35), (4, 0.20))  # GPUs on one node, and how often
TIERS = (("high", 0.2), ("normal", 0.35), ("low", 0.45))
STEP_S = 1.0


ARRIVAL_S = 4.5  # the mean time between two arrivals (200 jobs: about 15 minutes)


def schedule(n: int, seed: int = 13, span_s: float | None = None) -> list[dict]:
    """The workload: ``n`` jobs, each with its arrival (seconds from the start), GPUs, QOS, steps and time limit;
    arrivals at random over about ``span_s`` seconds (default: :data:`ARRIVAL_S` per job)."""
    span_s = n * ARRIVAL_S if span_s is None else span_s
    rnd = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        gpus = rnd.choices([g for g, _ in SIZES], [w for _, w in SIZES])[0]
        qos = rnd.choices([q for q, _ in TIERS], [w for _, w in TIERS])[0]
        steps = rnd.randint(10, 45)
        # roach asks for its checkpoint signal 60 s before the limit, and Slurm may send it up to 60 s earlier still:
        # every limit leaves a run 2 minutes more than it needs, and most leave it far more
        limit_min = rnd.randint(3, 8)
        out.append({"i": i, "at": round(t, 2), "gpus": gpus, "qos": qos, "steps": steps, "limit_min": limit_min})
        t += rnd.expovariate(n / span_s)
    return out


# -- the bench user's side ---------------------------------------------------------------------------------
def drive(a: argparse.Namespace) -> int:
    """Submit the schedule at its times (a thread) while a round every ``--every`` s records each moment."""
    from roach.launch.submit import submit
    from roach.model.resources import Resources
    from roach.records.store import Store
    from roach.scheduler.cluster_queue import queue_argv
    from roach.slurm.clusters.lab import LAB
    from roach.watch.watcher import Watcher

    plan = json.loads(Path(a.schedule).read_text())
    out = Path(a.out)
    store = Store(f"{a.wd}/store.sqlite")
    client = LAB.client()
    submitted: list[dict] = []
    done = threading.Event()

    def submitter() -> None:
        sub_store = Store(f"{a.wd}/store.sqlite")
        t0 = time.time()
        try:
            for job in plan:
                time.sleep(max(0.0, t0 + job["at"] - time.time()))
                res = Resources(
                    qos=job["qos"], gpus_per_node=job["gpus"], cpus_per_gpu=1, time=f"00:{job['limit_min']:02d}:00"
                )
                j = submit(
                    "pkg.jobfns:paced",
                    {"steps": job["steps"], "step_s": STEP_S},
                    resources=res,
                    cluster=LAB,
                    name=f"est-{job['i']}",
                    repo_root=a.work,
                    store=sub_store,
                    log_root=f"{a.wd}/logs",
                    clone_root=f"{a.wd}/clones",
                    run_root=f"{a.wd}/runs",
                )
                submitted.append({**job, "job_id": str(j.job_id), "submitted": time.time()})
                print(json.dumps({"submitted": submitted[-1]}), flush=True)
        finally:
            done.set()

    threading.Thread(target=submitter, daemon=True).start()
    watcher = Watcher(LAB, client, store, heartbeat_s=1e9, interval_s=a.every)
    nodes = [n.__dict__ for n in client.nodes()]
    deadline = time.time() + a.max_s
    with (out / "snapshots.jsonl").open("w") as f:
        f.write(json.dumps({"nodes": nodes, "tiers": [t.__dict__ for t in LAB.tiers]}) + "\n")
        while time.time() < deadline:
            t_round = time.time()
            try:
                watcher.round()
            except Exception as exc:  # a round that fails is a moment lost, not the benchmark
                print(json.dumps({"round_error": repr(exc)}), flush=True)
            queue = client.run(queue_argv(("gpu",))).stdout
            start = client.run(["squeue", "--me", "--start", "--noheader", "-o", "%i|%S"]).stdout
            mine = client.run(["squeue", "--me", "--noheader", "-o", "%i"]).stdout  # other users' jobs may stay
            t = time.time()
            views = {k: _view(w) for k, w in watcher.saved.load().views.items() if not w.done}
            f.write(json.dumps({"t": t, "t_round": t_round, "queue": queue, "start": start, "views": views}) + "\n")
            f.flush()
            if done.is_set() and not mine.strip():
                break
            time.sleep(max(0.0, t_round + a.every - time.time()))
    (out / "submitted.json").write_text(json.dumps(submitted))
    return 0


def _view(w) -> dict:
    return {"run_id": w.run_id, "step": w.step, "steps_total": w.steps_total, "points": w.points, "tier": w.tier}


# -- root's side -------------------------------------------------------------------------------------------
def run(lab: Lab, jobs: Jobs, n: int, log=print, every_s: float = 3.0, crowd=None) -> object:
    """The workload played and scored; with ``crowd`` (bench 14's :class:`~bench.b14_crowd.Crowd`), beside that
    trace played as other people's load from its offset, started ``crowd.warmup_s`` before the workload."""
    from roach.lab.load import LoadSpec, start, stop

    if crowd is None:
        return _run(lab, jobs, n, log, every_s)
    stop(lab.cfg)
    start(lab.cfg, LoadSpec(crowd.trace, "", crowd.offset_s, crowd.speed, crowd.load, crowd.users, crowd.seed))
    log(f"bench 13: {Path(crowd.trace).name} from {crowd.offset_s:.0f} s at {crowd.speed:g}x as other people's load")
    try:
        time.sleep(crowd.warmup_s)
        section = _run(lab, jobs, n, log, every_s)
    finally:
        stop(lab.cfg)
    section.params.update(crowd_trace=Path(crowd.trace).name, crowd_offset_s=crowd.offset_s, crowd_speed=crowd.speed)
    section.body = (
        f"Beside other people's load: {Path(crowd.trace).name} played from {crowd.offset_s:.0f} s (an offset no "
        f"estimate was tuned on) at {crowd.speed:g}x, offered at {crowd.load:.0%} of the lab's GPUs by {crowd.users} "
        f"users; the estimates read every user's queue.\n\n" + section.body
    )
    return section


def _run(lab: Lab, jobs: Jobs, n: int, log, every_s: float) -> object:
    from bench.repo import make_repo
    from bench.report import Section

    # under the bench user's home, which every node of the lab shares (a node's /tmp is its own in the hosts layout)
    base = Path(lab.home) / f"b13-{int(time.time())}"
    base.mkdir()
    lab.made.append(base)
    work = make_repo(lab, base / "repo")
    subprocess.run(["chown", "-R", lab.user, str(base)], check=True)
    out = OUT / "b13"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "-R", lab.user, str(out)], check=True)
    plan = schedule(n)
    (out / "schedule.json").write_text(json.dumps(plan))
    log(f"bench 13: {n} jobs over {plan[-1]['at']:.0f}s, a moment every {every_s}s")
    proc = lab.as_user(
        [
            lab.python,
            "-m",
            "bench.b13_estimate",
            "drive",
            "--work",
            str(work),
            "--wd",
            str(base),
            "--schedule",
            str(out / "schedule.json"),
            "--out",
            str(out),
            "--every",
            str(every_s),
        ],
        capture_output=True,
        text=True,
    )
    ids = [json.loads(ln)["submitted"]["job_id"] for ln in proc.stdout.splitlines() if '"submitted"' in ln]
    jobs.add(ids)
    if proc.returncode != 0:
        raise RuntimeError(f"the workload's driver exited {proc.returncode}: {proc.stderr[-2000:]}")
    from bench.b13_score import score_dir

    body, summary, params = score_dir(out, lab.user_client())
    return Section(13, TITLE, body, {"jobs": n, "moment_s": every_s, **params}, summary=summary)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.b13_estimate")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("drive")
    p.add_argument("--work", required=True)
    p.add_argument("--wd", required=True)
    p.add_argument("--schedule", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--every", type=float, default=3.0)
    p.add_argument("--max-s", type=float, default=3600.0)
    a = ap.parse_args(argv)
    return drive(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
