"""Check the local git repository before a job is submitted.

A roach job does not ship the caller's files: it clones the submitted commit from the git remote. So
before anything is submitted or written, :func:`inspect_repo` makes sure that what the job will run is
exactly what the caller sees: the working tree is clean (no tracked changes, staged or not, and no
untracked file that is not ignored), HEAD is on a branch with an upstream, and the HEAD commit is
contained in that upstream. :func:`check_target` then makes sure that ``pkg.module:function`` names a
module and a top-level function *at that commit*, by reading the committed file with ``git`` and
parsing it with :mod:`ast`; the caller's code is never imported.

The "pushed" check does **not** fetch: it compares HEAD with the local remote-tracking ref (say
``refs/remotes/origin/main``), which ``git push`` and ``git fetch`` update. Fetching would need the
network and perhaps credentials on every submit. If the remote was rewritten since (a force-push by
someone else), the clone on the cluster is what notices.

Submodules are ignored: their changes do not make the tree dirty and their files are not searched.
Every ``git`` call is an argument list; ``git`` missing or failing to run becomes a
:class:`~roach.errors.TransportError`, and a refusal becomes a :class:`~roach.errors.UsageError`.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roach.errors import RoachError, TransportError, UsageError

TARGET_FORM = "package.module:function"
_SHOWN = 20  # files or commits listed in a message before "and N more"
_GIT_TIMEOUT = 60.0
# Variables that would point git at another repository than repo_root (set inside git hooks, say).
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


@dataclass(frozen=True)
class RepoInfo:
    """The repository a job clones: where it is locally, which commit, and the URL to clone from."""

    root: Path  # toplevel of the working tree
    name: str  # basename of root, reduced to [A-Za-z0-9._-]
    commit: str  # full 40-hex HEAD
    branch: str  # e.g. "main"
    upstream: str  # e.g. "origin/main"
    remote: str  # e.g. "origin"
    url: str  # the remote's fetch URL, what the job clones from


# --------------------------------------------------------------------------------------------- git


def git(cwd: Path, *args: str, ok: Sequence[int] = (0,), raw: bool = False) -> subprocess.CompletedProcess:
    """Run ``git -C cwd args``; a failure to run becomes TransportError, an unexpected exit RoachError."""
    argv = ["git", "-C", str(cwd), *args]
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0")  # English messages; never write the index
    text_kw: dict[str, Any] = {} if raw else {"encoding": "utf-8", "errors": "replace"}
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=_GIT_TIMEOUT,
            text=not raw,
            **text_kw,
        )
    except FileNotFoundError as exc:
        raise TransportError(
            "git is not installed (or not on PATH)", argv, hint="install git (Debian: apt-get install git) or fix PATH"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise TransportError(
            f"git timed out after {exc.timeout:.0f}s: {' '.join(argv)}",
            argv,
            hint="is the repository on a slow or hung file system?",
        ) from exc
    except OSError as exc:
        raise TransportError(f"could not run git: {exc}", argv) from exc
    if proc.returncode not in ok:
        stderr = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode("utf-8", "replace")
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
        raise RoachError(
            f"`{' '.join(argv)}` failed (exit {proc.returncode}): {last}",
            hint="run that command yourself to see what git says",
        )
    return proc


def _show(path: str) -> str:
    """A path as it may be printed: itself, or its repr if it holds control characters."""
    return path if path.isprintable() else repr(path)


def listing(lines: Sequence[str]) -> str:
    shown = [f"  {line}" for line in lines[:_SHOWN]]
    if len(lines) > _SHOWN:
        shown.append(f"  ... and {len(lines) - _SHOWN} more")
    return "\n".join(shown)


def sanitize_name(name: str) -> str:
    """``name`` reduced to ``[A-Za-z0-9._-]``: other runs become ``_``, no leading ``.``/``-``."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".-")
    return clean or "repo"


def short_sha(root: Path, commit: str) -> str:
    return git(root, "rev-parse", "--short", commit).stdout.strip()


