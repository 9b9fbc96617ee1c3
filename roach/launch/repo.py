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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.errors import UsageError
from roach.launch.gitrun import git, git_env, start

TARGET_FORM = "package.module:function"
_SHOWN = 20  # files or commits listed in a message before "and N more"


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


_STATUS = ("status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all", "--ignore-submodules=all")
# The local branches at HEAD's commit, the current one marked *, with what inspect_repo reads of its upstream.
_UPSTREAM = "%(upstream)%0a%(upstream:short)%0a%(upstream:remotename)"
_HEADS = ("for-each-ref", "--points-at=HEAD", "--format=%(HEAD)%00%(refname)%00" + _UPSTREAM.replace("%0a", "%00"))


def _status(root: Path) -> _Status:
    """HEAD, branch, ahead/behind its upstream and the uncommitted changes and untracked, unignored files,
    in one git call (what took six)."""
    return _parse_status(git(root, *_STATUS).stdout)


def _parse_status(out: str) -> _Status:
    words = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "T": "type changed"}
    head = branch = ""
    ahead = behind = None
    entries, fields = [], out.split("\0")
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
    if commit is None:
        clean = _at_once(Path(repo_root))
        if clean is not None:
            return clean
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
    upstream_ref, upstream, remote = _upstream(root, branch, st)
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


def _upstream(root: Path, branch: str, st: _Status) -> tuple[str, str, str]:
    """``branch``'s upstream (its ref, its short name, its remote), refused unless a remote's branch known here."""
    lines = git(root, "for-each-ref", f"--format={_UPSTREAM}", f"refs/heads/{branch}").stdout.split("\n")
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
    return upstream_ref, upstream, remote


def _at_once(repo_root: Path) -> RepoInfo | None:
    """What :func:`inspect_repo` returns for a clean, pushed repository, from four git commands run at once (the
    toplevel, the status, the branches at HEAD with their upstreams, origin's URL): the time of the slowest, not
    of the four. None where anything is not that (an error, a refusal, a remote other than origin...): the
    checks one by one then say what, as they always have."""
    if not repo_root.is_dir():
        return None
    env = git_env()
    started = [
        start(repo_root, *args, env=env)
        for args in (("rev-parse", "--show-toplevel"), _STATUS, _HEADS, ("remote", "get-url", "origin"))
    ]
    try:
        done = [s.finish(ok=range(256)) for s in started]
    except Exception:
        for s in started:  # none left running
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        return None
    if any(p.returncode != 0 for p in done[:3]):
        return None
    top, status, heads, url = done
    root = Path(top.stdout.rstrip("\n"))
    st = _parse_status(status.stdout)
    ours = [line.split("\0") for line in heads.stdout.splitlines() if line.startswith("*")]
    if (
        not top.stdout.strip()
        or st.dirty
        or st.ahead != 0
        or not st.head
        or st.head == "(initial)"
        or st.branch in ("", "(detached)")
        or len(ours) != 1
        or len(ours[0]) != 5
        or ours[0][1] != f"refs/heads/{st.branch}"
    ):
        return None
    upstream_ref, upstream, remote = ours[0][2:]
    if not upstream_ref.startswith("refs/remotes/") or remote in ("", "."):
        return None
    if remote != "origin":
        url = git(root, "remote", "get-url", remote)
    elif url.returncode != 0:
        return None
    return RepoInfo(
        root=root,
        name=sanitize_name(root.name),
        commit=st.head,
        branch=st.branch,
        upstream=upstream,
        remote=remote,
        url=url.stdout.strip(),
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
