"""The JSON schemas themselves, without a cluster: every command with ``--json`` has one, each is a valid JSON
Schema naming its own version, every watch event kind is described, and docs/json.md is what they generate.

The real outputs are validated on the lab (tests/test_json_outputs.py); the watch's events on recorded Slurm
output are validated by every watch test that looks at its events (tests/support/watch.py ``kinds``)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import jsonschema
import pytest

from roach.cli.app import cli
from roach.cli.clusters import describe
from roach.cli.jsonout import COMMANDS, VARIANTS, VERSIONS, schema_id, stamp
from roach.cli.schemas import SCHEMAS, output_schema
from roach.cli.schemas.doc import MARK, reference
from roach.cli.schemas.event_lines import FIELDS, KIND_FIELDS
from roach.errors import UsageError
from roach.fleet.cluster import known_clusters, module_cluster
from roach.fleet.userconfig import configured
from roach.ops.events import EVENT_SCHEMA, EventKind
from roach.watch.ends import on_accounting
from roach.watch.jobs import Ctx, new_watch
from tests.support.schemas import closed, validate_output
from tests.support.watch import record, sq, watcher

DOC = Path(__file__).parent.parent / "docs" / "json.md"


def json_commands() -> set[str]:
    """Every command (and group) of the click tree with an option named --json, as typed after `roach`."""
    ctx = click.Context(cli)
    found: set[str] = set()

    def walk(cmd: click.Command, path: list[str]) -> None:
        if any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option)):
            found.add(" ".join(path))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, [*path, name])

    walk(cli, [])
    return found


def test_every_command_with_json_has_a_schema_and_every_schema_a_command():
    found = json_commands()
    assert found, "the walk found no --json option at all"
    missing = sorted(found - set(COMMANDS))
    assert not missing, f"--json without a schema (add it to roach/cli/jsonout.py COMMANDS and a schema): {missing}"
    assert sorted(set(COMMANDS) - found) == [], "a schema for a command that has no --json"
    assert {name for name, _ in (*COMMANDS.values(), *VARIANTS.values())} == set(SCHEMAS) == set(VERSIONS)


def test_a_command_without_a_schema_would_fail(monkeypatch):
    """The walk sees a new command's --json: the check above fails for it."""

    @click.command("newthing")
    @click.option("--json", "as_json", is_flag=True)
    def newthing(as_json: bool) -> None: ...

    monkeypatch.setitem(cli.commands, "newthing", newthing)  # type: ignore[attr-defined]
    assert "newthing" in json_commands() and "newthing" not in COMMANDS


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_is_valid_and_names_its_own_version(name: str):
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator.check_schema(closed(schema))
    assert schema["title"] == schema_id(name) == schema["properties"]["schema"]["const"]
    assert list(schema["properties"])[0] == "schema" and "schema" in schema["required"]
    for field, s in schema["properties"].items():
        assert s.get("description"), f"{name}.{field} has no description"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_output_schema_is_valid(command: str):
    schema = output_schema(command)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert (schema["type"] == "array") is COMMANDS[command][1]


def test_stamp_puts_the_version_first_and_the_event_schema_is_the_registry_one():
    assert list(stamp("job", {"run_id": "r", "schema": "old"})) == ["schema", "run_id"]
    assert stamp("job", {})["schema"] == "roach.job/2"
    assert EVENT_SCHEMA == schema_id("event")


def test_every_event_kind_lists_its_fields_and_every_field_belongs_to_a_kind():
    assert set(KIND_FIELDS) == set(EventKind)
    used = {f for names in KIND_FIELDS.values() for f in names}
    assert used == set(FIELDS)
    assert SCHEMAS["event"]["properties"]["event"]["enum"] == [k.value for k in EventKind]


def test_a_lost_job_event_validates_and_a_wrong_one_does_not():
    """``lost`` is the kind the recorded watch scenarios do not produce: made here by the watcher's own code."""
    w = new_watch("41", None, 100.0, run_id="r-1", name="j", job_id=41)
    w.left_at = 0.0
    ctx = Ctx("lab", (), 1000.0, explain=lambda q: pytest.fail("no pending job here"))
    (event,) = on_accounting(w, None, ctx, lost_after_s=60.0)
    assert event.kind is EventKind.LOST
    validate_output("watch", event.to_json())
    wrong = {**event.to_json(), "event": "finished"}  # a finished event lacks its state and exit code
    with pytest.raises(jsonschema.ValidationError, match="'state' is a required property"):
        validate_output("watch", wrong)
    with pytest.raises(jsonschema.ValidationError, match="'surprise' was unexpected"):
        validate_output("watch", {**event.to_json(), "surprise": 1})


def test_a_failed_promotion_event_validates(fake, store, clock):
    """``promote_failed``, the other kind no recorded watch scenario produces: the watcher's --rebalance with a
    promoter that is refused, on recorded squeue output."""
    store.add(record(81, qos="low"))
    fake.queue = [sq(81, "PENDING", qos="low", reason="Priority")]
    fake.starts_at = "2027-01-15T08:00:00"  # the probe: it would start now, preempting nobody

    def refused(p):
        raise UsageError("the run's commit is not pushed", hint="push it")

    w = watcher(fake, store, clock, rebalance=True, promoter=refused)
    w.round()
    clock.tick(10)
    (event,) = w.round()
    assert event.kind is EventKind.PROMOTE_FAILED
    validate_output("watch", event.to_json())


@pytest.mark.parametrize("name", known_clusters())
def test_clusters_show_of_every_known_cluster_validates(name: str):
    """Each site module's settings (metered prices, ssh aliases, presets) as `roach clusters show` prints them."""
    validate_output(
        "clusters show",
        json.loads(json.dumps(stamp("cluster", describe(configured(module_cluster(name)))), default=str)),
    )


def test_docs_json_md_is_what_the_schemas_generate_and_names_every_schema():
    page = DOC.read_text()
    assert MARK in page, f"{DOC} lost its generated part's marker"
    generated = page.split(MARK, 1)[1]
    assert MARK + generated == reference(SCHEMAS), (
        "docs/json.md's reference is stale: run `python -m roach.cli.schemas --doc-into docs/json.md`"
    )
    for name in SCHEMAS:
        assert f"### `{schema_id(name)}`" in generated
    for command in COMMANDS:
        assert f"`roach {command} --json`" in generated
