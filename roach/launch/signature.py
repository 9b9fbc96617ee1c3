"""The keyword arguments a target function takes, read from its ``def`` in the module's source at the commit
(:mod:`ast`, never an import), and a run's arguments checked against them before anything is queued.

A rank calls the function as ``fn(run, **args)`` where its first parameter asks for the run context (named ``run``
or annotated ``Run``: :func:`roach.runtime.rank.wants_run`), else as ``fn(**args)``. So the arguments a run may
give are the function's parameters that take a keyword, less that first one; ``**kwargs`` takes any. Where the
source does not say what the name is bound to (an assignment, an import, two ``def``\\ s, a decorator that may
change the signature), nothing is checked: the function is given the benefit of the doubt.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Decorators known to keep the function's signature (matched by their last name: torch.no_grad(), functools.cache).
KEEPS_SIGNATURE = frozenset({"no_grad", "inference_mode", "enable_grad", "cache", "lru_cache"})


@dataclass(frozen=True)
class Param:
    """One parameter: its name, its default's source (None: required) and whether it takes a keyword at all."""

    name: str
    default: str | None
    positional_only: bool = False


@dataclass(frozen=True)
class Params:
    """What the function of a target takes, as its ``def`` at the commit says."""

    function: str
    where: str  # "pkg/train.py:12"
    shown: str  # the signature as written, e.g. "train(run, lr, width=64, *, seed=0)"
    run: str | None  # the first parameter, given the run context by roach; None: the function takes none
    params: tuple[Param, ...]  # the others, less *args and **kwargs
    any_keyword: bool  # it has **kwargs

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "where": self.where,
            "shown": self.shown,
            "run": self.run,
            "params": [[p.name, p.default, p.positional_only] for p in self.params],
            "any_keyword": self.any_keyword,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Params:
        params = tuple(Param(str(n), None if x is None else str(x), bool(po)) for n, x, po in d["params"])
        run = d["run"]
        return cls(str(d["function"]), str(d["where"]), str(d["shown"]), run, params, bool(d["any_keyword"]))

    @property
    def keywords(self) -> list[str]:
        return [p.name for p in self.params if not p.positional_only]


