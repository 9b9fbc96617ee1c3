"""`roach submit`, `status`, `logs`, `cancel`, `ls`: jobs from the command line (the library is
:mod:`roach.slurm`).

Live states cost a fixed number of Slurm calls, never one per job: `ls` makes one ``squeue`` per cluster
and ssh alias (the user's whole queue) and at most one ``sacct`` per cluster and alias for the listed jobs
that left the queue and whose final state the store does not hold yet; it records those final states in the
store (the views and their live states: :mod:`roach.ops.fleet_views`). A job submitted through another ssh alias
than its cluster's own is read through that alias again (the store's ``via``); ``--ssh-alias`` overrides it.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from roach.cli.args import cli_cluster, parse_args, parse_args_json, parse_env, submit_cluster
from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, metered_option, run_as_option, ssh_config_option
from roach.cli.jsonout import stamp
from roach.cli.refs import ssh_alias_option
from roach.cli.tiers import TIER_OPTION, tier_line, tier_placed
from roach.cli.view_text import print_view
from roach.cli.views import job_json
from roach.errors import UsageError
from roach.fleet.cluster import Cluster, with_ssh_override
from roach.launch.hold.holder import InsideJob
from roach.launch.job import Job
from roach.launch.job_view import JobView
from roach.launch.options import CLONE_ROOT, SubmitFields
from roach.launch.prepare import Prepared
from roach.launch.submit import dry_run as dry_run_job
from roach.launch.submit import resume as resume_run
from roach.launch.submit import submit as submit_job
from roach.model.python_env import PythonEnv
from roach.model.resources import Resources
from roach.ops.fleet_views import reach
from roach.ops.tier_choice import Placed, landing
from roach.records.results import JOB_NOT_COMPLETED
from roach.records.store import Store
from roach.records.workspace_job import is_workspace_record

# -- commands -------------------------------------------------------------------------------------------
_WHERE_OPTIONS = (
    click.option(
        "--repo-root",
        default=".",
        show_default=True,
        type=click.Path(file_okay=False),
        help="The git repository whose pushed HEAD runs.",
    ),
    click.option(
        "--log-root",
        metavar="PATH",
        default=None,
        help="Cluster directory for logs and bundles (absolute or ~/...). [default: ~/roach/<repo>/slurm-logs]",
    ),
    click.option(
        "--clone-root", metavar="PATH", default=None, help=f"Cluster directory for clones. [default: {CLONE_ROOT}]"
    ),
    click.option(
        "--secrets-dir",
        metavar="PATH",
        default=None,
        help="Cluster directory of secret files (one per variable, mode 600) exported to the ranks.",
    ),
    click.option(
        "--run-root",
        metavar="PATH",
        default=None,
        help="Cluster directory for run directories. [default: runs/ beside the log root]",
    ),
)


_PYTHON_ENV_OPTION = click.option(
    "--python-env",
    type=click.Choice([e.value for e in PythonEnv]),
    default=None,
    help="How the jobs' Python is made: uv (`uv sync --frozen` in the clone), pixi (`pixi install --frozen`), "
    "the site's venv, or the node's python3. [default: clusters.toml's python_env, else the commit's uv.lock "
    "or pixi.lock, else the site file's]",
)
_SUBMISSION_OPTIONS = (
    click.option(
        "--cluster",
        default=None,
        metavar="NAME",
        help="The cluster to run on (e.g. lab). [default: clusters.toml's default, else ilc]",
    ),
    click.option(
        "--experiment",
        default=None,
        metavar="NAME",
        help="The experiment its runs belong to (what `roach clean` cleans). [default: the log root's parent]",
    ),
    click.option(
        "--resources",
        "preset",
        required=True,
        metavar="PRESET",
        help="A resources preset of the cluster (the lab: CPU, GPU1, GPU2, ...).",
    ),
    TIER_OPTION,
    click.option("--name", default=None, help="The jobs' name. [default: the function's name]"),
    click.option(
        "--env",
        "job_env",
        multiple=True,
        metavar="NAME=VALUE",
        callback=parse_env,
        help="An environment variable for the ranks. Repeatable.",
    ),
    *_WHERE_OPTIONS,
    click.option("--description", default="", help="Free text kept in each job.json."),
    metered_option,
    _PYTHON_ENV_OPTION,
)


def submission_options(command):
    """What `roach submit` and `roach sweep` both ask (:class:`~roach.launch.options.Options`' fields, and the
    tier the resources are put on): the cluster, experiment, resources, tier, name, env, where the files go,
    description and the Python environment."""
    for option in reversed(_SUBMISSION_OPTIONS):
        command = option(command)
    return command


@click.command()
@click.argument("target")
@submission_options
@click.option(
    "--arg",
    "kwargs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parse_args,
    help="A keyword argument of the function; VALUE is read as JSON when it parses (1e-3, 200, "
    '["a","b"], true), else kept as a string. Repeatable.',
)
@click.option(
    "--args-json",
    metavar="JSON",
    callback=parse_args_json,
    help="Keyword arguments as one JSON object; --arg may add others, not repeat them.",
)
@click.option("--run-id", metavar="ID", default=None, help="The run's id. [default: <name>-<UTC time>-<random>]")
@click.option(
    "--inside",
    type=int,
    metavar="HOLDER",
    default=None,
    help="Start now as steps of this running holder (roach hold) instead of queuing a job.",
)
@click.option("--force", is_flag=True, help="With --inside: start even beside another attempt's running ranks.")
@click.option(
    "--wait-holder",
    "wait_holder_s",
    type=click.FloatRange(min=0),
    metavar="S",
    default=None,
    help="With --inside: wait up to S seconds for a holder still pending to run (without it, a pending "
    "holder is refused).",
)
@run_as_option
@click.option(
    "--ssh-alias",
    metavar="ALIAS",
    default=None,
    help="Reach the cluster by `ssh ALIAS` instead of its own way; recorded, so later commands read the "
    "job the same way.",
)
@ssh_config_option
@click.option(
    "--wait", is_flag=True, help=f"Wait for the job to end; exit 0 if it COMPLETED, {JOB_NOT_COMPLETED} if not."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check everything and say what would run (the cluster, commit, resources, the Python environment and "
    "why); queue and write nothing.",
)
@json_option
@click.pass_context
def submit(
    ctx: click.Context,
    target: str,
    cluster: str,
    preset: str,
    tier: str | None,
    kwargs: dict[str, Any],
    args_json: dict[str, Any],
    job_env: dict[str, str],
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    wait: bool,
    dry_run: bool,
    as_json: bool,
    **paths: Any,
) -> None:
    """Run TARGET (package.module:function) of the repository's pushed HEAD as a Slurm job.

    Prints the job id, run id and log path.
    """
    both = sorted(set(kwargs) & set(args_json))
    if both:
        raise click.BadParameter(f"{', '.join(both)} also given in --args-json", param_hint="--arg")
    options = {k: v for k, v in paths.items() if v is not None}
    target_cluster = submit_cluster(cluster, run_as, ssh_alias, ssh_config)
    placed = tier_placed(target_cluster, preset, tier)
    if dry_run:
        fields = {k: v for k, v in options.items() if k not in _LAUNCH_ONLY}
        with Store() as store:
            p = dry_run_job(
                target,
                {**args_json, **kwargs},
                resources=placed.resources if placed else preset,
                cluster=target_cluster,
                job_env=job_env,
                store=store,
                **fields,
            )
        if as_json:
            _echo_json(dry_run_json(p, placed or landing(p.cluster, p.resources)))
        else:
            click.echo("\n".join(dry_run_lines(p, placed or landing(p.cluster, p.resources))))
        return
    with Store() as store:
        job = submit_job(
            target,
            {**args_json, **kwargs},
            resources=placed.resources if placed else preset,
            cluster=target_cluster,
            job_env=job_env,
            store=store,
            **options,
        )
        _report_submitted(ctx, job, run_as, wait, as_json, tier_line(placed))


@click.command()
@click.argument("run_id")
@click.option(
    "--cluster",
    metavar="NAME",
    default=None,
    help="Run it on this cluster (one that sees the same run directory). [default: where it last ran]",
)
@click.option(
    "--resources",
    "preset",
    metavar="PRESET",
    default=None,
    help="A resources preset of that cluster. [default: what its last job asked for]",
)
@TIER_OPTION
@click.option(
    "--repo-root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The git repository whose pushed HEAD the job runs.",
)
@metered_option
@_PYTHON_ENV_OPTION
@run_as_option
@ssh_alias_option
@ssh_config_option
@click.option(
    "--wait", is_flag=True, help=f"Wait for the job to end; exit 0 if it COMPLETED, {JOB_NOT_COMPLETED} if not."
)
@json_option
@click.pass_context
def resume(
    ctx: click.Context,
    run_id: str,
    cluster: str | None,
    preset: str | None,
    tier: str | None,
    repo_root: str,
    allow_metered: bool,
    python_env: str | None,
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Submit RUN_ID again so it continues from its checkpoint (resume.pt), here or on another cluster.

    A run id roach has no record of, or whose run directory is gone, is an error, never a fresh start.
    """
    with Store() as store:
        rec = store.latest_for_run(run_id)
        if rec is not None and is_workspace_record(rec):
            raise UsageError(
                f"{run_id} is a sbatch job of a remote workspace ({rec.target}), not a roach run",
                hint=f"submit its script again: roach sbatch {rec.target}",
            )
        name = cluster or (rec.cluster if rec else None)
        if rec is not None and name == rec.cluster:  # where it ran: the way it was submitted, unless told
            target_cluster: Cluster | None = reach(rec, run_as=run_as, ssh_alias=ssh_alias, ssh_config=ssh_config)
        else:
            target_cluster = with_ssh_override(cli_cluster(name, run_as), ssh_alias, ssh_config) if name else None
        placed = None
        if rec is not None:  # on --tier, what it asks for (or its last job asked for) put on that tier
            old = preset or Resources.from_json(rec.resources)
            placed = tier_placed(target_cluster or rec.cluster, old, tier)
        fields: SubmitFields = {
            "cluster": target_cluster,
            "repo_root": repo_root,
            "store": store,
            "allow_metered": allow_metered,
            "python_env": python_env,
        }
        resources = placed.resources if placed else preset
        if resources is not None:  # else what its last job asked for
            fields["resources"] = resources
        job = resume_run(run_id, **fields)
        if rec is not None and job.record.commit != rec.commit and not as_json:
            click.echo(
                f"code: commit {job.record.commit[:12]}, the repository's HEAD; its last job ran "
                f"{rec.commit[:12]} (the checkpoint must load in the new code)"
            )
        _report_submitted(ctx, job, run_as, wait, as_json, tier_line(placed))


