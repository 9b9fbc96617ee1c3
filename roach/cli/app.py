"""The `roach` command: parse, call the library, render.

This module is the only place that turns a :class:`~roach.errors.RoachError` into a red line on stderr
and an exit code. Commands live in their own modules and are registered in :data:`COMMANDS`, one line each;
a command's module is imported when that command runs (or when help lists it), so ``roach ls`` loads the
store and its views, not ssh, submit or the watch. Help text is the commands' docstrings and the options'
``help=``, nowhere else; the group's lists the exit codes from their one table, :mod:`roach.cli.exit_codes`.
"""

from __future__ import annotations

import importlib

import click

from roach import __version__
from roach.cli import exit_codes
from roach.errors import RoachError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def render_error(err: RoachError) -> None:
    """One red line (the message may carry a log excerpt below it), then the hint."""
    click.secho(f"roach: error: {err.message}", err=True, fg="red", bold=True)
    if err.hint:
        click.secho(f"  hint: {err.hint}", err=True, fg="yellow")


# Each command: the module that defines it and its name there.
COMMANDS: dict[str, str] = {
    "submit": "roach.cli.jobs:submit",
    "resume": "roach.cli.jobs:resume",
    "status": "roach.cli.show:status",
    "logs": "roach.cli.inspect:logs",
    "cancel": "roach.cli.inspect:cancel",
    "ls": "roach.cli.listing:ls",
    "sweep": "roach.cli.sweep:sweep",
    "hold": "roach.cli.hold:hold",
    "steps": "roach.cli.hold:steps",
    "signal": "roach.cli.hold:signal",
    "release": "roach.cli.hold:release",
    "watch": "roach.cli.watch:watch",
    "why": "roach.cli.watch:why",
    "top": "roach.cli.top:top",
    "promote": "roach.cli.promote:promote",
    "move": "roach.cli.promote:move",
    "clusters": "roach.cli.clusters:clusters",
    "plan": "roach.cli.clusters:plan_cmd",
    "clean": "roach.cli.cleanup:clean_cmd",
    "grant": "roach.cli.grant:grant",
    "report": "roach.cli.report:report_cmd",
    "clones": "roach.cli.cleanup:clones_cmd",
    "doctor": "roach.cli.remote:doctor",
    "sync": "roach.cli.workspace:sync",
    "sbatch": "roach.cli.workspace:sbatch",
    "wait": "roach.cli.workspace:wait",
    "pull": "roach.cli.workspace:pull",
    "verify": "roach.cli.workspace:verify",
    "lab": "roach.cli.lab:lab",
    "mcp": "roach.cli.agent.server:mcp",
    "skill": "roach.cli.agent.skill:skill",
}


class RoachGroup(click.Group):
    """The top-level group: loads each command from :data:`COMMANDS` when it is asked for, and catches
    roach's errors from every subcommand, once."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, cmd_name)
        return command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RoachError as err:
            render_error(err)
            ctx.exit(err.exit_code)


@click.group(
    cls=RoachGroup,
    context_settings=CONTEXT,
    help=f"Run Python functions as resumable Slurm jobs, and watch them.\n\n{exit_codes.help_text()}",
)
@click.version_option(__version__, "-V", "--version", prog_name="roach", message="%(prog)s %(version)s")
def cli() -> None:
    """The group; its help is the line above and the exit codes' table (:mod:`roach.cli.exit_codes`)."""


def main() -> None:
    """Console-script entry point (``roach = "roach.cli:main"``)."""
    cli(prog_name="roach")
