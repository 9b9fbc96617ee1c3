"""``scoring/interface.md``: which files scoring needs, in the shapes NeuriCo's runtime writes, and checking them.

Three shapes are read (pure text in, entries out), each under its own heading (any level, up to the next
heading of the same or a higher level; fenced blocks are skipped):

1. ``## Files to produce`` (scoring mode): a table whose header has ``Path`` and ``Required`` columns; one
   backticked workspace-relative path per row. Required is ``yes`` (must exist), ``no`` or ``recommended``
   (optional), or ``any-of:<group>`` (one existing member of the group suffices; a group has two or more rows).
2. ``## Primary outputs`` (bootstrap mode): bullets ``- path: `results/metrics.json```, with nested
   ``format:`` and ``shape:`` lines; every listed path is required.
3. ``## Required files`` (roach's own): every backticked span without a space is a required path; a glob
   must match, a path ending in ``/`` must be a directory.

A path ending in ``/`` is a directory (it must exist and hold something). Other backticked words (field
names, function names, the producer API) are not paths. In shapes 1 and 2 a glob, an absolute path, ``..``
or a URL in a path cell is an error naming the line. A required file must be non-empty and, by its format
(``format:``, else its extension), ``.json`` must parse, ``.jsonl`` every line, ``.csv`` as CSV.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from roach.workspace.file import WorkspaceError

INTERFACE_FILE = "scoring/interface.md"

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SPAN = re.compile(r"`([^`]+)`")
_PATH_BULLET = re.compile(r"^\s*[-*+]\s+(?:\*\*)?path(?:\*\*)?\s*:\s*(?P<rest>.*)$", re.IGNORECASE)
_FORMAT_LINE = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*)?format(?:\*\*)?\s*:\s*`?(?P<fmt>[A-Za-z0-9_+-]+)", re.IGNORECASE)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^(?:mailto|data|file):", re.IGNORECASE)
_CHECKED_FORMATS = ("json", "jsonl", "csv")


class InterfaceError(WorkspaceError):
    """scoring/interface.md cannot be read as a list of files (a bad row, an unknown Required value)."""


class Need(Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"
    ANY_OF = "any-of"


@dataclass(frozen=True)
class Entry:
    """One file or directory the interface names."""

    path: str  # workspace-relative; a directory ends in "/"
    need: Need
    line: int  # 1-based line in interface.md
    group: str | None = None  # for any-of
    format: str | None = None  # bootstrap mode's format: line
    label: str = ""  # the Required cell as written (e.g. "recommended")

    @property
    def is_dir(self) -> bool:
        return self.path.endswith("/")

    @property
    def is_glob(self) -> bool:
        return any(ch in self.path for ch in "*?[")


def _sections(text: str):
    """Yield (heading text, [(line number, line)]) for every heading's own lines (subheadings included)."""
    stack: list[tuple[int, str, list]] = []  # open headings: (level, text, lines)
    out: list[tuple[str, list]] = []
    fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        m = _HEADING.match(line)
        if m:
            depth = len(m[1])
            while stack and stack[-1][0] >= depth:
                stack.pop()
            lines: list = []
            stack.append((depth, m[2], lines))
            out.append((m[2], lines))
            for _, _, outer in stack[:-1]:
                outer.append((n, line))
            continue
        for _, _, lines in stack:
            lines.append((n, line))
    return out


def _kind(heading: str) -> str | None:
    h = heading.lower()
    if re.search(r"files\s+to\s+produce", h):
        return "table"
    if re.search(r"primary\s+outputs?", h):
        return "bullets"
    if re.search(r"required\s+files", h):
        return "list"
    return None


def check_path(path: str, where: str) -> str:
    """A workspace-relative path from a path cell; an error naming ``where`` for a glob, an absolute path,
    ``..``, ``~``, a URL or whitespace."""
    problem = None
    if not path:
        problem = "is empty"
    elif _URL.search(path):
        problem = "is a URL, not a workspace path"
    elif path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", path):
        problem = "is absolute; paths are relative to the workspace root"
    elif ".." in re.split(r"[\\/]", path):
        problem = "holds '..'; paths stay inside the workspace"
    elif any(ch in path for ch in "*?[]{}"):
        problem = "is a glob; name each file (or its directory, ending in '/')"
    elif any(ch.isspace() for ch in path) or "\0" in path:
        problem = "holds whitespace"
    if problem:
        raise InterfaceError(
            f"{where}: path {path!r} {problem}",
            hint="each path cell names one file or directory relative to the workspace root",
        )
    return path.removeprefix("./")


def _cells(line: str) -> list[str]:
    body = line.strip().strip("|")
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _need(cell: str, where: str) -> tuple[Need, str | None]:
    value = cell.strip().strip("*_`").strip().lower()
    if value in ("yes", "required", "true", "y"):
        return Need.REQUIRED, None
    if value in ("no", "optional", "recommended", "false", "n"):
        return Need.OPTIONAL, None
    m = re.fullmatch(r"any[-_ ]?of\s*:\s*([A-Za-z0-9._-]+)", value)
    if m:
        return Need.ANY_OF, m[1]
    raise InterfaceError(
        f"{where}: Required is {cell.strip()!r}", hint="Required is yes, no, recommended or any-of:<group>"
    )


