"""An attempt inside a holder, once started: its id, its paths, its exit status and its handle.

:class:`InsideJob` is the handle :func:`~roach.slurm.inside.submit_inside` returns (and :func:`job_for` makes
for a recorded attempt); its state is what the attempt's bundle says (the driver's ``exit`` file), read for
many attempts in one command by :func:`read_attempts`. Starting an attempt is :mod:`roach.slurm.inside`.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass, field

from roach.errors import RoachError, WaitTimeoutError
from roach.slurm.cluster import Cluster
from roach.slurm.clusterfs import ClusterFS
from roach.slurm.finals import End, record_ends
from roach.slurm.hold import Holder
from roach.slurm.hold_steps import Step, StepKind
from roach.slurm.job import Job
from roach.slurm.states import JobState
from roach.slurm.store import JobRecord, Store, utc_now

EXIT_LEFT = 3  # rank 0's exit code when the ranks checkpointed and left (roach.runtime.attempts)
_LOST_GRACE_S = 30.0  # after the holder ended, how long a driver may take to write its exit status


def attempt_id(holder: int, n: int) -> int:
    """The store's job id of attempt ``n`` (1, 2, ...) inside ``holder``."""
    return (n << 32) | holder


def split_attempt_id(job_id: int) -> tuple[int, int] | None:
    """``(holder, n)`` for an attempt's job id, None for a Slurm job id."""
    return (job_id & 0xFFFFFFFF, job_id >> 32) if job_id >> 32 else None


def is_attempt(rec: JobRecord) -> bool:
    return rec.holder is not None and rec.job_id != rec.holder


@dataclass(frozen=True)
class AttemptPaths:
    """Every path of one attempt on the cluster (``log_root`` absolute)."""

    log_root: str
    run_id: str
    holder: int
    attempt: int

    @classmethod
    def of(cls, rec: JobRecord) -> AttemptPaths:
        holder, n = split_attempt_id(rec.job_id) or (rec.job_id, 0)
        return cls(posixpath.dirname(rec.log_path), rec.run_id, holder, n)

    @property
    def bundle_dir(self) -> str:
        return posixpath.join(self.log_root, "bundles", f"{self.holder}.{self.attempt}")

    def _in(self, name: str) -> str:
        return posixpath.join(self.bundle_dir, name)

    driver = property(lambda self: self._in("driver.sh"))  # runs on the submit host
    step_sh = property(lambda self: self._in("step.sh"))  # runs on the nodes: prepare | rank
    script = driver
    spec = property(lambda self: self._in("spec.json"))
    node_sh = property(lambda self: self._in("node.sh"))
    job_json = property(lambda self: self._in("job.json"))
    exit = property(lambda self: self._in("exit"))  # {"exit_code": N, "ended_at_utc": ...}, by the driver
    pid = property(lambda self: self._in("driver.pid"))  # "<host> <pid>" of the driver
    stop = property(lambda self: self._in("stop"))  # roach signal asked the ranks to leave
    cancel = property(lambda self: self._in("cancel"))  # cancel() asked the driver not to start the ranks

    @property
    def log(self) -> str:
        return posixpath.join(self.log_root, f"{self.run_id}_{self.holder}.out")


@dataclass(frozen=True)
class AttemptExit:
    """The driver's exit status, and what it means."""

    exit_code: int
    ended_at: str

    @property
    def state(self) -> JobState:
        if self.exit_code == 0:
            return JobState.COMPLETED
        return JobState.CANCELLED if self.exit_code == EXIT_LEFT else JobState.FAILED

    @property
    def status(self) -> str:
        return self.state.value.lower()

    @property
    def state_text(self) -> str:
        if self.exit_code == EXIT_LEFT:
            return "CANCELLED (stopped: the ranks left to come back)"
        return self.state.value


def attempt_end(rec: JobRecord, ex: AttemptExit, text: str | None = None) -> End:
    """An attempt's end, from the exit status its driver wrote (``text``: the state text, if not the exit's)."""
    return End(rec, ex.status, text or ex.state_text, f"{ex.exit_code}:0")


@dataclass(frozen=True)
class AttemptStatus:
    """What an attempt's bundle says now."""

    exit: AttemptExit | None
    stop_requested: bool
    driver_alive: bool | None  # None: the driver ran on another host than the one asked


