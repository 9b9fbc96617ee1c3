"""What a submit puts on the cluster from roach itself: a copy of the runtime layer, and ``node.sh``.

The ranks run ``python -m roach.slurm.run`` with the shipped copy first on ``PYTHONPATH``, so the copy holds
every roach file a rank imports and nothing else: the runtime (``roach/runtime/``, node.sh included), the
pure type it reads (``roach/model/job_state.py``), ``roach.errors``, ``roach._fs``, and the three files on the entry's
import path (``roach/__init__.py``, the lazy ``roach/slurm/__init__.py``, ``roach/slurm/run.py``). A module
the runtime starts importing must be added here (tests/test_runtime_layer.py fails until it is).
"""

from __future__ import annotations

import functools
from pathlib import Path

import roach
from roach.errors import RoachError
from roach.scheduler.clusterfs import ClusterFS, package_files, shipped_dir

PACKAGE_DIR = Path(roach.__file__).parent

# Paths relative to the package: a file, or a directory shipped whole.
SHIPPED = (
    "__init__.py",
    "_fs.py",
    "errors.py",
    "model/__init__.py",
    "model/job_state.py",
    "model/run_spec.py",
    "runtime",
    "slurm/__init__.py",
    "slurm/run.py",
)


def runtime_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The files a submit ships, from ``package_dir`` (the roach package)."""
    files: list[Path] = []
    for rel in SHIPPED:
        path = package_dir / rel
        if path.is_dir():
            files += package_files(path)
        elif path.is_file():
            files.append(path)
        else:
            raise RoachError(
                f"roach's runtime file {path} is missing: this roach installation is incomplete",
                hint="reinstall roach (pip install --force-reinstall roach)",
            )
    return sorted(files)


def runtime_dir(bundle_root: str) -> str:
    """Where :func:`ship_runtime` puts the copy under ``bundle_root``: ``roach-<hash of the shipped files>``,
    the directory the batch script puts first on ``PYTHONPATH`` (it holds ``roach/``)."""
    files = _files()
    return shipped_dir(files, PACKAGE_DIR.parent, bundle_root, "roach", _signature(files))


def ship_runtime(fs: ClusterFS, bundle_root: str) -> str:
    """Copy the runtime under ``bundle_root`` once per version of it; returns :func:`runtime_dir`."""
    return fs.ship(_files(), PACKAGE_DIR.parent, runtime_dir(bundle_root))


def write_bundle(fs: ClusterFS, bundle_root: str, files: dict[str, str]) -> str:
    """A job's bundle (``files``, in one directory) and the runtime copy under ``bundle_root`` in one remote
    call; returns :func:`runtime_dir`."""
    dest = runtime_dir(bundle_root)
    fs.write_bundle(files, _files(), PACKAGE_DIR.parent, dest)
    return dest


@functools.lru_cache(maxsize=1)
def _listed() -> tuple[Path, ...]:
    return tuple(runtime_files())


def _files() -> list[Path]:
    """The shipped files, listed once per process (a new one, or a missing one, lists them again)."""
    files = list(_listed())
    if not all(p.is_file() for p in files):
        _listed.cache_clear()
        files = list(_listed())
    return files


def _signature(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """What the hash of the files is kept under: a file that changes changes it (an editable install)."""
    return tuple((str(p), (st := p.stat()).st_mtime_ns, st.st_size) for p in files)


def node_script() -> str:
    """``node.sh``, which every bundle carries: the batch script sources it and runs ``node.sh prepare``. Read
    where the shipped files are read (importlib.resources would first import zipfile: a submit's ms)."""
    return (PACKAGE_DIR / "runtime" / "node.sh").read_text()