# submit's own options that start a job rather than describe it: a dry run makes no job to start
_LAUNCH_ONLY = ("run_id", "inside", "force", "wait_holder_s")


def dry_run_json(p: Prepared, placed: Placed) -> dict[str, Any]:
    """`roach submit --dry-run --json`: what would run, on which tier and QOS, in which Python environment, and
    why."""
    return stamp(
        "dry_run",
        {
            "target": p.target,
            "cluster": p.cluster.name,
            "repo": p.repo.name,
            "commit": p.repo.commit,
            "name": p.name,
            "resources": p.resources.to_json(),
            **placed.to_json(),
            "python_env": p.python_env.to_json(),
            "log_root": p.log_root,
            "queued": False,
        },
    )


def dry_run_lines(p: Prepared, placed: Placed) -> list[str]:
    """What `roach submit --dry-run` prints."""
    return [
        f"would run {p.target} of {p.repo.name} at {p.repo.commit[:12]} on {p.cluster.name} as {p.name}",
        f"  resources: {', '.join(p.resources.sbatch_options(p.cluster.gpu_flag))}",
        f"  tier:      {placed.line()}",
        f"  python:    {p.python_env.line()}",
        f"  logs:      {p.log_root}",
        "nothing was queued or written (--dry-run)",
    ]


def _report_submitted(
    ctx: click.Context, job: Job | InsideJob, run_as: str | None, wait: bool, as_json: bool, tier: str | None = None
) -> None:
    """Print what was submitted (``tier``: the line of the tier it was put on); with ``wait``, wait for it and exit
    6 unless it completed."""
    view = JobView.of(job.record, None, job.record.status)
    if not as_json:
        said = f"submitted {job}\n  log {job.record.log_path}" + (f"\n{tier}" if tier else "")
        Console(highlight=False).print(said, soft_wrap=True)
    if wait:
        try:
            acct = job.wait()
        except KeyboardInterrupt:
            click.echo(f"stopped waiting; job {job.slurm_id} goes on (`roach cancel {job.run_id}` stops it)", err=True)
            raise click.Abort() from None
        view = JobView.of(job.record, acct.state.value, job.record.status, None, job.record.exit_code)
    if as_json:
        _echo_json(job_json(view))
    elif wait:
        print_view(view)
    if wait and not view.ok:
        if not as_json:
            click.echo(
                f"job {view.slurm_id} did not complete; read its log: roach logs {view.run_id}"
                + (f" --run-as {run_as}" if run_as else ""),
                err=True,
            )
        ctx.exit(JOB_NOT_COMPLETED)
