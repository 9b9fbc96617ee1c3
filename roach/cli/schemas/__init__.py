"""The JSON Schemas (draft 2020-12) of every ``--json`` record roach prints, shipped with the package.

``SCHEMAS`` holds one schema per record name (``job``, ``event``, ...): the record a ``schema`` field names,
``roach.NAME/VERSION``. :func:`output_schema` is the schema of what one command prints (an array of records for
``ls``, ``clusters``, ``clean``, ``clones``). The shipped schemas leave objects open: a field added later keeps the
version, and a consumer ignores fields it does not know (docs/json.md). ``python -m roach.cli.schemas NAME``
prints one; ``python -m roach.cli.schemas --doc`` prints docs/json.md's reference.
"""

from __future__ import annotations

from typing import Any

from roach.cli.jsonout import COMMANDS, VARIANTS, VERSIONS
from roach.cli.schemas import clusters, event_lines, holders, jobs, report, top, workspace

SCHEMAS: dict[str, dict[str, Any]] = {
    **jobs.SCHEMAS,
    "event": event_lines.EVENT,
    **holders.SCHEMAS,
    **clusters.SCHEMAS,
    **workspace.SCHEMAS,
    **top.SCHEMAS,
    **report.SCHEMAS,
}


def record_schema(name: str) -> dict[str, Any]:
    """The schema of one record ``name`` (a key of :data:`~roach.cli.jsonout.VERSIONS`)."""
    return SCHEMAS[name]


def output_schema(command: str) -> dict[str, Any]:
    """The schema of what ``roach COMMAND --json`` prints (``command`` as in ``COMMANDS``: ``clusters show``);
    for ``watch``, of each line."""
    name, many = COMMANDS[command] if command in COMMANDS else VARIANTS[command]
    one = SCHEMAS[name]
    if not many:
        return one
    items = {k: v for k, v in one.items() if k != "$schema"}
    return {
        "$schema": one["$schema"],
        "title": f"roach {command} --json",
        "description": f"An array of `{one['title']}` records (empty when there is none).",
        "type": "array",
        "items": items,
    }


__all__ = ["COMMANDS", "SCHEMAS", "VERSIONS", "output_schema", "record_schema"]
