"""`roach sync`, `sbatch`, `wait`, `pull`, `verify`: the remote-workspace backend from the command line
(the library is :mod:`roach.workspace.backend`; the guide is docs/remote-workspace.md).

Exit codes: 0 ok; 2 a usage error (a script that lacks a request is one: the list is printed);
4 transport; 5 Slurm; 6 `wait` saw the job end other than COMPLETED; 7 something required is missing
(the workspace file, the remote root, a file scoring/interface.md requires, the job's bundle on `pull`).
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option
from roach.cli.common import ssh_config_option as config_option
from roach.cli.workspace_json import pull_json, sbatch_json, sync_json, verify_json, wait_json
from roach.fleet.cluster import Cluster, with_ssh_override
from roach.records.results import JOB_NOT_COMPLETED
from roach.workspace.backend import (
    CHECKABLE_SKIPS,
    sbatch_script,
)
from roach.workspace.backend import (
    pull as pull_job,
)
from roach.workspace.backend import (
    sync as sync_ws,
)
from roach.workspace.backend import (
    verify as verify_ws,
)
from roach.workspace.backend import (
    wait as wait_job,
)
from roach.workspace.base import DEFAULT_EXCLUDES, Workspace, resolve_cluster
from roach.workspace.wait import WaitEvent

MISSING_REQUIRED = 7  # exit code: something required is missing (same code as `roach doctor`)

workspace_option = click.option(
    "--workspace",
    "workspace_dir",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="The local workspace folder (holds .neurico/).",
)
cluster_option = click.option(
    "--cluster",
    "cluster_name",
    metavar="NAME",
    default=None,
    help="The cluster (default: the job's record, else roach.toml [workspace] cluster).",
)
alias_option = click.option(
    "--ssh-alias", metavar="ALIAS", default=None, help="Reach the cluster by `ssh ALIAS` instead of its own setting."
)


def _console(err: bool = False) -> Console:
    return Console(highlight=False, stderr=err, soft_wrap=True)


def _cluster(
    ws: Workspace, name: str | None, alias: str | None, config: str | None, job_id: str | None = None
) -> Cluster:
    return with_ssh_override(resolve_cluster(ws, name, job_id), alias, config)


def _notes(ws: Workspace) -> None:
    for note in ws.notes:  # e.g. the runtime's environment disagreeing with the file (the file wins)
        _console(err=True).print(Text(f"note: {note}", style="yellow"))


def _record_line(rec) -> Text:
    style = "green" if rec.status == "completed" else ("yellow" if not rec.is_final else "red")
    shown = rec.status if rec.is_final else rec.live_state  # before the end, status is "unknown"
    return Text.assemble(
        f"job {rec.job_id}: ",
        (shown, f"bold {style}"),
        f"  slurm_state {rec.slurm_state}  exit {rec.exit_code}" if rec.is_final else "",
    )


@click.command()
@workspace_option
@cluster_option
@click.option(
    "--exclude", "extra", multiple=True, metavar="PATTERN", help="Leave this out too (rsync pattern). Repeatable."
)
@click.option(
    "--no-default-excludes",
    is_flag=True,
    help=f"Send what the defaults leave out ({' '.join(DEFAULT_EXCLUDES)}, or roach.toml's exclude).",
)
@click.option("--include-git", is_flag=True, help="Send .git/ too (left out by default).")
@click.option("--delete", is_flag=True, help="Remove remote files that are not here (never done without it).")
@click.option("--dry-run", is_flag=True, help="Say what would be sent; send nothing.")
@alias_option
@config_option
@json_option
def sync(
    workspace_dir: str,
    cluster_name: str | None,
    extra: tuple[str, ...],
    no_default_excludes: bool,
    include_git: bool,
    delete: bool,
    dry_run: bool,
    ssh_alias: str | None,
    ssh_config: str | None,
    as_json: bool,
) -> None:
    """Copy the workspace up to its remote root (rsync over the cluster's one SSH connection)."""
    ws = Workspace.load(workspace_dir)
    _notes(ws)
    res = sync_ws(
        ws,
        _cluster(ws, cluster_name, ssh_alias, ssh_config),
        excludes=() if no_default_excludes else None,
        extra_excludes=extra,
        delete=delete,
        dry_run=dry_run,
        include_git=include_git,
    )
    if as_json:
        _echo_json(sync_json(res))
        return
    verb = "would send" if dry_run else "sent"
    _console().print(
        f"{verb} {len(res.changed)} file(s) from {res.source} to {res.destination}"
        + (f", deleted {len(res.deleted)}" if res.deleted else "")
    )
    _console().print(f"  excluded: {' '.join(res.excludes) or '(nothing)'} (and dsi-slurm-artifacts/ always)")


@click.command()
@click.argument("script", type=click.Path(dir_okay=False))
@workspace_option
@cluster_option
@click.option("--description", default="", help="Short purpose of the job (kept in job.json).")
@click.option(
    "--preemptible",
    is_flag=True,
    help="Add --requeue and --signal=B:USR1@300 where missing (for a partition that preempts).",
)
@click.option("--no-check-account", is_flag=True, help="Do not require --account (for a site without accounts).")
@click.option(
    "--no-check",
    "skips",
    multiple=True,
    type=click.Choice(CHECKABLE_SKIPS),
    help="Do not require this request. Repeatable.",
)
@click.option("--sync", "sync_first", is_flag=True, help="Sync the workspace up first.")
@alias_option
@config_option
@json_option
def sbatch(
    script: str,
    workspace_dir: str,
    cluster_name: str | None,
    description: str,
    preemptible: bool,
    no_check_account: bool,
    skips: tuple[str, ...],
    sync_first: bool,
    ssh_alias: str | None,
    ssh_config: str | None,
    as_json: bool,
) -> None:
    """Submit SCRIPT (a sbatch script of the workspace) from the remote root, logs into its bundle.

    The script must ask for an account, partition, time, memory and CPUs (and GPUs if it uses them);
    missing --output/--error lines are added (dsi-slurm-artifacts/%j/slurm_%j.out|.err), and said.
    The script file is not changed. Submitted held; released once its bundle exists and it is recorded in
    roach's store (run sbatch-JOB: `roach ls`, `status`, `logs` see it).
    """
    ws = Workspace.load(workspace_dir)
    _notes(ws)
    cluster = _cluster(ws, cluster_name, ssh_alias, ssh_config)
    if sync_first:
        sync_ws(ws, cluster)
    skip = set(skips) | ({"account"} if no_check_account else set())
    sub = sbatch_script(ws, cluster, script, description, preemptible=preemptible, skip_checks=tuple(sorted(skip)))
    if as_json:
        _echo_json(sbatch_json(sub))
        return
    con = _console()
    con.print(f"submitted job {sub.job_id} ({sub.script.path}) on {sub.cluster}; bundle {sub.remote_bundle}")
    for line in sub.script.added:
        con.print(Text(f"  added: {line}", style="cyan"))
    for note in sub.script.notes:
        con.print(Text(f"  note: {note}", style="yellow"))
    con.print(f"  next: roach wait {sub.job_id}  (roach ls and roach status {sub.job_id} show it too)")


@click.command()
@click.argument("job_id", metavar="JOB")
@workspace_option
@cluster_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="SECONDS",
    help="Seconds between looks at the queue (default and minimum: 60; the lab allows 1).",
)
@click.option("--pull", "then_pull", is_flag=True, help="Then copy the bundle and outputs back (as `roach pull`).")
@alias_option
@config_option
@json_option
@click.pass_context
def wait(
    ctx: click.Context,
    job_id: str,
    workspace_dir: str,
    cluster_name: str | None,
    interval: float | None,
    then_pull: bool,
    ssh_alias: str | None,
    ssh_config: str | None,
    as_json: bool,
) -> None:
    """Watch JOB through the one poller (a job the store lacks: from one session) until it ends; record job.json.

    Prints a line per state change. Exits 0 if the job COMPLETED, 6 if it ended otherwise.
    """
    ws = Workspace.load(workspace_dir, job_id)
    _notes(ws)
    cluster = _cluster(ws, cluster_name, ssh_alias, ssh_config, job_id)
    con = _console(err=as_json)

    def show(ev: WaitEvent) -> None:
        con.print(Text(str(ev), style="red" if ev.kind == "error" else ""))

    try:
        rec = wait_job(ws, job_id, cluster, interval_s=interval, on_event=show)
    except KeyboardInterrupt:
        click.echo(f"stopped waiting; job {job_id} goes on (`roach wait {job_id}` again later)", err=True)
        raise click.Abort() from None
    pulled = pull_job(ws, job_id, cluster) if then_pull else None
    if as_json:
        _echo_json(wait_json(rec, pulled))
    else:
        con.print(_record_line(rec))
        if pulled:
            _print_pull(pulled)
    if rec.status != "completed":
        ctx.exit(JOB_NOT_COMPLETED)


