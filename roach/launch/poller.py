"""A waiter's poller: ``Job.wait``, ``Sweep.wait`` and ``roach logs -f`` read the ends a poller records.

A waiter marks itself a reader of its store and cluster (:mod:`roach.records.poller.readers`) and, where no
viewer polls, starts ``roach watch --serve`` in the background, which takes the rounds for every reader and
ends a while after the last has left; so any number of waiters cost one poller's calls. A waiter whose
cluster that command cannot reach the same way (a cluster made in Python that clusters.toml does not name, a
fake transport), or whose poller never came up, asks Slurm itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import get_cluster
from roach.records.poller.lock import lock_path, polled
from roach.records.poller.readers import Rank, ReaderMark
from roach.records.store import Store
from roach.scheduler.ssh import SSHTransport
from roach.scheduler.transport import LocalTransport, Transport

START_GRACE_S = 15.0  # a poller started here has this long to take the lock before the waiter asks Slurm itself
MAX_STARTS = 10  # pollers one wait starts at most, where each ends before it is seen polling (a signal kills it)
SERVE_LINGER_S = 30.0  # a poller started here outlives the last reader so long: a wait after another finds it


def _env(c: Cluster) -> dict[str, str]:
    return dict(c.env_factory()) if c.env_factory else {}


def serve_argv(c: Cluster, interval_s: float) -> list[str]:
    """The command of a poller that reaches ``c`` as ``c`` does."""
    argv = [sys.executable, "-m", "roach", "watch", "--serve", "--cluster", c.name]
    argv += ["--interval", f"{interval_s:g}", "--linger", f"{SERVE_LINGER_S:g}"]
    if c.run_as:
        argv += ["--run-as", c.run_as]
    if c.ssh_alias:
        argv += ["--ssh-alias", c.ssh_alias] + (["--ssh-config", c.ssh_config] if c.ssh_config else [])
    return argv


def startable(c: Cluster, transport: Transport) -> bool:
    """Whether ``roach watch --serve --cluster NAME`` reaches the Slurm that ``c`` (through ``transport``) does."""
    while isinstance(getattr(transport, "inner", None), (LocalTransport, SSHTransport)):
        transport = transport.inner  # type: ignore[attr-defined]  # a recorder around the real one
    if not isinstance(transport, (LocalTransport, SSHTransport)):
        return False  # a fake, or a transport only this process has
    try:
        named = get_cluster(c.name)
    except RoachError:
        return False
    return _env(named) == _env(c)


@dataclass
class Waiting:
    """One waiter on ``store`` and ``cluster``: :meth:`watched` says whether a poller records the ends, and starts
    one where none runs. Use it as a context manager: the mark goes when the wait ends."""

    cluster: Cluster
    store: Store
    interval_s: float
    can_start: bool
    _mark: ReaderMark | None = field(default=None, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _started: float = field(default=0.0, init=False)
    _seen: bool = field(default=False, init=False)  # the poller started here took the lock
    _starts: int = field(default=0, init=False)
    _gave_up: bool = field(default=False, init=False)

    def __enter__(self) -> Waiting:
        self._mark = ReaderMark(self.store.path, self.cluster.name, Rank.WAITER)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mark is not None:
            self._mark.close()
        if self._proc is not None:
            self._proc.poll()  # reaped if it ended; a running poller lingers for other readers

    def watched(self) -> bool:
        """Whether a poller records this store's ends on the cluster now, or one started here is coming up."""
        if polled(self.store.path, self.cluster.name):
            self._seen = self._seen or self._proc is not None
            return True
        if not self.can_start or self._gave_up:
            return False
        if self._proc is not None and not self._seen:
            code = self._proc.poll()
            if code is None and time.monotonic() - self._started < START_GRACE_S:
                return True
            if code is None or code > 0 or self._starts >= MAX_STARTS:
                self._gave_up = True  # it refused (its error is in the serve log) or hangs: ask Slurm here
                return False
        self._start()
        return True

    def _start(self) -> None:
        log = lock_path(self.store.path, self.cluster.name).with_suffix(".serve.log")
        env = {**os.environ, "ROACH_STORE": str(self.store.path)}
        with open(log, "ab") as err:
            self._proc = subprocess.Popen(
                serve_argv(self.cluster, self.interval_s),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,  # outlives the waiter, and a ^C to it
            )
        self._started, self._seen, self._starts = time.monotonic(), False, self._starts + 1


def waiting(cluster: Cluster, store: Store | None, transport: Transport, interval_s: float) -> Waiting | None:
    """The waiter for a wait on ``cluster`` with ``store``, None without a store."""
    if store is None:
        return None
    return Waiting(cluster, store, interval_s, startable(cluster, transport))
