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

import ast
import difflib
import keyword
import os
import posixpath
import re
import subprocess
import warnings
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


def _git(cwd: Path, *args: str, ok: Sequence[int] = (0,), raw: bool = False) -> subprocess.CompletedProcess:
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


def _listing(lines: Sequence[str]) -> str:
    shown = [f"  {line}" for line in lines[:_SHOWN]]
    if len(lines) > _SHOWN:
        shown.append(f"  ... and {len(lines) - _SHOWN} more")
    return "\n".join(shown)


def sanitize_name(name: str) -> str:
    """``name`` reduced to ``[A-Za-z0-9._-]``: other runs become ``_``, no leading ``.``/``-``."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".-")
    return clean or "repo"


def short_sha(root: Path, commit: str) -> str:
    return _git(root, "rev-parse", "--short", commit).stdout.strip()


def commit_subject(root: Path, commit: str) -> str:
    """The first line of ``commit``'s message."""
    return _git(root, "show", "-s", "--format=%s", commit).stdout.strip()


# ------------------------------------------------------------------------------------ inspect_repo


def _toplevel(repo_root: Path) -> Path:
    if not repo_root.is_dir():
        raise UsageError(
            f"repo_root {str(repo_root)!r} is not a directory",
            hint="pass repo_root= the directory of the git repository that holds your code",
        )
    proc = _git(repo_root, "rev-parse", "--show-toplevel", ok=range(256))
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


def _dirty(root: Path) -> list[str]:
    """Tracked changes (staged or not) and untracked, unignored files, as ``"what: path"`` lines."""
    out = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all").stdout
    words = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "T": "type changed"}
    entries, fields = [], out.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], _show(entry[3:])
        if xy[0] in "RC":  # rename/copy: the next field is the source path
            path = f"{_show(fields[i])} -> {path}"
            i += 1
        if xy == "??":
            what = "untracked"
        elif "U" in xy or xy in ("AA", "DD"):
            what = "unmerged"
        elif xy[1] != " ":
            what = words.get(xy[1], "changed")
        else:
            what = "staged " + words.get(xy[0], "change")
        entries.append(f"{what}: {path}")
    return entries


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
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", ok=(0, 1)).stdout.strip()
    if not head:
        raise UsageError(
            f"the repository {str(root)!r} has no commit yet",
            hint="commit your code and push it: git add -A && git commit && git push -u origin HEAD",
        )
    branch = _git(root, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1)).stdout.strip()
    if not branch:
        raise UsageError(
            f"HEAD of {str(root)!r} is detached (at {short_sha(root, head)}); roach submits the "
            "commit at the tip of a branch that is pushed",
            hint="check out a branch (`git switch -c <branch>`) and push it: git push -u origin <branch>",
        )
    fmt = "%(upstream)%0a%(upstream:short)%0a%(upstream:remotename)"
    lines = _git(root, "for-each-ref", f"--format={fmt}", f"refs/heads/{branch}").stdout.split("\n")
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
    if not _git(root, "rev-parse", "--verify", "-q", f"{upstream_ref}^{{commit}}", ok=(0, 1)).stdout.strip():
        raise UsageError(
            f"branch {branch!r} tracks {upstream!r}, which does not exist locally (never fetched, "
            "or deleted on the remote)",
            hint=f"push it: git push -u {remote} {branch}",
        )
    url = _git(root, "remote", "get-url", remote).stdout.strip()
    if commit is not None:
        return _pinned(root, commit, branch, upstream, upstream_ref, remote, url)

    dirty = _dirty(root)
    if dirty:
        raise UsageError(
            f"the working tree of {str(root)!r} has {len(dirty)} uncommitted change(s); the job "
            f"clones commit {short_sha(root, head)} and would not see them:\n{_listing(dirty)}",
            hint="commit them (and push), or stash them (`git stash -u`), or add files that are not code to .gitignore",
        )

    pushed = _git(root, "merge-base", "--is-ancestor", head, upstream_ref, ok=(0, 1)).returncode == 0
    if not pushed:
        ahead = _git(root, "log", "--format=%h %s", head, "--not", upstream_ref).stdout.splitlines()
        behind = int(_git(root, "rev-list", "--count", f"{head}..{upstream_ref}").stdout.strip() or 0)
        hint = f"run `git push` (to {upstream}), then submit again"
        if behind:
            hint = f"{upstream} has {behind} commit(s) you do not have: `git pull --rebase`, then `git push`"
        raise UsageError(
            f"commit {short_sha(root, head)} ({commit_subject(root, head)}) is not on {upstream} "
            f"(as last fetched); the job clones from {url} and would not find it. Unpushed:\n"
            f"{_listing(ahead)}",
            hint=hint,
        )

    return RepoInfo(
        root=root, name=sanitize_name(root.name), commit=head, branch=branch, upstream=upstream, remote=remote, url=url
    )


