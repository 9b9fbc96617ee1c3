"""Files on the cluster's side, through its transport: what submit writes (bundle, shipped runtime).

The cluster may be this machine as another user, or a login host over SSH, so the writes are fixed ``sh -c``
programs run through the transport; paths are passed to them as arguments, never spliced in. Where the cluster's
files are this machine's, as this user (a :class:`LocalTransport` with no ``user``), the writes and ``$HOME`` are
done in this process instead (roach/scheduler/localfs.py): the same files, without a shell and its commands.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roach.errors import MissingError, RoachError, UsageError
from roach.scheduler import localfs
from roach.scheduler.transport import PINNED_ENV, LocalTransport, Result, Transport

if TYPE_CHECKING:
    import tarfile

_WRITE = 'set -e; umask 022; mkdir -p -- "$(dirname -- "$1")"; t="$1.tmp.$$"; cat > "$t"; chmod "$2" "$t"; mv -f -- "$t" "$1"'
_WRITE_MANY = (
    # Unpacked beside the targets (same filesystem), then merged in: an entry the target lacks (a new bundle
    # directory, whole) or a file it has is renamed into place, many to one `mv` per directory; a directory both
    # have is merged the same way, in a subshell of its own. A 1,000-run sweep's new directories take one `mv`,
    # where one `mv` a file took seconds.
    'set -e; umask 022; r="$1"; mkdir -p -- "$r"; s="$(mktemp -d "$r/.roach-write.XXXXXX")"; '
    'trap \'rm -rf -- "$s"\' EXIT; tar -xf - -C "$s"; '
    'merge() ( cd "$1"; d="$2"; here="$(pwd)"; set --; '
    'for e in * .[!.]* ..?*; do { [ -e "$e" ] || [ -L "$e" ]; } || continue; '
    'if [ -d "$e" ] && [ ! -L "$e" ] && [ -d "$d/$e" ] && [ ! -L "$d/$e" ]; then merge "$here/$e" "$d/$e"; '
    'else set -- "$@" "$e"; fi; done; '
    '[ "$#" -eq 0 ] || mv -f -t "$d" -- "$@" ); '
    'merge "$s" "$r"'
)
# One call for a job's bundle and the shipped runtime: a tar of ``b/<file>`` (the bundle's files, each renamed
# into place) and, unless the runtime copy is already complete, ``r/...`` (moved in whole, then marked).
_WRITE_BUNDLE = (
    'set -e; umask 022; r="$1"; rt="$2"; shift 2; mkdir -p -- "$r"; s="$(mktemp -d "$r/.roach-write.XXXXXX")"; '
    'trap \'rm -rf -- "$s"\' EXIT; tar -xf - -C "$s"; '
    'if [ -d "$s/r" ] && [ ! -e "$rt/.complete" ]; then touch "$s/r/.complete"; '
    'mkdir -p -- "${rt%/*}"; mv -T -- "$s/r" "$rt" 2>/dev/null || :; fi; '
    'cd "$s/b"; mv -f -t "$r" -- "$@"'
)
_UNTAR = (
    'set -e; umask 022; d="$1"; [ -e "$d/.complete" ] && exit 0; mkdir -p -- "$(dirname -- "$d")"; '
    't="$d.tmp.$$"; rm -rf -- "$t"; mkdir -p -- "$t"; tar -xf - -C "$t"; touch "$t/.complete"; '
    'mv -T -- "$t" "$d" 2>/dev/null || rm -rf -- "$t"'
)


@dataclass
class ClusterFS:
    transport: Transport
    _home: str | None = field(default=None, init=False)

    @property
    def here(self) -> bool:
        """Whether the cluster's files are this machine's, as this user: written in this process, not by ``sh``."""
        t = self.transport
        return type(t) is LocalTransport and t.user is None

    def _here(self, fn: Callable[..., None], *args: Any, what: str) -> None:
        """``fn(*args)`` (a :mod:`localfs` write), its failure worded as the program's would be."""
        try:
            fn(*args)
        except OSError as e:
            raise RoachError(
                f"on the cluster, {what} failed: {e}", hint="check that the path is writable by the user who submits"
            ) from e

    def _sh(self, program: str, *args: str, input: str | bytes | None = None, what: str) -> Result:
        res = self.transport.run(["sh", "-c", program, "sh", *args], input=input)
        if res.returncode != 0:
            raise RoachError(
                f"on the cluster, {what} failed: {res.stderr.strip() or res.stdout.strip()}",
                hint="check that the path is writable by the user who submits",
            )
        return res

    def home(self) -> str:
        """The cluster user's home: what ``~`` means in every path a job receives."""
        t = self.transport
        if self._home is None and isinstance(t, LocalTransport) and self.here:
            env = {**os.environ, **PINNED_ENV, **t.env}  # the environment `sh` would get
            self._home = env.get("HOME", "").strip() or "/"
        if self._home is None:
            self._home = self._sh('printf "%s" "$HOME"', what="reading $HOME").stdout.strip() or "/"
        return self._home

    def expand(self, path: str) -> str:
        """``~`` and ``~/x`` as the cluster user's home; other paths unchanged (must be absolute)."""
        if path == "~" or path.startswith("~/"):
            return posixpath.normpath(self.home() + path[1:])
        if not path.startswith("/"):
            raise UsageError(f"cluster path {path!r} is relative", hint="use an absolute path or one under ~")
        return posixpath.normpath(path)

    def write(self, path: str, data: str, mode: str = "644") -> None:
        """Write a whole file atomically (temp file, rename)."""
        if self.here and posixpath.isabs(path) and mode.isdigit():
            return self._here(localfs.write, path, data.encode(), int(mode, 8), what=f"writing {path}")
        self._sh(_WRITE, path, mode, input=data, what=f"writing {path}")

    def write_many(self, files: dict[str, str], mode: str = "644") -> None:
        """Write many small files in one remote call, each atomically: a tar stream unpacked into a
        staging directory beside them (same filesystem), then each file renamed into place. Here (:attr:`here`),
        a directory the call makes is filled in place instead, before anyone can know of it (localfs.py)."""
        if not files:
            return
        for path in files:
            if not posixpath.isabs(path) or "\n" in path:
                raise RoachError(
                    f"cluster path {path!r} is relative or has a newline", hint="expand ~ on the cluster first"
                )
        normal = [posixpath.normpath(p) for p in files]
        root = common_dir([posixpath.dirname(p) for p in normal])
        under = root.rstrip("/") + "/"
        rel = [p[len(under) :] if p.startswith(under) else posixpath.relpath(p, root) for p in normal]
        if self.here:
            data = dict(zip(rel, (d.encode() for d in files.values())))
            return self._here(
                localfs.write_many, root, data, int(mode, 8), what=f"writing {len(files)} files under {root}"
            )
        buf = io.BytesIO()
        with _tar(buf) as tar:
            _add_texts(tar, dict(zip(rel, files.values())), int(mode, 8))
        self._sh(_WRITE_MANY, root, input=buf.getvalue(), what=f"writing {len(files)} files under {root}")

    def write_bundle(self, files: dict[str, str], runtime: Sequence[Path], base: Path, runtime_dest: str) -> None:
        """A bundle's files (all in one directory) and the runtime copy (:meth:`ship`'s ``files`` under ``base``,
        to ``runtime_dest``, kept where it is already complete) in one remote call: what took two."""
        dirs = {posixpath.dirname(posixpath.normpath(p)) for p in files}
        if len(dirs) != 1 or any(not posixpath.isabs(p) or "\n" in p for p in files):
            raise RoachError(f"a bundle's files must be absolute paths in one directory: {sorted(files)}")
        (root,) = dirs
        if self.here:
            named = {posixpath.basename(p): d.encode() for p, d in files.items()}
            return self._here(
                localfs.write_bundle, root, named, runtime, base, runtime_dest, what=f"writing the bundle {root}"
            )
        buf = io.BytesIO()
        with _tar(buf) as tar:
            _add_texts(tar, {f"b/{posixpath.basename(p)}": d for p, d in files.items()}, 0o644)
            _add_files(tar, runtime, base, "r")
        names = [posixpath.basename(p) for p in files]
        self._sh(_WRITE_BUNDLE, root, runtime_dest, *names, input=buf.getvalue(), what=f"writing the bundle {root}")

    def read(self, path: str) -> str:
        return self._sh('cat -- "$1"', path, what=f"reading {path}").stdout

    def tail(self, path: str, lines: int) -> str:
        return self._sh('tail -n "$2" -- "$1"', path, str(lines), what=f"reading {path}").stdout

    def exists(self, path: str) -> bool:
        if self.here and posixpath.isabs(path):
            return os.path.exists(path)
        return self.transport.run(["test", "-e", path]).returncode == 0

    def makedirs(self, path: str) -> None:
        if self.here and posixpath.isabs(path):  # `mkdir -p` under this process's umask, as the program's
            return self._here(os.makedirs, path, 0o777, True, what=f"creating {path}")
        self._sh('mkdir -p -- "$1"', path, what=f"creating {path}")

    def remove_bundle(self, path: str) -> None:
        """Roll back a bundle directory made by a submission that failed (never a run directory)."""
        self.remove_bundles([path])

    def remove_bundles(self, paths: list[str]) -> None:
        """Roll back the bundle directories of a failed submission in one call (never a run directory)."""
        for path in paths:
            if "/bundles/" not in path:
                raise RoachError(f"refusing to remove {path}: not a bundle directory")
        if paths:
            self.transport.run(["rm", "-rf", "--", *paths])

    def rmdir_if_empty(self, path: str) -> None:
        self.transport.run(["rmdir", "--", path])

    def secrets_readable_by_others(self, path: str) -> list[str]:
        """Files in a secrets directory that group or others may read (or a missing directory)."""
        res = self.transport.run(["find", path, "-maxdepth", "1", "-type", "f", "-perm", "/077"])
        if res.returncode != 0:
            raise MissingError(
                f"secrets_dir {path} cannot be read on the cluster: {res.stderr.strip()}",
                hint="create it with mode 700 and one file per variable, mode 600",
            )
        return sorted(line for line in res.stdout.splitlines() if line)

    def ship(self, files: Sequence[Path], base: Path, dest: str) -> str:
        """Copy ``files`` (paths under ``base``, kept relative to it) into ``dest`` once; returns ``dest``.

        ``dest`` is named by its contents (:func:`shipped_dir`): a copy already complete there is kept."""
        if self.here:
            self._here(localfs.ship, files, base, dest, what=f"copying {len(files)} files to {dest}")
            return dest
        buf = io.BytesIO()
        with _tar(buf) as tar:
            _add_files(tar, files, base, "")
        self._sh(_UNTAR, dest, input=buf.getvalue(), what=f"copying {len(files)} files to {dest}")
        return dest


