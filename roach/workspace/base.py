"""The remote workspace's foundations: the workspace file, settings, reaching the cluster, job.json on both sides.

A workspace is a local folder that names its remote root in ``.neurico/dsi_slurm_remote_workspace.json``
(read by :mod:`roach.workspace.file`, the one loader; ``$HOME/x``, ``~/x`` and absolute roots are one
place, made absolute on the cluster by :meth:`Remote.resolve`). Nothing else decides the remote root: roach
never creates, chooses, reuses or removes one. Optional settings live in ``roach.toml`` (table ``[workspace]``).

Each Slurm job has a bundle, ``dsi-slurm-artifacts/<JOB_ID>/``, on the cluster and locally, holding its
logs and ``job.json`` (:class:`~roach.records.workspace_job.WorkspaceJob`).
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from roach.errors import RoachError, TransportError, UsageError
from roach.fleet.cluster import Cluster, known_clusters
from roach.fleet.route import as_recorded
from roach.fleet.userconfig import configured, get_cluster, load
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.transport import Result, Transport
from roach.workspace.file import (
    BACKEND_CLUSTERS,
    WorkspaceError,
    WorkspaceFile,
    load_workspace_file,
)
from roach.workspace.script import ARTIFACTS_DIR
from roach.workspace.stage import archived_bundle, earlier_stage_error

SETTINGS_FILE = "roach.toml"
DEFAULT_EXCLUDES = (".venv/", ".conda/", "__pycache__/", ".cache/", "logs/", ".git/")
GIT_DIR = ".git/"  # a workspace is a git repository: its history stays here unless asked for (--include-git)
# Never synced up, whatever the settings: the bundles there are written by running jobs (a copy from
# here would replace a live log), and they come back with `roach pull`.
ALWAYS_EXCLUDED = (f"/{ARTIFACTS_DIR}/",)
DEFAULT_OUTPUTS = ("metrics.json", "artifacts/", "results/")
# When a job left the queue but sacct does not show its end yet, ask again after these pauses (seconds).
SETTLE_DELAYS = (0.0, 2.0, 5.0, 10.0)


# -- the workspace -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """``roach.toml`` ``[workspace]``: the cluster to use, what sync leaves out, what pull brings back."""

    cluster: str | None = None
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES  # replaces the defaults when given
    outputs: tuple[str, ...] = DEFAULT_OUTPUTS

    @classmethod
    def load(cls, root: Path) -> Settings:
        path = root / SETTINGS_FILE
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{path} cannot be read as TOML: {exc}") from None
        table = data.get("workspace", {})
        valid = [f.name for f in fields(cls)]
        extra = sorted(set(table) - set(valid))
        if not isinstance(table, dict) or extra:
            raise UsageError(
                f"{path}: unknown key(s) in [workspace]: {', '.join(extra)}", hint=f"valid keys: {', '.join(valid)}"
            )
        values: dict = {}
        if "cluster" in table:
            if not isinstance(table["cluster"], str):
                raise UsageError(f"{path}: [workspace] cluster must be a string")
            values["cluster"] = table["cluster"]
        for key in ("exclude", "outputs"):
            if key in table:
                v = table[key]
                if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                    raise UsageError(f"{path}: [workspace] {key} must be a list of non-empty strings")
                values[key] = tuple(v)
        for out in values.get("outputs", ()):
            check_relative(out, f"{path}: output")
        return cls(**values)


def check_relative(path: str, what: str) -> str:
    """A workspace-relative POSIX path (no leading ``/``, no ``..``); returned unchanged."""
    if not path or path.startswith("/") or ".." in path.split("/") or "\0" in path:
        raise UsageError(f"{what} {path!r} must be a path relative to the workspace, without '..'")
    return path


@dataclass(frozen=True)
class Workspace:
    """A local workspace folder and the remote root its workspace file names.

    ``home`` is the remote user's ``$HOME`` once :meth:`Remote.resolve` asked the cluster (needed only when
    the file spells the root below ``$HOME``); :attr:`remote_root` is then absolute."""

    root: Path
    file: WorkspaceFile
    settings: Settings = field(default_factory=Settings)
    home: str | None = None

    @classmethod
    def load(cls, root: str | os.PathLike[str] = ".", job_id: str | None = None) -> Workspace:
        """Read ``root``'s workspace file; raise :class:`WorkspaceError` saying what is missing and what to do
        (for ``job_id`` from a stage that is over: where its bundle went, and that its remote root is gone)."""
        root = Path(root).resolve()
        if not root.is_dir():
            raise UsageError(f"workspace {root} is not a directory", hint="pass --workspace DIR (default: here)")
        try:
            file = load_workspace_file(root)
        except WorkspaceError:
            old = archived_bundle(root, job_id) if job_id else None
            if job_id and old is not None:
                raise earlier_stage_error(root, job_id, old) from None
            raise
        return cls(root, file, Settings.load(root))

    @property
    def resolved(self) -> bool:
        return self.home is not None or not self.file.remote_root.home

    @property
    def remote_root(self) -> str:
        """The absolute remote root (after :meth:`Remote.resolve` where the file spells it below ``$HOME``)."""
        if not self.resolved:
            raise RoachError(
                f"the remote root {self.file.remote_root} has not been resolved on the cluster yet",
                hint="a bug in roach: Remote.resolve(ws) comes before any use of the remote root",
            )
        return self.file.remote_root.resolve(self.home or "/")

    @property
    def rsync_remote_root(self) -> str:
        return self.file.rsync_remote_root

    @property
    def rsync_host(self) -> str | None:
        return self.file.rsync_host

    @property
    def notes(self) -> tuple[str, ...]:
        return self.file.notes

    def local_bundle(self, job_id: str) -> Path:
        return self.root / ARTIFACTS_DIR / job_id

    def remote_bundle(self, job_id: str) -> str:
        return posixpath.join(self.remote_root, ARTIFACTS_DIR, job_id)

    def relative(self, path: str | os.PathLike[str]) -> str:
        """``path`` (absolute, or relative to the current directory) relative to the workspace root."""
        p = Path(path)
        full = (p if p.is_absolute() else Path.cwd() / p).resolve()
        if not full.is_relative_to(self.root):
            alt = (self.root / p).resolve()  # a path given relative to the workspace
            if not p.is_absolute() and alt.is_relative_to(self.root) and alt.exists():
                full = alt
            else:
                raise UsageError(
                    f"{path} is not inside the workspace {self.root}",
                    hint="the job runs in the remote copy of the workspace: keep its script there",
                )
        return full.relative_to(self.root).as_posix()


def open_workspace(workspace: Workspace | str | os.PathLike[str]) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace.load(workspace)


def check_job_id(job_id: str | int) -> str:
    text = str(job_id).strip()
    if not re.fullmatch(r"\d+", text):
        raise UsageError(
            f"job id {job_id!r} is not a Slurm job id",
            hint="give the number sbatch printed (for an array, the array's job id)",
        )
    return text


# -- reaching the cluster ----------------------------------------------------------------------------------
class _InDir:
    """A transport that runs each command in ``directory`` on the cluster (sbatch's submit directory)."""

    _CD = 'cd -- "$1" || exit 97; shift; exec "$@"'

    def __init__(self, transport: Transport, directory: str):
        self.transport, self.directory = transport, directory

    def run(self, argv, *, input=None, timeout=None) -> Result:
        return self.transport.run(["sh", "-c", self._CD, "sh", self.directory, *argv], input=input, timeout=timeout)


@dataclass
class Remote:
    """A cluster and the transport that reaches it (one multiplexed SSH connection, or this machine)."""

    cluster: Cluster
    transport: Transport

    @property
    def ssh(self) -> bool:
        return self.cluster.ssh_alias is not None

    @property
    def where(self) -> str:
        return f"{self.cluster.name} (ssh {self.cluster.ssh_alias})" if self.ssh else f"{self.cluster.name} (local)"

    @property
    def fs(self) -> ClusterFS:
        return ClusterFS(self.transport)

    def client(self, directory: str | None = None) -> SlurmClient:
        return SlurmClient(_InDir(self.transport, directory) if directory else self.transport)

    def open(self) -> None:
        """Bring the shared connection up (paced, backed off by the transport) before rsync rides on it."""
        check = getattr(self.transport, "check", None)
        if self.ssh and check is not None:
            check()

    # $1 the path below $HOME (or absolute), $2 "home" or "abs": prints $HOME, then whether the root is a directory.
    _RESOLVE = (
        'case $2 in home) p=${HOME%/}/$1;; *) p=$1;; esac; printf "%s\\n" "$HOME"; '
        'if [ -d "$p" ]; then echo dir; else echo none; fi'
    )

    def resolve(self, ws: Workspace) -> Workspace:
        """``ws`` with its remote root made absolute on this cluster (one remote call) and checked: both
        spellings name one directory, and it exists. A root that does not exist is the blocker it is."""
        root = ws.file.remote_root
        res = self.transport.run(["sh", "-c", self._RESOLVE, "sh", root.path, "home" if root.home else "abs"])
        lines = res.stdout.splitlines()
        if not res.ok or len(lines) != 2 or not lines[0].startswith("/"):
            raise RoachError(
                f"could not read $HOME on {self.where} to place the remote root {root}: "
                f"{(res.stderr or res.stdout).strip()[:200]}",
                hint="the remote shell must print nothing of its own (see `roach doctor`)",
            )
        home = lines[0].rstrip("/") or "/"
        ws = replace(ws, home=home)
        rsync_abs = ws.file.rsync_path.resolve(home)
        if rsync_abs != ws.remote_root:
            raise WorkspaceError(
                f"{ws.file.path}: rsync_remote_root {ws.rsync_remote_root!r} names {rsync_abs} on "
                f"{self.where}, remote_root {root.text!r} names {ws.remote_root}",
                hint="both must name the one remote root; roach will not pick one of them",
            )
        if lines[1] != "dir":
            raise WorkspaceError(
                f"the remote root {ws.remote_root} (remote_root {root.text} in {ws.file.path}) is "
                f"not a directory on {self.where}",
                hint="NeuriCo's runtime creates the remote workspace at each stage start; roach "
                "never creates or chooses one. Report this blocker instead of working around it",
            )
        return ws

    def rsync_root(self, ws: Workspace) -> str:
        """The (resolved) remote root as rsync names it from here: ``<alias>:<absolute path>/``."""
        if not self.ssh:
            return ws.remote_root.rstrip("/") + "/"
        host = ws.rsync_host
        if host != self.cluster.ssh_alias:
            raise WorkspaceError(
                f"{ws.file.path}: rsync_remote_root {ws.rsync_remote_root!r} does not go "
                f"through {self.cluster.ssh_alias!r}, the ssh alias of cluster {self.cluster.name}",
                hint="rsync must ride on the cluster's one SSH connection: the file must say "
                f"{self.cluster.ssh_alias}:<path>, or pass --ssh-alias {host or '<alias>'}",
            )
        return f"{host}:{ws.remote_root.rstrip('/')}/"

    def rsync(
        self,
        args: Sequence[str],
        what: str,
        *,
        ok_codes: Sequence[int] = (0,),
        rsync: str = "rsync",
        up: bool = True,
        timeout: float = 3600.0,
    ) -> subprocess.CompletedProcess:
        """Run ``rsync args`` here, over the shared connection; for a local cluster, copying ``up`` runs as its
        ``run_as`` user (the files there are that user's)."""
        if self.ssh:
            rsh = getattr(self.transport, "rsync_args", None)
            if rsh is None:
                raise TransportError(f"the transport of {self.cluster.name} cannot carry rsync", (rsync, *args))
            argv = [rsync, *rsh(), *args]
        else:
            argv = [rsync, *args]
            if self.cluster.run_as and up:
                argv = ["runuser", "-u", self.cluster.run_as, "--", *argv]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=timeout
            )
        except FileNotFoundError as exc:
            raise TransportError(
                f"{argv[0]} is not installed on this machine",
                argv,
                hint="install rsync (Debian: apt-get install rsync; macOS: brew install rsync)",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"rsync {what} timed out after {timeout:.0f}s", argv) from exc
        if proc.returncode not in ok_codes:
            err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            last = err[-1] if err else "(no message)"
            cls = TransportError if proc.returncode in (10, 12, 35, 255) else RoachError
            raise cls(
                f"rsync {what} failed (exit {proc.returncode}): {last}",
                hint="run the same by hand to see all of it: " + " ".join(argv[:1] + list(args)),
            )
        return proc


