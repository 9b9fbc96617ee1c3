"""What :class:`~roach.scheduler.clusterfs.ClusterFS` writes, done in this process when the cluster's files are this
machine's, as this user (a :class:`~roach.scheduler.transport.LocalTransport` with no ``user``: roach on the login
host): the same files, modes and renames as its ``sh -c`` programs, without a shell and its ``mkdir``, ``tar`` and
``mv`` (most of a warm submit's time, and seconds of a 1,000-run sweep's).

Each function does what the program of the same name in clusterfs.py does, under its ``umask 022``: a directory
made here is 0755, a file the mode asked for; a file is renamed into place whole, a new directory moved in whole.
An :class:`OSError` is left to the caller, which words it as the program's failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

DIR_MODE = 0o755  # what `mkdir` and `tar` make under the programs' umask 022


def umask() -> int | None:
    """This process's umask (Linux's /proc/self/status; None where it cannot be read)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def extracted_mode(mode: int) -> int:
    """The mode ``tar -x`` gives a file stored with ``mode``: as it is for root, less the umask (022) for others."""
    return mode if os.geteuid() == 0 else mode & ~0o022


def makedirs(path: str) -> None:
    """``mkdir -p`` under umask 022: each directory made is 0755, those that exist are left as they are."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        makedirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    os.chmod(path, DIR_MODE)  # whatever this process's umask


def write_file(path: str, data: bytes, mode: int, exact: bool = False) -> None:
    """A new file at ``path`` (which must not exist) holding ``data``, of ``mode`` (``exact``: the umask leaves
    ``mode`` as it is, so no chmod is needed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if not exact:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write(path: str, data: bytes, mode: int) -> None:
    """``_WRITE``: the parent made, a temp file beside ``path`` of ``mode``, renamed over it."""
    makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp.{os.getpid()}"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    try:
        write_file(tmp, data, mode)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def write_many(root: str, files: dict[str, bytes], mode: int) -> None:
    """``_WRITE_MANY``: ``files`` (paths relative to ``root``) end up in ``root`` as the program leaves them. A top
    directory ``root`` lacks (a sweep's new bundle directories) is made here and filled in place: this call makes
    it, so no one can have read it (the program renames it in from its staging directory, which costs a rename a
    directory, a third of a 1,000-run sweep's writes). The rest goes through a staging directory and is merged in:
    a file ``root`` has is renamed over, a directory both have merged the same way. If the call fails, what it
    made is removed."""
    makedirs(root)
    mode = extracted_mode(mode)
    mask = umask()
    exact_dirs = mask is not None and not mask & DIR_MODE  # then no chmod after each mkdir, nor each file
    exact = mask is not None and not mask & mode
    by_top: dict[str, list[str]] = {}
    for rel in files:
        by_top.setdefault(rel.split("/", 1)[0], []).append(rel)
    made_here: list[str] = []
    staged: dict[str, bytes] = {}
    try:
        for top, rels in by_top.items():
            path = f"{root}/{top}"
            if rels == [top]:  # a file right in root: renamed into place
                staged[top] = files[top]
                continue
            try:
                os.mkdir(path, DIR_MODE)
            except FileExistsError:
                staged.update((rel, files[rel]) for rel in rels)
                continue
            made_here.append(path)
            if not exact_dirs:
                os.chmod(path, DIR_MODE)
            made = {"", top}
            for rel in rels:
                parent = os.path.dirname(rel)
                if parent not in made:
                    _make_under(root, parent, made, exact_dirs)
                write_file(f"{root}/{rel}", files[rel], mode, exact)
        if staged:
            _write_staged(root, staged, mode, exact, exact_dirs)
    except BaseException:
        for path in made_here:
            shutil.rmtree(path, ignore_errors=True)
        raise


def _write_staged(root: str, files: dict[str, bytes], mode: int, exact: bool, exact_dirs: bool) -> None:
    """``files`` into a staging directory in ``root``, then merged in (:func:`_merge`)."""
    staging = tempfile.mkdtemp(prefix=".roach-write.", dir=root)
    try:
        made = {""}
        for rel, data in files.items():
            parent = os.path.dirname(rel)
            if parent not in made:
                _make_under(staging, parent, made, exact_dirs)
            write_file(f"{staging}/{rel}", data, mode, exact)
        _merge(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_bundle(root: str, files: dict[str, bytes], runtime: Sequence[Path], base: Path, runtime_dest: str) -> None:
    """``_WRITE_BUNDLE``: the runtime copy moved in whole unless one is complete at ``runtime_dest``, then each of
    the bundle's ``files`` (names in ``root``) renamed into ``root``."""
    makedirs(root)
    staging = tempfile.mkdtemp(prefix=".roach-write.", dir=root)
    try:
        if not os.path.exists(os.path.join(runtime_dest, ".complete")):
            copy = os.path.join(staging, "r")
            _copy_files(runtime, base, copy)
            write_file(os.path.join(copy, ".complete"), b"", 0o644)
            makedirs(os.path.dirname(runtime_dest))
            try:
                os.rename(copy, runtime_dest)
            except OSError:
                pass  # another submit's copy got there first (the program's `mv -T ... || :`)
        for name, data in files.items():
            write_file(os.path.join(staging, name), data, 0o644)
        for name in files:
            os.replace(os.path.join(staging, name), os.path.join(root, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ship(files: Sequence[Path], base: Path, dest: str) -> None:
    """``_UNTAR``: nothing if ``dest`` is complete; else the files copied into a temp directory beside it, marked
    complete and renamed to ``dest`` (or dropped, where another copy got there first)."""
    if os.path.exists(os.path.join(dest, ".complete")):
        return
    makedirs(os.path.dirname(dest))
    tmp = f"{dest}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _copy_files(files, base, tmp)
        write_file(os.path.join(tmp, ".complete"), b"", 0o644)
        try:
            os.rename(tmp, dest)
        except OSError:
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _make_under(top: str, rel: str, made: set[str], exact: bool = False) -> None:
    """Directory ``rel`` (and its parents) under ``top``, each 0755 (``exact``: the umask leaves it so);
    ``made`` holds those already made."""
    parent = os.path.dirname(rel)
    if parent not in made:
        _make_under(top, parent, made, exact)
    path = f"{top}/{rel}"
    os.mkdir(path, DIR_MODE)
    if not exact:
        os.chmod(path, DIR_MODE)
    made.add(rel)


def _merge(src: str, dest: str) -> None:
    """Each entry of ``src`` into ``dest``: a directory both have merged, anything else renamed into place."""
    for entry in os.scandir(src):
        target = os.path.join(dest, entry.name)
        if entry.is_dir(follow_symlinks=False) and os.path.isdir(target) and not os.path.islink(target):
            _merge(entry.path, target)
        elif entry.is_dir(follow_symlinks=False) and os.path.lexists(target):
            raise IsADirectoryError(f"cannot overwrite non-directory {target!r} with directory {entry.path!r}")
        else:
            os.replace(entry.path, target)


def _copy_files(files: Sequence[Path], base: Path, dest: str) -> None:
    """``files`` (under ``base``) into the new directory ``dest``, kept relative to ``base``: contents, modes and
    mtimes (to the second) as ``tar`` stores and extracts them."""
    makedirs(dest)
    made = {""}
    for p in files:
        rel = str(p.relative_to(base))
        parent = os.path.dirname(rel)
        if parent not in made:
            _make_under(dest, parent, made)
        st = p.stat()
        out = os.path.join(dest, rel)
        write_file(out, p.read_bytes(), extracted_mode(st.st_mode & 0o777))
        os.utime(out, (int(st.st_mtime), int(st.st_mtime)))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
