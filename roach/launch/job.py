"""The typed handles of a started run: state, status, wait, logs, cancel; rebuilt from the store by run or job id.

:class:`JobHandle` is what every handle has; :class:`Job` is a batch job's (or a sweep's run's), whose end is
sacct's record, and :class:`~roach.launch.hold.holder.InsideJob` an attempt's inside a holder, whose end is its
driver's exit status. Each ``wait()`` returns its own end type.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from roach.errors import MissingError, ParseError, UsageError, WaitTimeoutError
from roach.fleet.cluster import Cluster
from roach.fleet.route import reaching
from roach.launch.job_view import JobView, reconcile
from roach.launch.poller import Waiting, waiting
from roach.model.ids import JobKey
from roach.model.job_state import JobState
from roach.model.status import Status
from roach.records.bundle import BundlePaths
from roach.records.job_end import End, record_ends
from roach.records.job_record import JobRecord
from roach.records.results import collect, ended
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.controller_ends import OutOfQueue, controller_ends
from roach.scheduler.parse import AcctRecord, JobRef
from roach.scheduler.queue_states import StateRecord

READ_TICK_S = 0.5  # how often a wait looks at the store while a poller records the ends

EndT = TypeVar("EndT")  # what a handle's wait() returns: the end as that kind of job tells it


@dataclass
class JobHandle(ABC, Generic[EndT]):
    """What every handle of a started run has: its record, cluster and store, its view, log and result. Cheap to
    make; every method asks the cluster afresh. ``wait()`` returns ``EndT``, the end as the kind of job tells it."""

    cluster: Cluster
    record: JobRecord
    store: Store | None = field(default=None, repr=False)
    _client: SlurmClient | None = field(default=None, init=False, repr=False)
    _fs: ClusterFS | None = field(default=None, init=False, repr=False)

    # -- identity ------------------------------------------------------------------------------------
    @property
    def job_id(self) -> int:
        """Slurm's job id (an attempt's: its holder's; :attr:`key` names the attempt)."""
        return self.record.job_id

    @property
    def key(self) -> JobKey:
        """The job's key in the store: ``123``, ``123_4``, ``123/2``."""
        return self.record.key

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def task(self) -> int | None:
        """The array task index when this is one run of a sweep."""
        return self.record.task

    @property
    def slurm_id(self) -> str:
        """The job as Slurm names it: ``123``, or ``123_4`` for a sweep's run."""
        return self.record.slurm_id

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            self._client = self.cluster.client()
        return self._client

    @property
    def fs(self) -> ClusterFS:
        if self._fs is None:
            self._fs = ClusterFS(self.client.transport)
        return self._fs

    def __str__(self) -> str:
        return f"job {self.slurm_id} (run {self.run_id}) on {self.cluster.name}"

    # -- state ---------------------------------------------------------------------------------------
    @abstractmethod
    def state(self) -> JobState:
        """The job's state now."""

    @abstractmethod
    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> EndT:
        """Block until the job ended; record its end in the store and job.json; return it."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the job."""

    def status(self) -> JobView:
        """What ``roach status`` shows of the job (its ``--json`` is this view): state, status, why it is pending,
        its exit code once it ended, from :func:`~roach.launch.job_view.reconcile`, which decides it for the
        command line and the MCP server too. An end it finds is recorded, as :meth:`state` records one."""
        found = reconcile(self.client, [self.record], self.store, whole_queue=False)
        (self.record,) = found.records
        (view,) = found.views
        return view

    def waiting(self, interval_s: float) -> Waiting | None:
        """This job's waiter on its store's poller (:mod:`roach.launch.poller`); None where no poller records
        its end (no store, or an attempt in a holder, which ends by its own exit file)."""
        if self.record.is_attempt:
            return None
        return waiting(self.cluster, self.store, self.client.transport, interval_s)

    def _final_record(self) -> JobRecord | None:
        """The job's record in the store once it records an end (kept as :attr:`record`), else None."""
        r = self.record
        mine = self.store.get(r.cluster, r.job_id, r.task, r.attempt) if self.store is not None else None
        if mine is None or not mine.is_final:
            return None
        self.record = mine
        return mine

    def recorded_end(self) -> JobState | None:
        """The final state the store records for the job (a watch, a wait or `roach ls` recorded it), None while it
        records none; asks Slurm nothing. The store keeps sacct's words (``CANCELLED by 0``, ``OUT_OF_MEMORY (step
        0; ...)``): the state is the first."""
        mine = self._final_record()
        if mine is None:
            return None
        try:
            return JobState.parse((mine.slurm_state or "").split(" ", 1)[0])
        except ParseError:
            return JobState.COMPLETED if mine.status == Status.COMPLETED else JobState.FAILED

    # -- logs and result -----------------------------------------------------------------------------
    def log(self) -> str:
        """The job's whole log (``<log_root>/<run_id>_<job_id>.out``, a sweep's run
        ``<log_root>/<sweep_id>_<array>_<task>.out``); empty before the job starts."""
        path = self.record.log_path
        return self.fs.read(path) if self.fs.exists(path) else ""

    def tail(self, lines: int = 20) -> str:
        path = self.record.log_path
        return self.fs.tail(path, lines) if self.fs.exists(path) else ""

    def result(self, timeout: float | None = None, poll_s: float = 2.0) -> Any:
        """Wait for the job to end (:meth:`wait`), then return its function's return value: rank 0's
        ``result.json`` in the run directory (JSON: a tuple comes back a list), else its ``result.pkl``.

        ``result.pkl`` is unpickled only here, on this call: unpickling runs code of the classes in it, which
        are the job's own (the function's value). Raises :class:`~roach.records.results.NotCompletedError` (exit
        code 6) when the job ended other than COMPLETED, with its final state, the failing rank's last
        traceback lines and the log to read; :class:`~roach.records.results.ResultMissingError` when it
        completed and its run directory holds no result file.
        """

        (outcome,) = collect(self.fs, [ended(self, self.wait(timeout, poll_s))])
        return outcome.get()


