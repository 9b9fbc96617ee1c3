"""``roach logs`` and ``cancel``: a job's log, cancelling it (``status`` and ``ls`` are :mod:`roach.cli.show`)."""

from __future__ import annotations

import click

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option, ssh_config_option
from roach.cli.refs import cluster_option, explained, record_of_ref, ssh_alias_option
from roach.cli.views import follow_log, job_json
from roach.errors import UsageError, WaitTimeoutError
from roach.launch.hold.holder import InsideJob, job_for
from roach.launch.job import Job
from roach.launch.job_view import live_views
from roach.ops.fleet_views import reach
from roach.records.store import Store
from roach.records.workspace_job import is_workspace_record


def job_of_ref(
    ref: str,
    cluster: str | None,
    run_as: str | None,
    store: Store,
    ssh_alias: str | None = None,
    ssh_config: str | None = None,
) -> Job | InsideJob:
    """The recorded job ``ref`` names (run id or job id), reached the way it was submitted unless ``ssh_alias``
    says otherwise; roach only acts on jobs in its store."""
    rec = record_of_ref(ref, cluster, store)
    return job_for(reach(rec, run_as=run_as, ssh_alias=ssh_alias, ssh_config=ssh_config), rec, store)


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
            f"cancelled job {job.slurm_id} (run {job.run_id}) on {job.cluster.name} (it was {view.state})"
            + (
                f"; it ended {ended}, recorded"
                if ended
                else "; its end is recorded by the next `roach status`, `ls` or `watch`"
            )
        )
    else:
        click.echo(
            f"job {job.slurm_id} (run {job.run_id}) already ended ({view.state or view.status}); nothing to cancel"
        )