def _pinned(root: Path, commit: str, branch: str, upstream: str, upstream_ref: str, remote: str, url: str) -> RepoInfo:
    full = _git(root, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}", ok=(0, 1)).stdout.strip()
    if not full:
        raise UsageError(
            f"commit {commit[:12]} is not in the repository {str(root)!r}",
            hint="fetch it (`git fetch`), or pass --repo-root to a clone that has it",
        )
    if _git(root, "merge-base", "--is-ancestor", full, upstream_ref, ok=(0, 1)).returncode != 0:
        raise UsageError(
            f"commit {short_sha(root, full)} is not on {upstream} (as last fetched): the job clones "
            f"from {url} and might not find it",
            hint=f"push it, or `git fetch {remote}` if it is there",
        )
    return RepoInfo(
        root=root, name=sanitize_name(root.name), commit=full, branch=branch, upstream=upstream, remote=remote, url=url
    )


# ------------------------------------------------------------------------------------ check_target


def _is_name(s: str) -> bool:
    return s.isidentifier() and not keyword.iskeyword(s)


def parse_target(target: str) -> tuple[str, str]:
    """Split ``"pkg.module:function"`` into ``("pkg.module", "function")``, or raise UsageError."""
    example = "e.g. 'pkg.train:train' runs function train defined in pkg/train.py"
    if not isinstance(target, str) or target.count(":") != 1:
        why = "it has no ':'" if isinstance(target, str) and ":" not in target else "it needs exactly one ':'"
        raise UsageError(f"target {target!r} is not of the form {TARGET_FORM!r}: {why}", hint=example)
    module, function = target.split(":")
    if not module or not all(_is_name(part) for part in module.split(".")):
        raise UsageError(
            f"target {target!r} is not of the form {TARGET_FORM!r}: {module!r} is not a dotted module name",
            hint=example,
        )
    if not _is_name(function):
        raise UsageError(
            f"target {target!r} is not of the form {TARGET_FORM!r}: {function!r} is not the name "
            "of a function (methods and nested names are not supported)",
            hint=example,
        )
    return module, function


def module_path_candidates(target: str) -> list[str]:
    """Repo-relative paths where ``target``'s module may live, in the order Python would find them."""
    module, _ = parse_target(target)
    base = module.replace(".", "/")
    return [f"{base}/__init__.py", f"{base}.py", f"src/{base}/__init__.py", f"src/{base}.py"]