def _table(lines: Sequence[tuple[int, str]], where: str) -> list[Entry]:
    entries: list[Entry] = []
    header: list[str] | None = None
    for n, line in lines:
        if not line.strip().startswith("|"):
            if line.strip():
                header = None  # a table ended; a later one brings its own header
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower().strip("*_ ") for c in cells]
            continue
        if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue
        if "path" not in header:
            continue
        row = f"{where} line {n}"
        pcell = cells[header.index("path")] if header.index("path") < len(cells) else ""
        spans = _SPAN.findall(pcell)
        if len(spans) != 1:
            raise InterfaceError(
                f"{row}: the Path cell {pcell!r} must hold one backticked path",
                hint="write it as `relative/path` (a directory ends in /)",
            )
        path = check_path(spans[0].strip(), row)
        if "required" in header and header.index("required") < len(cells):
            need, group = _need(cells[header.index("required")], row)
            label = cells[header.index("required")].strip()
        else:
            need, group, label = Need.REQUIRED, None, ""
        entries.append(Entry(path, need, n, group, label=label))
    return entries


def _bullets(lines: Sequence[tuple[int, str]], where: str) -> list[Entry]:
    entries: list[Entry] = []
    for n, line in lines:
        m = _PATH_BULLET.match(line)
        if m:
            row = f"{where} line {n}"
            spans = _SPAN.findall(m["rest"])
            raw = spans[0] if spans else m["rest"].strip().split(" ")[0] if m["rest"].strip() else ""
            entries.append(Entry(check_path(raw.strip(), row), Need.REQUIRED, n))
            continue
        f = _FORMAT_LINE.match(line)
        if f and entries and entries[-1].format is None:
            last = entries[-1]
            entries[-1] = Entry(last.path, last.need, last.line, format=f["fmt"].lower())
    return entries


def _list(lines: Sequence[tuple[int, str]]) -> list[Entry]:
    return [Entry(s, Need.REQUIRED, n) for n, line in lines for s in _SPAN.findall(line) if " " not in s]


def parse_interface(text: str, where: str = INTERFACE_FILE) -> list[Entry]:
    """The files ``text`` names, in order, each path once (its first row wins)."""
    found: list[Entry] = []
    for heading, lines in _sections(text):
        kind = _kind(heading)
        if kind == "table":
            found += _table(lines, where)
        elif kind == "bullets":
            found += _bullets(lines, where)
        elif kind == "list":
            found += _list(lines)
    seen: dict[str, Entry] = {}
    for e in found:
        seen.setdefault(e.path, e)
    entries = list(seen.values())
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        if e.need is Need.ANY_OF:
            groups.setdefault(e.group or "", []).append(e)
    for name, members in groups.items():
        if len(members) < 2:
            raise InterfaceError(
                f"{where} line {members[0].line}: any-of:{name} has only one row ({members[0].path})",
                hint="a group has two or more rows; for one file say yes",
            )
    return entries


def problem(root: Path, entry: Entry) -> str | None:
    """Why ``entry`` is not usable in the workspace at ``root`` (None: it is)."""
    if entry.is_glob:  # roach's own list only
        return None if glob.glob(entry.path, root_dir=root) else "matches nothing"
    p = root / entry.path
    if not p.exists():
        return "missing"
    if entry.is_dir:
        if not p.is_dir():
            return "is not a directory"
        return None if any(p.iterdir()) else "is an empty directory"
    if p.is_dir():
        return "is a directory, not a file"
    if p.stat().st_size == 0:
        return "is empty"
    fmt = entry.format if entry.format in _CHECKED_FORMATS else p.suffix.lower().lstrip(".")
    if fmt not in _CHECKED_FORMATS:
        return None
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read as UTF-8 text ({exc})"
    return _format_problem(text, fmt)


def _format_problem(text: str, fmt: str) -> str | None:
    if fmt == "json":
        try:
            json.loads(text)
        except ValueError as exc:
            return f"is not valid JSON ({exc})"
    elif fmt == "jsonl":
        lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        if not lines:
            return "holds no JSON lines"
        for n, ln in lines:
            try:
                json.loads(ln)
            except ValueError as exc:
                return f"line {n} is not valid JSON ({exc})"
    elif fmt == "csv":
        try:
            rows = [r for r in csv.reader(io.StringIO(text), strict=True) if r]
        except csv.Error as exc:
            return f"is not valid CSV ({exc})"
        if not rows:
            return "holds no CSV rows"
        for n, row in enumerate(rows[1:], 2):
            if len(row) != len(rows[0]):
                return f"CSV row {n} has {len(row)} fields, the header has {len(rows[0])}"
    return None


@dataclass(frozen=True)
class Finding:
    """A missing or invalid entry (``path`` is ``any-of:<group>`` for a group none of whose members is usable)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def check_entries(root: Path, entries: Sequence[Entry]) -> tuple[list[Finding], list[str]]:
    """The problems (required entries, unmet groups) and the notes (optional entries, other members)."""
    problems: list[Finding] = []
    notes: list[str] = []
    groups: dict[str, list[tuple[Entry, str | None]]] = {}
    for e in entries:
        why = problem(root, e)
        if e.need is Need.REQUIRED and why:
            problems.append(Finding(e.path, why))
        elif e.need is Need.OPTIONAL and why:
            notes.append(f"{e.path} ({e.label or 'optional'}) {why}")
        elif e.need is Need.ANY_OF:
            groups.setdefault(e.group or "", []).append((e, why))
    for name, members in groups.items():
        ok = [e.path for e, why in members if why is None]
        if not ok:
            problems.append(
                Finding(f"any-of:{name}", "none usable: " + "; ".join(f"{e.path} {why}" for e, why in members))
            )
        else:
            rest = [f"{e.path} {why}" for e, why in members if why]
            notes.append(f"any-of:{name} met by {', '.join(ok)}" + (f" ({'; '.join(rest)})" if rest else ""))
    return problems, notes