@dataclass
class Job(JobHandle[AcctRecord]):
    """A batch job roach queued, or one run of a sweep: its end is sacct's record."""

    @property
    def paths(self) -> BundlePaths:
        log_root = self.record.log_path.rsplit("/", 1)[0]
        return BundlePaths(log_root, self.run_id, self.slurm_id)

    def _is_me(self, ref: JobRef) -> bool:
        """Whether a squeue/sacct line (its JobRef) is this job, or this task of its array."""
        return ref.names(self.job_id, self.task)

    @classmethod
    def from_ref(cls, ref: str | int, *, cluster: str | Cluster | None = None, store: Store | None = None) -> Job:
        """The job named by a run id (its latest job) or a job id, from the store."""
        store = store or Store()
        cname = cluster.name if isinstance(cluster, Cluster) else cluster
        rec = store.find(str(ref), cluster=cname)

        return cls(reaching(rec, cluster), rec, store)

    # -- state ---------------------------------------------------------------------------------------
    def state(self) -> JobState:
        """Live state: squeue while the job is in the queue, else sacct's final record (``COMPLETING`` in the
        moment between leaving the queue and accounting recording the end)."""
        recs = [r for r in self.client.squeue(job_ids=[self.slurm_id]) if self._is_me(r.ref)]
        if recs:
            return recs[0].state
        final = self._accounting()
        if final is None:
            raise MissingError(
                f"{self} is neither in squeue nor in sacct",
                hint="the controller may have restarted without accounting; check `sacct -j`",
            )
        if final.state.is_terminal and not self.record.is_final:
            self.record_final(final)
        return final.state.after_queue()

    def _accounting(self, *, slurmctld: bool = False) -> AcctRecord | None:
        """sacct's latest allocation of the job; with ``slurmctld``, the controller's record of its end where sacct
        has none (:mod:`roach.scheduler.controller_ends`)."""
        recs = [r for r in self.client.ends([self.slurm_id]) if r.step is None and self._is_me(r.ref)]
        if slurmctld and not (recs and recs[-1].state.is_terminal):
            recs += [r for r in controller_ends(self.client, [self.slurm_id]) if self._is_me(r.ref)]
        return recs[-1] if recs else None

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> AcctRecord:
        """Block until Slurm says the job ended (sacct, or slurmctld where accounting lags; never an empty squeue);
        record it; return its record.

        A requeued job is not ended: it is back in the queue. Records the final state in the store and
        in the bundle's ``job.json``. The wait reads the end the store's poller records (a `roach watch` or
        `roach top`, else a ``roach watch --serve`` it starts, shared with every other wait) instead of asking
        Slurm each round, then asks sacct once.
        """
        poll_s = max(poll_s, self.cluster.min_poll_s)  # never faster than the cluster allows
        w = self.waiting(poll_s)
        with w if w is not None else nullcontext():
            return self._wait(w, timeout, poll_s)

    def _wait(self, w: Waiting | None, timeout: float | None, poll_s: float) -> AcctRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        out = OutOfQueue()
        while True:
            recorded = self._final_record() is not None  # a poller recorded the end (and may have exited since)
            watched = not recorded and w is not None and w.watched()
            queued = [] if recorded or watched else self._queued()
            if queued:
                out.queued()
            if recorded or not (watched or queued):
                rec = self._accounting(slurmctld=recorded or out.lagging())
                if rec is not None and rec.state.is_terminal:
                    if not recorded:
                        self.record_final(rec)
                    return rec
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{self} did not end within {timeout:.0f}s",
                    hint=f"it is still {queued[0].state.value if queued else 'not ended'}; wait again or `roach cancel`",
                )
            time.sleep(min(poll_s, READ_TICK_S) if watched else poll_s)

    def _queued(self) -> list[StateRecord]:
        return [r for r in self.client.job_states([self.slurm_id]) if self._is_me(r.ref) and r.state.is_active]

    def record_final(self, rec: AcctRecord) -> None:
        """sacct's final record of the job into its job.json and the store (:func:`~roach.records.job_end.record_ends`)."""
        (self.record,) = record_ends(self.store, self.fs.transport, [End.of_acct(self.record, rec)])

    def cancel(self) -> None:
        """Cancel this job (only ever a job roach submitted and recorded)."""
        if self.record.job_id != self.job_id:
            raise UsageError("job handle and record disagree")
        self.client.scancel([self.slurm_id])