def read_params(tree: ast.Module, function: str, path: str) -> Params | None:
    """The parameters of ``function`` as the module ``tree`` defines it, or None where its source does not say."""
    bindings = list(_binders(tree, function))
    defs = [b for b in bindings if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1:
        return None
    fn = defs[0]
    # a star import above the def is rebound by it; any other binding of the name may be what runs
    if any(
        b is not fn and not (isinstance(b, ast.ImportFrom) and _is_star(b) and b.lineno < fn.lineno) for b in bindings
    ):
        return None
    if not all(_decorator_name(d) in KEEPS_SIGNATURE for d in fn.decorator_list):
        return None
    a = fn.args
    ordered = [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs]
    ordered += [a.kwarg] if a.kwarg else []
    if not ordered:
        return Params(function, f"{path}:{fn.lineno}", f"{function}()", None, (), False)
    run = ordered[0] if _asks_for_run(ordered[0], tree) else None
    if run is not None and run in a.kwonlyargs:  # the rank passes it positionally: a call that fails either way
        return None
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [
        Param(p.arg, _source(d), i < len(a.posonlyargs))
        for i, (p, d) in enumerate(zip(positional, defaults))
        if p is not run
    ]
    params += [Param(p.arg, _source(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    shown = f"{function}({_shown(a)})"
    return Params(function, f"{path}:{fn.lineno}", shown, run.arg if run else None, tuple(params), a.kwarg is not None)


def problem(params: Params, runs: Sequence[Mapping[str, Any]], *, grid: bool) -> tuple[str, str, str] | None:
    """What stops the arguments of ``runs`` (one run's, or each grid entry's) from binding to the function, or None:
    (which runs, what, the hint). For a grid, which runs are the entries (counted from 0, as the sweep's runs) that
    fail the first way, and how many fail another way."""
    problems = [(i, p) for i, args in enumerate(runs) if (p := call_problem(params, args)) is not None]
    if not problems:
        return None
    first = problems[0][1]
    if not grid:
        return "", *first
    same = [i for i, p in problems if p == first]
    other = len(problems) - len(same)
    label = f"grid entry {same[0]}" if len(same) == 1 else f"grid entries {_listed(same)}"
    more = f"; {other} other entr{'y is' if other == 1 else 'ies are'} refused too" if other else ""
    return f"{label} of {len(runs)} (counted from 0{more}): ", *first


def call_problem(params: Params, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(message, hint) of what stops ``args`` from binding to the function, or None."""
    takes = f"it is {params.shown} ({params.where})"
    if params.run is not None and params.run in args:
        return (
            f"{params.run!r} is the run context roach passes to {params.function}, not an argument to give; {takes}",
            f"drop {params.run!r} from the arguments",
        )
    keywords = params.keywords
    positional_only = {p.name for p in params.params if p.positional_only}
    unknown = [k for k in args if k not in keywords and not params.any_keyword]
    if unknown:
        named = ", ".join(repr(k) for k in unknown)
        wrong = [k for k in unknown if k in positional_only]
        if wrong:
            return (
                f"{named}: positional-only (before '/') in {params.function}, and roach passes arguments by keyword; "
                f"{takes}",
                f"move {', '.join(wrong)} after the '/' in the def",
            )
        return (
            f"{params.function} takes no argument{'s' if len(unknown) > 1 else ''} {named}; {takes}",
            _did_you_mean(unknown, keywords) + f"its arguments are: {', '.join(keywords) or '(none)'}",
        )
    unreachable = [p.name for p in params.params if p.positional_only and p.default is None]
    if unreachable:
        return (
            f"{params.function}'s parameter{'s' if len(unreachable) > 1 else ''} {', '.join(unreachable)} "
            f"{'are' if len(unreachable) > 1 else 'is'} positional-only (before '/') without a default: roach passes "
            f"arguments by keyword, so no run can give {'them' if len(unreachable) > 1 else 'it'}; {takes}",
            "move it after the '/' in the def, or give it a default",
        )
    missing = [p.name for p in params.params if p.default is None and p.name not in args]
    if missing:
        return (
            f"{params.function} needs argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}, not given; "
            f"{takes}",
            "give " + " ".join(f"--arg {m}=VALUE" for m in missing) + " (Python: args={...}), or a default in the def",
        )
    return None


def _did_you_mean(unknown: list[str], keywords: list[str]) -> str:
    close = {k: m for k in unknown if (m := _closest(k, keywords)) is not None}
    if not close:
        return ""
    if len(unknown) == 1:
        return f"did you mean {next(iter(close.values()))!r}? "
    return "did you mean " + ", ".join(f"{m!r} (for {k!r})" for k, m in close.items()) + "? "


def _closest(key: str, keywords: list[str]) -> str | None:
    """The keyword ``key`` most likely meant: the same but for case, a close spelling (difflib), or one whose
    words' initials it is (``lr`` for ``learning_rate``, and the other way)."""
    same = [p for p in keywords if p.casefold() == key.casefold()]
    close = same or difflib.get_close_matches(key, keywords, n=1)
    if close:
        return close[0]

    def initials(name: str) -> str:
        words = [w for w in name.casefold().split("_") if w]
        return "".join(w[0] for w in words) if len(words) > 1 else ""

    short = [p for p in keywords if initials(key) == p.casefold() or initials(p) == key.casefold()]
    return short[0] if short else None


def _binders(node: ast.AST, name: str) -> Iterator[ast.AST]:
    """Every statement or expression of the module's own scope that binds ``name`` (a star import may)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if child.name == name:
                yield child
            continue  # its body is a scope of its own
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name.split(".")[0]) == name for a in child.names):
                yield child
            continue
        if isinstance(child, ast.Lambda):
            continue
        if isinstance(child, ast.Name) and child.id == name and not isinstance(child.ctx, ast.Load):
            yield child
        elif isinstance(child, ast.ExceptHandler) and child.name == name:
            yield child
        elif isinstance(child, (ast.Global, ast.Nonlocal)) and name in child.names:
            yield child
        yield from _binders(child, name)


def _is_star(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)


def _decorator_name(d: ast.expr) -> str:
    d = d.func if isinstance(d, ast.Call) else d
    return d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else ""


def _asks_for_run(first: ast.arg, tree: ast.Module) -> bool:
    """Does the rank pass the run context to this first parameter (named ``run``, or annotated ``Run``)?"""
    ann = first.annotation
    if first.arg == "run" or (isinstance(ann, ast.Name) and ann.id == "Run"):
        return True
    if isinstance(ann, ast.Constant):
        return ann.value == "Run"
    # x.Run is the class itself, unless annotations are strings ("x.Run" is not "Run")
    return isinstance(ann, ast.Attribute) and ann.attr == "Run" and not _string_annotations(tree)


def _string_annotations(tree: ast.Module) -> bool:
    return any(
        isinstance(s, ast.ImportFrom) and s.module == "__future__" and any(a.name == "annotations" for a in s.names)
        for s in tree.body
    )


def _source(default: ast.expr | None) -> str | None:
    if default is None:
        return None
    text = ast.unparse(default)
    return text if len(text) <= 24 else text[:21] + "..."


def _shown(a: ast.arguments) -> str:
    """The parameter list as written, annotations left out, long defaults shortened."""
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    parts = [p.arg if d is None else f"{p.arg}={_source(d)}" for p, d in zip(positional, defaults)]
    if a.posonlyargs:
        parts.insert(len(a.posonlyargs), "/")
    if a.vararg or a.kwonlyargs:
        parts.append(f"*{a.vararg.arg}" if a.vararg else "*")
    parts += [p.arg if d is None else f"{p.arg}={_source(d)}" for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        parts.append(f"**{a.kwarg.arg}")
    return ", ".join(parts)


def _listed(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:10])
    return shown + (f" and {len(indices) - 10} more" if len(indices) > 10 else "")
