"""scoring/interface.md in the shapes NeuriCo's rule makers write (pure): what is a path, what must be valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.workspace.backend import verify
from roach.workspace.interface import InterfaceError, Need, parse_interface

# Scoring mode, as the rule maker's template has it: the table, then entry points full of backticked words.
SCORING = """# Artifact Protocol

The experiment_runner must produce the artifacts below. Conform exactly to
paths, signatures, and schemas.

## Files to produce

| Path | Purpose | Required |
|---|---|---|
| `src/solution.py` | Module exposing the callable being measured | yes |
| `results/metrics.json` | Final metrics (`accuracy`, `f1`) | yes |
| `results/predictions.csv` | One row per `id` | **yes** |
| `figures/` | Plots | yes |
| `logs/train.log` | Training log | no |
| `REPORT.md` | Write-up | recommended |

## Entry points

### `src/solution.py`

Must define a top-level function:

```python
def lcs(s1: str, s2: str) -> int:
    \"\"\"`not/a/path.txt` inside a fence.\"\"\"
```

- `s1`, `s2`: ASCII strings. Returns `int`.
- Must be importable via `importlib.util`.

## What is measured (context only — do not tune)

- **accuracy** (direction: max), read from `results/metrics.json` field `accuracy`.
"""

ANY_OF = """# Artifact Protocol

## Files to produce

| Path | Purpose | Required |
|------|---------|----------|
| `results/task_0.json` | task 0 | yes |
| `results/task_1.json` | task 1 | yes |
| `results/task_2.json` | task 2 | yes |
| `checkpoints/model.pt` | weights (torch) | any-of:weights |
| `checkpoints/model.safetensors` | weights (safetensors) | any-of:weights |
| `results/summary.jsonl` | per-example records | no |
"""

# Bootstrap mode, as the bootstrap rule maker's template asks: path, format and shape per output.
BOOTSTRAP = """# Artifact Protocol

## Primary outputs

- path: `results/metrics.json`
  - format: json
  - shape: object with keys `accuracy` (float), `n` (int)
- path: `results/predictions.jsonl`
  format: jsonl
  shape: one object per line with `id`, `label`
- **path**: `results/table.csv`
  - format: `csv`
  - shape: columns `id`, `score`

## Producer API

- file: `src/run.py`
- functions: `main`, `evaluate`

## Invocation contract for the scorer