def commit_subject(root: Path, commit: str) -> str:
    """The first line of ``commit``'s message."""
    return git(root, "show", "-s", "--format=%s", commit).stdout.strip()


# ------------------------------------------------------------------------------------ inspect_repo


def _toplevel(repo_root: Path) -> Path:
    if not repo_root.is_dir():
        raise UsageError(
            f"repo_root {str(repo_root)!r} is not a directory",
            hint="pass repo_root= the directory of the git repository that holds your code",
        )
    proc = git(repo_root, "rev-parse", "--show-toplevel", ok=range(256))
    if proc.returncode == 0 and proc.stdout.strip():
        return Path(proc.stdout.rstrip("\n"))
    err = proc.stderr.strip()
    if "dubious ownership" in err:
        raise UsageError(
            f"git refuses {str(repo_root)!r}: it is owned by another user",
            hint=f"if you trust it: git config --global --add safe.directory {repo_root.resolve()}",
        )
    if "not a git repository" in err:
        raise UsageError(
            f"{str(repo_root)!r} is not inside a git repository; roach jobs clone a commit from "
            "the repository's remote",
            hint="pass repo_root= the directory of your git repository, or create one with "
            "`git init`, commit and push it",
        )
    raise UsageError(
        f"{str(repo_root)!r} has no git working tree: {err.splitlines()[-1] if err else 'git said nothing'}",
        hint="pass repo_root= a git working tree (a clone, not a bare repository)",
    )


@dataclass(frozen=True)
class _Status:
    """One ``git status --porcelain=v2 --branch``: HEAD, its branch and upstream, and the working tree."""

    head: str  # "(initial)": no commit yet
    branch: str  # "(detached)": no branch
    ahead: int | None  # commits of HEAD not on the upstream; None: no upstream, or its ref is not here
    behind: int | None
    dirty: list[str]  # "what: path" lines


def _status(root: Path) -> _Status:
    """HEAD, branch, ahead/behind its upstream and the uncommitted changes and untracked, unignored files,
    in one git call (what took six)."""
    out = git(root, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--ignore-submodules=all")
    words = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "T": "type changed"}
    head = branch = ""
    ahead = behind = None
    entries, fields = [], out.stdout.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if entry.startswith("# "):
            key, _, value = entry[2:].partition(" ")
            if key == "branch.oid":
                head = value
            elif key == "branch.head":
                branch = value
            elif key == "branch.ab":
                a, b = value.split()
                ahead, behind = int(a.lstrip("+")), int(b.lstrip("-"))
            continue
        kind = entry[:1]
        if kind == "?":
            entries.append(f"untracked: {_show(entry[2:])}")
            continue
        if kind not in "12u" or len(entry) < 4:
            continue
        xy = entry[2:4].replace(".", " ")
        parts = entry.split(" ", {"1": 8, "2": 9, "u": 10}[kind])
        path = _show(parts[-1])
        if kind == "2":  # rename/copy: the next field is the source path
            path = f"{_show(fields[i])} -> {path}"
            i += 1
        if kind == "u" or "U" in xy or xy in ("AA", "DD"):
            what = "unmerged"
        elif xy[1] != " ":
            what = words.get(xy[1], "changed")
        else:
            what = "staged " + words.get(xy[0], "change")
        entries.append(f"{what}: {path}")
    return _Status(head, branch, ahead, behind, entries)


