"""``roach status``, ``logs``, ``cancel`` and ``ls``: one job's state and log, cancelling it, the store's recent jobs."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option, ssh_config_option
from roach.cli.refs import cluster_option, explained, job_of_ref, ssh_alias_option
from roach.cli.views import follow_log, grouped_views, job_json, live_views, print_view, state_text
from roach.clusters.userconfig import get_cluster
from roach.errors import UsageError, WaitTimeoutError
from roach.records.store import Store
from roach.records.workspace import is_workspace_record
from roach.workspace.file import archived_bundle, earlier_stage_error


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@cluster_option
@run_as_option
@ssh_alias_option
@ssh_config_option
@json_option
def status(
    ref: str, cluster: str | None, run_as: str | None, ssh_alias: str | None, ssh_config: str | None, as_json: bool
) -> None:
    """Show the state of one job (a run id names its latest job)."""
    with Store() as store:
        job = job_of_ref(ref, cluster, run_as, store, ssh_alias, ssh_config)
        with explained(job.record, ssh_alias):
            (view,) = live_views(job.client, [job.record], store, whole_queue=False)
    stage = earlier_stage(job.record)
    if as_json:
        _echo_json(job_json(view, **({"earlier_stage": stage} if stage else {})))
    else:
        print_view(view)
        if stage:
            click.echo(f"note: {stage}", err=True)


def earlier_stage(rec) -> str | None:
    """For a remote-workspace job whose stage is over (NeuriCo archived its bundle): where the bundle went."""
    if not is_workspace_record(rec):
        return None
    archived = archived_bundle(rec.resources.get("workspace") or "", str(rec.job_id))
    return (
        None if archived is None else earlier_stage_error(rec.resources["workspace"], str(rec.job_id), archived).message
    )


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("-n", "--lines", type=click.IntRange(min=1), default=None, help="Print only the last N lines.")
@cluster_option
@run_as_option
@ssh_alias_option
@ssh_config_option
def logs(
    ref: str,
    follow: bool,
    lines: int | None,
    cluster: str | None,
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
) -> None:
    """Print a job's log (a run id names its latest job)."""
    with Store() as store:
        job = job_of_ref(ref, cluster, run_as, store, ssh_alias, ssh_config)
    path = job.record.log_path  # where the job writes it (a sweep's run: <sweep_id>_<array>_<task>.out)
    if is_workspace_record(job.record):  # a sbatch script's log: where its --output said
        if job.record.resources.get("array") is not None:
            raise UsageError(
                f"job {job.job_id} is an array: each task writes its own log ({path})",
                hint=f"`roach pull {job.job_id}` brings them all back to dsi-slurm-artifacts/{job.job_id}/",
            )
    with explained(job.record, ssh_alias):
        if follow:
            follow_log(job, lines, path=path)
            return
        if not job.fs.exists(path):
            click.echo(f"{path} does not exist yet: the job has not started (`roach status {ref}`)", err=True)
            return
        click.echo(job.fs.tail(path, lines) if lines else job.fs.read(path), nl=False)


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@cluster_option
@run_as_option
@ssh_alias_option
@ssh_config_option
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    metavar="S",
    help="Wait up to S seconds for the job to end (its ranks checkpoint first) and record its end in "
    "job.json and the store; 0: return at once (the next status, ls or watch records it).",
)
@json_option
def cancel(
    ref: str,
    cluster: str | None,
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    wait_s: float,
    as_json: bool,
) -> None:
    """Cancel one job that roach submitted (a run id names its latest job)."""
    with Store() as store:
        job = job_of_ref(ref, cluster, run_as, store, ssh_alias, ssh_config)
        with explained(job.record, ssh_alias):
            (view,) = live_views(job.client, [job.record], store, whole_queue=False)
    queued = view.status in ("pending", "running")
    ended = None
    if queued:
        job.cancel()
        if wait_s > 0:
            try:
                ended = job.wait(timeout=wait_s, poll_s=1.0).state.value  # records the end: job.json and store
            except WaitTimeoutError:
                pass
    if as_json:
        _echo_json(job_json(view, "cancel", cancelled=queued, ended=ended))
    elif queued:
        click.echo(
            f"cancelled job {job.job_id} (run {job.run_id}) on {job.cluster.name} (it was {view.state})"
            + (
                f"; it ended {ended}, recorded"
                if ended
                else "; its end is recorded by the next `roach status`, `ls` or `watch`"
            )
        )
    else:
        click.echo(
            f"job {job.job_id} (run {job.run_id}) already ended ({view.state or view.status}); nothing to cancel"
        )


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
    table = Table(box=None, pad_edge=False)
    for header in ("run id", "job id", "cluster", "name", "state", "submitted", "log"):
        table.add_column(header, overflow="fold")
    for v in ordered:
        where = f"{v.cluster} via {v.via}" if v.via else v.cluster
        table.add_row(v.run_id, v.slurm_id, where, v.name, state_text(v), v.submitted_at, v.log)
    console = Console(highlight=False)
    if not console.is_terminal:  # piped: whole values, one line per job, for grep and awk
        console.width = 100_000
    console.print(table)
