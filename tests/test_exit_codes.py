"""What a user reads of roach's exit codes is what roach does: one table (roach/cli/exit_codes.py) renders
`roach --help`, `roach skill` and docs/cli.md's table, and holds every code an error or a command exits with."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from roach import errors
from roach.cli import exit_codes
from roach.cli.agent import skill
from roach.cli.app import cli
from roach.cli.remote import DOCTOR_FAILED
from roach.cli.workspace import MISSING_REQUIRED
from roach.errors import RoachError
from roach.fleet import userconfig
from roach.lab import trace
from roach.ops import rebalance
from roach.records import results
from roach.runtime import rendezvous
from roach.scheduler import ssh
from roach.scheduler.rest import request as rest_request
from roach.workspace import interface, script, stage

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
TABLE = {c.code: c for c in exit_codes.EXIT_CODES}
# Every module that defines a RoachError (roach/cli/agent/server.py's, a MissingError, needs the mcp extra).
DEFINE_ERRORS = (errors, userconfig, trace, rebalance, results, rendezvous, rest_request, ssh, interface, script, stage)


def test_docs_cli_md_holds_the_rendered_table():
    text = DOC.read_text()
    assert exit_codes.markdown() in text, "paste the output of: python -m roach.cli.exit_codes"
    assert text.count("| code | meaning |") == 1


def test_roach_help_lists_each_code_as_the_table_says():
    out = CliRunner().invoke(cli, ["--help"]).output
    lines = [ln.strip() for ln in out.splitlines()]
    for c in exit_codes.EXIT_CODES:
        assert f"{c.code}  {c.short}" in lines


def test_roach_help_says_9_is_not_used():
    out = CliRunner().invoke(cli, ["--help"]).output
    assert "9  not used" in out
    assert "another `roach watch`" not in out


def test_roach_skill_lists_the_same_codes():
    assert exit_codes.skill_list() in skill.generate().text


def test_every_code_an_error_or_a_command_exits_with_is_in_the_table():
    """Each error's code, and the codes commands exit with."""
    found = [v for m in DEFINE_ERRORS for v in vars(m).values() if isinstance(v, type) and issubclass(v, RoachError)]
    assert len(found) > 15
    codes = {cls.exit_code for cls in found}
    codes |= {DOCTOR_FAILED, MISSING_REQUIRED, results.JOB_NOT_COMPLETED, rebalance.MOVE_NOT_RESUMED}
    assert codes - set(TABLE) == set()


def test_the_table_has_each_code_once_in_order():
    codes = [c.code for c in exit_codes.EXIT_CODES]
    assert codes == sorted(set(codes))