def _tar(buf: io.BytesIO) -> tarfile.TarFile:
    """A tar archive written into ``buf``."""
    return tarfile.open(fileobj=buf, mode="w")


def common_dir(dirs: Sequence[str]) -> str:
    """``posixpath.commonpath(dirs)`` of normalised absolute paths, by one character-wise comparison (commonpath
    splits every path: ms of a 1,000-run sweep's write) cut back to a whole component where it must be."""
    if any(d.startswith("//") for d in dirs):  # (POSIX's own // root, kept by normpath)
        return posixpath.commonpath(dirs)
    common = posixpath.commonprefix(list(dirs))
    under = common.rstrip("/") + "/"
    if not all(d == common or d.startswith(under) for d in dirs):
        common = common[: common.rfind("/")]
    return common.rstrip("/") or "/"


def _add_texts(tar: tarfile.TarFile, texts: dict[str, str], mode: int) -> None:
    """Each text as a file of ``mode`` at its name in the archive."""
    now = time.time()  # the files' mtime: when written (a TarInfo's default is 1970)
    for name, data in texts.items():
        raw = data.encode()
        info = tar.tarinfo(name)  # the archive's TarInfo class: tarfile is not imported here (see _tar)
        info.size, info.mode, info.mtime = len(raw), mode, now
        tar.addfile(info, io.BytesIO(raw))


