"""Validating a command's ``--json`` output against its shipped schema, closed: every object's fields named."""

from __future__ import annotations

from typing import Any

import jsonschema

from roach.cli.schemas import output_schema


def closed(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that declares its properties and says
    nothing of others: the shipped schemas stay open for consumers (a field added keeps the version), the
    tests insist that every field roach prints is documented."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    # "if" only selects (a closed "if" would never match); const and enum are values, not schemas
    out = {k: v if k in ("if", "const", "enum") else closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def validate_output(command: str, data: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` is what ``roach COMMAND --json`` may print."""
    schema = closed(output_schema(command))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(data)
