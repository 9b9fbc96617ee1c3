"""``roach promote`` and ``roach move``: a pending job to a tier with room, a running run to another tier (it checkpoints and resumes there)."""

from __future__ import annotations

import json
from typing import Any

import click

from roach.cli.args import cli_cluster
from roach.cli.common import json_option
from roach.cli.jsonout import stamp
from roach.cli.watch import cluster_option, new_commit_option, repo_option, run_as_option
from roach.launch.job import Job
from roach.ops.move import MoveResult
from roach.ops.move import move as move_run
from roach.ops.rebalance import promote as promote_job
from roach.records.job_record import JobRecord
from roach.records.store import Store


# -- promote and move ----------------------------------------------------------------------------------------
@click.command()
@click.argument("ref", metavar="JOB")
@click.option("--to", "tier", required=True, metavar="TIER", help="The tier to move it to (the cluster's tier names).")
@click.option(
    "--preempt-own",
    is_flag=True,
    help="Move it even where Slurm says starting it on TIER now would preempt running jobs of yours.",
)
@repo_option
@new_commit_option
@cluster_option
@run_as_option
@json_option
def promote(
    ref: str,
    tier: str,
    preempt_own: bool,
    repo_root: str,
    allow_new_commit: bool,
    cluster: str | None,
    run_as: str | None,
    as_json: bool,
) -> None:
    """Move a pending JOB (run id or job id) to TIER: hold it, resubmit its run id there, cancel it.

    A pending job loses nothing by moving; refused where starting it on TIER now would preempt running jobs of
    yours (unless --preempt-own).
    """
    with Store() as store:
        rec = store.find(ref, cluster=cluster)
        c = cli_cluster(rec.cluster, run_as)
        new = promote_job(
            ref,
            tier,
            cluster=c,
            store=store,
            repo_root=repo_root,
            allow_new_commit=allow_new_commit,
            preempt_own=preempt_own,
        )
    if as_json:
        click.echo(json.dumps(promote_json(rec, new, tier), indent=2))
    else:
        click.echo(
            f"promoted run {rec.run_id} to tier {tier}: job {rec.slurm_id} cancelled, job {new.job_id} "
            f"submitted\n  log {new.record.log_path}"
        )


@click.command()
@click.argument("ref", metavar="RUN")
@click.option("--to", "tier", required=True, metavar="TIER", help="The tier to move it to (the cluster's tier names).")
@click.option("--force", is_flag=True, help="Move a running run that does not checkpoint (it starts over).")
@click.option(
    "--preempt-own",
    is_flag=True,
    help="Move it even where Slurm says starting it on TIER now would preempt running jobs of yours.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    metavar="S",
    help="How long to wait for the new job's log to say where it resumed.",
)
@repo_option
@new_commit_option
@cluster_option
@run_as_option
@json_option
def move(
    ref: str,
    tier: str,
    force: bool,
    preempt_own: bool,
    wait_s: float,
    repo_root: str,
    allow_new_commit: bool,
    cluster: str | None,
    run_as: str | None,
    as_json: bool,
) -> None:
    """Move RUN to TIER: a running run checkpoints (scancel: TERM at its step boundary), is resubmitted with its
    run id, and its new log must say `resumed at step N`; a pending one is promoted.

    Exits 8 when the new job did not resume at the step the old one checkpointed at.
    """
    with Store() as store:
        rec = store.find(ref, cluster=cluster)
        c = cli_cluster(rec.cluster, run_as)
        result = move_run(
            ref,
            tier,
            cluster=c,
            store=store,
            repo_root=repo_root,
            force=force,
            allow_new_commit=allow_new_commit,
            preempt_own=preempt_own,
            wait_s=wait_s,
        )
    if as_json:
        click.echo(json.dumps(move_json(result), indent=2))
        return
    if result.how == "promoted":
        click.echo(
            f"run {result.run_id} was pending: promoted to tier {result.tier} as job {result.new_job} "
            f"(job {result.old_ref} cancelled)"
        )
        return
    ck = (
        f"checkpointed at step {result.checkpoint_step}"
        + ("" if result.fresh_checkpoint else " (no fresh checkpoint after the signal: it resumes from an older one)")
        if result.checkpoint_step is not None
        else "had no checkpoint: it starts from the top"
    )
    click.echo(
        f"moved run {result.run_id} to tier {result.tier}: job {result.old_ref} {ck}; job {result.new_job} submitted"
    )
    if result.verified:
        click.echo(f"  job {result.new_job} resumed at step {result.resumed_at}")
    elif result.verified is None:
        click.echo(f"  job {result.new_job} has not started within {wait_s:.0f}s; `roach watch` says when it resumes")
    click.echo(f"  log {result.log}")


def promote_json(rec: JobRecord, new: Job, tier: str) -> dict[str, Any]:
    """``roach promote --json``: the run, the job it was and the job it is now on ``tier``."""
    return stamp(
        "promote",
        {
            "run_id": rec.run_id,
            "old_job": rec.job_id,
            "old_task": rec.task,
            "new_job": new.job_id,
            "tier": tier,
            "log": new.record.log_path,
        },
    )


def move_json(result: MoveResult) -> dict[str, Any]:
    """``roach move --json``: what the move did (:class:`~roach.ops.move.MoveResult`)."""
    return stamp("move", result.to_json())
