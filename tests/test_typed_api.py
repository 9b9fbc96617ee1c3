"""roach's public API as a type checker reads it from a user's project: ``py.typed`` ships, the options of
``submit``, ``sweep``, ``resume``, ``dry_run`` and ``Holder.submit`` are typed keywords (``SubmitFields``, kept
equal to ``Options``), and an attempt started inside a holder is typed ``InsideJob``.

The mypy tests check scripts the way a user's project checks them, with roach found as an installed package:
mypy reads an installed package only when it carries ``py.typed``. The suite's venv installs roach editable
through setuptools' import hook (a ``.pth`` that runs code), which mypy cannot follow, and ``MYPYPATH`` would read
roach as the user's own source whether or not it is typed; so the test makes a bare venv whose site directory
holds a plain ``.pth`` naming this source tree (then the suite's site-packages, for click and rich), and points
mypy at that venv's python from a directory outside the package.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from roach.launch.options import Options, SubmitFields

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", REPO / "roach" / "slurm" / "README.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_LINE = re.compile(r"^(?P<file>[\w.]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")

# Each line marked `# error: TEXT` must be an error whose message has TEXT; every other line must pass.
MISTAKES = """\
from roach.slurm import InsideJob, hold, resume, submit, sweep
from roach.slurm.clusters.lab import GPU1, LAB

job = submit("pkg.mod:fn", args={"lr": 1}, resoruces=GPU1, cluster=LAB, log_root=3)  # error: "resoruces"
submit("pkg.mod:fn", args={"lr": 1}, resources=GPU1, cluster=LAB, log_root=3)  # error: No overload variant
submit("pkg.mod:fn", resources=GPU1, force=True)  # error: No overload variant
attempt: InsideJob = submit("pkg.mod:fn", resources=GPU1)  # error: Incompatible types in assignment
sweep("pkg.mod:fn", [{"lr": 1}], resources=GPU1, clone_root=None)  # error: Argument "clone_root" to "sweep"
resume("run-1", checkpoint_every="10")  # error: Argument "checkpoint_every" to "resume"
hold(GPU1, cluster=LAB).submit("pkg.mod:fn", python_env=3)  # error: Argument "python_env" to "submit"
"""

# Each line marked `# revealed: TYPE` must reveal that type: what each entry point returns, and its wait().
REVEALED = """\
from roach.slurm import Options, hold, resume, submit, sweep
from roach.slurm.clusters.lab import GPU1, LAB

job = submit("pkg.mod:fn", {"lr": 1}, resources=GPU1, cluster=LAB)
reveal_type(job)  # revealed: roach.launch.job.Job
reveal_type(job.wait())  # revealed: roach.scheduler.parse.AcctRecord
attempt = submit("pkg.mod:fn", {"lr": 1}, Options(resources=GPU1, cluster=LAB), inside=123, force=True)
reveal_type(attempt)  # revealed: roach.launch.hold.holder.InsideJob
reveal_type(attempt.wait())  # revealed: roach.launch.hold.attempts.AttemptExit
reveal_type(hold(GPU1, cluster=LAB).submit("pkg.mod:fn", wait_holder_s=60))  # revealed: roach.launch.hold.holder.InsideJob
reveal_type(resume("run-1", resources="GPU2"))  # revealed: roach.launch.job.Job
reveal_type(sweep("pkg.mod:fn", [{"lr": 1}], resources=GPU1).results())  # revealed: list[Any]
"""


def test_submit_fields_are_the_options_fields_with_their_types():
    options = {f.name: f.type for f in fields(Options)}
    assert list(SubmitFields.__annotations__) == list(options)
    assert typing.get_type_hints(SubmitFields) == typing.get_type_hints(Options)


def test_every_submit_field_may_be_left_out():
    """``options=`` may carry any of them, so none is required as a keyword (``resources`` is checked when the call
    runs)."""
    assert SubmitFields.__required_keys__ == frozenset()


def test_the_options_table_of_roach_slurm_readme_names_every_field_in_order():
    section = DOCS[1].read_text().split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == [f.name for f in fields(Options)]


def test_py_typed_ships_in_the_package():
    assert (REPO / "roach" / "py.typed").is_file()


def _examples() -> dict[str, str]:
    """The documented Python examples that use roach, one script each (blocks without a roach import are
    fragments of a user's function)."""
    found = {}
    for doc in DOCS:
        for i, block in enumerate(_BLOCK.findall(doc.read_text())):
            if re.search(r"^(from|import) roach", block, re.M):
                found[f"{doc.relative_to(REPO).with_suffix('')}_{i}.py".replace("/", "_").lower()] = block
    return found


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, list[tuple[int, str, str]]]:
    """``mypy --strict`` over the examples, MISTAKES and REVEALED, as a user's project runs it: each file's
    (line, error or note, text)."""
    tmp = tmp_path_factory.mktemp("typed")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    python = tmp / "venv" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "roach_source.pth").write_text(f"{REPO}\n{sysconfig.get_path('purelib')}\n")
    scripts = {**_examples(), "mistakes.py": MISTAKES, "revealed.py": REVEALED}
    for name, text in scripts.items():
        (tmp / name).write_text(text)
    (tmp / "mypy.ini").write_text("[mypy]\nstrict = True\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    argv = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--python-executable", str(python)]
    argv += ["--cache-dir", str(tmp / "cache"), "--no-error-summary", "--hide-error-context", *scripts]
    r = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    out: dict[str, list[tuple[int, str, str]]] = {name: [] for name in scripts}
    for line in r.stdout.splitlines():
        m = _LINE.match(line)
        assert m is not None or line.startswith(" "), f"mypy said: {line}\n{r.stderr}"
        if m is not None:
            out[m["file"]].append((int(m["line"]), m["kind"], m["text"]))
    return out


def _marked(text: str, mark: str) -> dict[int, str]:
    return {n: ln.split(f"# {mark}: ", 1)[1] for n, ln in enumerate(text.splitlines(), 1) if f"# {mark}: " in ln}


def test_the_documented_examples_pass_mypy_strict(checked):
    examples = _examples()
    assert "readme_0.py" in examples, "README.md's example was not found"
    assert "roach_slurm_readme_0.py" in examples, "roach/slurm/README.md's example was not found"
    for name in examples:
        assert [e for e in checked[name] if e[1] == "error"] == [], name


def test_a_misspelled_option_or_a_wrong_type_is_a_mypy_error(checked):
    errors: dict[int, list[str]] = {}
    for line, kind, text in checked["mistakes.py"]:
        if kind == "error":
            errors.setdefault(line, []).append(text)
    expected = _marked(MISTAKES, "error")
    assert sorted(errors) == sorted(expected)
    for line, words in expected.items():
        assert any(words in text for text in errors[line]), (line, errors[line])


def test_each_entry_point_returns_what_it_started(checked):
    revealed = {line: text for line, kind, text in checked["revealed.py"] if kind == "note"}
    assert [e for e in checked["revealed.py"] if e[1] == "error"] == []
    for line, type_name in _marked(REVEALED, "revealed").items():
        assert revealed.get(line) == f'Revealed type is "{type_name}"'
