"""`roach sweep`: one function over a grid file as Slurm job arrays (the library: :mod:`roach.launch.sweep`)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click
from rich.console import Console

from roach.cli.args import submit_cluster
from roach.cli.common import json_option, run_as_option, ssh_config_option
from roach.cli.jobs import submission_options
from roach.cli.jsonout import stamp
from roach.cli.refs import ssh_alias_option
from roach.launch.prepare import read_grid
from roach.launch.sweep import Sweep
from roach.launch.sweep import sweep as sweep_runs
from roach.records.results import JOB_NOT_COMPLETED
from roach.records.store import Store


@click.command()
@click.argument("target")
@click.option(
    "--grid",
    "grid_file",
    required=True,
    metavar="FILE.json|FILE.jsonl",
    help="The runs' keyword arguments: a JSON list of objects, or one JSON object per line.",
)
@submission_options
@click.option("--parallelism", type=int, default=None, metavar="K", help="At most K runs at once (--array=...%K).")
@click.option(
    "--sweep-id",
    default=None,
    metavar="ID",
    help="The sweep's id; run i is <ID>-<i>. [default: <name>-<UTC time>-<random>]",
)
@click.option(
    "--max-array-size",
    type=int,
    default=None,
    metavar="N",
    help="Split into arrays of at most N tasks. [default and upper bound: the cluster's MaxArraySize]",
)
@run_as_option
@ssh_alias_option
@ssh_config_option
@click.option(
    "--wait", is_flag=True, help=f"Wait for every run to end; exit 0 if all COMPLETED, {JOB_NOT_COMPLETED} if not."
)
@json_option
@click.pass_context
def sweep(
    ctx: click.Context,
    target: str,
    grid_file: str,
    cluster: str | None,
    preset: str,
    job_env: dict[str, str],
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    wait: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Run TARGET (package.module:function) once per entry of the grid file, as Slurm job arrays.

    Prints the sweep id, its arrays and where the logs go; `roach ls` and `roach watch` show its runs.
    """
    grid = read_grid(grid_file)
    options = {k: v for k, v in options.items() if v is not None}
    with Store() as store:
        sw = sweep_runs(
            target,
            grid,
            resources=preset,
            cluster=submit_cluster(cluster, run_as, ssh_alias, ssh_config),
            job_env=job_env,
            store=store,
            **options,
        )
        out = sweep_json(sw)
        if not as_json:
            Console(highlight=False).print(
                f"submitted {sw}\n  runs {sw[0].run_id} .. {sw[-1].run_id}\n  logs {out['log_root']}/"
                f"{sw.sweep_id}_<array>_<task>.out",
                soft_wrap=True,
            )
        if wait:
            try:
                done = sw.wait()
            except KeyboardInterrupt:
                click.echo(f"stopped waiting; sweep {sw.sweep_id} goes on", err=True)
                raise click.Abort() from None
            out = sweep_json(sw, {r: a.state.value for r, a in done.items()})
        if as_json:
            click.echo(json.dumps(out, indent=2))
        elif wait:
            click.echo("ended: " + ", ".join(f"{n} {s}" for s, n in sorted(out["states"].items())))
        if wait and out["failed"]:
            if not as_json:
                click.echo(
                    f"{len(out['failed'])} runs did not complete, e.g. `roach logs {out['failed'][0]}`", err=True
                )
            ctx.exit(JOB_NOT_COMPLETED)


def sweep_json(sw: Sweep, ended: dict[str, str] | None = None) -> dict[str, Any]:
    """The sweep's ``--json`` record: its id, arrays and log root; with ``ended`` (run id: Slurm's final
    state, from ``--wait``) how many ended in each state and which did not complete."""
    out: dict[str, Any] = {
        "sweep_id": sw.sweep_id,
        "cluster": sw.cluster.name,
        "array_ids": sw.array_ids,
        "runs": len(sw),
        "log_root": sw[0].record.log_path.rsplit("/", 1)[0],
    }
    if ended is not None:
        out["states"] = dict(Counter(ended.values()))
        out["failed"] = sorted(r for r, state in ended.items() if state != "COMPLETED")
    return stamp("sweep", out)
