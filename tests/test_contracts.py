"""The import contracts in pyproject.toml ([tool.importlinter]) hold: a layering violation fails the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import roach
from tests.module_lengths import long_modules

REPO = Path(__file__).resolve().parent.parent
# What the runtime may import besides itself (the stdlib and torch aside).
RUNTIME_MAY_IMPORT = {"roach.runtime", "roach.errors", "roach._fs", "roach.model"}


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is not installed: make venv installs the test extras (import-linter)")
    r = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_the_runtime_contract_forbids_every_other_part_of_roach():
    """A new module of roach is forbidden to the runtime too: the contract lists them all."""
    (runtime,) = [c for c in _contracts() if c.get("source_modules") == ["roach.runtime"]]
    package = Path(roach.__file__).parent
    tops = {f"roach.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    tops |= {f"roach.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert set(runtime["forbidden_modules"]) == tops - RUNTIME_MAY_IMPORT


def test_the_layers_contract_orders_every_package():
    """Each package of roach is in the layers contract (a new one must be given its place), but for the entry
    points: ``roach.slurm`` (the public facade, which imports nothing at its top) and ``roach.__main__``."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.split("|")}
    package = Path(roach.__file__).parent
    tops = {f"roach.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    tops |= {f"roach.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert tops - named == {"roach.slurm", "roach.__main__"}
    assert "roach.slurm.clusters" in named  # the site modules: the seeds' path, the clusters' layer


# The imports allowed inside a function: torch stays unimported until a run asks for DDP, and http.client (with
# the email package it loads) until a REST cluster sends a request, off every other command's start; zipfile and
# pickletools (7 ms) until a resumed rank reads its checkpoint's modules, off every rank's start; slurmrestd's
# client until a REST cluster's is made, a holder's attempts and steps until a listing holds some, and difflib
# until a name is not known, off `roach ls` (tests/test_cli_imports.py). Off it too: tomllib until a clusters.toml
# exists, the watch log until a watch reads or writes it, the job.json writer and the error line's reader until
# an end is recorded, the reasons' table until a reason is asked what it means, and the lab's namespaces until
# `roach lab` makes them: 4-11M instructions each, 45M of `roach ls`'s 513M (valgrind), most of it dataclasses built.
LAZY_IMPORTS = {
    ("roach/runtime/context.py", "roach.runtime.ddp"),
    ("roach/scheduler/rest/request.py", "http.client"),
    ("roach/runtime/checkpoint.py", "pickletools"),
    ("roach/runtime/checkpoint.py", "zipfile"),
    ("roach/fleet/cluster.py", "roach.scheduler.rest.client"),
    ("roach/fleet/cluster.py", "roach.scheduler.rest.request"),
    ("roach/fleet/cluster.py", "roach.scheduler.rest.token"),
    ("roach/fleet/cluster.py", "difflib"),
    ("roach/launch/job_view.py", "roach.launch.hold.attempts"),
    ("roach/launch/job_view.py", "roach.launch.hold.steps"),
    ("roach/fleet/userconfig.py", "tomllib"),
    ("roach/records/store.py", "roach.records.watch_log"),
    ("roach/records/job_end.py", "roach.records.error_line"),
    ("roach/records/job_end.py", "roach.records.job_json_end"),
    ("roach/model/states.py", "roach.model.reason_rules"),
    ("roach/model/states.py", "roach.model.reason_table"),
    ("roach/lab/config.py", "roach.lab.hosts"),
    ("roach/scheduler/client.py", "roach.scheduler.parse_control"),
    ("roach/scheduler/client.py", "roach.scheduler.capabilities"),
    ("roach/scheduler/client.py", "roach.scheduler.accounting"),
    ("roach/launch/job_view.py", "roach.records.workspace_job"),
}


# Imported inside a function only to keep a heavy optional dependency lazy (the extras torch, mcp and plot's matplotlib).
OPTIONAL = ("torch", "mcp", "matplotlib")


def test_no_module_imports_inside_a_function():
    """Imports inside functions hid three cycles; a module's dependencies are its top lines (roach's, the
    standard library's and rich alike), the optional extras aside."""
    import ast

    package = Path(roach.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package.parent))
        for fn in ast.walk(ast.parse(path.read_text(), rel)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                found += [
                    f"{rel}:{node.lineno} {n}"
                    for n in names
                    if n.split(".")[0] not in OPTIONAL and (rel, n) not in LAZY_IMPORTS
                ]
    assert found == []


def test_no_module_imports_a_private_name_of_another():
    """A leading underscore means "this module's own": another module reaching for it is a hidden coupling."""
    import ast

    package = Path(roach.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roach"):
                found += [
                    f"{path.relative_to(package.parent)}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_tests_share_helpers_through_support_modules_never_through_other_tests():
    """A test module importing another runs that module's tests' imports and fixtures in its own: shared helpers
    live in tests/support/ (or conftest.py)."""
    import ast

    found = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if ".test_" in f".{n}"]
    assert found == []


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed: make venv installs the test extras ({name})")
    return path


def test_ruff_lint_and_format_are_clean():
    """pyproject.toml's [tool.ruff]: the lint rules, and the formatter's form of every file."""
    for argv in (["check", "roach", "tests", "bench"], ["format", "--check", "roach", "tests", "bench"]):
        r = subprocess.run([_tool("ruff"), *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"ruff {' '.join(argv)}:\n{r.stdout[-4000:]}{r.stderr[-2000:]}"


def test_mypy_is_clean_on_the_package():
    r = subprocess.run([_tool("mypy")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_the_length_report_lists_long_modules_without_failing(tmp_path):
    """``make lint`` lists the modules over 400 lines (tests/module_lengths.py); a long module is not an error."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 401)
    assert long_modules(tmp_path / "pkg") == {"pkg/long.py": 401}


def test_make_lint_prints_the_length_report():
    assert "$(VENV)/bin/python -m tests.module_lengths" in (REPO / "Makefile").read_text()


def _roach_imports(tree) -> tuple[set[str], set[str]]:
    """A module's roach imports at its top: (those it runs, those only under ``if TYPE_CHECKING:``)."""
    import ast

    runs, typing_only = set(), set()
    for node in tree.body:
        typed = isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for sub in node.body if typed else [node]:
            if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("roach"):
                (typing_only if typed else runs).add(sub.module or "")
            elif isinstance(sub, ast.Import):
                (typing_only if typed else runs).update(a.name for a in sub.names if a.name.startswith("roach"))
    return runs, typing_only


def test_no_type_only_import_hides_a_cycle():
    """A module that imports another only for its types, while that one imports it, is a cycle the
    contracts do not see: the lower module names what it needs as a Protocol of its own."""
    import ast

    package = Path(roach.__file__).parent
    graph = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = _roach_imports(ast.parse(path.read_text(), str(path)))
    found = sorted(
        f"{a} -> {b} (type-only) -> {a}"
        for a, (_, typed) in graph.items()
        for b in typed
        if a in graph.get(b, (set(), set()))[0] and not b.startswith(a + ".")  # a package's own modules
    )
    assert found == []
