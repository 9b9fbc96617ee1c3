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
from roach.cli.tiers import tier_line, tier_placed
from roach.launch.prepare import read_grid
from roach.launch.sweep import Sweep
from roach.launch.sweep import sweep as sweep_runs
from roach.launch.sweep_dry_run import SweepDryRun
from roach.launch.sweep_dry_run import dry_run as sweep_dry_run
from roach.ops.tier_choice import Placed, landing
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
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check everything and say what would run (the tier and QOS, the runs, the arrays, the Python "
    "environment); queue and write nothing.",
)
@json_option
@click.pass_context
def sweep(
    ctx: click.Context,
    target: str,
    grid_file: str,
    cluster: str | None,
    preset: str,
    tier: str | None,
    job_env: dict[str, str],
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    wait: bool,
    dry_run: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Run TARGET (package.module:function) once per entry of the grid file, as Slurm job arrays.

    Prints the sweep id, its arrays and where the logs go; `roach ls` and `roach watch` show its runs.
    """
    grid = read_grid(grid_file)
    options = {k: v for k, v in options.items() if v is not None}
    target_cluster = submit_cluster(cluster, run_as, ssh_alias, ssh_config)
    at_once = min(len(grid), options.get("parallelism") or len(grid))  # --tier auto plans the runs at once
    placed = tier_placed(target_cluster, preset, tier, runs=max(at_once, 1))
    resources = placed.resources if placed else preset
    with Store() as store:
        if dry_run:
            d = sweep_dry_run(
                target, grid, resources=resources, cluster=target_cluster, job_env=job_env, store=store, **options
            )
            shown = placed or landing(d.prepared.cluster, d.prepared.resources)
            click.echo(json.dumps(sweep_dry_run_json(d, shown), indent=2) if as_json else sweep_dry_run_text(d, shown))
            return
        sw = sweep_runs(
            target, grid, resources=resources, cluster=target_cluster, job_env=job_env, store=store, **options
        )
        out = sweep_json(sw)
        if not as_json:
            line = tier_line(placed)
            Console(highlight=False).print(
                f"submitted {sw}\n  runs {sw[0].run_id} .. {sw[-1].run_id}\n  logs {out['log_root']}/"
                f"{sw.sweep_id}_<array>_<task>.out" + (f"\n{line}" if line else ""),
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


def sweep_dry_run_json(d: SweepDryRun, placed: Placed) -> dict[str, Any]:
    """`roach sweep --dry-run --json`: what would be queued, on which tier and QOS; nothing was."""
    p = d.prepared
    return stamp(
        "sweep_dry_run",
        {
            "target": p.target,
            "cluster": p.cluster.name,
            "repo": p.repo.name,
            "commit": p.repo.commit,
            "name": p.name,
            "sweep_id": d.sweep_id,
            "runs": d.runs,
            "arrays": [{"first": first, "tasks": tasks} for first, tasks in d.arrays],
            "parallelism": d.parallelism,
            "resources": p.resources.to_json(),
            **placed.to_json(),
            "python_env": p.python_env.to_json(),
            "log_root": p.log_root,
            "run_root": d.run_root,
            "queued": False,
        },
    )


def sweep_dry_run_text(d: SweepDryRun, placed: Placed) -> str:
    """What `roach sweep --dry-run` prints."""
    p = d.prepared
    arrays = ", ".join(f"runs {first}-{first + tasks - 1}" for first, tasks in d.arrays)
    at_once = f", at most {d.parallelism} at once" if d.parallelism else ""
    return "\n".join(
        [
            f"would run {p.target} of {p.repo.name} at {p.repo.commit[:12]} on {p.cluster.name} as sweep {d.sweep_id}",
            f"  runs:      {d.runs} in {len(d.arrays)} array{'s' if len(d.arrays) != 1 else ''} ({arrays}){at_once}",
            f"  resources: {', '.join(p.resources.sbatch_options(p.cluster.gpu_flag))} each",
            f"  tier:      {placed.line()}",
            f"  python:    {p.python_env.line()}",
            f"  logs:      {p.log_root}",
            "nothing was queued or written (--dry-run)",
        ]
    )
