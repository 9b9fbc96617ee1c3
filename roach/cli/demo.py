"""`make demo` / `roach lab demo`: submit a small training loop to the lab with roach and show its log.

The demo makes a throwaway git repository with a bare "remote" (as a user's project would have),
commits and pushes a tiny training function, submits it on 2 nodes x 2 GPUs (4 ranks, gloo all-reduce
when torch is in the lab's job venv), follows the log while it runs, and prints the job's record.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from roach.lab.config import LAB_USER, LabConfig
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB, NODES2_GPU2

TRAIN = '''"""A tiny data-parallel regression: fit y = 3x + 1, one shard of the data per rank."""
import random


def train(run, steps=40, lr=0.1):
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        torch = None
    rng = random.Random(run.rank)
    xs = [rng.uniform(-1, 1) for _ in range(64)]
    ys = [3 * x + 1 for x in xs]
    w = b = 0.0
    if torch is not None:
        dist.init_process_group("gloo")
    for step in range(steps):
        gw = sum(2 * (w * x + b - y) * x for x, y in zip(xs, ys)) / len(xs)
        gb = sum(2 * (w * x + b - y) for x, y in zip(xs, ys)) / len(xs)
        if torch is not None:  # average the gradients over every rank, as DDP does
            g = torch.tensor([gw, gb])
            dist.all_reduce(g)
            gw, gb = (g / run.world_size).tolist()
        w, b = w - lr * gw, b - lr * gb
        if run.is_main and step % 10 == 0:
            loss = sum((w * x + b - y) ** 2 for x, y in zip(xs, ys)) / len(xs)
            run.log("step %d loss %.4f w %.3f b %.3f", step, loss, w, b)
    if torch is not None:
        dist.destroy_process_group()
    return {"w": round(w, 3), "b": round(b, 3)}
'''

GIT = [
    "git",
    "-c",
    "user.name=roach demo",
    "-c",
    "user.email=demo@roach",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "safe.directory=*",
]


def _make_repo(base: Path, as_user: str | None) -> Path:
    remote, work = base / "remote.git", base / "work"
    subprocess.run([*GIT, "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run([*GIT, "clone", "-q", f"file://{remote}", str(work)], check=True, capture_output=True)
    (work / "demo").mkdir()
    (work / "demo" / "__init__.py").write_text("")
    (work / "demo" / "train.py").write_text(TRAIN)
    for args in (["add", "-A"], ["commit", "-q", "-m", "a tiny training loop"], ["push", "-q", "-u", "origin", "main"]):
        subprocess.run([*GIT, "-C", str(work), *args], check=True, capture_output=True)
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    if as_user:  # the job's git refuses a repository owned by another user
        subprocess.run(["chown", "-R", as_user, str(remote)], check=True)
    return work


def main(state_dir: str | None = None, say=print) -> int:
    LabConfig.load(state_dir)  # a clear error if the lab is not there
    as_user = LAB_USER if os.geteuid() == 0 else None
    # /var/tmp: the lab's nodes share this machine's file systems but /tmp, which each has of its own
    base = Path(tempfile.mkdtemp(prefix="roach-demo-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    work = _make_repo(base, as_user)
    cluster = LAB.with_(run_as=as_user) if as_user else LAB
    job = submit(
        "demo.train:train",
        args={"steps": 40, "lr": 0.3},
        resources=NODES2_GPU2,
        cluster=cluster,
        name="demo",
        repo_root=work,
        log_root="~/roach-demo/slurm-logs",
        clone_root="~/roach_clones",
        description="roach lab demo: a tiny data-parallel training loop",
    )
    say(f"submitted {job} as {as_user or 'you'}: 2 nodes x 2 GPUs, 4 ranks")
    say(f"log: {job.paths.log}")
    shown = 0
    while True:
        text = job.log()
        for line in text.splitlines()[shown:]:
            say(f"  | {line}")
        shown = len(text.splitlines())
        if job.state().is_terminal:
            break
        time.sleep(1)
    rec = job.wait(timeout=60)
    for line in job.log().splitlines()[shown:]:
        say(f"  | {line}")
    say(f"{job}: {rec.state.value}, exit code {rec.exit_code}:{rec.exit_signal}, {rec.elapsed_s}s on {rec.nodelist}")
    say(f"record: {job.paths.job_json}")
    return 0 if rec.state.is_success else 1
