"""``resume.pt``: written atomically, read back; never deleted by roach.

With torch importable the file is a ``torch.save`` of ``{"roach": {...}, "state": <user state>}``,
else a pickle of the same. A kill during a save leaves the previous file intact: the new one is
written to a temporary file in the same directory, fsynced, then renamed over it.

A resumed rank reads it early (:class:`Prefetch`): in a thread of its own once the rank has imported the function,
while the function forms its process group, so that ``run.resume()`` finds it read.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roach._fs import atomic_open

RESUME_FILE = "resume.pt"


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def save(path: Path, obj: Any, check: Callable[[], None] | None = None) -> None:
    """Write ``obj`` to ``path`` atomically; ``check()`` runs just before the rename and may refuse the write."""
    with atomic_open(path, check=check) as f:
        torch = _torch()
        if torch is not None:
            torch.save(obj, f)
        else:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)


def load(path: Path) -> Any:
    torch = _torch()
    if torch is not None:
        return torch.load(path, map_location="cpu", weights_only=False)
    with open(path, "rb") as f:
        return pickle.load(f)


def _imported(name: str) -> bool:
    """Whether module ``name`` is imported whole: in ``sys.modules`` and no thread importing it now."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def pickled_modules(path: Path) -> set[str] | None:
    """The modules whose names ``torch.save``'s pickle in ``path`` references (its ``GLOBAL`` opcodes: torch saves
    with protocol 2), read from the archive's small ``data.pkl`` without unpickling; None where that cannot be
    told (not a torch archive, a ``STACK_GLOBAL``, a damaged file). Imported here: only a resumed rank reads it."""
    import pickletools
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
            data = zf.read(name)
        modules: set[str] = set()
        for op, arg, _ in pickletools.genops(data):
            if op.name == "STACK_GLOBAL":
                return None
            if op.name == "GLOBAL":
                modules.add(str(arg).split(" ", 1)[0])
        return modules
    except (OSError, StopIteration, ValueError, zipfile.BadZipFile):
        return None


#: What torch.load needs imported for the one module it imports itself (``torch.utils.serialization``, whose
#: config module imports only this) to be a leaf: imported beside another thread's imports, it meets no cycle.
_LOAD_NEEDS = ("torch", "torch.utils._config_module")


def _ready(modules: set[str] | None) -> bool:
    """Whether unpickling a checkpoint that names ``modules`` imports nothing but torch.load's own leaf."""
    return modules is not None and all(_imported(m) for m in (*_LOAD_NEEDS, *modules))


def _read_through(path: Path, chunk: int = 16 << 20) -> None:
    """Read the file once into one reused buffer: its pages are then in the page cache, nothing kept here."""
    buf = bytearray(chunk)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Prefetch:
    """``resume.pt`` read in a thread of its own while the rank starts, once :meth:`release` says the main thread has
    imported the function. The thread unpickles it once that imports nothing (torch and every module the pickle
    names imported whole: two threads importing one package at once can hand one of them a partly made module,
    which crashes torch). Until then it reads the file through (into the page cache, keeping nothing: torch's load
    of a copy in memory is the slower) and waits for those imports, which a function that imports torch inside
    itself makes meanwhile. Where :meth:`take` comes first, the caller's thread unpickles the file itself.

    :meth:`take` hands the state over once (waiting for a read or an unpickling under way to end), when the file is
    still the one that was read: a checkpoint written since (renamed over it: another inode) is read again by the
    caller, as is a file the thread could not read (the caller's read raises the error where the function sees it).
    """

    def __init__(self, path: Path):
        self.path = path
        self._value: Any = None
        self._unpickled = False  # the value is the state; else the file was read through only
        self._read: tuple[int, int, int, int] | None = None  # the identity of the file read, when read whole
        self._go = threading.Event()
        self._taken = threading.Event()  # take() has begun: the thread starts no unpickling from then on
        self._lock = threading.Lock()  # orders that against the thread's start of one
        self._thread = threading.Thread(target=self._run, name="roach-resume-read", daemon=True)

    @classmethod
    def start(cls, path: Path) -> Prefetch | None:
        """The reading thread started, where there is a checkpoint to read; else None."""
        if _identity(path) is None:
            return None
        early = cls(path)
        early._thread.start()
        return early

    def _run(self) -> None:
        self._go.wait()
        before = _identity(self.path)
        if before is None:
            return
        try:
            modules = pickled_modules(self.path)  # None: not torch's archive (a plain pickle), unpickled by take()
            if not self._begin(modules):
                _read_through(self.path)
                self._read = before
                if not self._await(modules):
                    return
            self._value, self._unpickled = load(self.path), True
            self._read = before
        except BaseException:  # noqa: BLE001 - the caller reads it again and sees the error itself
            self._value, self._unpickled = None, False

    def _begin(self, modules: set[str] | None) -> bool:
        """Start the unpickling here if it imports nothing now and take() has not begun."""
        with self._lock:
            return not self._taken.is_set() and _ready(modules)

    def _await(self, modules: set[str] | None) -> bool:
        """Wait until the unpickling may start here (True), or take() has begun first (False)."""
        if modules is None:
            return False
        while not self._begin(modules):
            if self._taken.wait(0.01):
                return False
        return True

    def release(self) -> None:
        """The main thread has imported the function: the read may begin."""
        self._go.set()

    def wait(self) -> None:
        self.release()
        self._thread.join()

    def take(self) -> tuple[bool, Any]:
        """(True, the state read) when that read is of the file there now; (False, None) otherwise. Once."""
        with self._lock:
            self._taken.set()
        self.wait()
        value, read, unpickled = self._value, self._read, self._unpickled
        self._value = self._read = None
        if read is None or read != _identity(self.path):
            return False, None
        return True, (value if unpickled else load(self.path))


def stale_temporaries(directory: Path) -> list[Path]:
    """Partial saves left by a killed writer (never the checkpoint itself)."""
    return sorted(directory.glob(f".{RESUME_FILE}.*.tmp"))
