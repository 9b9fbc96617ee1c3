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
    mark = _first_line_mark()
    _write_mark(out, mark)
    return mark["t"]


def first_line_then_import(run=None, out: str = "", module: str = "sympy") -> float:
    """:func:`first_line`'s mark, with ``imported``: the time once ``module`` is imported (a real job's first import,
    from whichever environment the job runs in)."""
    import importlib

    mark = _first_line_mark()
    importlib.import_module(module)
    _write_mark(out, {**mark, "imported": time.time()})
    return mark["t"]


def _first_line_mark() -> dict:
    t, mono = time.time(), time.monotonic()
    batch = batch_process()
    return {
        "t": t,
        "mono": mono,
        "pid": os.getpid(),
        "process": process_start(os.getpid(), t),
        "batch_pid": batch,
        "batch": None if batch is None else process_start(batch, t),
    }


def _write_mark(out: str, mark: dict) -> None:
    tmp = f"{out}.tmp"
    with open(tmp, "w") as f:
        json.dump(mark, f)
    os.replace(tmp, out)


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


# -- bench 12: a resumed 2 x 2 DDP run's restart, the same training under roach and submitit --------------------


def restart_entry(p: Progress, rank: int) -> None:
    """Rank 0's first marks: the function's entry and this process's start (``/proc``); its batch shell's start is
    found after the first step (:func:`restart_batch`), out of the time measured."""
    t = time.time()
    if rank == 0:
        p.event("entry", process=process_start(os.getpid(), time.time()), t_entry=t)


def restart_batch(p: Progress, rank: int) -> None:
    """Rank 0's batch shell's start (``/proc``), once its first step is done (the batch shell is still there)."""
    if rank == 0:
        batch = batch_process()
        p.event("batch", batch=None if batch is None else process_start(batch, time.time()))


def ddp_group(p: Progress, rank: int):
    """torch imported and the gloo process group made (the env:// variables of whoever started the rank)."""
    import torch
    import torch.distributed as dist

    if rank == 0:
        p.event("torch")
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    if rank == 0:
        p.event("group")
    return torch


def ddp_model(torch, wrap):
    """A small model (the step stays cheap: what is measured is the restart), wrapped for DDP by ``wrap``."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, wrap(model), opt


def ddp_step(torch, ddp, opt, step: int, rank: int) -> float:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    loss = ((ddp(x) - x) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def payload_of(torch, mb: int):
    """The checkpoint's bulk: ``mb`` MB of float32 beside the model (not a parameter, so the first step's all-reduce
    stays the small model's while the checkpoint is read and written whole)."""
    return torch.arange(mb * 2**20 // 4, dtype=torch.float32)


def ddp_restart_roach(run, steps: int = 100000, step_s: float = 0.05, mb: int = 100, progress: str = "") -> int:
    """The training loop on roach's contract: the group, ``run.resume``, steps, ``run.checkpoint`` when asked."""
    p = Progress(progress)
    restart_entry(p, run.rank)
    torch = ddp_group(p, run.rank)
    state = run.resume(default=None)
    if run.rank == 0:
        p.event("loaded", step=run.start_step)
    model, ddp, opt = ddp_model(torch, run.ddp)
    if run.rank == 0:
        p.event("ddp")
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        payload = state["payload"]
    else:
        payload = payload_of(torch, mb)
    for step in run.steps(run.start_step, steps):
        ddp_step(torch, ddp, opt, step, run.rank)
        if run.rank == 0:
            p.event("step", step=step)
        if step == run.start_step:
            restart_batch(p, run.rank)
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "payload": payload})
    return steps
