"""One poller per store and cluster, and every viewer a reader of its rounds.

The poller is whichever viewer holds the poller's lock (:mod:`roach.records.poller.lock`): it alone takes the rounds, and
so every action a round takes (a promotion, a rebalancing move, the record of a job's end), and each round goes
into the store's watch log with its events numbered (:mod:`roach.records.watch_log`). Every viewer, the poller
included, shows what the log has after its own cursor: `roach watch`, `roach top` and the MCP ``watch_events``
tool alike, so the Slurm calls per round are one poller's whatever the number of viewers. A viewer that starts
while another polls gets the last round's events at once. Each tick a reader tries the lock, so when the poller
ends, however it ends, a reader takes the next round within one interval; two viewers that start at once take
one lock between them. Each viewer marks itself a reader at its :class:`~roach.records.poller.readers.Rank`, and
the poller hands its lock to a reader that would do more (a ``--rebalance`` watch takes the rounds from a top).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from roach.ops.events import Event, EventKind
from roach.records.poller.lock import WatchLock, polled
from roach.records.poller.readers import Rank, ReaderMark, outranked
from roach.records.results import JOB_NOT_COMPLETED
from roach.watch.watcher import Watcher

READ_TICK_S = 0.5  # how often a reader looks at the log (and tries the lock): a round shows within this


@dataclass
class Viewer:
    """One viewer of ``watcher``'s store and cluster: the poller while it holds the lock, else a reader."""

    watcher: Watcher
    monotonic: Callable[[], float] = time.monotonic
    rank: Rank = Rank.WATCH  # what this viewer does as the poller; a reader that would do more takes the lock
    cursor: int = field(default=0, init=False)  # the last event shown
    rounds: int = field(default=0, init=False)  # the rounds this viewer took (its watcher's queue is the log's)
    lock: WatchLock = field(init=False)
    mark: ReaderMark = field(init=False)
    _due: float = field(default=0.0, init=False)  # when the poller's next round is due (monotonic)

    def __post_init__(self) -> None:
        self.lock = WatchLock(self.watcher.store.path, self.watcher.cluster.name)
        self.mark = ReaderMark(self.watcher.store.path, self.watcher.cluster.name, self.rank)

    @property
    def polling(self) -> bool:
        return self.lock.held

    def _log(self, **where: int) -> list[Event]:
        said = self.watcher.store.watch_log(self.watcher.cluster.name, **where)
        return [Event.from_stored(s.data, s.seq) for s in said]

    def _outranked(self) -> bool:
        return outranked(self.watcher.store.path, self.watcher.cluster.name, self.mark)

    def _take(self) -> bool:
        """Try the lock where it is free, unless a reader that would do more is there to take it (the readers' marks
        are read only then: a reader's tick while another polls costs one probe of the lock). Taken, the next round
        is due an interval after the log's last one, whoever took it."""
        if self.lock.held:
            return True
        store, cluster = self.watcher.store.path, self.watcher.cluster.name
        if polled(store, cluster) or self._outranked() or not self.lock.try_acquire():
            return False
        last, _ = self.watcher.store.watch_round(self.watcher.cluster.name)
        wait = 0.0 if last is None else last.at + self.watcher.next_delay() - self.watcher.clock()
        self._due = self.monotonic() + max(0.0, wait)
        return True

    def open(self) -> list[Event]:
        """Start viewing, the poller if none runs: the last round's events at once where that round is still in
        its interval (another viewer's, running or just ended), else none and a round at once."""
        last, self.cursor = self.watcher.store.watch_round(self.watcher.cluster.name)
        took = self._take()
        if last is None or (took and self._due <= self.monotonic()):
            return []
        self.watcher.heartbeat.beating = True  # joined a run: the heartbeat keeps that run's clock
        return self._log(round=last.round)

    def step(self, *, now: bool = False) -> list[Event]:
        """The round if this viewer polls (or the lock is free now) and it is due (``now``: at once), then what the
        log has new. A poller that a reader outranks hands the lock over first: that reader takes the next round."""
        if self.polling and self._outranked():
            self.lock.release()
        elif not self.polling and self._take():
            self.watcher.heartbeat.beating = True  # taken over: the heartbeat keeps the last poller's clock
        if self.polling:
            if now or self.monotonic() >= self._due:
                self.watcher.round()
                self.rounds += 1
                self._due = self.monotonic() + self.watcher.next_delay()
        new = self._log(after=self.cursor)
        if new:
            self.cursor = new[-1].seq or self.cursor
        return new

    def once(self, since: int | None = None) -> list[Event]:
        """One look: a round now where no poller runs, and its events (or, while another polls, its last
        round's); with ``since``, every event the log keeps after that seq instead (all of them for a seq the log
        never gave)."""
        last, seq = self.watcher.store.watch_round(self.watcher.cluster.name)
        if since is not None and since > seq:  # a seq this log never gave (another store's): all it keeps
            since = 0
        if self.lock.try_acquire():
            self.watcher.heartbeat.beating = last is not None  # the log's heartbeat clock, once it has one
            self.watcher.round()
            self.rounds += 1
            return self._log(after=seq if since is None else since)
        if since is not None:
            return self._log(after=since)
        return self._log(round=last.round) if last else []

    def next_wait(self) -> float:
        """Seconds to the next look: a tick for a reader; for the poller, its next round or a tick, the sooner."""
        if self.polling:
            return min(max(0.0, self._due - self.monotonic()), READ_TICK_S)
        return READ_TICK_S

    def pause(self) -> None:
        self.watcher.sleep(self.next_wait())

    def close(self) -> None:
        self.lock.release()
        self.mark.close()

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Ends:
    """What a viewer's events said of the watched jobs' ends: the watch's exit status."""

    failed: int = 0
    empty: bool = False  # the poller saw every watched job end

    def see(self, e: Event) -> None:
        if e.kind is EventKind.FINISHED and not (e.data.get("ok") or e.data.get("superseded_by")):
            self.failed += 1
        elif e.kind is EventKind.QUEUE_EMPTY:
            self.empty = True
            ended, completed = e.data.get("ended"), e.data.get("completed")
            if isinstance(ended, int) and isinstance(completed, int):
                self.failed = ended - completed  # the poller's count: a job its run continued ends as the run did

    @property
    def status(self) -> int:
        """0, or :data:`JOB_NOT_COMPLETED` when a job ended other than COMPLETED."""
        return JOB_NOT_COMPLETED if self.failed else 0


def follow(viewer: Viewer, emit: Callable[[Event], None], *, once: bool = False, since: int | None = None) -> int:
    """Show the poller's rounds through ``emit`` until every watched job ended (or one look with ``once``);
    returns the watch's exit status. Only events from rounds after the start decide it: the last round's,
    shown at the start, may be an earlier watch's end."""
    ends = Ends()
    if once:
        for e in viewer.once(since):
            ends.see(e)
            emit(e)
        return ends.status
    for e in viewer.open():
        emit(e)
    while True:
        for e in viewer.step():
            ends.see(e)
            emit(e)
        if ends.empty:
            return ends.status
        viewer.pause()
