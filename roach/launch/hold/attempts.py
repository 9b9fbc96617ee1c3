"""An attempt inside a holder, as data: its paths, its exit status, read for many attempts at once.

The handle that acts on a running attempt is :class:`~roach.launch.hold.holder.InsideJob`; starting one is
:mod:`roach.launch.hold.attempt_start`. ``roach ls`` reads attempts' ends through this module alone.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

from roach.errors import RoachError
from roach.model.job_state import JobState
from roach.model.status import Status
from roach.records.job_end import End
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.transport import Transport

EXIT_LEFT = 3  # rank 0's exit code when the ranks checkpointed and left (roach.runtime.attempts)


@dataclass(frozen=True)
class AttemptPaths:
    """Every path of one attempt on the cluster (``log_root`` absolute)."""

    log_root: str
    run_id: str
    holder: int
    attempt: int

    @classmethod
    def of(cls, rec: JobRecord) -> AttemptPaths:
        return cls(posixpath.dirname(rec.log_path), rec.run_id, rec.job_id, rec.attempt or 0)

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
    left = property(lambda self: self._in("left"))  # rank 0 left to come back (roach.runtime.attempts.leave)
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
    def status(self) -> Status:
        return Status(self.state.value.lower())

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


def read_attempts(transport: Transport, bundle_dirs: list[str]) -> dict[str, AttemptStatus]:
    """Each attempt's status from its bundle, in one command on the cluster through ``transport`` (for
    ``roach ls`` too, which loads no :class:`~roach.scheduler.clusterfs.ClusterFS`)."""
    if not bundle_dirs:
        return {}
    res = transport.run(["sh", "-c", _READ, "sh", *bundle_dirs])
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


def attempt_records(store: Store, cluster: str, holder: int) -> list[JobRecord]:
    """The store's attempts inside ``holder``, newest first."""
    return store.attempts(cluster, holder)[::-1]
