"""The user functions the benchmarks run, the same code under every method.

roach imports this file from a git clone (the benchmark commits it as ``pkg/jobfns.py``); raw ``sbatch``
and submitit import it as ``bench.jobfns``. Only the standard library at import time; torch is imported
inside the training functions, as a real job would.
"""

from __future__ import annotations

import json
import os
import time


def first_line(run=None, out: str = "") -> float:
    """Write the time of this function's first line to ``out`` (what submit latency is measured to), with
    when this process and the job's batch shell started (so the benchmark can split the latency), and both pids
    with the time on CLOCK_MONOTONIC (to match them with the kernel's fork events, bench/execclock.py)."""
    t, mono = time.time(), time.monotonic()
    batch = batch_process()
    mark = {
        "t": t,
        "mono": mono,
        "pid": os.getpid(),
        "process": process_start(os.getpid(), t),
        "batch_pid": batch,
        "batch": None if batch is None else process_start(batch, t),
    }
    tmp = f"{out}.tmp"
    with open(tmp, "w") as f:
        json.dump(mark, f)
    os.replace(tmp, out)
    return t


def process_start(pid: int, now: float) -> float | None:
    """When process ``pid`` started, on the ``time.time()`` clock (to the kernel's 10 ms tick)."""
    try:
        ticks = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return now - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def batch_process() -> int | None:
    """The pid of this job's batch shell: the process running Slurm's copy of the batch script
    (``.../slurm_script``) with this job's id in its environment."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            if not any(c.endswith(b"slurm_script") for c in cmd):
                continue
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in env:
            return int(entry)
    return None


class Progress:
    """One JSON line per event in ``path``: the attempt (Slurm's restart count), the step, the time."""

    def __init__(self, path: str):
        self.path = path
        self.restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        self.job = os.environ.get("SLURM_JOB_ID", "")

    def event(self, kind: str, **data) -> None:
        line = json.dumps({"kind": kind, "restart": self.restart, "job": self.job, "t": time.time(), **data})
        with open(self.path, "a") as f:
            f.write(line + "\n")


def model_and_optimizer():
    """The 1-rank torch regression of tests/jobs/resumable.py (one Linear layer, SGD with momentum)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def train_step(model, opt, step: int) -> float:
    import torch

    g = torch.Generator().manual_seed(1000 * step)
    x = torch.randn(16, 8, generator=g)
    y = x.sum(1, keepdim=True)
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def train_roach(run, steps: int = 60, step_s: float = 0.1, progress: str = "") -> float:
    """The training loop written to roach's contract: resume, steps, checkpoint when asked."""
    p = Progress(progress)
    p.event("start")
    model, opt = model_and_optimizer()
    state = run.resume(default=None)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    loss = float("nan")
    for step in run.steps(run.start_step, steps):
        loss = train_step(model, opt, step)
        p.event("step", step=step)
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint({"model": model.state_dict(), "opt": opt.state_dict()})
    p.event("end")
    return loss


def paced(run, steps: int = 30, step_s: float = 1.0) -> int:
    """A run of ``steps`` steps of ``step_s`` seconds each (no work but the wait), resumed from its checkpoint after
    a preemption, a checkpoint every few steps: benchmark 13's workload, whose pace the watch reads from the log."""
    state = run.resume(default={"done": 0})
    for step in run.steps(run.start_step, steps):
        time.sleep(step_s)
        state["done"] = step + 1
        if run.should_checkpoint() or step % 5 == 4:
            run.checkpoint(state)
    return state["done"]
