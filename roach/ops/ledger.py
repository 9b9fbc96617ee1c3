"""A run's GPU-hour ledger: what its attempts were allocated, and what each GPU-second went to.

Summed from Slurm's accounting (:class:`~roach.scheduler.accounting.Allocation`, one per attempt: AllocTRES
gres/gpu x ElapsedRaw, Eligible -> Start) and the run's log (:mod:`roach.ops.attempt_log`). An attempt's
elapsed time is split, in order, into

- *starting*: from its Start to its first step line (the clone, the environment, the ranks' start-up);
- *recomputed*: from its first step until it passed the step the attempt before it had reached (steps done
  again because that attempt's last checkpoint was behind where it stopped);
- *useful*: the rest.

and its queue time (Eligible -> Start) is kept per tier. Pure: records in, ledger out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from roach.model.job_state import JobState
from roach.ops.attempt_log import AttemptLog, LogStop
from roach.scheduler.accounting import Allocation

#: The ends of an attempt that are a failure, counted by type (a preemption, a wall-clock stop and a cancel are not).
FAILURES = frozenset(
    {
        JobState.FAILED,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
        JobState.TIMEOUT,
        JobState.BOOT_FAIL,
        JobState.DEADLINE,
        JobState.LAUNCH_FAILED,
    }
)


@dataclass(frozen=True)
class AttemptLedger:
    """One attempt: where it queued and ran, how it ended, and its seconds by phase (GPU-seconds: x ``gpus``)."""

    job: str  # Slurm's id of the job: 123, or 123_4 for an array task
    restart: int  # its restart count: 0 for the first attempt of a job
    tier: str
    state: JobState
    stop: LogStop
    nodes: str
    gpus: int
    eligible: float | None  # UTC epoch seconds
    start: float | None
    end: float | None
    pending_s: float
    requeue_s: float  # from the job's attempt before this one ending to this one's Eligible (0 for a first)
    elapsed_s: int
    starting_s: float
    recomputed_s: float
    start_step: int | None  # None: the log says nothing of this attempt
    end_step: int | None
    recomputed_steps: int

    @property
    def useful_s(self) -> float:
        return max(0.0, self.elapsed_s - self.starting_s - self.recomputed_s)

    @property
    def preempted(self) -> bool:
        """Its log says it was preempted, or Slurm does and the log does not say it ran to its end (Slurm 24.11
        requeues once more, and accounts PREEMPTED, the run that follows a preemption with a grace time)."""
        return self.stop is LogStop.PREEMPTED or (
            self.state is JobState.PREEMPTED and self.stop is not LogStop.FINISHED
        )

    @property
    def wall_clock(self) -> bool:
        return self.stop is LogStop.WALL_CLOCK

    @property
    def failure(self) -> str | None:
        return self.state.value if self.state in FAILURES and not self.preempted else None


@dataclass(frozen=True)
class RunLedger:
    """Every attempt of one run (all its submissions) and its totals."""

    run_id: str
    cluster: str
    attempts: tuple[AttemptLedger, ...]
    steps_total: int | None = None
    error_line: str | None = None  # its latest job failed: the cause its log gives (the store's, with its end)

    def gpu_hours(self, what: Callable[[AttemptLedger], float]) -> float:
        return sum(a.gpus * what(a) for a in self.attempts) / 3600

    @property
    def allocated_gpu_h(self) -> float:
        return self.gpu_hours(lambda a: a.elapsed_s)

    @property
    def useful_gpu_h(self) -> float:
        return self.gpu_hours(lambda a: a.useful_s)

    @property
    def recomputed_gpu_h(self) -> float:
        return self.gpu_hours(lambda a: a.recomputed_s)

    @property
    def idle_gpu_h(self) -> float:
        return self.gpu_hours(lambda a: a.starting_s)

    @property
    def recomputed_steps(self) -> int:
        return sum(a.recomputed_steps for a in self.attempts)

    @property
    def useful_steps(self) -> int:
        done = sum((a.end_step or 0) - (a.start_step or 0) for a in self.attempts if a.start_step is not None)
        return max(0, done - self.recomputed_steps)

    @property
    def pending_s_by_tier(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for a in self.attempts:
            out[a.tier] = out.get(a.tier, 0.0) + a.pending_s
        return out

    @property
    def requeue_s(self) -> float:
        return sum(a.requeue_s for a in self.attempts)

    @property
    def preemptions(self) -> int:
        return sum(a.preempted for a in self.attempts)

    @property
    def wall_clock_stops(self) -> int:
        return sum(a.wall_clock for a in self.attempts)

    @property
    def failures(self) -> dict[str, int]:
        return dict(Counter(f for a in self.attempts if (f := a.failure)))


@dataclass(frozen=True)
class Span:
    """A stretch that held GPUs: one allocation (a line of ``sacct -X -D``), an attempt inside a holder (its
    steps), or a holder's time with no attempt in it. Times are UTC epoch seconds."""

    state: JobState
    nodes: str
    gpus: int
    partition: str
    qos: str
    eligible: float | None
    start: float | None
    end: float | None
    elapsed_s: int
    pending_s: float
    requeue_s: float = 0.0  # from the attempt before it (of the same job) ending to its Eligible


