"""A holder and the attempts in it: :class:`Holder`, :class:`InsideJob`, and starting an attempt.

A holder is a job that takes the nodes and sleeps (:func:`~roach.launch.hold.start.hold` queues one);
attempts run inside it as its steps. :class:`Holder` is its one handle: what Slurm says of it, its steps,
stopping an attempt, releasing it, and :meth:`Holder.submit`, which starts an attempt in it the way
``submit(..., inside=<holder>)`` does (:func:`submit_attempt`, both through
:func:`~roach.launch.hold.attempt_start.start_attempt`). :class:`InsideJob` is an attempt's handle; it asks its
holder for its state, so the two live together. The guide is docs/hold.md.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self, Unpack

from roach.errors import MissingError, RoachError, UsageError, WaitTimeoutError
from roach.fleet.cluster import Cluster
from roach.fleet.route import reaching
from roach.launch.hold.attempt_start import start_attempt
from roach.launch.hold.attempts import AttemptExit, AttemptPaths, AttemptStatus, attempt_end, read_attempts
from roach.launch.hold.steps import SENT, SIGNAL_PROGRAM, STEP_SIGNAL, HolderInfo, Step, StepKind, list_steps
from roach.launch.job import Job, JobHandle
from roach.launch.options import Options, SubmitFields
from roach.launch.prepare import check_args, check_ids, prepare, resolve_run
from roach.model.ids import RecordKind
from roach.model.job_state import JobState
from roach.model.resources import Resources
from roach.records.job_end import End, record_ends
from roach.records.job_record import JobRecord, utc_now
from roach.records.store import Store
from roach.runtime.signals import parse_signal
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import AcctRecord

HOLD_TARGET = "roach:hold"  # the target of a holder's record: it runs no function
HOLDER_NAME = re.compile(r"[A-Za-z0-9._+=@:-]{1,128}")
_LOST_GRACE_S = 30.0  # after the holder ended, how long a driver may take to write its exit status


@dataclass(frozen=True)
class SignalReport:
    """What :meth:`Holder.signal` did: one line per node from the signalling step."""

    holder: int
    step: str  # the ranks' step signalled, e.g. "412.3"
    attempt: int
    signal: str
    ranks: int  # processes signalled, summed over the nodes
    lines: tuple[str, ...]


# -- the holder --------------------------------------------------------------------------------------------
@dataclass
class Holder:
    """A holder on a cluster. Every method asks the cluster afresh; ``record`` is its store record (None
    for an allocation roach did not queue, which works too)."""

    cluster: Cluster
    job_id: int
    record: JobRecord | None = None
    store: Store | None = field(default=None, repr=False)
    _client: SlurmClient | None = field(default=None, init=False, repr=False)

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            self._client = self.cluster.client()
        return self._client

    @property
    def log_path(self) -> str | None:
        return self.record.log_path if self.record else None

    def __str__(self) -> str:
        return f"holder {self.job_id} on {self.cluster.name}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """``with hold(...) as h:`` ends the holder when the block ends, also on an exception or ^C (as
        :meth:`release`: a running attempt checkpoints first), so a script that fails stops the charge.
        The block's own exception goes on; a failure to release is then a note on it, not a new error."""
        try:
            if self.info().state.is_active:
                self.release()
        except Exception as err:
            if exc is None:
                raise
            exc.add_note(f"roach: releasing {self} failed too: {err}; end it with `roach release {self.job_id}`")

    @classmethod
    def from_ref(cls, ref: str | int, *, cluster: str | Cluster | None = None, store: Store | None = None) -> Self:
        """The holder a job id (or the holder's record's run id) names, from the store."""
        store = store or Store()
        cname = cluster.name if isinstance(cluster, Cluster) else cluster
        rec = store.find(str(ref), cluster=cname)
        if rec.kind is not RecordKind.HOLDER:
            raise UsageError(
                f"job {rec.job_id} (run {rec.run_id}) is not a holder: it runs {rec.target}",
                hint="`roach ls` marks holders; `roach hold` makes one",
            )
        return cls(reaching(rec, cluster), rec.job_id, rec, store)

    # -- state -----------------------------------------------------------------------------------------
    def info(self) -> HolderInfo:
        """One ``squeue`` (or, once it left the queue, one ``sacct``)."""
        q = [r for r in self.client.squeue(job_ids=[self.job_id]) if r.raw_id == self.job_id]
        if q:
            r = q[0]
            reason = r.reason_text if r.state.is_pending and r.reason_text not in ("", "None") else None
            return HolderInfo(
                self.job_id, r.state, reason, r.nodelist, r.nodes, r.tres.gpus, r.elapsed_s, r.time_limit_s
            )
        acct = [a for a in self.client.sacct([self.job_id]) if a.step is None and a.ref.job == self.job_id]
        if not acct and self.record is None:
            raise UsageError(
                f"{self} is neither in squeue nor in sacct",
                hint="`--inside` takes the job id of a holder `roach hold` queued; `roach ls` lists them",
            )
        if not acct:
            raise MissingError(
                f"{self} is neither in squeue nor in sacct",
                hint="the controller may have restarted without accounting; check `sacct -j`",
            )
        a = acct[-1]
        self._record_final(a)
        return HolderInfo(
            self.job_id, a.state.after_queue(), None, a.nodelist, a.nodes, a.tres.gpus, a.elapsed_s, a.time_limit_s
        )

    def state(self) -> JobState:
        return self.info().state

    def wait_running(self, timeout: float | None = None, poll_s: float = 2.0) -> HolderInfo:
        """Block until the holder runs; raise if it ends first or ``timeout`` passes."""
        poll_s = max(poll_s, self.cluster.min_poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.info()
            if info.state.is_running and not info.state.is_ending:
                return info
            if info.state.is_terminal:
                raise RoachError(
                    f"{self} ended ({info.state.value}) before it ran",
                    hint="read its log" + (f": {self.log_path}" if self.log_path else ""),
                )
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{self} did not start within {timeout:.0f}s (pending: {info.reason or '?'})",
                    hint="wait again, or `roach release` it and hold something that fits",
                )
            time.sleep(poll_s)

    def steps(self, info: HolderInfo | None = None) -> list[Step]:
        """The holder's steps (``squeue -s``), each told apart: ranks' step, node step, roach signal, ..."""
        info = info or self.info()
        return list_steps(self.client, [self.job_id], info.gpus, info.nodes)

    def idle(self) -> bool:
        """Running, and no attempt's step (nor anyone's own) runs in it: it is charged for nothing."""
        info = self.info()
        if not info.state.is_running:
            return False
        return not [s for s in self.steps(info) if s.kind.is_attempt or s.kind is StepKind.OTHER]

    def lead_s(self) -> int | None:
        """How long before its wall clock the holder stops its attempts (from its script; None if unknown)."""
        if self.record is None:
            return None
        try:
            text = ClusterFS(self.client.transport).read(posixpath.join(self.record.bundle_dir, "job.sh"))
        except RoachError:
            return None
        m = re.search(r"^#SBATCH --signal=B:\w+@(\d+)$", text, re.M)
        return int(m[1]) if m else None

    @property
    def ending_path(self) -> str | None:
        """Written by the holder when its wall clock is near: no attempt starts after it."""
        return posixpath.join(self.record.bundle_dir, "ending") if self.record else None

    # -- attempts --------------------------------------------------------------------------------------------
    def submit(
        self,
        target: str,
        args: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        force: bool = False,
        wait_holder_s: float | None = None,
        **fields: Unpack[SubmitFields],
    ) -> InsideJob:
        """``submit(target, args, inside=<this holder>, ...)`` on the holder's cluster; ``resources`` defaults to
        the holder's, ``store`` to its store."""
        if "cluster" in fields:
            raise UsageError(
                f"an attempt runs on its holder's cluster ({self.cluster.name}): cluster= is not an option here",
                hint="leave cluster= out",
            )
        if "resources" not in fields:
            if self.record is None:
                raise UsageError(f"{self} has no record to take resources from", hint="pass resources=")
            fields["resources"] = Resources.from_json(self.record.resources)
        fields.setdefault("store", self.store)
        fields["cluster"] = self.cluster
        return submit_attempt(
            target,
            args,
            inside=self.job_id,
            run_id=run_id,
            force=force,
            wait_holder_s=wait_holder_s,
            **fields,
        )

    # -- control ---------------------------------------------------------------------------------------
    def signal(self, step: str | int | None = None, sig: str = "USR1") -> SignalReport:
        """Stop an attempt cleanly: a step of its own on the ranks' nodes sends ``sig`` to that attempt's ranks
        only. They log ``caught_signal``, checkpoint and exit at their next step. ``step`` is the ranks' step
        (``3`` or ``412.3``); by default the one ranks' step running."""
        name = parse_signal(sig).name.removeprefix("SIG")
        info = self.info()
        if not info.state.is_running:
            raise UsageError(f"{self} is {info.state.value}: no step runs in it")
        steps = self.steps(info)
        ranks = [s for s in steps if s.kind is StepKind.RANKS]
        if step is not None:
            want = str(step).rpartition(".")[2]
            hits = [s for s in steps if s.step == want]
            if not hits:
                raise UsageError(f"{self} has no step {want}", hint=_steps_hint(steps))
            if hits[0].kind is not StepKind.RANKS:
                raise UsageError(
                    f"step {hits[0].id} is {hits[0].describe()}, not an attempt's ranks' step", hint=_steps_hint(steps)
                )
            target = hits[0]
        elif len(ranks) == 1:
            target = ranks[0]
        else:
            raise UsageError(
                f"{self} runs {'no' if not ranks else len(ranks)} ranks' steps"
                + ("" if not ranks else ": say which with --step"),
                hint=_steps_hint(steps),
            )
        if target.attempt is None:
            raise UsageError(
                f"step {target.id} ({target.name}) is not an attempt roach started",
                hint="roach signals only the ranks of its own attempts (`roach submit --inside`)",
            )
        self._note_stop(target, name)
        n_nodes = len(self.client.hostnames(target.nodelist))
        argv = [
            "srun",
            f"--jobid={self.job_id}",
            "--overlap",
            f"--job-name={STEP_SIGNAL}",
            f"--nodelist={target.nodelist}",
            f"--nodes={n_nodes}",
            f"--ntasks={n_nodes}",
            "--ntasks-per-node=1",
            "bash",
            "-c",
            SIGNAL_PROGRAM,
            STEP_SIGNAL,
            name,
            str(self.job_id),
            str(target.attempt),
        ]
        out = self.client.run(argv, retry=False).stdout
        lines = tuple(ln for ln in out.splitlines() if ln.strip())
        return SignalReport(
            self.job_id, target.id, target.attempt, name, sum(int(m[2]) for m in SENT.finditer(out)), lines
        )

    def _note_stop(self, target: Step, sig: str) -> None:
        """Mark the attempt as asked to stop (a new attempt then waits for it instead of refusing) and say so
        in its log."""
        if self.store is None:
            return
        rec = self.store.get(self.cluster.name, self.job_id, attempt=target.attempt)
        if rec is None:
            return
        p = AttemptPaths.of(rec)
        line = f"roach: roach signal: SIG{sig} to the ranks of attempt {p.attempt} (step {target.id}) at {utc_now()}"
        fs = ClusterFS(self.client.transport)
        fs.write(p.stop, line + "\n")
        self.client.transport.run(["sh", "-c", 'printf "%s\\n" "$2" >> "$1"', "sh", p.log, line])

    def release(self, wait_s: float = 60.0) -> JobState:
        """End the holder (``scancel``). Running attempts get SIGTERM (they checkpoint at their next step if
        they can). Waits up to ``wait_s`` for it to leave the queue and records its final state."""
        self.client.scancel([self.job_id])
        deadline = time.monotonic() + wait_s
        while True:
            info = self.info()
            if info.state.is_terminal or time.monotonic() > deadline:
                return info.state
            time.sleep(max(1.0, min(self.cluster.min_poll_s, 5.0)))

    def _record_final(self, a: AcctRecord) -> None:
        """The holder's end, once sacct has it: into its job.json and the store (:func:`record_ends`)."""
        if self.record is None or self.record.is_final or not a.state.is_terminal:
            return
        (self.record,) = record_ends(self.store, self.client.transport, [End.of_acct(self.record, a)])


