"""The function a submission names (``package.module:function``): parsed, and found at the commit (its module in the tree, the name bound at its top level), and the keyword arguments of its runs checked against its ``def`` there (:mod:`roach.launch.signature`), before anything is queued."""

from __future__ import annotations

import ast
import difflib
import functools
import json
import keyword
import os
import posixpath
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roach.errors import UsageError
from roach.launch.repo import TARGET_FORM, RepoInfo, git, listing, short_sha
from roach.launch.signature import Params, problem, read_params


def is_name(s: str) -> bool:
    return s.isidentifier() and not keyword.iskeyword(s)


def parse_target(target: str) -> tuple[str, str]:
    """Split ``"pkg.module:function"`` into ``("pkg.module", "function")``, or raise UsageError."""
    example = "e.g. 'pkg.train:train' runs function train defined in pkg/train.py"
    if not isinstance(target, str) or target.count(":") != 1:
        why = "it has no ':'" if isinstance(target, str) and ":" not in target else "it needs exactly one ':'"
        raise UsageError(f"target {target!r} is not of the form {TARGET_FORM!r}: {why}", hint=example)
    module, function = target.split(":")
    if not module or not all(is_name(part) for part in module.split(".")):
        raise UsageError(
            f"target {target!r} is not of the form {TARGET_FORM!r}: {module!r} is not a dotted module name",
            hint=example,
        )
    if not is_name(function):
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


