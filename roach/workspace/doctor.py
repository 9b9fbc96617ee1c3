"""`roach doctor`: check, in order, what working with a cluster needs, and say each missing piece plainly.

1. ``ssh``: the alias connects without a prompt (BatchMode) and the remote shell prints nothing extra;
   if not, nothing else can be checked and the list stops there with ssh's own message.
2. ``rsync``: installed here and there, and a real copy of a small file through the alias works.
3. ``slurm-commands``: ``sbatch squeue sacct scancel`` are on the remote PATH after ``remote_setup``.
4. ``partitions`` and ``accounts``: every one a preset names exists (for the remote user).
5. ``repo-remote`` (where ``repo_root`` is a git working tree): the user the jobs run as (``run_as``, or the ssh
   user) can read the repository's remote, by ``git ls-remote`` through the cluster's transport, as its jobs'
   clone would (:mod:`roach.launch.remote_access`): git's "dubious ownership" of a remote another user owns, or a
   directory it may not enter, fails here with the fix instead of in every job's first second.
6. ``workspace`` (when a workspace is given): ``.neurico/dsi_slurm_remote_workspace.json`` names the
   remote root, read by the loader every other command uses (:mod:`roach.workspace.file`), and, once
   the cluster answers, that root (``$HOME`` made absolute there) is a directory and rsync's path names it
   through the cluster's alias. A missing file is the blocker it is: roach never chooses a remote root.

A local cluster has no SSH or rsync to check; those lines say "local". The rsync round trip rides on the
transport's shared connection; rsync's remote side does not run the ``remote_setup`` lines.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import get_cluster
from roach.launch.remote_access import remote_access
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import Transport
from roach.workspace.base import Remote, Settings, Workspace
from roach.workspace.doctor_check import Check, attempt
from roach.workspace.file import WORKSPACE_FILE, load_workspace_file
from roach.workspace.rest_doctor import rest_checks

SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel")
__all__ = ["WORKSPACE_FILE", "Check", "check_workspace", "doctor"]

# For each name: "<name> <path>" when found, "<name>" alone when not.
_WHICH = 'for c do p=$(command -v "$c" 2>/dev/null) && printf "%s %s\\n" "$c" "$p" || printf "%s\\n" "$c"; done'


_attempt = attempt


def _which(t: Transport, names: tuple[str, ...]) -> dict[str, str | None]:
    res = t.run(["sh", "-c", _WHICH, "sh", *names])
    found: dict[str, str | None] = {n: None for n in names}
    for line in res.stdout.splitlines():
        name, _, path = line.partition(" ")
        if name in found:
            found[name] = path or None
    return found


def doctor(
    cluster: Cluster | str,
    *,
    workspace: str | os.PathLike[str] | None = None,
    remote_rsync: str = "rsync",
    local_rsync: str = "rsync",
    transport: Transport | None = None,
    repo_root: str | os.PathLike[str] | None = None,
) -> list[Check]:
    """Check ``cluster``'s prerequisites in order; returns every check made (stops after a failed ``ssh``).

    ``remote_rsync`` is rsync's command on the cluster (``rsync --rsync-path``); ``transport`` replaces the
    cluster's own (tests); ``repo_root``: the git working tree whose remote the jobs clone (None: no such check).
    """
    c = get_cluster(cluster)
    if c.rest_url and transport is None:
        return _rest_doctor(c, workspace, remote_rsync, local_rsync)
    first = "ssh"
    try:
        t = transport if transport is not None else c.transport()
        user, detail = _reach(c, t)
    except RoachError as err:
        return [Check(first, False, err.message, err.hint)]  # nothing else can be checked
    checks = [Check(first, True, detail)]

    if c.ssh_alias:
        checks += _check_rsync(c, t, remote_rsync, local_rsync)
    else:
        checks.append(Check("rsync", True, "local: no rsync needed, the cluster's files are on this machine"))

    commands = _attempt("slurm-commands", lambda: _check_commands(c, t))
    checks.append(commands)
    if commands.ok:
        client = SlurmClient(t, retries=1)
        checks.append(_attempt("partitions", lambda: _check_partitions(c, client)))
        checks.append(_attempt("accounts", lambda: _check_accounts(c, client, user)))
    if repo_root is not None:
        checks.append(_attempt("repo-remote", lambda: check_repo_remote(c, t, Path(repo_root), user)))
    if workspace is not None:
        checks.append(check_workspace(workspace, c, t))
    return checks


def _rest_doctor(
    c: Cluster, workspace: str | os.PathLike[str] | None, remote_rsync: str, local_rsync: str
) -> list[Check]:
    """A cluster reached through slurmrestd: its checks (:mod:`roach.workspace.rest_doctor`), then, where files go
    over ssh, that connection and rsync through it."""
    try:
        client = c.rest_client()
    except RoachError as err:
        return [Check("rest-token", False, err.message, err.hint)]
    checks = rest_checks(c, client)
    if c.ssh_alias and checks[-1].ok:
        try:
            t = c.transport()
            _, detail = _reach(c, t)
        except RoachError as err:
            return [*checks, Check("ssh", False, err.message, err.hint)]
        checks += [Check("ssh", True, detail), *_check_rsync(c, t, remote_rsync, local_rsync)]
        if workspace is not None:
            checks.append(check_workspace(workspace, c, t))
    return checks


# -- 1. reaching the cluster --------------------------------------------------------------------------------
def _who(t: Transport, where: str) -> str:
    res = t.run(["id", "-un"])
    lines = res.stdout.splitlines()
    if not res.ok or len(lines) != 1:
        raise RoachError(
            f"{where}: `id -un` printed {res.stdout[:200]!r} (exit {res.returncode}), expected one user "
            f"name: {res.stderr.strip()[:200]}",
            hint="the remote shell prints text of its own (a chatty ~/.bashrc or a remote_setup line); "
            "that text would corrupt Slurm's output: make it print nothing when not interactive",
        )
    return lines[0].strip()


def _reach(c: Cluster, t: Transport) -> tuple[str, str]:
    """The remote user and the ``ssh`` (or ``connection``) line; raises with ssh's exact message."""
    if not c.ssh_alias:
        user = _who(t, "locally")
        return user, f"local: Slurm's commands run on this machine as {user}; no SSH needed"
    where = f"ssh {c.ssh_alias}" + (f" -F {c.ssh_config}" if c.ssh_config else "")
    check = getattr(t, "check", None)
    if check is not None:
        check()  # a TransportError here carries ssh's exact message
    user = _who(t, where)
    return user, f"{where} connects without a prompt (BatchMode) as {user}; later calls reuse its one connection"