def inspect_repo(repo_root: str | os.PathLike[str] = ".", commit: str | None = None) -> RepoInfo:
    """Check that the repository at ``repo_root`` is clean and pushed, and describe what a job clones.

    ``commit`` pins an earlier commit instead of HEAD (promote and move resubmit a run's own code): it must
    be on the upstream; the working tree's state does not matter then, since the job does not see it.

    Raises :class:`UsageError` for: not a git repository, no commit yet, detached HEAD, a branch with
    no upstream (or an upstream that is a local branch or was never fetched), uncommitted changes or
    untracked files that are not ignored (listed), and a HEAD commit not contained in the local
    remote-tracking ref of the upstream (nothing is fetched; see the module docstring).
    """
    root = _toplevel(Path(repo_root))
    st = _status(root)
    head = st.head
    if not head or head == "(initial)":
        raise UsageError(
            f"the repository {str(root)!r} has no commit yet",
            hint="commit your code and push it: git add -A && git commit && git push -u origin HEAD",
        )
    branch = st.branch
    if not branch or branch == "(detached)":
        raise UsageError(
            f"HEAD of {str(root)!r} is detached (at {short_sha(root, head)}); roach submits the "
            "commit at the tip of a branch that is pushed",
            hint="check out a branch (`git switch -c <branch>`) and push it: git push -u origin <branch>",
        )
    fmt = "%(upstream)%0a%(upstream:short)%0a%(upstream:remotename)"
    lines = git(root, "for-each-ref", f"--format={fmt}", f"refs/heads/{branch}").stdout.split("\n")
    upstream_ref, upstream, remote = (lines + ["", "", ""])[:3]
    if not upstream_ref:
        raise UsageError(
            f"branch {branch!r} has no upstream, so roach cannot tell where the job clones it from",
            hint=f"push it and set the upstream: git push -u origin {branch}",
        )
    if remote in ("", ".") or not upstream_ref.startswith("refs/remotes/"):
        raise UsageError(
            f"the upstream of branch {branch!r} is {upstream!r}, a local branch; the job clones from a remote",
            hint=f"push to a remote and track it: git push -u origin {branch}",
        )
    if st.ahead is None:  # status counts ahead/behind only against an upstream ref that exists here
        raise UsageError(
            f"branch {branch!r} tracks {upstream!r}, which does not exist locally (never fetched, "
            "or deleted on the remote)",
            hint=f"push it: git push -u {remote} {branch}",
        )
    url = git(root, "remote", "get-url", remote).stdout.strip()
    if commit is not None:
        return _pinned(root, commit, branch, upstream, upstream_ref, remote, url)

    dirty = st.dirty
    if dirty:
        raise UsageError(
            f"the working tree of {str(root)!r} has {len(dirty)} uncommitted change(s); the job "
            f"clones commit {short_sha(root, head)} and would not see them:\n{listing(dirty)}",
            hint="commit them (and push), or stash them (`git stash -u`), or add files that are not code to .gitignore",
        )

    if st.ahead:  # HEAD has commits the upstream (as last fetched) lacks
        ahead = git(root, "log", "--format=%h %s", head, "--not", upstream_ref).stdout.splitlines()
        behind = st.behind or 0
        hint = f"run `git push` (to {upstream}), then submit again"
        if behind:
            hint = f"{upstream} has {behind} commit(s) you do not have: `git pull --rebase`, then `git push`"
        raise UsageError(
            f"commit {short_sha(root, head)} ({commit_subject(root, head)}) is not on {upstream} "
            f"(as last fetched); the job clones from {url} and would not find it. Unpushed:\n"
            f"{listing(ahead)}",
            hint=hint,
        )

    return RepoInfo(
        root=root, name=sanitize_name(root.name), commit=head, branch=branch, upstream=upstream, remote=remote, url=url
    )


def _pinned(root: Path, commit: str, branch: str, upstream: str, upstream_ref: str, remote: str, url: str) -> RepoInfo:
    full = git(root, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}", ok=(0, 1)).stdout.strip()
    if not full:
        raise UsageError(
            f"commit {commit[:12]} is not in the repository {str(root)!r}",
            hint="fetch it (`git fetch`), or pass --repo-root to a clone that has it",
        )
    if git(root, "merge-base", "--is-ancestor", full, upstream_ref, ok=(0, 1)).returncode != 0:
        raise UsageError(
            f"commit {short_sha(root, full)} is not on {upstream} (as last fetched): the job clones "
            f"from {url} and might not find it",
            hint=f"push it, or `git fetch {remote}` if it is there",
        )
    return RepoInfo(
        root=root, name=sanitize_name(root.name), commit=full, branch=branch, upstream=upstream, remote=remote, url=url
    )
