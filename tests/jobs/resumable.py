"""Functions the resumable-run tests submit (copied into the test's git repo as pkg/resumable.py)."""

import hashlib
import time


def ddp_train(run, steps=120, step_s=0.25):
    """A deterministic 4-rank gloo DDP regression; returns a digest of the final parameters."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    # Many tensors of several sizes through run.ddp, whose gradient buckets keep one layout in every
    # attempt; plain DDP rebuilds them after each attempt's first step and a resume can differ in the last bit.
    nn = torch.nn
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 8), nn.Linear(8, 1))
    ddp = run.ddp(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    state = run.resume(default=None)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    for step in run.steps(run.start_step, steps):
        g = torch.Generator().manual_seed(1000 * step + run.rank)
        x = torch.randn(16, 8, generator=g)
        y = x.sum(1, keepdim=True)
        loss = ((ddp(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if run.is_main:
            run.log("step %d done loss %.6f", step, loss.item())
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint({"model": model.state_dict(), "opt": opt.state_dict()})
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    del ddp  # DDP's destructor must run before its process group goes, or it can hang
    dist.destroy_process_group()
    return digest


def plain_loop(run, steps=200, step_s=0.2):
    """Does not checkpoint: preempted, it starts from the top."""
    for step in range(steps):
        if step % 10 == 0:
            run.log("plain step %d", step)
        time.sleep(step_s)
    return steps


def leave_then_abort(run, steps=300, step_s=0.1):
    """Rank 1 dies of SIGABRT a second after it leaves (as a C extension's teardown can at exit); no torch."""
    import atexit
    import os

    if run.rank == 1:
        atexit.register(lambda: (time.sleep(1.0), os.abort()))
    for step in run.steps(run.start_step, steps):
        if run.is_main and step % 10 == 0:
            run.log("abort-loop step %d", step)
        time.sleep(step_s)
    return steps
