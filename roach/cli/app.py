"""The `roach` command: parse, call the library, render.

This module is the only place that turns a :class:`~roach.errors.RoachError` into a red line on stderr
and an exit code. Command groups live in their own modules (``roach/cli/lab.py``) and are added at the bottom;
a new group is one module and one ``add_command`` line. Help text is the commands' docstrings and the
options' ``help=``, nowhere else.
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.text import Text

from roach import __version__
from roach.cli import clusters as cli_clusters
from roach.cli import hold as cli_hold
from roach.cli import inspect as cli_inspect
from roach.cli import jobs as cli_jobs
from roach.cli import promote as cli_promote
from roach.cli import sweep as cli_sweep
from roach.cli import watch as cli_watch
from roach.cli import workspace as cli_workspace
from roach.cli.lab import lab
from roach.cli.remote import doctor
from roach.errors import RoachError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def render_error(err: RoachError) -> None:
    """One red line (the message may carry a log excerpt below it), then the hint."""
    console = Console(stderr=True, highlight=False)
    console.print(Text(f"roach: error: {err.message}", style="bold red"), soft_wrap=True)
    if err.hint:
        console.print(Text(f"  hint: {err.hint}", style="yellow"), soft_wrap=True)


class RoachGroup(click.Group):
    """The top-level group: catches roach's errors from every subcommand, once."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RoachError as err:
            render_error(err)
            ctx.exit(err.exit_code)


@click.group(cls=RoachGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="roach", message="%(prog)s %(version)s")
def cli() -> None:
    """Run Python functions as resumable Slurm jobs, and watch them.

    Exit codes: 0 ok, 1 unexpected error, 2 usage error, 3 lab error or lab not up,
    4 transport error, 5 Slurm error, 6 the job ran and did not complete, 7 something required is
    missing (doctor prerequisite, workspace file or remote root, job bundle, a required file).
    """


def main() -> None:
    """Console-script entry point (``roach = "roach.cli:main"``)."""
    cli(prog_name="roach")


def _register() -> None:
    cli.add_command(lab)
    for command in (
        cli_jobs.submit,
        cli_jobs.resume,
        cli_inspect.status,
        cli_inspect.logs,
        cli_inspect.cancel,
        cli_inspect.ls,
    ):
        cli.add_command(command)
    cli.add_command(doctor)
    for module in (cli_workspace, cli_clusters, cli_hold, cli_sweep):
        for command in module.COMMANDS:
            cli.add_command(command)
    for command in (cli_watch.watch, cli_watch.why, cli_promote.promote, cli_promote.move):
        cli.add_command(command)


_register()
