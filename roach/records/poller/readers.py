"""The poller's readers: one file per reader beside the store, each held with a shared ``flock`` while it reads.

A reader (a watch, a top, a waiting ``Job``) marks itself with :class:`ReaderMark` for as long as it reads the
rounds of a store and cluster. The file names its rank: what it would do as the poller, so that a holder of the
poller's lock hands it to a reader that would do more (:func:`outranked`), and a poller started for waiters
ends a while after the last one leaves (:func:`readers`). The kernel drops a reader's ``flock`` however its
process ends: a file no one holds is a reader gone, removed by the next look.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from roach.records.poller.lock import lock_path


class Rank(IntEnum):
    """What a viewer does when it holds the poller's lock; the higher takes the lock from the lower."""

    WAITER = -1  # never polls itself (Job.wait, Sweep.wait, logs -f): it starts a poller instead
    SERVER = 0  # `roach watch --serve`: polls for the waiters, and ends when they have left
    TOP = 1  # `roach top`
    WATCH = 2  # `roach watch`
    REBALANCE = 3  # `roach watch --rebalance`: its rounds also move jobs across tiers


def readers_dir(store_path: Path, cluster: str) -> Path:
    return lock_path(Path(store_path), cluster).with_suffix(".readers")


@dataclass(frozen=True)
class Reader:
    path: Path  # its mark
    pid: int
    rank: Rank


class ReaderMark:
    """This process reads the rounds of ``store_path`` and ``cluster`` at ``rank`` until :meth:`close`."""

    def __init__(self, store_path: Path, cluster: str, rank: Rank):
        self.rank = rank
        folder = readers_dir(store_path, cluster)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.path = folder / name
        self._fd: int | None = os.open(folder / f".{name}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        os.pwrite(self._fd, f"{os.getpid()} {int(rank)}\n".encode(), 0)
        os.rename(folder / f".{name}", self.path)  # seen only once held: a look never takes it for a reader gone

    def close(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ReaderMark:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(path: Path) -> Reader | None:
    """The reader a mark names while its process holds it; a mark no one holds is removed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode(errors="replace").split()
            if len(text) == 2 and text[0].isdigit() and text[1].lstrip("-").isdigit():
                return Reader(path, int(text[0]), Rank(int(text[1])))
            return Reader(path, 0, Rank.WAITER)  # unreadable yet held: a reader all the same
        path.unlink(missing_ok=True)
        return None
    finally:
        os.close(fd)


def live_readers(store_path: Path, cluster: str, *, but: ReaderMark | None = None) -> list[Reader]:
    """The readers of ``store_path`` and ``cluster`` now, other than ``but``."""
    try:
        paths = list(readers_dir(store_path, cluster).iterdir())
    except OSError:
        return []
    found = (_alive(p) for p in paths if not p.name.startswith("."))
    return [r for r in found if r is not None and (but is None or r.path != but.path)]


def readers(store_path: Path, cluster: str, *, but: ReaderMark | None = None) -> int:
    return len(live_readers(store_path, cluster, but=but))


def outranked(store_path: Path, cluster: str, mark: ReaderMark) -> bool:
    """Whether another reader would do more as the poller than ``mark``'s."""
    return any(r.rank > mark.rank for r in live_readers(store_path, cluster, but=mark))
