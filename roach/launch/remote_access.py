"""Whether the user a cluster's jobs run as can read the repository's remote, asked before anything is queued.

A job clones its commit from the remote as the user it runs as (``run_as`` on a local cluster, the ssh user
otherwise), not as the user who submits. Where that user may not read it (a local repository another user owns,
which git refuses as of "dubious ownership"; a directory it may not enter), every job fails in its first second
with git's message in its log only. :func:`remote_access` runs ``git ls-remote`` through the cluster's transport,
the one its Slurm commands and so its jobs go through, as that user, and words what git said as what to do.
``roach submit``/``sweep`` ask it of a local remote (a path or ``file://``: one local git call); ``roach doctor``
of any remote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roach.errors import MissingError, RoachError
from roach.records.error_line import git_error_line
from roach.scheduler.transport import Transport

LS_REMOTE_TIMEOUT_S = 60.0
# git asks nothing on a terminal: a remote that wants credentials fails at once with its message
_ENV = ("env", "GIT_TERMINAL_PROMPT=0")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP_LIKE = re.compile(r"^[^/]*:")


def is_local_url(url: str) -> bool:
    """A remote on the machine that clones it: a ``file://`` URL or a path (not ``host:path`` nor ``scheme://``)."""
    if url.startswith("file://"):
        return True
    return not _URL_SCHEME.match(url) and not _SCP_LIKE.match(url)


def local_path(url: str) -> str:
    return url.removeprefix("file://")


@dataclass(frozen=True)
class RemoteAccess:
    """What ``git ls-remote`` of the remote said as the jobs' user: ``ok``, else git's line and what to do."""

    url: str
    user: str  # who asked: the jobs' user's name, or "the cluster's user" where it is not known here
    ok: bool
    error: str = ""  # git's most telling line
    hint: str = ""

    def raise_if_not(self) -> None:
        if not self.ok:
            raise MissingError(
                f"{self.user}, whom the jobs run as, cannot read the repository's remote {self.url}: {self.error}",
                hint=self.hint,
            )


def remote_access(transport: Transport, url: str, user: str | None) -> RemoteAccess:
    """``git ls-remote URL HEAD`` as the cluster's jobs' user through ``transport``: can its jobs clone from ``url``?"""
    who = user or "the cluster's user"
    try:
        res = transport.run([*_ENV, "git", "ls-remote", "--quiet", "--", url, "HEAD"], timeout=LS_REMOTE_TIMEOUT_S)
    except RoachError as err:
        return RemoteAccess(url, who, False, err.message, err.hint or "check that git is installed on the cluster")
    if res.ok:
        return RemoteAccess(url, who, True)
    line = git_error_line(res.stderr) or f"git ls-remote exited {res.returncode}"
    return RemoteAccess(url, who, False, line, _hint(res.stderr, url, user))


def _hint(stderr: str, url: str, user: str | None) -> str:
    as_user = f"as {user}" if user else "as the cluster's user"
    path = local_path(url)
    if "dubious ownership" in stderr:
        return (
            f"git refuses a repository another user owns: {as_user}, run `git config --global --add safe.directory "
            f"{path}`, or give the remote to that user (`chown -R {user or '<user>'} {path}`)"
        )
    if is_local_url(url):
        return (
            f"let {user or 'that user'} read it: every directory down to {path} needs x, its files r (`chmod -R a+rX`)"
        )
    return f"check that {user or 'the cluster user'} can fetch it on the cluster: `git ls-remote {url}` {as_user}"
