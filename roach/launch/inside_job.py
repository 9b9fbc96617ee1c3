"""The handle of an attempt inside a holder, once started (:class:`InsideJob`).

:func:`~roach.launch.inside.submit_inside` returns it (and :func:`job_for` makes one for a recorded attempt);
its state is what the attempt's bundle says (the driver's ``exit`` file, :mod:`roach.launch.inside_attempts`), and
its :meth:`~roach.launch.job.JobHandle.status` the view ``roach status`` shows of it (:mod:`roach.launch.job_view`).
It is a :class:`~roach.launch.job.JobHandle` beside :class:`~roach.launch.job.Job`, not a kind of it: its
``wait()`` returns the driver's :class:`~roach.launch.inside_attempts.AttemptExit`, its ``paths`` are an
attempt's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from roach.errors import WaitTimeoutError
from roach.fleet.cluster import Cluster
from roach.launch.hold_steps import Step, StepKind
from roach.launch.holder import HolderHandle
from roach.launch.inside_attempts import (
    AttemptExit,
    AttemptPaths,
    AttemptStatus,
    attempt_end,
    read_attempts,
)
from roach.launch.job import Job, JobHandle
from roach.model.job_state import JobState
from roach.records.finals import record_ends
from roach.records.job_record import JobRecord, utc_now
from roach.records.store import Store

_LOST_GRACE_S = 30.0  # after the holder ended, how long a driver may take to write its exit status


# -- the handle ----------------------------------------------------------------------------------------------
@dataclass
class InsideJob(JobHandle[AttemptExit]):
    """An attempt run as steps of a holder. Its state is the driver's exit status, not Slurm's job state."""

    _holder: HolderHandle | None = field(default=None, init=False, repr=False)

    @property
    def holder(self) -> int:
        """The holder's job id (an attempt's record keeps it as its own ``job_id``)."""
        return self.record.job_id

    @property
    def attempt(self) -> int:
        return self.record.attempt or 0

    @property
    def paths(self) -> AttemptPaths:
        return AttemptPaths.of(self.record)

    def __str__(self) -> str:
        return f"attempt {self.attempt} of run {self.run_id} inside holder {self.holder} on {self.cluster.name}"

    def _holder_handle(self) -> HolderHandle:
        if self._holder is None:
            self._holder = HolderHandle(self.cluster, self.holder, None, self.store)
            self._holder._client = self.client
        return self._holder

    def attempt_status(self) -> AttemptStatus:
        """What the attempt's bundle says: the driver's exit status once it wrote one (one command)."""
        return read_attempts(self.fs.transport, [self.paths.bundle_dir])[self.paths.bundle_dir]

    def state(self) -> JobState:
        """COMPLETED, FAILED or CANCELLED (stopped) once the driver wrote its exit status; RUNNING before,
        while the holder runs; FAILED if the holder ended and the driver never wrote one."""
        st = self.attempt_status()
        if st.exit is not None:
            if not self.record.is_final:
                self.record_final(st.exit)
            return st.exit.state
        return JobState.RUNNING if self._holder_handle().state().is_active else JobState.FAILED

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> AttemptExit:
        """Block until the driver wrote its exit status; record it in the store and job.json."""
        poll_s = max(poll_s, self.cluster.min_poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        holder_gone_at = None
        while True:
            st = self.attempt_status()
            if st.exit is not None:
                self.record_final(st.exit)
                return st.exit
            if holder_gone_at is None and not self._holder_handle().state().is_active:
                holder_gone_at = time.monotonic()
            if holder_gone_at is not None and time.monotonic() - holder_gone_at > _LOST_GRACE_S:
                lost = AttemptExit(-1, utc_now())
                self.record_final(lost, "FAILED (the holder ended and the driver wrote no exit status)")
                return lost
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{self} did not end within {timeout:.0f}s",
                    hint=f"wait again, or stop it: roach signal {self.holder}",
                )
            time.sleep(poll_s)

    def record_final(self, ex: AttemptExit, text: str | None = None) -> None:
        """The attempt's exit into its job.json and the store (:func:`~roach.records.finals.record_ends`)."""
        (self.record,) = record_ends(self.store, self.fs.transport, [attempt_end(self.record, ex, text)])

    def steps(self) -> list[Step]:
        return [s for s in self._holder_handle().steps() if s.attempt == self.attempt and s.kind.is_attempt]

    def cancel(self) -> None:
        """Stop this attempt; the holder goes on. The driver starts no ranks' step any more; running ranks get
        SIGTERM the way ``roach signal`` sends it (they log it, checkpoint at their next step and exit). A
        second cancel, or a node step, is ``scancel``-ed (killed at once)."""
        again = self.fs.exists(self.paths.cancel)
        self.fs.write(self.paths.cancel, utc_now() + "\n")
        steps = self.steps()
        ranks = [s for s in steps if s.kind is StepKind.RANKS]
        if ranks and not again:
            self._holder_handle().signal(ranks[0].step, "TERM")
            steps = [s for s in steps if s not in ranks]
        if steps:
            self.client.scancel([s.id for s in steps])


def job_for(cluster: Cluster, record: JobRecord, store: Store | None = None) -> Job | InsideJob:
    """The handle of a recorded job: an :class:`InsideJob` for an attempt inside a holder, else a :class:`Job`."""
    return InsideJob(cluster, record, store) if record.is_attempt else Job(cluster, record, store)