def connect(cluster: Cluster | str, transport: Transport | None = None) -> Remote:
    c = get_cluster(cluster)
    return Remote(c, transport if transport is not None else c.transport())


def min_poll_interval(cluster: Cluster) -> float:
    """The shortest pause between two looks at the queue that ``cluster`` allows (its ``min_poll_s``)."""
    return float(cluster.min_poll_s)


def resolve_cluster(
    ws: Workspace, cluster: Cluster | str | None, job_id: str | None = None, store: Store | None = None
) -> Cluster:
    """The cluster given, else the one the job's local record names, else the workspace setting.

    Unless ``cluster`` is a :class:`Cluster` (used as given), a job submitted through another ssh alias than
    the cluster's own is reached through that alias again (the store's ``via``)."""
    c = _named(ws, cluster, job_id)
    if job_id is not None and not isinstance(cluster, Cluster) and job_id.isdigit():
        rec = (store if store is not None else Store()).get(c.name, int(job_id))
        if rec is not None and rec.via:
            c = as_recorded(c, rec)
    return c


def _named(ws: Workspace, cluster: Cluster | str | None, job_id: str | None) -> Cluster:
    if cluster is not None:
        return get_cluster(cluster)
    if job_id is not None:
        rec = read_local(ws, job_id)
        if rec is not None and rec.cluster:
            return get_cluster(rec.cluster)
    if ws.settings.cluster:
        return get_cluster(ws.settings.cluster)
    return cluster_for_file(ws.file, ws.root)


