"""The ``Run`` object a job's function receives as its first parameter (if it asks for one).

The contract for a resumable function::

    def train(run, lr, steps):
        state = run.resume(default=init_state())        # resume.pt if there; logs "resumed at step N"
        for step in run.steps(run.start_step, steps):    # yields steps; logs progress
            ...                                          # one training step
            if run.should_checkpoint():                  # periodic, or a signal was caught
                run.checkpoint(state)                    # atomic resume.pt (rank 0)
        # after a signal, run.steps() checkpoints (if not done) and ends the job so it comes back

A caught signal is acted on at a step boundary that every rank agrees on (one all-reduce per step when
torch.distributed is initialized), so no rank leaves while another is still in the step.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from roach.runtime import checkpoint as ckpt
from roach.runtime.fence import Fence, Superseded
from roach.runtime.signals import SignalHandler


class RunInterrupted(BaseException):
    """Raised out of :meth:`Run.steps` when the run must leave to come back (not an ``Exception``,
    so a user's ``except Exception`` does not swallow it)."""

    def __init__(self, sig: signal.Signals, step: int, checkpointed: bool):
        super().__init__(f"{sig.name} at step {step}")
        self.signal, self.step, self.checkpointed = sig, step, checkpointed


@dataclass
class Run:
    """Who this rank is, where the run keeps its files, and how it checkpoints and resumes.

    ``run_dir`` is shared by every job of the run id, so a requeued or resubmitted job finds what an
    earlier one wrote.
    """

    run_id: str
    job_id: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: str
    run_dir: Path
    restart_count: int = 0
    cluster: str = ""
    checkpoint_every: int | None = None  # steps; None: only when a signal asks
    checkpoint_every_s: float | None = None
    log_every: int | None = None  # progress line every N steps (default: about 20 lines per run)
    signals: SignalHandler | None = field(default=None, repr=False)
    prefetch: ckpt.Prefetch | None = field(default=None, repr=False)  # resume.pt, read since the rank started
    fence: Fence | None = field(default=None, repr=False)  # this attempt's claim on the run (rank 0 claims and writes)
    logger: logging.Logger = field(default=None, repr=False)  # type: ignore[assignment]
    step: int = 0  # the step in flight (or the next one, between steps)
    start_step: int = 0  # where this attempt starts: 0, or the step resume.pt recorded
    _state: Any = field(default=None, init=False, repr=False)
    _last_checkpoint_step: int | None = field(default=None, init=False, repr=False)
    _last_checkpoint_time: float = field(default_factory=time.monotonic, init=False, repr=False)
    _agreed: tuple[int, bool, bool] | None = field(default=None, init=False, repr=False)
    _agreed_signal: signal.Signals | None = field(default=None, init=False, repr=False)
    _progress: tuple[int, int] | None = field(default=None, init=False, repr=False)  # steps()'s (begin, every)
    consulted: bool = field(default=False, init=False, repr=False)  # has the function used resume/steps/checkpoint?

    def __post_init__(self) -> None:
        if self.logger is None:
            self.logger = _make_logger(self.rank)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def resume_path(self) -> Path:
        return self.run_dir / ckpt.RESUME_FILE

    @property
    def caught_signal(self) -> signal.Signals | None:
        return self.signals.caught if self.signals else None

    @property
    def stop_signal(self) -> signal.Signals | None:
        """The signal the ranks agreed to stop for (the highest any rank caught), else this rank's own.

        Slurm signals the ranks one by one: at a step boundary rank 0 may not have seen its own USR1 yet
        while another rank has. Rank 0 decides whether the job comes back from this, never from its own
        handler alone, so a wall-clock USR1 is never read as a TERM (cancelled, not requeued)."""
        return self._agreed_signal or self.caught_signal

    def log(self, message: str, *args: object) -> None:
        """One progress line in the job's log (with time and rank), flushed at once."""
        self.logger.info(message, *args)

    # -- resume and checkpoint -----------------------------------------------------------------------
    def resume(self, default: Any = None) -> Any:
        """The state saved in ``resume.pt`` (and :attr:`start_step` set from it), else ``default``."""
        self.consulted = True
        early, saved = False, cast(Any, None)  # read early: resume.pt, since the rank started (rank.py)
        if self.prefetch is not None:
            early, saved = self.prefetch.take()
            self.prefetch = None
        if early or self.resume_path.exists():
            if not early:
                saved = ckpt.load(self.resume_path)
            meta, state = saved["roach"], saved["state"]
            self.start_step = self.step = int(meta["next_step"])
            self._last_checkpoint_step = self.start_step
            self.log(
                "resumed at step %d (checkpoint of job %s; restart count %d%s)",
                self.start_step,
                meta.get("job_id"),
                self.restart_count,
                "; read while the rank started" if early else "",
            )
        else:
            state = default
            self.start_step = self.step = 0
            if self.restart_count > 0:
                self.log(
                    "no resume.pt in %s: starting from the top (restart count %d)", self.run_dir, self.restart_count
                )
            else:
                self.log("fresh start: no resume.pt in %s", self.run_dir)
        self._state = state
        return state

    def checkpoint(self, state: Any = None, *, next_step: int | None = None) -> None:
        """Save ``state`` atomically as ``resume.pt`` (rank 0 only); ``next_step`` defaults to the step after
        the one in flight. Every rank must call it (ranks other than 0 only note that it happened)."""
        if state is None:
            state = self._state
        self._state = state
        nxt = self.step + 1 if next_step is None else next_step
        if self.is_main:
            ckpt.save(
                self.resume_path,
                {
                    "roach": {"next_step": nxt, "run_id": self.run_id, "job_id": self.job_id, "time": time.time()},
                    "state": state,
                },
                check=lambda: self.check_fence(f"the checkpoint of step {nxt}"),
            )
            sig = self.stop_signal
            why = f" after caught_signal {sig.name.removeprefix('SIG')}" if sig else ""
            self.log("checkpoint at step %d%s: %s", nxt, why, self.resume_path)
        self._last_checkpoint_step = nxt
        self._last_checkpoint_time = time.monotonic()

    def should_checkpoint(self) -> bool:
        """True when a checkpoint is due now: a signal was caught (on any rank) or the period elapsed."""
        self.consulted = True
        _, stop, due = self._agree(self.step + 1)
        return stop or due

    # -- steps ---------------------------------------------------------------------------------------
    def steps(self, start: int | None = None, stop: int | None = None) -> Iterator[int]:
        """Yield step numbers from ``start`` (default :attr:`start_step`) to ``stop``; leave when a signal
        was caught, after checkpointing the state :meth:`resume` returned if it was not saved at this step."""
        self.consulted = True
        begin = self.start_step if start is None else start
        every = self.log_every or max(1, ((stop or begin + 100) - begin) // 20)
        self._progress = (begin, every)
        for step in range(begin, stop) if stop is not None else _count(begin):
            self.step = step
            if step > begin:
                self._leave_if_asked(completed=step)
            if self.signals:
                rearmed = self.signals.rearm()
                if rearmed and self.is_main:
                    self.log("re-armed %s (another handler had replaced roach's)", ",".join(s.name for s in rearmed))
            if self.is_main and (step - begin) % every == 0:  # "step N" in every line: N steps are done
                self.check_fence(f"the progress line of step {step}")
                self.log("step %d%s", step, f"/{stop}" if stop is not None else "")
            yield step
        # A signal during the last step does not stop a run that has finished: it just ends.
        self.step = stop if stop is not None else self.step

    def check_fence(self, what: str) -> None:
        """Raise :class:`~roach.runtime.fence.Superseded` when a later attempt took the run over (rank 0)."""
        if self.fence is not None and self.is_main:
            self.fence.check(what)

    def _taken_over(self, boundary: int, due: bool) -> Superseded | None:
        """Rank 0's reading of the claim where a progress line or a checkpoint is due at ``boundary``: the
        :class:`Superseded` to raise where a later attempt holds the run, else None (and None on other ranks)."""
        if self.fence is None or not self.is_main:
            return None
        progress = self._progress is not None and (boundary - self._progress[0]) % self._progress[1] == 0
        if not (due or progress):
            return None
        try:
            self.fence.check(f"step {boundary}")
        except Superseded as gone:
            return gone
        return None

    def _superseded_as_told(self, boundary: int) -> Superseded:
        """What a rank other than 0 raises when rank 0 found the run taken over: the claim as it reads it."""
        holder = self.fence.holder() if self.fence is not None else None
        return Superseded(self.fence.key if self.fence is not None else "?", holder or {}, f"step {boundary}")

    # -- models --------------------------------------------------------------------------------------
    def ddp(self, model: Any, **kwargs: Any) -> Any:
        """``DistributedDataParallel(model, **kwargs)`` with one bucket layout in every attempt, so a resumed
        run is bitwise the uninterrupted one (roach/runtime/ddp.py says why plain DDP is not)."""
        from roach.runtime.ddp import ddp  # torch stays unimported until a run asks for DDP

        return ddp(model, **kwargs)

    def _leave_if_asked(self, completed: int) -> None:
        _, stop, _ = self._agree(completed)
        if not stop:
            return
        sig = self.stop_signal or signal.SIGTERM
        saved = self._last_checkpoint_step == completed
        if not saved and self._state is not None:
            self.checkpoint(self._state, next_step=completed)
            saved = True
        if not saved and self.is_main:
            self.log("no checkpoint at step %d: the run will start from its last checkpoint, or the top", completed)
        raise RunInterrupted(sig, completed, saved)

    def _agree(self, boundary: int) -> tuple[int, bool, bool]:
        """(boundary, stop, due) agreed by every rank at the boundary before step ``boundary``.

        Computed once per boundary, whether :meth:`should_checkpoint` or :meth:`steps` asks first, so a
        step costs at most one all-reduce and every rank stops at the same boundary. Where rank 0 finds that a
        later attempt took the run over, every rank raises :class:`Superseded` there, together.
        """
        if self._agreed is not None and self._agreed[0] == boundary:
            return self._agreed
        due = bool(
            (self.checkpoint_every and boundary % self.checkpoint_every == 0)
            or (self.checkpoint_every_s and time.monotonic() - self._last_checkpoint_time >= self.checkpoint_every_s)
        )
        gone = self._taken_over(boundary, due)
        caught, agreed_due, superseded = _all_ranks_max(int(self.caught_signal or 0), int(due), int(gone is not None))
        if superseded:  # every rank stops here: one left in the next all-reduce would wait for rank 0 forever
            raise gone or self._superseded_as_told(boundary)
        if caught:
            self._agreed_signal = signal.Signals(int(caught))
        self._agreed = (boundary, bool(caught), bool(agreed_due))
        return self._agreed


def _count(start: int) -> Iterator[int]:
    while True:
        yield start
        start += 1


def _all_ranks_max(*values: int) -> tuple[int, ...]:
    """Each value's maximum over every rank, when torch.distributed is initialized; else as they are."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    import torch

    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([float(v) for v in values], device=device)  # small integers: exact as floats
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(int(v) for v in t.tolist())


def _make_logger(rank: int) -> logging.Logger:
    logger = logging.getLogger(f"roach.run.rank{rank}")
    if not logger.handlers:
        h = logging.StreamHandler(sys.stdout)
        fmt = logging.Formatter("%(asctime)sZ roach rank %(rank)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
        fmt.converter = time.gmtime
        h.setFormatter(fmt)
        h.addFilter(_RankFilter(rank))
        logger.addHandler(h)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True
