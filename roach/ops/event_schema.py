"""The ``schema`` field of the watch's events, in a module of its own: the CLI's ``--json`` stamp
(:mod:`roach.cli.jsonout`) reads its version from here without loading the events (:mod:`roach.ops.events`)."""

#: The ``schema`` field of every event's JSON (docs/json.md): its version rises only when a field is removed,
#: renamed or changes meaning, never for an added field or a new kind.
EVENT_SCHEMA = "roach.event/1"