# -- 2. rsync ------------------------------------------------------------------------------------------------
def _check_rsync(c: Cluster, t: Transport, remote_rsync: str, local_rsync: str) -> list[Check]:
    here = shutil.which(local_rsync)
    checks = [
        Check("rsync-local", True, f"rsync is installed here: {here}")
        if here
        else Check(
            "rsync-local",
            False,
            f"rsync ({local_rsync}) is not installed on this machine",
            "install it (Debian: apt-get install rsync; macOS: brew install rsync)",
        )
    ]

    def remote() -> Check:
        path = _which(t, (remote_rsync,))[remote_rsync]
        if path:
            return Check("rsync-remote", True, f"rsync is installed on {c.ssh_alias}: {path}")
        return Check(
            "rsync-remote",
            False,
            f"rsync ({remote_rsync}) is not found on {c.ssh_alias} "
            "(looked on the PATH after the cluster's remote_setup lines)",
            "ask the cluster's admins to install rsync on the login host, or name its full path",
        )

    checks.append(_attempt("rsync-remote", remote))
    if all(ch.ok for ch in checks):
        checks.append(_attempt("rsync-copy", lambda: _rsync_round_trip(c, t, remote_rsync, here or local_rsync)))
    return checks


def _rsync_round_trip(c: Cluster, t: Transport, remote_rsync: str, local_rsync: str) -> Check:
    """Copy a small file to a fresh remote temp directory through the alias, read it back, remove it."""
    rsync_args = getattr(t, "rsync_args", None)
    if rsync_args is None:
        return Check("rsync-copy", True, "skipped: this transport does not say how rsync reaches the cluster")
    made = t.run(["mktemp", "-d", "/tmp/roach-doctor.XXXXXX"])
    remote_dir = made.stdout.strip()
    if not made.ok or not remote_dir.startswith("/"):
        return Check(
            "rsync-copy",
            False,
            f"could not make a temp directory on {c.ssh_alias}: {made.stderr.strip()}",
            "check that /tmp is writable on the login host",
        )
    token = secrets.token_hex(16)
    try:
        with tempfile.TemporaryDirectory(prefix="roach-doctor-") as local:
            src = Path(local) / "probe.txt"
            src.write_text(token)
            argv = [local_rsync, "-t", *rsync_args(remote_rsync), str(src), f"{c.ssh_alias}:{remote_dir}/"]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return Check("rsync-copy", False, f"rsync could not run: {exc}", "check the rsync installation here")
            if proc.returncode != 0:
                err = proc.stderr.strip().splitlines()
                return Check(
                    "rsync-copy",
                    False,
                    f"rsync to {c.ssh_alias}:{remote_dir}/ failed (exit "
                    f"{proc.returncode}): {err[-1] if err else '(no message)'}",
                    "try the same by hand: rsync " + " ".join(argv[1:]),
                )
        back = t.run(["cat", "--", f"{remote_dir}/probe.txt"])
        if back.stdout != token:
            return Check(
                "rsync-copy",
                False,
                f"rsync reported success but the file on {c.ssh_alias} holds "
                f"{back.stdout[:80]!r}: {back.stderr.strip()}",
            )
        return Check("rsync-copy", True, f"rsync copied a file through {c.ssh_alias} (to {remote_dir}, removed)")
    finally:
        try:
            t.run(["rm", "-rf", "--", remote_dir])
        except RoachError:
            pass  # the connection dropped meanwhile; the next check will say so


