"""The same training loops written to submitit's contract (``submitit.helpers.Checkpointable``).

``TrainSubmitit`` keeps its state on the object: on submitit's checkpoint signal the object is pickled as it is
(the default ``checkpoint`` method) and the requeued job calls it again, continuing from ``next_step``.

``DdpRestartSubmitit`` is bench 12's 2 x 2 DDP run: its ``checkpoint`` (rank 0, in submitit's signal handler)
``torch.save``s the model, the optimizer and the payload to ``ckpt`` and returns itself without them, so the
requeued job's ranks each ``torch.load`` that file, as roach's ranks read ``resume.pt``.
"""

from __future__ import annotations

import os
import time

import submitit

from bench.jobfns import (
    Progress,
    ddp_group,
    ddp_model,
    ddp_step,
    model_and_optimizer,
    payload_of,
    restart_batch,
    restart_entry,
    train_step,
)


class TrainSubmitit(submitit.helpers.Checkpointable):
    def __init__(self) -> None:
        self.model = None
        self.opt = None
        self.next_step = 0

    def __call__(self, steps: int = 60, step_s: float = 0.1, progress: str = "") -> float:
        p = Progress(progress)
        p.event("start")
        if self.model is None:
            self.model, self.opt = model_and_optimizer()
        loss = float("nan")
        for step in range(self.next_step, steps):
            loss = train_step(self.model, self.opt, step)
            self.next_step = step + 1
            p.event("step", step=step)
            time.sleep(step_s)
        p.event("end")
        return loss


class PacedSubmitit(submitit.helpers.Checkpointable):
    """Bench 14's run (``jobfns.paced``): ``steps`` steps of ``step_s`` seconds, its step kept on the object (what
    submitit's checkpoint pickles); each step done appends a line to ``progress`` (recomputed steps are counted
    from it)."""

    def __init__(self) -> None:
        self.next_step = 0

    def __call__(self, steps: int, step_s: float, progress: str) -> int:
        for step in range(self.next_step, steps):
            time.sleep(step_s)
            self.next_step = step + 1
            with open(progress, "a") as f:
                f.write(f"{step}\n")
        return self.next_step


class DdpRestartSubmitit(submitit.helpers.Checkpointable):
    def __init__(self, ckpt: str) -> None:
        self.ckpt = ckpt
        self.live: dict | None = None  # this process's model, optimizer, payload and step (never pickled)

    def __getstate__(self) -> dict:
        return {"ckpt": self.ckpt, "live": None}

    def __call__(self, steps: int = 100000, step_s: float = 0.05, mb: int = 100, progress: str = "") -> int:
        rank = int(os.environ["SLURM_PROCID"])
        p = Progress(progress)
        restart_entry(p, rank)
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        torch = ddp_group(p, rank)
        state = torch.load(self.ckpt, map_location="cpu", weights_only=False) if os.path.exists(self.ckpt) else None
        start = state["next_step"] if state else 0
        if rank == 0:
            p.event("loaded", step=start)
        model, ddp, opt = ddp_model(
            torch, lambda m: torch.nn.parallel.DistributedDataParallel(m, find_unused_parameters=True)
        )
        if rank == 0:
            p.event("ddp")
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            payload = state["payload"]
        else:
            payload = payload_of(torch, mb)
        self.live = {"model": model, "opt": opt, "payload": payload, "next_step": start}
        for step in range(start, steps):
            ddp_step(torch, ddp, opt, step, rank)
            self.live["next_step"] = step + 1
            if rank == 0:
                p.event("step", step=step)
            if step == start:
                restart_batch(p, rank)
            time.sleep(step_s)
        return steps

    def checkpoint(self, *args, **kwargs):
        import torch

        if self.live is not None:
            live = self.live
            state = {
                "model": live["model"].state_dict(),
                "opt": live["opt"].state_dict(),
                "payload": live["payload"],
                "next_step": live["next_step"],
            }
            tmp = f"{self.ckpt}.tmp"
            torch.save(state, tmp)
            os.replace(tmp, self.ckpt)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
