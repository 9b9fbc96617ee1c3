"""`roach submit`, `status`, `logs`, `cancel`, `ls`: jobs from the command line (the library is
:mod:`roach.slurm`).

Live states cost a fixed number of Slurm calls, never one per job: `ls` makes one ``squeue`` per cluster
(the user's whole queue) and at most one ``sacct`` per cluster for the listed jobs that left the queue
and whose final state the store does not hold yet; it records those final states in the store (the views
and their live states: :mod:`roach.cli_views`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from inspect import signature
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from roach.cli_views import JobView, live_views
from roach.errors import RoachError
from roach.slurm.cluster import Cluster, get_cluster
from roach.slurm.job import Job
from roach.slurm.states import JobState
from roach.slurm.store import JobRecord, Store
from roach.slurm.submit import resume as resume_run
from roach.slurm.submit import submit as submit_job

JOB_NOT_COMPLETED = 6  # exit code: the job ran (or was cancelled) and did not end COMPLETED
FOLLOW_POLL_S = 2.0  # `logs -f`: how often the log is read for new lines
STATE_POLL_S = 10.0  # `logs -f`: how often Slurm is asked whether the job ended

cluster_option = click.option("--cluster", metavar="NAME", default=None,
                              help="Only look on this cluster (needed when a job id is recorded on several).")
run_as_option = click.option(
    "--run-as", metavar="USER", default=None,
    help="Run Slurm's commands as this local user (needs root); the lab's user is roachlab.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


# -- parsing --------------------------------------------------------------------------------------------
def parse_arg_value(text: str) -> Any:
    """A ``--arg`` value: JSON when it parses (``1e-3``, ``200``, ``["a","b"]``, ``true``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(param: str, values: Iterable[str], form: str) -> list[tuple[str, str]]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not of the form {form}", param_hint=param)
        pairs.append((key, value))
    return pairs


def _parse_args(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in _pairs("--arg", values, "KEY=VALUE (e.g. --arg lr=1e-3)"):
        if not key.isidentifier():
            raise click.BadParameter(f"{key!r} is not a keyword argument name", param_hint="--arg")
        if key in out:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="--arg")
        out[key] = parse_arg_value(value)
    return out


def _parse_args_json(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError as e:
        raise click.BadParameter(f"not JSON ({e}): {value!r}", param_hint="--args-json") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"must be a JSON object of keyword arguments, got {type(data).__name__}",
                                 param_hint="--args-json")
    return data


def _parse_env(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    return dict(_pairs("--env", values, "NAME=VALUE (e.g. --env WANDB_MODE=offline)"))


def _cluster(name: str, run_as: str | None) -> Cluster:
    c = get_cluster(name)
    return c.with_(run_as=run_as) if run_as else c


def _job(ref: str, cluster: str | None, run_as: str | None, store: Store) -> Job:
    """The recorded job ``ref`` names (run id or job id); roach only acts on jobs in its store."""
    if cluster is not None:
        get_cluster(cluster)  # an unknown name lists the known ones
    rec = store.find(ref, cluster=cluster)
    from roach.slurm.inside import job_for  # an attempt inside a holder has its own handle

    return job_for(_cluster(rec.cluster, run_as), rec, store)


# -- rendering ------------------------------------------------------------------------------------------
_STYLE = {"completed": "green", "running": "cyan", "pending": "yellow"}


def _state_text(v: JobView) -> Text:
    label = v.state or "?"
    if v.reason:
        label += f" ({v.reason})"
    text = Text(label, style=_STYLE.get(v.status, "red" if v.status != "submitted" else ""))
    if v.held_s is not None:
        text.append(f" held {v.held_s // 3600}h{v.held_s // 60 % 60:02d}m")
    if v.idle:
        text.append(" IDLE: charged, no attempt runs", style="bold yellow")
    return text


def _job_label(job_id: int) -> str:
    """A Slurm job id, or ``H/n`` for attempt n inside holder H."""
    from roach.slurm.inside import split_attempt_id

    split = split_attempt_id(job_id)
    return f"{split[0]}/{split[1]}" if split else str(job_id)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def _print_view(v: JobView) -> None:
    console = Console(highlight=False)
    console.print(Text.assemble(f"job {v.job_id} (run {v.run_id}) on {v.cluster}: ", _state_text(v),
                                f"  exit {v.exit_code}" if v.exit_code else ""), soft_wrap=True)
    console.print(f"  name {v.name}  target {v.target}  submitted {v.submitted_at}", soft_wrap=True)
    console.print(f"  log {v.log}", soft_wrap=True)


# -- commands -------------------------------------------------------------------------------------------
_CLONE_ROOT = signature(submit_job).parameters["clone_root"].default


@click.command()
@click.argument("target")
@click.option("--cluster", default=None, metavar="NAME",
              help="The cluster to run on (e.g. lab). [default: clusters.toml's default, else ilc]")
@click.option("--experiment", default=None, metavar="NAME",
              help="The experiment the run belongs to (what `roach clean` cleans). [default: the log root's parent]")
@click.option("--resources", "preset", required=True, metavar="PRESET", help="A resources preset of the cluster (the lab: CPU, GPU1, GPU2, ...).")
@click.option("--arg", "kwargs", multiple=True, metavar="KEY=VALUE", callback=_parse_args,
              help="A keyword argument of the function; VALUE is read as JSON when it parses (1e-3, 200, "
                   '["a","b"], true), else kept as a string. Repeatable.')
@click.option("--args-json", metavar="JSON", callback=_parse_args_json,
              help="Keyword arguments as one JSON object; --arg may add others, not repeat them.")
@click.option("--name", default=None, help="The job's name. [default: the function's name]")
@click.option("--env", "job_env", multiple=True, metavar="NAME=VALUE", callback=_parse_env,
              help="An environment variable for the job's ranks. Repeatable.")
@click.option("--repo-root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The git repository whose pushed HEAD the job runs.")
@click.option("--log-root", metavar="PATH", default=None,
              help="Cluster directory for logs and bundles (absolute or ~/...). [default: ~/roach/<repo>/slurm-logs]")
@click.option("--clone-root", metavar="PATH", default=None, help=f"Cluster directory for clones. [default: {_CLONE_ROOT}]")
@click.option("--secrets-dir", metavar="PATH", default=None,
              help="Cluster directory of secret files (one per variable, mode 600) exported to the job.")
@click.option("--run-root", metavar="PATH", default=None,
              help="Cluster directory for run directories. [default: runs/ beside the log root]")
@click.option("--run-id", metavar="ID", default=None, help="The run's id. [default: <name>-<UTC time>-<random>]")
@click.option("--description", default="", help="Free text kept in the job's job.json.")
@click.option("--metered", "allow_metered", is_flag=True,
              help="Confirm that a metered cluster (one that spends an allocation or dollars) may be used.")
@click.option("--inside", type=int, metavar="HOLDER", default=None,
              help="Start now as steps of this running holder (roach hold) instead of queuing a job.")
@click.option("--force", is_flag=True, help="With --inside: start even beside another attempt's running ranks.")
@run_as_option
@click.option("--wait", is_flag=True,
              help=f"Wait for the job to end; exit 0 if it COMPLETED, {JOB_NOT_COMPLETED} if not.")
@json_option
@click.pass_context
def submit(ctx: click.Context, target: str, cluster: str, preset: str, kwargs: dict[str, Any],
           args_json: dict[str, Any], job_env: dict[str, str], run_as: str | None, wait: bool, as_json: bool,
           **paths: Any) -> None:
    """Run TARGET (package.module:function) of the repository's pushed HEAD as a Slurm job.

    Prints the job id, run id and log path.
    """
    both = sorted(set(kwargs) & set(args_json))
    if both:
        raise click.BadParameter(f"{', '.join(both)} also given in --args-json", param_hint="--arg")
    options = {k: v for k, v in paths.items() if v is not None}
    with Store() as store:
        job = submit_job(target, {**args_json, **kwargs}, resources=preset,
                         cluster=_cluster(cluster, run_as) if cluster else None,
                         job_env=job_env, store=store, **options)
        _report_submitted(ctx, job, run_as, wait, as_json)


@click.command()
@click.argument("run_id")
@click.option("--cluster", metavar="NAME", default=None,
              help="Run it on this cluster (one that sees the same run directory). [default: where it last ran]")
@click.option("--resources", "preset", metavar="PRESET", default=None,
              help="A resources preset of that cluster. [default: what its last job asked for]")
@click.option("--repo-root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The git repository whose pushed HEAD the job runs.")
@click.option("--metered", "allow_metered", is_flag=True, help="Confirm that a metered cluster may be used.")
@run_as_option
@click.option("--wait", is_flag=True,
              help=f"Wait for the job to end; exit 0 if it COMPLETED, {JOB_NOT_COMPLETED} if not.")
@json_option
@click.pass_context
def resume(ctx: click.Context, run_id: str, cluster: str | None, preset: str | None, repo_root: str,
           allow_metered: bool, run_as: str | None, wait: bool, as_json: bool) -> None:
    """Submit RUN_ID again so it continues from its checkpoint (resume.pt), here or on another cluster.

    A run id roach has no record of, or whose run directory is gone, is an error, never a fresh start.
    """
    with Store() as store:
        rec = store.latest_for_run(run_id)
        name = cluster or (rec.cluster if rec else None)
        target_cluster = _cluster(name, run_as) if name else None
        job = resume_run(run_id, resources=preset, cluster=target_cluster, repo_root=repo_root, store=store,
                         allow_metered=allow_metered)
        _report_submitted(ctx, job, run_as, wait, as_json)


def _report_submitted(ctx: click.Context, job: Job, run_as: str | None, wait: bool, as_json: bool) -> None:
    """Print what was submitted; with ``wait``, wait for it and exit 6 unless it completed."""
    view = JobView.of(job.record, None, job.record.status)
    if not as_json:
        Console(highlight=False).print(f"submitted {job}\n"
                                       f"  log {job.record.log_path}", soft_wrap=True)
    if wait:
        try:
            acct = job.wait()
        except KeyboardInterrupt:
            click.echo(f"stopped waiting; job {job.job_id} goes on (`roach cancel {job.run_id}` stops it)",
                       err=True)
            raise click.Abort() from None
        view = JobView.of(job.record, acct.state.value, job.record.status, None, job.record.exit_code)
    if as_json:
        _echo_json(asdict(view))
    elif wait:
        _print_view(view)
    if wait and not view.ok:
        if not as_json:
            click.echo(f"job {view.job_id} did not complete; read its log: roach logs {view.run_id}"
                       + (f" --run-as {run_as}" if run_as else ""), err=True)
        ctx.exit(JOB_NOT_COMPLETED)


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@cluster_option
@run_as_option
@json_option
def status(ref: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """Show the state of one job (a run id names its latest job)."""
    with Store() as store:
        job = _job(ref, cluster, run_as, store)
        (view,) = live_views(job.client, [job.record], store, whole_queue=False)
    if as_json:
        _echo_json(asdict(view))
    else:
        _print_view(view)


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("-n", "--lines", type=click.IntRange(min=1), default=None, help="Print only the last N lines.")
@cluster_option
@run_as_option
def logs(ref: str, follow: bool, lines: int | None, cluster: str | None, run_as: str | None) -> None:
    """Print a job's log (a run id names its latest job)."""
    with Store() as store:
        job = _job(ref, cluster, run_as, store)
    path = job.paths.log
    if follow:
        follow_log(job, lines)
        return
    if not job.fs.exists(path):
        click.echo(f"{path} does not exist yet: the job has not started (`roach status {ref}`)", err=True)
        return
    click.echo(job.fs.tail(path, lines) if lines else job.fs.read(path), nl=False)


def follow_log(job: Job, lines: int | None, *, sleep=time.sleep, clock=time.monotonic) -> JobState:
    """Print the log as it grows until the job ends: read it every ``FOLLOW_POLL_S`` (only lines not yet
    printed, through the cluster's ``tail``), ask Slurm every ``STATE_POLL_S``. Returns the final state."""
    path, transport = job.paths.log, job.fs.transport
    done = 0  # complete lines printed (or skipped, with -n)
    first, next_state, state = True, 0.0, None
    while True:
        ended = False
        if clock() >= next_state:  # checked before the read, so the last read sees the whole log
            state = job.state()
            ended, next_state = state.is_terminal, clock() + STATE_POLL_S
        res = transport.run(["tail", "-n", f"+{done + 1}", "--", path])
        if res.returncode != 0 and job.fs.exists(path):
            raise RoachError(f"reading {path} failed: {res.stderr.strip()}",
                             hint="check that the submitting user may read the log")
        new = res.stdout.splitlines(keepends=True) if res.returncode == 0 else []
        if new and not ended and not new[-1].endswith("\n"):
            new = new[:-1]  # a line still being written: print it once it is whole
        if first and lines is not None:
            done += max(0, len(new) - lines)
            new = new[-lines:]
        first = False
        sys.stdout.write("".join(new))
        sys.stdout.flush()
        done += len(new)
        if ended:
            click.echo(f"job {job.job_id} ended: {state.value}", err=True)
            return state
        sleep(FOLLOW_POLL_S)


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@cluster_option
@run_as_option
@json_option
def cancel(ref: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """Cancel one job that roach submitted (a run id names its latest job)."""
    with Store() as store:
        job = _job(ref, cluster, run_as, store)
        (view,) = live_views(job.client, [job.record], store, whole_queue=False)
    queued = view.status in ("pending", "running")
    if queued:
        job.cancel()
    if as_json:
        _echo_json({**asdict(view), "cancelled": queued})
    elif queued:
        click.echo(f"cancelled job {job.job_id} (run {job.run_id}) on {job.cluster.name} (it was {view.state})")
    else:
        click.echo(f"job {job.job_id} (run {job.run_id}) already ended ({view.state or view.status}); nothing to cancel")


@click.command("ls")
@cluster_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many jobs to list.")
@run_as_option
@json_option
def ls(cluster: str | None, limit: int, run_as: str | None, as_json: bool) -> None:
    """List recent jobs from the store, newest first, with their live states."""
    if cluster is not None:
        get_cluster(cluster)
    with Store() as store:
        records = store.recent(limit, cluster)
        by_cluster: dict[str, list[JobRecord]] = {}
        for rec in records:
            by_cluster.setdefault(rec.cluster, []).append(rec)
        views = {}
        for name, recs in by_cluster.items():
            for v in live_views(_cluster(name, run_as).client(), recs, store, whole_queue=True):
                views[(v.cluster, v.job_id)] = v
    ordered = [views[(r.cluster, r.job_id)] for r in records]
    if as_json:
        _echo_json([asdict(v) for v in ordered])
        return
    if not ordered:
        click.echo(f"no jobs in the store {store.path}")
        return
    table = Table(box=None, pad_edge=False)
    for header in ("run id", "job id", "cluster", "name", "state", "submitted", "log"):
        table.add_column(header, overflow="fold")
    for v in ordered:
        table.add_row(v.run_id, _job_label(v.job_id), v.cluster, v.name, _state_text(v), v.submitted_at, v.log)
    console = Console(highlight=False)
    if not console.is_terminal:  # piped: whole values, one line per job, for grep and awk
        console.width = 100_000
    console.print(table)