# One call for many attempts: per bundle dir, a line "<dir> US <exit json or -> US <stop 0/1> US <alive 1/0/?>"
# (alive "?": the driver ran on another host than the one that answers).
_READ = r"""me="$(hostname)"
for d in "$@"; do
  if [ ! -d "$d" ]; then printf '%s\037-\0370\0370\n' "$d"; continue; fi  # removed (roach clean): not running
  e=-; [ -r "$d/exit" ] && e="$(tr -d '\n' < "$d/exit")"
  s=0; [ -e "$d/stop" ] && s=1
  a=?; if [ -r "$d/driver.pid" ]; then read -r h p < "$d/driver.pid"
    if [ "$h" = "$me" ]; then if kill -0 "$p" 2>/dev/null; then a=1; else a=0; fi; fi; fi
  printf '%s\037%s\037%s\037%s\n' "$d" "$e" "$s" "$a"
done"""


def read_attempts(fs: ClusterFS, bundle_dirs: list[str]) -> dict[str, AttemptStatus]:
    """Each attempt's status from its bundle, in one command on the cluster (for ``roach ls`` too)."""
    if not bundle_dirs:
        return {}
    res = fs.transport.run(["sh", "-c", _READ, "sh", *bundle_dirs])
    if res.returncode != 0:
        raise RoachError(f"reading the attempts' bundles failed: {res.stderr.strip()}")
    out = {}
    for line in res.stdout.splitlines():
        d, e, s, a = line.split("\x1f")
        ex = None
        if e != "-":
            try:
                data = json.loads(e)
                ex = AttemptExit(int(data["exit_code"]), str(data.get("ended_at_utc", "")))
            except (ValueError, KeyError, TypeError):
                raise RoachError(f"the exit status in {d}/exit is not roach's: {e!r}") from None
        out[d] = AttemptStatus(ex, s == "1", None if a == "?" else a == "1")
    return out


def attempt_records(store: Store, cluster: str, holder: int, limit: int = 500) -> list[JobRecord]:
    """The store's attempts inside ``holder``, newest first."""
    return [r for r in store.recent(limit, cluster) if r.holder == holder and is_attempt(r)]


# -- the handle ----------------------------------------------------------------------------------------------
@dataclass
class InsideJob(Job):
    """An attempt run as steps of a holder. Its state is the driver's exit status, not Slurm's job state."""

    _holder: Holder | None = field(default=None, init=False, repr=False)

    @property
    def holder(self) -> int:
        return self.record.holder  # type: ignore[return-value]

    @property
    def attempt(self) -> int:
        return (split_attempt_id(self.record.job_id) or (0, 0))[1]

    @property
    def paths(self) -> AttemptPaths:  # type: ignore[override]
        return AttemptPaths.of(self.record)

    def __str__(self) -> str:
        return f"attempt {self.attempt} of run {self.run_id} inside holder {self.holder} on {self.cluster.name}"

    def _holder_handle(self) -> Holder:
        if self._holder is None:
            self._holder = Holder(self.cluster, self.holder, None, self.store)
            self._holder._client = self.client
        return self._holder

    def status(self) -> AttemptStatus:
        return read_attempts(self.fs, [self.paths.bundle_dir])[self.paths.bundle_dir]

    def state(self) -> JobState:
        """COMPLETED, FAILED or CANCELLED (stopped) once the driver wrote its exit status; RUNNING before,
        while the holder runs; FAILED if the holder ended and the driver never wrote one."""
        st = self.status()
        if st.exit is not None:
            if not self.record.is_final:
                self.record_final(st.exit)
            return st.exit.state
        return JobState.RUNNING if self._holder_handle().state().is_active else JobState.FAILED

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> AttemptExit:  # type: ignore[override]
        """Block until the driver wrote its exit status; record it in the store and job.json."""
        poll_s = max(poll_s, self.cluster.min_poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        holder_gone_at = None
        while True:
            st = self.status()
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
                raise WaitTimeoutError(f"{self} did not end within {timeout:.0f}s",
                                 hint=f"wait again, or stop it: roach signal {self.holder}")
            time.sleep(poll_s)

    def record_final(self, ex: AttemptExit, text: str | None = None) -> None:  # type: ignore[override]
        """The attempt's exit into its job.json and the store (:func:`~roach.slurm.finals.record_ends`)."""
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


def job_for(cluster: Cluster, record: JobRecord, store: Store | None = None) -> Job:
    """The handle of a recorded job: an :class:`InsideJob` for an attempt inside a holder, else a :class:`Job`."""
    return InsideJob(cluster, record, store) if is_attempt(record) else Job(cluster, record, store)
