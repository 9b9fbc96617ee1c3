"""What every `roach` command module shares: the options spelled the same everywhere, and JSON output.

`--cluster` and `--ssh-alias` stay with their modules: what they default to differs from command to command.
"""

from __future__ import annotations

import json
from typing import Any

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
state_dir_option = click.option(  # every `roach lab` command's
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The lab's state directory. Default: $ROACH_LAB_DIR, else /var/lib/roach/lab as root.",
)
run_as_option = click.option(
    "--run-as",
    metavar="USER",
    default=None,
    help="Run Slurm's commands as this local user (needs root); the lab's user is roachlab.",
)
ssh_config_option = click.option(
    "--ssh-config",
    metavar="FILE",
    default=None,
    help="The ssh config file that defines the alias (default: ~/.ssh/config).",
)


def _metered_said(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        click.echo(
            "roach: --metered changes nothing: a metered cluster is used within a grant its budget's owner made "
            "(`roach grant`, at a terminal)",
            err=True,
        )
    return value


# Accepted so that older scripts keep working; the consent is a grant (roach.records.grants).
metered_option = click.option("--metered", "allow_metered", is_flag=True, hidden=True, callback=_metered_said)


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON; what JSON has no type for (a path, a datetime) as its text."""
    click.echo(json.dumps(data, indent=2, default=str))
