"""``.neurico/dsi_slurm_remote_workspace.json``: the one loader of a workspace's remote root (pure, no cluster).

NeuriCo's runtime writes the file at each stage start (after it made the remote root empty over ``ssh``)::

    {"backend": "dsi-slurm", "ssh_host": "login.ds", "workspace_name": "<name>",
     "remote_root": "$HOME/neurico_workspaces/<name>",
     "rsync_remote_root": "login.ds:~/neurico_workspaces/<name>/"}

``remote_root`` keeps a literal ``$HOME`` (for shell commands on the login host); ``rsync_remote_root`` uses
``~`` and ends in ``/``. Both spell one place: ``$HOME/x``, ``${HOME}/x``, ``~/x`` and an absolute path are
read here as a :class:`RemotePath` (below ``$HOME``, or absolute), and the cluster's ``$HOME`` makes them
absolute later (``Remote.resolve``), in one remote call. The runtime also exports the two values as
``NEURICO_DSI_REMOTE_ROOT`` / ``NEURICO_DSI_RSYNC_REMOTE_ROOT``: the file wins where they disagree (said in
``notes``); without the file they are used, and that is said too. roach never creates, chooses, reuses or
removes a remote root.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from roach.workspace.stage import WorkspaceError

WORKSPACE_FILE = ".neurico/dsi_slurm_remote_workspace.json"
WORKSPACE_KEYS = ("remote_root", "rsync_remote_root")
OPTIONAL_KEYS = ("backend", "ssh_host", "workspace_name")
ENV_ROOT = "NEURICO_DSI_REMOTE_ROOT"
ENV_RSYNC_ROOT = "NEURICO_DSI_RSYNC_REMOTE_ROOT"
# The cluster module a backend names, when no cluster's ssh alias is the file's ssh_host.
BACKEND_CLUSTERS = {"dsi-slurm": "dsi"}
# Where NeuriCo's runtime moves dsi-slurm-artifacts/ after a successful stage.

_HOME = re.compile(r"^(?:~|\$HOME|\$\{HOME\})(?=/|$)/*(?P<rest>.*)$")
_RSYNC_REMOTE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^/:@]+):(?P<path>(?!:).*)$")


@dataclass(frozen=True)
class RemotePath:
    """A remote directory as the file spells it: below the remote user's ``$HOME`` (``home``), or absolute."""

    text: str  # as written
    home: bool
    path: str  # normalized, no trailing "/": relative to $HOME when ``home``, else absolute

    def resolve(self, home: str) -> str:
        """The absolute path, given the remote user's ``$HOME``."""
        if not self.home:
            return self.path
        base = home.rstrip("/") or "/"
        return posixpath.join(base, self.path) if self.path else base

    def same_as(self, other: RemotePath) -> bool | None:
        """Whether both name one place; None when only the cluster's ``$HOME`` can tell."""
        return (self.path == other.path) if self.home == other.home else None

    def __str__(self) -> str:
        return self.text


def parse_remote_path(text: str, what: str, *, relative_is_home: bool = False) -> RemotePath:
    """Read ``$HOME/x``, ``${HOME}/x``, ``~/x`` or ``/abs/x`` (and, for rsync, ``x``: below the login directory).

    What follows ``$HOME``/``~`` is taken literally (no other expansion is made); ``..`` is refused."""
    raw = text.strip()
    if not raw or "\0" in raw or "\n" in raw:
        raise WorkspaceError(f"{what} {text!r} is empty or holds a NUL or newline")
    m = _HOME.match(raw)
    if m:
        home, rest = True, m["rest"]
    elif raw.startswith("/"):
        home, rest = False, raw
    elif relative_is_home and not raw.startswith(("~", "$")):
        home, rest = True, raw  # rsync reads host:x relative to the login directory
    else:
        raise WorkspaceError(
            f"{what} {text!r} is neither an absolute path nor one below $HOME",
            hint="write it as /abs/path, $HOME/path, ${HOME}/path or ~/path; roach expands "
            "nothing else (no other variables, no ~user)",
        )
    if ".." in rest.split("/"):
        raise WorkspaceError(f"{what} {text!r} holds '..'", hint="name the remote root itself, without '..'")
    norm = posixpath.normpath(rest) if rest else ""
    if home:
        norm = "" if norm == "." else norm.lstrip("/")
    else:
        norm = "/" + norm.lstrip("/")
    return RemotePath(text, home, norm)


