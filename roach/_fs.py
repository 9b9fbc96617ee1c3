"""Small filesystem helpers shared by every module that writes state."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: int = 0o644, check: Callable[[], None] | None = None
) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` only once it is whole: readers see the old file or the new one.

    Temp file in the same directory, fsync, chmod, ``check()`` (it may raise to refuse the write), rename, then
    fsync the directory. If the block or the check raises (or the process is killed), ``path`` is untouched and
    the temp file is removed (or left, named ``.<name>.*.tmp``, for a killed process).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if check is not None:
            check()
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # a write's error names no file: this one is what could not be written
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _new_temp(path: Path) -> tuple[int, Path]:
    """A new file ``.<name>.<random>.tmp`` beside ``path``, open for writing, mode 0600 (``tempfile.mkstemp``'s
    way, without loading tempfile and shutil into every command that writes a file)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def atomic_write(
    path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644, check: Callable[[], None] | None = None
) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, mode, check) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)