def cluster_for_file(file: WorkspaceFile, root: Path | None = None) -> Cluster:
    """The cluster a workspace file names: the one whose ssh alias is its ``ssh_host`` (if several are,
    clusters.toml's ``default`` among them, else the backend's own), else the backend's cluster
    (``dsi-slurm``: dsi) reached through ``ssh_host``."""

    alias = file.alias
    own = BACKEND_CLUSTERS.get(file.backend or "")
    where = root / SETTINGS_FILE if root else SETTINGS_FILE
    if alias:
        cfg = load()
        matching = [c for c in (configured(n, cfg) for n in known_clusters()) if c.ssh_alias == alias]
        if len(matching) == 1:
            return matching[0]
        for pick in (cfg.default, own):
            chosen = [c for c in matching if c.name == pick]
            if chosen:
                return chosen[0]
        if matching:
            raise UsageError(
                f"{file.path} names ssh host {alias!r}, the alias of clusters {', '.join(c.name for c in matching)}",
                hint="pass --cluster NAME",
            )
    if own:
        c = get_cluster(own)
        return c.with_(ssh_alias=alias) if alias and c.ssh_alias != alias else c
    raise UsageError(
        "no cluster given",
        hint=f"pass --cluster NAME or set cluster in {where} [workspace]; {file.path} names no backend roach knows",
    )


def read_local(ws: Workspace, job_id: str) -> WorkspaceJob | None:
    path = ws.local_bundle(job_id) / "job.json"
    try:
        return WorkspaceJob.from_json(path.read_text(), str(path))
    except FileNotFoundError:
        return None
