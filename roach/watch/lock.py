"""One ``roach watch`` per store and cluster: a lock file beside the store, held with ``flock`` while it runs.

Two watchers on one store would each say every edge line and overwrite each other's saved rounds. The lock
is ``<store>.watch-<cluster>.lock``; it holds the pid of the watcher that has it. The kernel drops an
``flock`` when its process ends, however it ends, so a lock left by a dead watcher is simply taken over.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

from roach._proc import alive
from roach.errors import RoachError

WATCH_BUSY = 9  # exit code: another `roach watch` holds this store and cluster
_PID_WIDTH = 20  # the pid is written padded, in one write that never shortens the file


class WatchBusyError(RoachError):
    """Another watcher already watches this cluster with this store."""

    exit_code = WATCH_BUSY


def lock_path(store_path: Path, cluster: str) -> Path:
    return store_path.with_name(f"{store_path.name}.watch-{re.sub(r'[^A-Za-z0-9._-]', '_', cluster)}.lock")


class WatchLock:
    """``with WatchLock(store.path, cluster):`` holds the lock or raises :class:`WatchBusyError`."""

    def __init__(self, store_path: Path, cluster: str):
        self.path = lock_path(Path(store_path), cluster)
        self.cluster = cluster
        self.store_path = Path(store_path)
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            raise self._busy(int(text) if text.isdigit() else None) from None
        except OSError as e:
            os.close(fd)
            raise RoachError(
                f"cannot lock {self.path}: {e}", hint="check that the store's directory is writable"
            ) from e
        os.pwrite(fd, f"{os.getpid():<{_PID_WIDTH}}\n".encode(), 0)
        self._fd = fd

    def _busy(self, pid: int | None) -> WatchBusyError:
        who = f"pid {pid}" if pid is not None else "a process that has not written its pid yet"
        if pid is not None and not alive(pid):
            who += " (no longer running: a process it started still holds the lock)"
        kill = f"`kill {pid}`" if pid is not None else "stop it"
        return WatchBusyError(
            f"another `roach watch` ({who}) is already watching cluster {self.cluster} with the store {self.store_path}",
            hint=f"read its output instead, or stop it first ({kill}; the jobs go on and the next watch picks up); "
            f"a watch with another store (ROACH_STORE) or cluster is not blocked. Lock: {self.path}",
        )

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WatchLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