# -- 3. Slurm's commands --------------------------------------------------------------------------------------
def _check_commands(c: Cluster, t: Transport) -> Check:
    found = _which(t, SLURM_COMMANDS)
    missing = [n for n, p in found.items() if not p]
    where = c.ssh_alias or "this machine"
    if missing:
        hint = (
            "add the line that puts Slurm on the PATH to the cluster's remote_setup (e.g. 'module load slurm')"
            if c.ssh_alias
            else "install Slurm's client commands (Debian: apt-get install slurm-client)"
        )
        return Check(
            "slurm-commands",
            False,
            f"not found on {where}: {' '.join(missing)}"
            f"{' (after remote_setup: ' + '; '.join(c.remote_setup) + ')' if c.remote_setup else ''}",
            hint,
        )
    return Check("slurm-commands", True, f"{' '.join(SLURM_COMMANDS)} found on {where} ({found['sbatch']}, ...)")


# -- 4. what the presets name ---------------------------------------------------------------------------------
def _named(c: Cluster, field: str) -> dict[str, list[str]]:
    """Each value of ``field`` the presets name, with the presets that name it."""
    named: dict[str, list[str]] = {}
    for preset, res in sorted(c.presets.items()):
        value = getattr(res, field)
        if value:
            named.setdefault(value, []).append(preset)
    return named