@dataclass(frozen=True)
class WorkspaceFile:
    """What the workspace file (or, without it, the runtime's environment) says about the remote root."""

    path: Path
    source: str  # "file" or "environment"
    remote_root: RemotePath
    rsync_remote_root: str  # as written, e.g. "login.ds:~/neurico_workspaces/x/"
    rsync_host: str | None  # None: a local path (a cluster reached on this machine)
    rsync_path: RemotePath
    backend: str | None = None
    ssh_host: str | None = None
    workspace_name: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def alias(self) -> str | None:
        """The ssh alias the file names: ``ssh_host``, else the host of ``rsync_remote_root``."""
        return self.ssh_host or self.rsync_host

    def describe(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in (("backend", self.backend), ("ssh_host", self.ssh_host)) if v)
        return f"remote_root={self.remote_root.text}, rsync_remote_root={self.rsync_remote_root}{extra}"


def _hint(path: Path) -> str:
    return (
        f"NeuriCo's runtime writes {path} (keys remote_root and rsync_remote_root) at each stage start of a run "
        "with --compute-backend dsi-slurm; roach never chooses, creates or guesses a remote root: report this "
        "blocker instead of working around it"
    )


def load_workspace_file(workspace: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> WorkspaceFile:
    """Read ``workspace``'s file (else the runtime's two environment variables); raise :class:`WorkspaceError`
    naming the file, the key and what to do."""
    env = os.environ if env is None else env
    path = Path(workspace) / WORKSPACE_FILE
    from_env = {
        k: env.get(v, "").strip() for k, v in (("remote_root", ENV_ROOT), ("rsync_remote_root", ENV_RSYNC_ROOT))
    }
    notes: list[str] = []
    try:
        data = json.loads(path.read_text())
        source = "file"
    except FileNotFoundError:
        if not all(from_env.values()):
            raise WorkspaceError(
                f"{path} is missing: the workspace does not name its remote root", _hint(path)
            ) from None
        data, source = dict(from_env), "environment"
        notes.append(f"{path} is missing: the remote root comes from ${ENV_ROOT} and ${ENV_RSYNC_ROOT}")
    except (OSError, ValueError) as exc:
        raise WorkspaceError(f"{path} cannot be read as JSON: {exc}", _hint(path)) from None
    if not isinstance(data, dict):
        raise WorkspaceError(f"{path} holds {type(data).__name__}, not a JSON object", _hint(path))
    bad = [k for k in WORKSPACE_KEYS if not isinstance(data.get(k), str) or not data[k].strip()]
    if bad:
        raise WorkspaceError(f"{path} lacks {' and '.join(bad)} (a non-empty string each)", _hint(path))
    wrong = [k for k in OPTIONAL_KEYS if k in data and not isinstance(data[k], str)]
    if wrong:
        raise WorkspaceError(f"{path}: {', '.join(wrong)} must be a string", _hint(path))
    root = parse_remote_path(data["remote_root"], f"{path}: remote_root")
    rsync_text = data["rsync_remote_root"].strip()
    m = _RSYNC_REMOTE.match(rsync_text)
    rsync_host = m["host"] if m else None
    rsync_path = parse_remote_path(
        m["path"] if m else rsync_text, f"{path}: rsync_remote_root's path", relative_is_home=m is not None
    )
    if root.same_as(rsync_path) is False:
        raise WorkspaceError(
            f"{path}: rsync_remote_root {rsync_text!r} does not name the same directory as remote_root {root.text!r}",
            hint="both must name the one remote root; roach will not pick one of them",
        )
    ssh_host = (data.get("ssh_host") or "").strip() or None
    if ssh_host and rsync_host and ssh_host != rsync_host:
        raise WorkspaceError(
            f"{path}: ssh_host {ssh_host!r} and rsync_remote_root's host {rsync_host!r} differ",
            hint="rsync must go through the same ssh alias as every other command",
        )
    if source == "file":
        for key, var in (("remote_root", ENV_ROOT), ("rsync_remote_root", ENV_RSYNC_ROOT)):
            if from_env[key] and _differs(from_env[key], data[key].strip(), key == "rsync_remote_root"):
                notes.append(f"${var}={from_env[key]} differs from {key}={data[key].strip()} in {path}: the file wins")
    return WorkspaceFile(
        path,
        source,
        root,
        rsync_text,
        rsync_host,
        rsync_path,
        backend=(data.get("backend") or None),
        ssh_host=ssh_host,
        workspace_name=(data.get("workspace_name") or None),
        notes=tuple(notes),
    )


def _differs(a: str, b: str, rsync: bool) -> bool:
    if rsync:
        ma, mb = _RSYNC_REMOTE.match(a), _RSYNC_REMOTE.match(b)
        if (ma is None) != (mb is None) or (ma and mb and ma["host"] != mb["host"]):
            return True
        a, b = (ma["path"], mb["path"]) if ma and mb else (a, b)
    try:
        pa = parse_remote_path(a, "", relative_is_home=rsync)
        pb = parse_remote_path(b, "", relative_is_home=rsync)
    except WorkspaceError:
        return a != b
    return pa.same_as(pb) is not True
