"""The one convention of every ``--json`` output: each record carries ``"schema": "roach.NAME/VERSION"`` first.

A record is a top-level object (``roach status``), each element of a top-level array (``roach ls``), or each
line of ``roach watch --json``. The version rises only when a field is removed, renamed or changes its type
or meaning; an added field keeps it (docs/json.md). The JSON Schemas are :mod:`roach.cli.schemas`; this module
stays small so that every command may stamp its output without loading them.
"""

from __future__ import annotations

from typing import Any

from roach.ops.event_schema import EVENT_SCHEMA

#: Each record's schema name and its version. The watch's events are stamped below the CLI (``Event.to_json``).
VERSIONS: dict[str, int] = {
    "job": 2,  # 2: an attempt's job_id is its holder's (docs/json.md, "Changes")
    "cancel": 2,
    "sweep": 1,
    "dry_run": 1,
    "sweep_dry_run": 1,
    "event": int(EVENT_SCHEMA.rsplit("/", 1)[1]),
    "why": 1,
    "top": 1,
    "promote": 1,
    "move": 1,
    "hold": 1,
    "steps": 1,
    "signal": 1,
    "release": 1,
    "clusters": 1,
    "cluster": 1,
    "discover": 1,
    "plan": 1,
    "clean": 1,
    "grant": 1,
    "report": 1,
    "clone": 1,
    "doctor": 1,
    "sync": 1,
    "sbatch": 1,
    "wait": 1,
    "pull": 1,
    "verify": 1,
    "lab.status": 1,
    "lab.load": 1,
}

#: Each command with ``--json`` (its path, as typed after ``roach``): its record's schema, and whether it
#: prints an array of them (``True``) or one object; ``watch`` prints one object per line.
COMMANDS: dict[str, tuple[str, bool]] = {
    "submit": ("job", False),
    "resume": ("job", False),
    "status": ("job", False),
    "ls": ("job", True),
    "cancel": ("cancel", False),
    "sweep": ("sweep", False),
    "watch": ("event", False),
    "why": ("why", False),
    "top": ("top", False),
    "promote": ("promote", False),
    "move": ("move", False),
    "hold": ("hold", False),
    "steps": ("steps", False),
    "signal": ("signal", False),
    "release": ("release", False),
    "clusters": ("clusters", True),
    "clusters show": ("cluster", False),
    "clusters discover": ("discover", False),
    "plan": ("plan", False),
    "clean": ("clean", True),
    "grant": ("grant", False),
    "report": ("report", False),
    "clones": ("clone", True),
    "clones prune": ("clone", True),
    "doctor": ("doctor", False),
    "sync": ("sync", False),
    "sbatch": ("sbatch", False),
    "wait": ("wait", False),
    "pull": ("pull", False),
    "verify": ("verify", False),
    "lab status": ("lab.status", False),
    "lab load status": ("lab.load", False),
}


#: A command with a flag that makes it print another record instead (as ``COMMANDS``).
VARIANTS: dict[str, tuple[str, bool]] = {
    "submit --dry-run": ("dry_run", False),
    "sweep --dry-run": ("sweep_dry_run", False),
    "grant --list": ("grant", True),
}


def schema_id(name: str) -> str:
    """``roach.job/1``: the value of the ``schema`` field of a record of schema ``name``."""
    return f"roach.{name}/{VERSIONS[name]}"


def stamp(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``schema`` field first (a ``schema`` key already in ``data`` is replaced)."""
    return {"schema": schema_id(name), **{k: v for k, v in data.items() if k != "schema"}}