scoring/eval.py reads `results/metrics.json` and writes `scoring/results.json`.
"""


def _ws(tmp_path: Path, text: str) -> Path:
    (tmp_path / "scoring").mkdir(exist_ok=True)
    (tmp_path / "scoring" / "interface.md").write_text(text)
    return tmp_path


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_scoring_table_rows_and_only_them_are_paths():
    entries = parse_interface(SCORING)
    assert [(e.path, e.need, e.label) for e in entries] == [
        ("src/solution.py", Need.REQUIRED, "yes"),
        ("results/metrics.json", Need.REQUIRED, "yes"),
        ("results/predictions.csv", Need.REQUIRED, "**yes**"),
        ("figures/", Need.REQUIRED, "yes"),
        ("logs/train.log", Need.OPTIONAL, "no"),
        ("REPORT.md", Need.OPTIONAL, "recommended"),
    ]
    assert entries[3].is_dir and entries[0].line == 10


def test_any_of_groups_and_bootstrap_bullets_with_their_formats():
    groups = {e.path: e.group for e in parse_interface(ANY_OF) if e.need is Need.ANY_OF}
    assert groups == {"checkpoints/model.pt": "weights", "checkpoints/model.safetensors": "weights"}
    boot = parse_interface(BOOTSTRAP)
    assert [(e.path, e.need, e.format) for e in boot] == [
        ("results/metrics.json", Need.REQUIRED, "json"),
        ("results/predictions.jsonl", Need.REQUIRED, "jsonl"),
        ("results/table.csv", Need.REQUIRED, "csv"),
    ]  # the producer API's files and field names are not outputs


@pytest.mark.parametrize(
    "cell,why",
    [
        ("`results/*.json`", "is a glob"),
        ("`/abs/metrics.json`", "is absolute"),
        ("`../outside.json`", "holds '..'"),
        ("`https://example.org/m.json`", "is a URL"),
        ("`~/m.json`", "is absolute"),
        ("`a b.json`", "holds whitespace"),
        ("results/metrics.json", "must hold one backticked path"),
    ],
)
def test_a_bad_path_cell_is_an_error_naming_the_row(cell, why):
    text = f"## Files to produce\n\n| Path | Purpose | Required |\n|---|---|---|\n| `ok.txt` | x | yes |\n| {cell} | x | yes |\n"
    with pytest.raises(InterfaceError, match=why) as exc:
        parse_interface(text, "scoring/interface.md")
    assert "scoring/interface.md line 6" in exc.value.message and exc.value.exit_code == 7
    with pytest.raises(InterfaceError, match="line 3: path 'https://x.org/a.json' is a URL"):
        parse_interface("## Primary outputs\n\n- path: `https://x.org/a.json`\n")


def test_unknown_required_values_and_lonely_groups_are_errors():
    head = "## Files to produce\n| Path | Purpose | Required |\n|---|---|---|\n"
    with pytest.raises(InterfaceError, match="line 4: Required is 'maybe'") as exc:
        parse_interface(head + "| `a.txt` | x | maybe |\n")
    assert "any-of:<group>" in exc.value.hint
    with pytest.raises(InterfaceError, match="any-of:w has only one row"):
        parse_interface(head + "| `a.txt` | x | any-of:w |\n| `b.txt` | x | yes |\n")


def test_verify_passes_complete_scoring_outputs_and_notes_optional_ones(tmp_path):
    root = _ws(tmp_path, SCORING)
    _write(
        root,
        {
            "src/solution.py": "def lcs(a, b): return 0\n",
            "results/metrics.json": '{"accuracy": 0.9}',
            "results/predictions.csv": "id,label\n1,a\n2,b\n",
            "figures/loss.png": "png",
        },
    )
    res = verify(root)
    assert res.ok and res.problems == ()
    assert res.notes == ("logs/train.log (no) missing", "REPORT.md (recommended) missing")


def test_verify_reports_every_missing_or_invalid_required_file_with_why(tmp_path):
    root = _ws(tmp_path, SCORING)
    (root / "figures").mkdir()
    _write(
        root,
        {
            "src/solution.py": "",
            "results/metrics.json": '{"accuracy": 0.9',
            "results/predictions.csv": 'id,label\n1,"a\n',
        },
    )
    got = {f.path: f.reason for f in verify(root).problems}
    assert got["src/solution.py"] == "is empty"
    assert got["results/metrics.json"].startswith("is not valid JSON")
    assert got["results/predictions.csv"].startswith("is not valid CSV")
    assert got["figures/"] == "is an empty directory"
    _write(root, {"results/predictions.csv": "id,label\n1,a,extra\n"})
    assert {f.path: f.reason for f in verify(root).problems}[
        "results/predictions.csv"
    ] == "CSV row 2 has 3 fields, the header has 2"


def test_any_of_one_member_suffices_none_is_a_problem_naming_them(tmp_path):
    root = _ws(tmp_path, ANY_OF)
    _write(root, {f"results/task_{i}.json": "{}" for i in range(3)})
    (res,) = verify(root).problems
    assert res.path == "any-of:weights"
    assert res.reason == "none usable: checkpoints/model.pt missing; checkpoints/model.safetensors missing"
    _write(root, {"checkpoints/model.safetensors": "weights"})
    ok = verify(root)
    assert ok.ok and "any-of:weights met by checkpoints/model.safetensors (checkpoints/model.pt missing)" in ok.notes


def test_bootstrap_formats_are_checked_line_by_line(tmp_path):
    root = _ws(tmp_path, BOOTSTRAP)
    _write(
        root,
        {
            "results/metrics.json": '{"accuracy": 0.5, "n": 2}',
            "results/predictions.jsonl": '{"id": 1, "label": "a"}\n\n{"id": 2, label}\n',
            "results/table.csv": "id,score\n1,0.5\n",
        },
    )
    (bad,) = verify(root).problems
    assert (bad.path, bad.reason.split(" (")[0]) == ("results/predictions.jsonl", "line 3 is not valid JSON")
    _write(root, {"results/predictions.jsonl": '{"id": 1, "label": "a"}\n{"id": 2, "label": "b"}\n'})
    assert verify(root).ok
    (root / "results" / "table.csv").unlink()
    assert verify(root).missing == ("results/table.csv",)


def test_an_interface_naming_nothing_is_an_error(tmp_path):
    from roach.workspace.file import WorkspaceError

    root = _ws(tmp_path, "# Artifact Protocol\n\nUse `src/solution.py` somehow.\n")
    with pytest.raises(WorkspaceError, match="names no files"):
        verify(root)