def _print_pull(res) -> None:
    con = _console()
    where = res.bundle if res.bundle_found else "not found on the cluster"
    con.print(f"job {res.job_id}: bundle {where}; status {res.record.status}")
    if res.copied:
        con.print(f"  copied back: {' '.join(res.copied)}")
    if res.missing:
        con.print(Text(f"  not on the cluster: {' '.join(res.missing)}", style="yellow"))
    for note in res.notes:
        con.print(Text(f"  note: {note}", style="yellow"))
    if res.still_queued:
        con.print(
            Text(
                f"  the job is still queued ({', '.join(res.still_queued)}): job.json is not final; "
                f"`roach wait {res.job_id}`",
                style="yellow",
            )
        )


@click.command()
@click.argument("job_id", metavar="JOB")
@workspace_option
@cluster_option
@click.option(
    "--output",
    "outputs",
    multiple=True,
    metavar="PATH",
    help="Another output to bring back (workspace-relative), besides every path scoring/interface.md "
    "names and roach.toml's outputs. Repeatable.",
)
@alias_option
@config_option
@json_option
@click.pass_context
def pull(
    ctx: click.Context,
    job_id: str,
    workspace_dir: str,
    cluster_name: str | None,
    outputs: tuple[str, ...],
    ssh_alias: str | None,
    ssh_config: str | None,
    as_json: bool,
) -> None:
    """Copy JOB's bundle back to dsi-slurm-artifacts/JOB/ and its outputs to the same paths here.

    The outputs: every path scoring/interface.md names, roach.toml's outputs (with neither: metrics.json
    artifacts/ results/) and --output. Missing outputs are listed, not an error; a missing bundle exits 7.
    """
    ws = Workspace.load(workspace_dir, job_id)
    _notes(ws)
    res = pull_job(ws, job_id, _cluster(ws, cluster_name, ssh_alias, ssh_config, job_id), outputs=outputs)
    if as_json:
        _echo_json(pull_json(res))
    else:
        _print_pull(res)
    if not res.bundle_found:
        ctx.exit(MISSING_REQUIRED)


@click.command()
@workspace_option
@json_option
@click.pass_context
def verify(ctx: click.Context, workspace_dir: str, as_json: bool) -> None:
    """Check every file scoring/interface.md names: exit 7 listing each missing or invalid one with why.

    Required files must exist and be valid (non-empty; .json, .jsonl, .csv parse); a directory must hold
    something; one member of an any-of group suffices; optional (no, recommended) ones are notes.
    """
    res = verify_ws(Path(workspace_dir))
    if as_json:
        _echo_json(verify_json(res))
    else:
        con = _console()
        if res.ok:
            con.print(Text(f"all {len(res.entries)} file(s) {res.interface} names are usable", style="bold green"))
        else:
            con.print(
                Text(
                    f"{len(res.problems)} required file(s) missing or invalid (from {res.interface}):", style="bold red"
                )
            )
            for f in res.problems:
                con.print(f"  {f.path}: {f.reason}")
        for note in res.notes:
            con.print(Text(f"  note: {note}", style="yellow"))
    if not res.ok:
        ctx.exit(MISSING_REQUIRED)
