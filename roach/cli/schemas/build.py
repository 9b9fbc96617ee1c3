"""The few constructors the schemas are written with: a field's type and meaning in one call, a record with
its ``schema`` field. They make plain JSON Schema (draft 2020-12) dicts; nothing here is a validator."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from roach.cli.jsonout import schema_id

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_OPTIONAL = "x-roach-optional"  # a marker obj() takes out: the field is not always printed


def _typed(kind: str, description: str, null: bool, more: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": [kind, "null"] if null else kind, "description": description}
    out.update(more)
    if null and "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def string(description: str, *, null: bool = False, **more: Any) -> dict[str, Any]:
    return _typed("string", description, null, more)


def integer(description: str, *, null: bool = False, **more: Any) -> dict[str, Any]:
    return _typed("integer", description, null, more)


def number(description: str, *, null: bool = False, **more: Any) -> dict[str, Any]:
    return _typed("number", description, null, more)


def boolean(description: str, *, null: bool = False) -> dict[str, Any]:
    return _typed("boolean", description, null, {})


def enum(description: str, values: Iterable[str], *, null: bool = False) -> dict[str, Any]:
    return string(description, null=null, enum=list(values))


def array(description: str, items: Mapping[str, Any], *, null: bool = False) -> dict[str, Any]:
    return _typed("array", description, null, {"items": dict(items)})


def strings(description: str) -> dict[str, Any]:
    return array(description, {"type": "string"})


def anything(description: str) -> dict[str, Any]:
    """A value of any JSON type (a function's return value, a site's setting)."""
    return {"description": description}


def optional(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A field printed only sometimes (its description says when): not in the record's ``required``."""
    return {**schema, _OPTIONAL: True}


def obj(description: str, props: Mapping[str, Mapping[str, Any]], *, null: bool = False) -> dict[str, Any]:
    """An object with these fields, each required unless :func:`optional`."""
    properties = {k: {a: b for a, b in v.items() if a != _OPTIONAL} for k, v in props.items()}
    return {
        "type": ["object", "null"] if null else "object",
        "description": description,
        "properties": properties,
        "required": [k for k, v in props.items() if not v.get(_OPTIONAL)],
    }


def mapping(description: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """An object whose keys are names (a preset, a node) and whose values all have one schema."""
    return {"type": "object", "description": description, "additionalProperties": dict(values)}


def record(name: str, description: str, props: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A top-level record: its ``schema`` field (``roach.NAME/VERSION``) first, then ``props``."""
    sid = schema_id(name)
    schema_field = string("This record's schema and version: `" + sid + "` (docs/json.md).", const=sid)
    return {"$schema": DRAFT, "title": sid, **obj(description, {"schema": schema_field, **props})}
