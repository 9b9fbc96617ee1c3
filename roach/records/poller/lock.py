"""The poller's lock: one ``flock``-held file beside the store per cluster, whose holder takes the watch's rounds.

Whoever holds ``<store>.watch-<cluster>.lock`` is the one poller of that store and cluster (:mod:`roach.watch.shared`);
every other viewer reads what it writes to the store's watch log, and a waiting ``Job`` reads the ends it records
(:func:`polled`). The file holds the holder's pid. The kernel drops an ``flock`` when its
process ends, however it ends, so a lock left by a dead poller is simply taken by the next viewer that tries it.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from roach.errors import RoachError

_PID_WIDTH = 20  # the pid is written padded, in one write that never shortens the file


def lock_path(store_path: Path, cluster: str) -> Path:
    return store_path.with_name(f"{store_path.name}.watch-{re.sub(r'[^A-Za-z0-9._-]', '_', cluster)}.lock")


class WatchLock:
    """``lock.try_acquire()``: True when this process now holds the poller's lock, False while another does."""

    def __init__(self, store_path: Path, cluster: str):
        self.path = lock_path(Path(store_path), cluster)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as e:
            os.close(fd)
            raise RoachError(
                f"cannot lock {self.path}: {e}", hint="check that the store's directory is writable"
            ) from e
        os.pwrite(fd, f"{os.getpid():<{_PID_WIDTH}}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> int | None:
        """The pid the lock file names (the poller's, or the last one's)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def polled(store_path: Path, cluster: str) -> bool:
    """Whether a poller holds the lock of ``store_path`` and ``cluster`` now (a shared lock it would refuse)."""
    path = lock_path(Path(store_path), cluster)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a shared lock this took
    return False