def _steps_hint(steps: list[Step]) -> str:
    listed = "; ".join(f"{s.id} {s.name}: {s.describe()}" for s in steps if s.kind not in (StepKind.EXTERN,))
    return f"its steps: {listed or '(none)'} (`roach steps` lists them)"


# -- an attempt ------------------------------------------------------------------------------------------------
@dataclass
class InsideJob(JobHandle[AttemptExit]):
    """An attempt run as steps of a holder. Its state is the driver's exit status, not Slurm's job state.

    It is a :class:`~roach.launch.job.JobHandle` beside :class:`~roach.launch.job.Job`, not a kind of it: its
    ``wait()`` returns the driver's :class:`~roach.launch.hold.attempts.AttemptExit`, its ``paths`` are an
    attempt's, and its :meth:`~roach.launch.job.JobHandle.status` is the view ``roach status`` shows of it."""

    _holder: Holder | None = field(default=None, init=False, repr=False)

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

    def _holder_handle(self) -> Holder:
        if self._holder is None:
            self._holder = Holder(self.cluster, self.holder, None, self.store)
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
        """The attempt's exit into its job.json and the store (:func:`~roach.records.job_end.record_ends`)."""
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


def submit_attempt(
    target: str,
    args: Mapping[str, Any] | None = None,
    options: Options | None = None,
    *,
    inside: int,
    run_id: str | None = None,
    force: bool = False,
    wait_holder_s: float | None = None,
    **fields: Unpack[SubmitFields],
) -> InsideJob:
    """``submit(..., inside=<holder job id>)``: the submission's checks, then an attempt started now as steps of
    that running holder (:func:`~roach.launch.hold.attempt_start.start_attempt`)."""
    check_ids(run_id, inside, wait_holder_s)
    checked = check_args(args or {})
    p = prepare(target, Options.of(options, fields), args=checked)
    run_id, run_dir = resolve_run(p, run_id)
    holder = int(inside)
    h = Holder(p.cluster, holder, p.store.get(p.cluster.name, holder), p.store)
    h._client = p.client
    record = start_attempt(p, h, args=checked, run_id=run_id, run_dir=run_dir, force=force, wait_holder_s=wait_holder_s)
    job = InsideJob(p.cluster, record, p.store)
    job._client = p.client
    return job