def tree_entries(root: Path, commit: str, paths: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """``{path: (mode, type, object)}`` for those of ``paths`` that exist at ``commit``."""
    known = _PATHS.get((root, commit), {})
    if paths and all(p in known for p in paths):  # each path asked before, alone or with others
        return {p: e for p in paths if (e := known[p]) is not None}
    found = dict(_tree_entries(root, commit, tuple(paths)))
    if len(_PATHS) > 256:
        _PATHS.clear()
    memo = _PATHS.setdefault((root, commit), {})
    memo.update((p, found.get(p)) for p in paths)
    return found


# What ls-tree said of each path at a commit (None: not there), so that read_blob's look at the module that
# locate_module found asks git nothing.
_PATHS: dict[tuple[Path, str], dict[str, tuple[str, str, str] | None]] = {}


# A commit's tree and a blob never change: what git said of them is kept for the process (a sweep, a
# benchmark's loop and check_target's own second look ask git once).
@functools.lru_cache(maxsize=256)
def _tree_entries(root: Path, commit: str, paths: tuple[str, ...]) -> tuple[tuple[str, tuple[str, str, str]], ...]:
    out = git(root, "ls-tree", "-z", commit, "--", *paths).stdout
    entries = {}
    for rec in filter(None, out.split("\0")):
        meta, _, path = rec.partition("\t")
        mode, kind, obj = meta.split()
        entries[path] = (mode, kind, obj)
    return tuple(entries.items())


@functools.lru_cache(maxsize=256)
def _blob(root: Path, obj: str) -> bytes:
    return git(root, "cat-file", "blob", obj, raw=True).stdout


def locate_module(info: RepoInfo, target: str) -> str:
    """The repo-relative path of ``target``'s module at ``info.commit`` (a ``src/`` layout is allowed)."""
    candidates = module_path_candidates(target)
    found = tree_entries(info.root, info.commit, candidates)
    for path in candidates:
        if path in found and found[path][1] == "blob":
            return path
    short = short_sha(info.root, info.commit)
    on_disk = [p for p in candidates if (info.root / p).is_file()]
    hint = f"check the module name in {target!r}; paths are relative to the repository root {str(info.root)!r}"
    if on_disk:
        hint = f"{on_disk[0]} exists in the working tree but not at commit {short}: commit and push it"
    raise UsageError(
        f"module {parse_target(target)[0]!r} is not in commit {short}; tried:\n{listing(candidates)}", hint=hint
    )


def read_blob(info: RepoInfo, path: str) -> bytes:
    """The committed content of ``path``, following symlinks that stay inside the repository."""
    for _ in range(8):
        mode, kind, obj = tree_entries(info.root, info.commit, [path]).get(path, ("", "", ""))
        if kind != "blob":
            raise UsageError(
                f"{path} is a symlink at commit {short_sha(info.root, info.commit)} whose target is "
                "not a file in the repository",
                hint="make the module a regular file",
            )
        data = _blob(info.root, obj)
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


def bound_names(node: ast.AST) -> list[str]:
    """Names bound by an assignment target."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Starred):
        return bound_names(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in bound_names(elt)]
    return []


def top_level(body: Sequence[ast.stmt]) -> tuple[list[str], set[str], set[str], bool]:
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
            others.update(n for t in stmt.targets for n in bound_names(t))
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            others.update(bound_names(stmt.target))
        elif isinstance(stmt, ast.Import):
            others.update(a.asname or a.name.split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            star |= any(a.name == "*" for a in stmt.names)
            others.update(a.asname or a.name for a in stmt.names if a.name != "*")
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            others.update(bound_names(stmt.target))
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            others.update(n for item in stmt.items if item.optional_vars for n in bound_names(item.optional_vars))
        blocks = [getattr(stmt, f, []) for f in ("body", "orelse", "finalbody")]
        if isinstance(stmt, (ast.If, ast.Try, ast.TryStar, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            for block in blocks:
                f, o, c, s = top_level(block)
                functions += [n for n in f if n not in functions]
                others |= o
                classes |= c
                star |= s
    return functions, others, classes, star


def checked_module(info: RepoInfo, target: str) -> str:
    """:func:`check_target`, then the module's path (:func:`locate_module`): :func:`checked_target`'s path."""
    return checked_target(info, target)[0]


def checked_target(info: RepoInfo, target: str) -> tuple[str, Params | None]:
    """:func:`check_target`, then the module's path (:func:`locate_module`) and what the function takes
    (:func:`target_params`). A target found good at a commit is remembered (``~/.cache/roach/targets/``): a commit
    never changes, so a later submit of the same commit and target asks git nothing. Only a target that passed is
    remembered; a refusal is worked out again each time."""
    cache = _targets_file(info.commit)
    try:
        known = json.loads(cache.read_text()).get(str(info.root), {})
        entry = known.get(target) if isinstance(known, dict) else None
        if isinstance(entry, dict) and entry.get("path") in module_path_candidates(target):
            return entry["path"], None if entry["params"] is None else Params.from_json(entry["params"])
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    params = target_params(info, target)
    path = locate_module(info, target)
    _remember(cache, str(info.root), target, {"path": path, "params": None if params is None else params.to_json()})
    return path, params


def check_calls(info: RepoInfo, target: str, params: Params, runs: Sequence[Mapping[str, Any]], *, grid: bool) -> None:
    """Refuse (UsageError) the arguments of ``runs`` (one run's, or each of a sweep's grid entries) unless the
    function of ``target`` at the commit, as ``params`` read it, can take each of them."""
    found = problem(params, runs, grid=grid)
    if found is not None:
        which, message, hint = found
        raise UsageError(f"{which}{target} at commit {short_sha(info.root, info.commit)}: {message}", hint=hint)


def _targets_file(commit: str) -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "roach" / "targets" / f"{commit}.json"


def _remember(cache: Path, root: str, target: str, found: dict[str, Any]) -> None:
    """Add ``target -> found`` for ``root`` to ``cache`` (temp file, rename); a failure only costs the next look."""
    try:
        data = json.loads(cache.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    entry = data.get(root)
    data[root] = {**(entry if isinstance(entry, dict) else {}), target: found}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".targets.", dir=cache.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, cache)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def check_target(info: RepoInfo, target: str) -> None:
    """Refuse ``target`` unless its module exists at ``info.commit`` and defines the function at top level
    (:func:`target_params`)."""
    target_params(info, target)


def target_params(info: RepoInfo, target: str) -> Params | None:
    """What the function of ``target`` takes (:func:`roach.launch.signature.read_params`; None where its source does
    not say), once :func:`check_target`'s checks pass: its module exists at ``info.commit`` and defines the function
    at top level.

    The module file is read from the commit (not the working tree) and parsed with :mod:`ast`; it is
    never imported. A top-level ``def``/``async def`` counts, and so does a module-level assignment or
    import that binds the name; with a ``from x import *`` the name is given the benefit of the doubt.
    """
    _, function = parse_target(target)
    path = locate_module(info, target)
    source = read_blob(info, path)
    try:
        with warnings.catch_warnings():  # the user's invalid escapes etc. are not ours to print
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else path
        text = f"\n    {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        raise UsageError(
            f"{where}: syntax error at commit {short_sha(info.root, info.commit)}: {exc.msg}{text}",
            hint=f"fix line {exc.lineno} of {path}, commit and push, then submit again",
        ) from exc
    except ValueError as exc:  # e.g. null bytes
        raise UsageError(
            f"{path} at commit {short_sha(info.root, info.commit)} cannot be parsed as Python: {exc}",
            hint=f"check that {path} is a Python source file",
        ) from exc
    functions, others, classes, star = top_level(tree.body)
    if function in functions:
        return read_params(tree, function, path)
    if function in others or (star and function not in classes):
        return None
    if function in classes:
        raise UsageError(
            f"{function!r} in {path} is a class, not a function (commit {short_sha(info.root, info.commit)})",
            hint=f"wrap it in a top-level function, e.g. `def run_{function.lower()}(...)`, and name that",
        )
    choices = ", ".join(functions) if functions else "(none)"
    close = difflib.get_close_matches(function, functions, n=1)
    hint = (
        f"did you mean {close[0]!r}? " if close else ""
    ) + f"name one of them, e.g. '{parse_target(target)[0]}:{(close or functions or ['function'])[0]}'"
    raise UsageError(
        f"{path} at commit {short_sha(info.root, info.commit)} has no top-level function {function!r}; its top-level functions are: {choices}",
        hint=hint,
    )