def _check_partitions(c: Cluster, client: SlurmClient) -> Check:
    existing = sorted(p.get("PartitionName", "") for p in client.partitions())
    named = _named(c, "partition")
    missing = {p: presets for p, presets in named.items() if p not in existing}
    if missing:
        return Check(
            "partitions",
            False,
            "; ".join(
                f"preset {', '.join(presets)} names partition {p!r}, which does not exist"
                for p, presets in missing.items()
            ),
            f"partitions on {c.name}: {', '.join(existing) or '(none)'} (`sinfo -s` lists them)",
        )
    if not named:
        return Check(
            "partitions",
            True,
            f"no preset names a partition (jobs go to the default); partitions: {', '.join(existing)}",
        )
    return Check("partitions", True, f"every partition the presets name exists: {', '.join(sorted(named))}")


def _check_accounts(c: Cluster, client: SlurmClient, user: str | None) -> Check:
    named = _named(c, "account")
    if not named:
        return Check("accounts", True, "no preset names an account (jobs use the user's default account)")
    mine = sorted({a.get("Account", "") for a in client.associations(user=user)} - {""})
    missing = {a: presets for a, presets in named.items() if a not in mine}
    if missing:
        return Check(
            "accounts",
            False,
            "; ".join(
                f"preset {', '.join(presets)} names account {a!r}, which user {user} has no association with"
                for a, presets in missing.items()
            ),
            f"accounts of {user}: {', '.join(mine) or '(none)'} "
            f"(`sacctmgr show assoc user={user} format=account,partition,qos`)",
        )
    return Check("accounts", True, f"user {user} may use every account the presets name: {', '.join(sorted(named))}")


# -- 5. the repository's remote, as the jobs' user ---------------------------------------------------------
def check_repo_remote(c: Cluster, t: Transport, repo_root: Path, user: str | None) -> Check:
    """Whether the user ``c``'s jobs run as (``user``: whom ``t`` runs commands as) can read the remote of the
    repository at ``repo_root``."""
    name = "repo-remote"
    got = subprocess.run(
        ["git", "-C", str(repo_root), "ls-remote", "--get-url"], capture_output=True, text=True, check=False
    )
    url = got.stdout.strip()
    if got.returncode != 0 or not url:
        err = got.stderr.strip().splitlines()
        return Check(
            name,
            False,
            f"{repo_root} names no git remote: {err[-1] if err else 'git printed no URL'}",
            "pass --repo-root the git working tree whose pushed commits the jobs run",
        )
    if not c.git_reachable:
        return Check(name, True, f"jobs clone from a mirror submit sends each commit to, not from {url}")
    access = remote_access(t, url, c.run_as or user)
    if not access.ok:
        return Check(
            name, False, f"{access.user}, whom the jobs run as, cannot read {url}: {access.error}", access.hint
        )
    return Check(name, True, f"{access.user}, whom the jobs run as, can read the repository's remote {url}")


# -- 6. the remote workspace ----------------------------------------------------------------------------------
def check_workspace(
    workspace: str | os.PathLike[str], cluster: Cluster | None = None, transport: Transport | None = None
) -> Check:
    """Whether ``workspace`` names its remote root; with ``cluster`` (and its ``transport``), also that the
    root, made absolute there, is a directory that rsync reaches through the cluster's alias (what every
    command checks first)."""
    return _attempt("workspace", lambda: _check_workspace(workspace, cluster, transport))


def _check_workspace(workspace: str | os.PathLike[str], cluster: Cluster | None, transport: Transport | None) -> Check:
    file = load_workspace_file(workspace)  # a WorkspaceError is this check failing, with its hint
    notes = "".join(f"; note: {n}" for n in file.notes)
    if cluster is None:
        return Check("workspace", True, f"{file.path}: {file.describe()}{notes}")
    remote = Remote(cluster, transport if transport is not None else cluster.transport())
    ws = remote.resolve(Workspace(Path(workspace).resolve(), file, Settings()))
    dest = remote.rsync_root(ws)
    return Check(
        "workspace",
        True,
        f"{file.path}: remote root {ws.remote_root} (remote_root {file.remote_root}) is "
        f"a directory on {remote.where}; rsync goes to {dest}{notes}",
    )