@dataclass(frozen=True)
class Slot:
    """One attempt of a job: its span, and where the run's log names it (``(job id, restart count)`` for a batch
    job's attempt, ``(holder, attempt)`` inside a holder; None: its log says nothing of it)."""

    span: Span
    restart: int
    log_key: tuple[int, int] | None = None


@dataclass(frozen=True)
class Job:
    """One submission of a run as the ledger needs it: Slurm's id of it, its attempts, its log's attempts."""

    slurm_id: str  # 123, 123_4, or 123/2 for attempt 2 inside holder 123
    slots: Sequence[Slot]
    logs: dict[tuple[int, int], AttemptLog] = field(default_factory=dict)  # the run log's attempts


def epoch(t: datetime | None, tz: timezone) -> float | None:
    """A sacct time (the cluster's local time, naive) as UTC epoch seconds."""
    return None if t is None else t.replace(tzinfo=tz).timestamp()


def span_of(alloc: Allocation, tz: timezone, now: datetime) -> Span:
    """An allocation's span (``now``: what a waiting attempt's queue time runs to)."""
    r = alloc.record
    return Span(
        state=r.state,
        nodes=r.nodelist if alloc.started else "",
        gpus=alloc.gpus,
        partition=r.partition,
        qos=r.qos,
        eligible=epoch(alloc.eligible, tz),
        start=epoch(r.start_time, tz),
        end=epoch(r.end_time, tz),
        elapsed_s=r.elapsed_s if alloc.started else 0,
        pending_s=alloc.pending_s(now.astimezone(tz).replace(tzinfo=None)) or 0.0,
    )


def slots_of(allocations: Sequence[Allocation], tz: timezone, now: datetime) -> list[Slot]:
    """A batch job's attempts (its ``sacct -X -D`` lines, oldest first): the i-th ran with restart count i, and
    was requeued from the end of the one before it until it was eligible (to now while it is not). Each is keyed
    to the log's attempt of that restart count even where sacct has no Start for it: 22.05 may keep a preempted
    array task's first allocation that way, and the log is then the one record that it ran."""
    out: list[Slot] = []
    for i, a in enumerate(allocations):
        span = span_of(a, tz, now)
        before = out[-1].span.end if out else None
        if before is not None:
            until = min(span.eligible if span.eligible is not None else now.timestamp(), now.timestamp())
            span = replace(span, requeue_s=max(0.0, until - before))
        key = (int(a.record.raw_id), i) if a.record.raw_id.isdigit() else None
        out.append(Slot(span, i, key))
    return out


def run_ledger(run_id: str, cluster: str, jobs: Sequence[Job], tier: Callable[[str, str], str]) -> RunLedger:
    """The ledger of one run from its submissions, oldest first; ``tier(partition, qos)`` names a tier."""
    attempts: list[AttemptLedger] = []
    before: AttemptLog | None = None  # the last attempt that logged, across submissions (a resume continues it)
    for job in jobs:
        for slot in job.slots:
            log = job.logs.get(slot.log_key) if slot.log_key is not None else None
            sp = slot.span
            attempts.append(_attempt(job.slurm_id, slot.restart, sp, log, before, tier(sp.partition, sp.qos)))
            before = log if log is not None and log.points else before
    total = next((a.total for j in reversed(jobs) for a in reversed(list(j.logs.values())) if a.total), None)
    return RunLedger(run_id, cluster, tuple(attempts), total)


def _attempt(
    slurm_id: str, restart: int, sp: Span, log: AttemptLog | None, before: AttemptLog | None, tier: str
) -> AttemptLedger:
    start, elapsed = sp.start, sp.elapsed_s
    starting = recomputed = 0.0
    recomputed_steps = 0
    if start is not None:
        first = log.first_step_at if log is not None else None
        starting = min(float(elapsed), max(0.0, first - start)) if first is not None else float(elapsed)
        if log is not None and before is not None and log.points:
            recomputed_steps = max(0, min(before.end_step, log.end_step) - log.start_step)
            if recomputed_steps and first is not None:
                passed = log.reached_at(before.end_step)
                upto = passed if passed is not None else start + elapsed
                recomputed = min(elapsed - starting, max(0.0, upto - first))
    return AttemptLedger(
        job=slurm_id,
        restart=restart,
        tier=tier,
        state=sp.state,
        stop=log.stop if log is not None else LogStop.NONE,
        nodes=sp.nodes or (log.nodes if log is not None else ""),  # the log's, where sacct has no Start
        gpus=sp.gpus,
        eligible=sp.eligible,
        start=start,
        end=sp.end,
        pending_s=sp.pending_s,
        requeue_s=sp.requeue_s,
        elapsed_s=elapsed,
        starting_s=starting,
        recomputed_s=recomputed,
        start_step=log.start_step if log is not None else None,
        end_step=log.end_step if log is not None else None,
        recomputed_steps=recomputed_steps,
    )
