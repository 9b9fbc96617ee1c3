"""The same training loop written to submitit's contract (``submitit.helpers.Checkpointable``).

Its state lives on the object: on submitit's checkpoint signal the object is pickled as it is (the
default ``checkpoint`` method) and the requeued job calls it again, continuing from ``next_step``.
"""

from __future__ import annotations

import time

import submitit

from bench.jobfns import Progress, model_and_optimizer, train_step


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
