"""The CLI as the watch tests call it."""

from __future__ import annotations

from click.testing import CliRunner, Result

from roach.cli import promote as cli_promote
from roach.cli import watch as cli_watch
from roach.cli.app import CONTEXT, RoachGroup


def roach(*args: str) -> Result:
    """The CLI as `roach` runs it (errors become a red line and an exit code), with the watch commands."""
    group = RoachGroup(
        "roach",
        context_settings=CONTEXT,
        commands={c.name: c for c in (cli_watch.watch, cli_watch.why, cli_promote.promote, cli_promote.move)},
    )
    return CliRunner().invoke(group, list(args), catch_exceptions=False)