def _add_files(tar: tarfile.TarFile, files: Sequence[Path], base: Path, prefix: str) -> None:
    """``files`` (under ``base``, kept relative to it, under ``prefix``) into ``tar``: contents and modes only
    (``tar.add`` looks up each file's owner in the user database, which costs more than the copy)."""
    for p in files:
        st = p.stat()
        info = tar.tarinfo(posixpath.join(prefix, str(p.relative_to(base))) if prefix else str(p.relative_to(base)))
        info.size, info.mode, info.mtime = st.st_size, st.st_mode & 0o777, int(st.st_mtime)
        with p.open("rb") as f:
            tar.addfile(info, f)


def package_files(directory: Path) -> list[Path]:
    """The files under ``directory`` that Python may import or read (no ``__pycache__``, no bytecode)."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def shipped_dir(files: Sequence[Path], base: Path, dest_root: str, name: str, signature: Hashable | None = None) -> str:
    """Where :meth:`ClusterFS.ship` puts ``files``: ``dest_root/<name>-<hash of their paths and contents>``.

    With ``signature`` (what identifies the files' versions, e.g. their mtimes and sizes) the hash is computed
    once per signature in this process."""
    key = (tuple(str(p) for p in files), str(base), signature)
    digest = _DIGESTS.get(key) if signature is not None else None
    if digest is None:
        h = hashlib.sha256()
        for p in sorted(files):
            h.update(str(p.relative_to(base)).encode() + b"\0" + p.read_bytes() + b"\0")
        digest = h.hexdigest()[:16]
        if signature is not None:
            _DIGESTS[key] = digest
    return posixpath.join(dest_root, f"{name}-{digest}")


_DIGESTS: dict[tuple, str] = {}
