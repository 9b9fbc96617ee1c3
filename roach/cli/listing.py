"""``roach ls``: the store's recent jobs, newest first, with their live states (``status`` is :mod:`roach.cli.show`).

It reads the store and asks Slurm, and loads no more than that (issue 18: it starts in under 150 ms with 10,000
records in the store); ``tests/test_cli_imports.py`` checks what it loads.
"""

from __future__ import annotations

import click

from roach.cli.columns import table_lines, terminal_width
from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option
from roach.cli.refs import cluster_option
from roach.cli.view_text import state_text
from roach.cli.views import job_json
from roach.errors import UsageError
from roach.fleet.userconfig import get_cluster
from roach.ops.fleet_views import grouped_views
from roach.records.store import Store


@click.command("ls")
@cluster_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many jobs to list.")
@run_as_option
@click.option(
    "--ssh-alias",
    metavar="ALIAS",
    default=None,
    help="With --cluster: reach it by `ssh ALIAS` [default: each job the way it was submitted].",
)
@click.option(
    "--ssh-config",
    metavar="FILE",
    default=None,
    help="The ssh config file that defines the aliases jobs are reached through (default: ~/.ssh/config).",
)
@json_option
def ls(
    cluster: str | None, limit: int, run_as: str | None, ssh_alias: str | None, ssh_config: str | None, as_json: bool
) -> None:
    """List recent jobs from the store, newest first, with their live states."""
    if cluster is not None:
        get_cluster(cluster)
    elif ssh_alias is not None:
        raise UsageError(
            "--ssh-alias reaches one cluster, and the store may list several",
            hint="name it: roach ls --cluster NAME --ssh-alias ALIAS",
        )
    with Store() as store:
        records = store.recent(limit, cluster)
        ordered = grouped_views(records, store, run_as=run_as, ssh_alias=ssh_alias, ssh_config=ssh_config)
    if as_json:
        _echo_json([job_json(v) for v in ordered])
        return
    if not ordered:
        click.echo(f"no jobs in the store {store.path}")
        return

    headers = ("run id", "job id", "cluster", "name", "state", "submitted", "log")
    rows = []
    for v in ordered:
        where = f"{v.cluster} via {v.via}" if v.via else v.cluster
        rows.append((v.run_id, v.slurm_id, where, v.name, state_text(v), v.submitted_at, v.log))
    # on a terminal, fitted to its width; piped: whole values, one line per job, for grep and awk
    for line in table_lines(headers, rows, terminal_width()):
        click.echo(line)
