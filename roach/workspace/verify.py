"""``roach verify``: every file scoring/interface.md names is here, after a pull."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from roach.workspace.base import Workspace
from roach.workspace.file import WorkspaceError
from roach.workspace.interface import INTERFACE_FILE, Entry, Finding, Need, check_entries, parse_interface


# -- verify -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyResult:
    interface: Path
    entries: tuple[Entry, ...]
    problems: tuple[Finding, ...]  # every missing or invalid required entry (or unmet any-of group), with why
    notes: tuple[str, ...] = ()  # optional entries that are missing or invalid, how any-of groups were met

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(e.path for e in self.entries if e.need is Need.REQUIRED)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.problems)


def required_files(text: str) -> list[str]:
    """The paths ``scoring/interface.md`` requires (``yes`` rows, Primary outputs, roach's Required files)."""
    return [e.path for e in parse_interface(text) if e.need is Need.REQUIRED]


def read_interface(root: Path) -> list[Entry]:
    """The entries of ``root``'s ``scoring/interface.md``; :class:`WorkspaceError` if it is missing or names none."""
    interface = root / INTERFACE_FILE
    try:
        text = interface.read_text()
    except FileNotFoundError:
        raise WorkspaceError(
            f"{interface} is missing: nothing says which files scoring needs",
            hint="NeuriCo's rule maker writes it (a 'Files to produce' table or 'Primary "
            "outputs' bullets); roach also reads a 'Required files' list",
        ) from None
    entries = parse_interface(text, str(interface))
    if not entries:
        raise WorkspaceError(
            f"{interface} names no files",
            hint="list them in a '## Files to produce' table (| Path | Purpose | Required |), "
            "as '## Primary outputs' bullets (- path: `...`) or under '## Required files' "
            "(see docs/remote-workspace.md)",
        )
    return entries


def verify(workspace: Workspace | str | os.PathLike[str]) -> VerifyResult:
    """Check every file ``scoring/interface.md`` names against the local workspace: required ones exist and
    are valid (non-empty; ``.json``/``.jsonl``/``.csv`` parse), each any-of group has a usable member, a
    directory holds something; optional ones are notes. Needs neither the workspace file nor the cluster."""
    root = Path(workspace).resolve() if not isinstance(workspace, Workspace) else workspace.root
    entries = read_interface(root)
    problems, notes = check_entries(root, entries)
    return VerifyResult(root / INTERFACE_FILE, tuple(entries), tuple(problems), tuple(notes))