def _tree_entries(root: Path, commit: str, paths: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """``{path: (mode, type, object)}`` for those of ``paths`` that exist at ``commit``."""
    out = _git(root, "ls-tree", "-z", commit, "--", *paths).stdout
    entries = {}
    for rec in filter(None, out.split("\0")):
        meta, _, path = rec.partition("\t")
        mode, kind, obj = meta.split()
        entries[path] = (mode, kind, obj)
    return entries


def locate_module(info: RepoInfo, target: str) -> str:
    """The repo-relative path of ``target``'s module at ``info.commit`` (a ``src/`` layout is allowed)."""
    candidates = module_path_candidates(target)
    found = _tree_entries(info.root, info.commit, candidates)
    for path in candidates:
        if path in found and found[path][1] == "blob":
            return path
    short = short_sha(info.root, info.commit)
    on_disk = [p for p in candidates if (info.root / p).is_file()]
    hint = f"check the module name in {target!r}; paths are relative to the repository root {str(info.root)!r}"
    if on_disk:
        hint = f"{on_disk[0]} exists in the working tree but not at commit {short}: commit and push it"
    raise UsageError(
        f"module {parse_target(target)[0]!r} is not in commit {short}; tried:\n{_listing(candidates)}", hint=hint
    )


def _read_blob(info: RepoInfo, path: str) -> bytes:
    """The committed content of ``path``, following symlinks that stay inside the repository."""
    for _ in range(8):
        mode, kind, obj = _tree_entries(info.root, info.commit, [path]).get(path, ("", "", ""))
        if kind != "blob":
            raise UsageError(
                f"{path} is a symlink at commit {short_sha(info.root, info.commit)} whose target is "
                "not a file in the repository",
                hint="make the module a regular file",
            )
        data = _git(info.root, "cat-file", "blob", obj, raw=True).stdout
        if mode != "120000":
            return data
        target = posixpath.normpath(posixpath.join(posixpath.dirname(path), data.decode("utf-8", "replace")))
        if target.startswith("../") or target == ".." or posixpath.isabs(target):
            raise UsageError(
                f"{path} is a symlink to {target!r}, outside the repository",
                hint="the job only has the repository's files: make the module a regular file",
            )
        path = target
    raise UsageError(f"{path}: too many levels of symlinks", hint="make the module a regular file")


def _bound_names(node: ast.AST) -> list[str]:
    """Names bound by an assignment target."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Starred):
        return _bound_names(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _bound_names(elt)]
    return []


def _top_level(body: Sequence[ast.stmt]) -> tuple[list[str], set[str], set[str], bool]:
    """(functions in order, other bound names, classes, has a star import) at module level.

    Statements under module-level ``if``/``try``/``with``/``for`` count: they run at import.
    """
    functions: list[str] = []
    others: set[str] = set()
    classes: set[str] = set()
    star = False
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.append(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            classes.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            others.update(n for t in stmt.targets for n in _bound_names(t))
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            others.update(_bound_names(stmt.target))
        elif isinstance(stmt, ast.Import):
            others.update(a.asname or a.name.split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            star |= any(a.name == "*" for a in stmt.names)
            others.update(a.asname or a.name for a in stmt.names if a.name != "*")
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            others.update(_bound_names(stmt.target))
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            others.update(n for item in stmt.items if item.optional_vars for n in _bound_names(item.optional_vars))
        blocks = [getattr(stmt, f, []) for f in ("body", "orelse", "finalbody")]
        if isinstance(stmt, (ast.If, ast.Try, ast.TryStar, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            for block in blocks:
                f, o, c, s = _top_level(block)
                functions += [n for n in f if n not in functions]
                others |= o
                classes |= c
                star |= s
    return functions, others, classes, star


def check_target(info: RepoInfo, target: str) -> None:
    """Refuse ``target`` unless its module exists at ``info.commit`` and defines the function at top level.

    The module file is read from the commit (not the working tree) and parsed with :mod:`ast`; it is
    never imported. A top-level ``def``/``async def`` counts, and so does a module-level assignment or
    import that binds the name; with a ``from x import *`` the name is given the benefit of the doubt.
    """
    _, function = parse_target(target)
    path = locate_module(info, target)
    short = short_sha(info.root, info.commit)
    source = _read_blob(info, path)
    try:
        with warnings.catch_warnings():  # the user's invalid escapes etc. are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else path
        text = f"\n    {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise UsageError(
            f"{where}: syntax error at commit {short}: {exc.msg}{text}",
            hint=f"fix line {exc.lineno} of {path}, commit and push, then submit again",
        ) from exc
    except ValueError as exc:  # e.g. null bytes
        raise UsageError(
            f"{path} at commit {short} cannot be parsed as Python: {exc}",
            hint=f"check that {path} is a Python source file",
        ) from exc
    functions, others, classes, star = _top_level(tree.body)
    if function in functions or function in others or (star and function not in classes):
        return
    if function in classes:
        raise UsageError(
            f"{function!r} in {path} is a class, not a function (commit {short})",
            hint=f"wrap it in a top-level function, e.g. `def run_{function.lower()}(...)`, and name that",
        )
    choices = ", ".join(functions) if functions else "(none)"
    close = difflib.get_close_matches(function, functions, n=1)
    hint = (
        f"did you mean {close[0]!r}? " if close else ""
    ) + f"name one of them, e.g. '{parse_target(target)[0]}:{(close or functions or ['function'])[0]}'"
    raise UsageError(
        f"{path} at commit {short} has no top-level function {function!r}; its top-level functions are: {choices}",
        hint=hint,
    )
