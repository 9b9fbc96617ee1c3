"""`roach watch`, `why`, `promote`, `move`: watching a user's jobs and moving them between tiers (the library
is :mod:`roach.watch.watcher`, :mod:`roach.ops.pending` and :mod:`roach.ops.rebalance`)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import click

from roach.cli.args import cli_cluster
from roach.cli.common import json_option, ssh_config_option
from roach.cli.refs import ssh_alias_option
from roach.cli.why_text import estimate, req_nodes, why_json, why_lines
from roach.errors import SlurmError, TransportError, UsageError
from roach.fleet.cluster import Cluster, with_ssh_override
from roach.fleet.userconfig import get_cluster
from roach.model.tiers import tier_of
from roach.ops.events import Event
from roach.ops.explain import PendingContext, env_failure, explain
from roach.ops.rebalance import promote as promote_job
from roach.records.job_record import JobRecord
from roach.records.poller.readers import Rank
from roach.records.store import Store
from roach.scheduler.capabilities import RateLimit
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import QueueRecord
from roach.watch.logs import StallRule
from roach.watch.serve import LINGER_S, serve
from roach.watch.shared import Viewer, follow
from roach.watch.stalls import OnStall
from roach.watch.watcher import Watcher

EXEC_TIMEOUT_S = 60.0

cluster_option = click.option(
    "--cluster",
    metavar="NAME",
    default=None,
    help="The cluster (needed when the store holds jobs on several, or for a job roach did not submit).",
)
run_as_option = click.option(
    "--run-as",
    metavar="USER",
    default=None,
    help="Run Slurm's commands (and read the logs) as this local user (needs root); the lab's user is roachlab.",
)
repo_option = click.option(
    "--repo-root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The repository the run was submitted from (it must have the run's commit, pushed).",
)
new_commit_option = click.option(
    "--allow-new-commit", is_flag=True, help="Resubmit at the repository's HEAD instead of the run's own commit."
)


def pick_cluster(name: str | None, store: Store) -> str:
    if name is not None:
        get_cluster(name)
        return name
    names = sorted({r.cluster for r in store.recent(10_000) if not r.is_final})
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(
            "no job of roach's store is still running or pending on any cluster",
            hint="name the cluster to watch: --cluster NAME (and --job ID for jobs roach did not submit)",
        )
    raise UsageError(
        f"the store has unfinished jobs on several clusters: {', '.join(names)}",
        hint=f"watch one: --cluster {names[0]}",
    )


def _emitter(as_json: bool, exec_cmd: list[str] | None):
    def emit(event: Event) -> None:
        data = json.dumps(event.to_json())
        click.echo(data if as_json else event.line())
        sys.stdout.flush()
        if exec_cmd:
            try:
                r = subprocess.run(
                    exec_cmd,
                    input=data + "\n",
                    text=True,
                    capture_output=True,
                    timeout=EXEC_TIMEOUT_S,
                    env={**os.environ, "ROACH_EVENT": event.kind.value},
                )
            except (OSError, subprocess.SubprocessError) as e:
                click.echo(f"roach watch: --exec {exec_cmd[0]} failed for a {event.kind.value} event: {e}", err=True)
                return
            if r.returncode != 0:
                click.echo(
                    f"roach watch: --exec {exec_cmd[0]} exited {r.returncode} for a {event.kind.value} event: "
                    f"{(r.stderr or r.stdout).strip()[-300:]}",
                    err=True,
                )

    return emit


# The options `roach watch` and `roach top` share (top is the watch's round on a screen).
job_ids_option = click.option(
    "--job",
    "job_ids",
    multiple=True,
    metavar="ID",
    help="Also watch this job of yours (e.g. one roach did not submit). Repeatable.",
)
stall_after_option = click.option(
    "--stall-after",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    metavar="S",
    help="The least silence before a log counts as stalled (else 3x the run's usual gap).",
)


def check_job_ids(job_ids: tuple[str, ...]) -> None:
    """Each --job is a Slurm job id (``123``, ``123_4``)."""
    for j in job_ids:
        if not j.replace("_", "").isdigit():
            raise click.BadParameter(f"{j!r} is not a Slurm job id", param_hint="--job")


@click.command()
@cluster_option
@run_as_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    metavar="S",
    help="Seconds between rounds, never under the cluster's floor (doubled per round while Slurm is "
    "unreachable, up to 300).",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(min=1),
    default=900.0,
    show_default=True,
    metavar="S",
    help="Seconds between heartbeat lines (the tier table, whatever happened).",
)
@job_ids_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per event, one a line.")
@click.option(
    "--exec",
    "exec_cmd",
    metavar="CMD",
    help="Run CMD for each event with the event's JSON on stdin and ROACH_EVENT set to its kind. CMD is "
    "split into arguments like a shell would (shlex) but no shell runs it.",
)
@click.option(
    "--rebalance",
    is_flag=True,
    help="Make the promotions itself: cancel a pending run and resubmit its run id into the tier with "
    "room (needs --repo-root at the runs' commit).",
)
@repo_option
@click.option(
    "--probe-window",
    type=click.FloatRange(min=0),
    default=None,
    metavar="S",
    help="Ask `sbatch --test-only` per tier, and count a tier as having room only if a job would start "
    "within S seconds (uncapped tiers too).",
)
@stall_after_option
@click.option(
    "--on-stall",
    type=click.Choice([o.value for o in OnStall]),
    default=OnStall.SAY.value,
    show_default=True,
    help="What to do with a stalled run: `say` it, or also `requeue` it (`scontrol requeue`) when it is a run of "
    "roach's store whose log shows a checkpoint: it resumes from there, once per stall. `requeue` also releases a "
    "run of the store that Slurm held after its launch failed, once per attempt.",
)
@click.option(
    "--once",
    is_flag=True,
    help="One look, then exit: a round where no other viewer polls, else the poller's last round.",
)
@click.option(
    "--since",
    type=click.IntRange(min=0),
    default=None,
    metavar="SEQ",
    help="With --once: every event the watch log keeps after SEQ (an event's `seq`; 0: all of them).",
)
@click.option(
    "--serve",
    "serve_",
    is_flag=True,
    help="Print nothing: poll for the other viewers and waiters of this store and cluster, and exit --linger "
    "seconds after the last has left, or when a watch or top takes the rounds (what a waiting Job starts).",
)
@click.option(
    "--linger",
    type=click.FloatRange(min=0),
    default=LINGER_S,
    show_default=True,
    metavar="S",
    help="With --serve: how long to poll on after the last reader left.",
)
@ssh_alias_option
@ssh_config_option
def watch(
    cluster: str | None,
    run_as: str | None,
    interval: float,
    heartbeat: float,
    job_ids: tuple[str, ...],
    as_json: bool,
    exec_cmd: str | None,
    rebalance: bool,
    repo_root: str,
    probe_window: float | None,
    stall_after: float,
    on_stall: str,
    once: bool,
    since: int | None,
    serve_: bool,
    linger: float,
    ssh_alias: str | None,
    ssh_config: str | None,
) -> None:
    """Watch your jobs until every one has ended: started, finished, preempted, stalled, never-starts and
    promotion lines on change, a heartbeat with the tier table every --heartbeat seconds.

    Watches the jobs in roach's store on the cluster that have not ended, and every --job. Any number of
    watches, `roach top`s and agents may follow one store and cluster: one of them polls Slurm and the others
    show its rounds (docs/watch.md). Exits 0 when the queue is empty and every job COMPLETED, 6 when one ended
    otherwise.
    """
    argv = shlex.split(exec_cmd) if exec_cmd else None
    if exec_cmd is not None and not argv:
        raise click.BadParameter("is empty", param_hint="--exec")
    check_job_ids(job_ids)
    if since is not None and not once:
        raise click.BadParameter("needs --once", param_hint="--since")
    acting = OnStall(on_stall)
    if serve_ and (once or as_json or exec_cmd or rebalance or acting is not OnStall.SAY):
        raise UsageError(
            "--serve prints nothing and moves nothing", hint="drop --once, --json, --exec, --rebalance and --on-stall"
        )
    with Store() as store:
        name = cluster or (pick_cluster(None, store) if not job_ids else None)
        if name is None:
            raise UsageError("--job needs --cluster", hint="e.g. --cluster lab")
        c = cli_cluster(pick_cluster(name, store), run_as)
        c = with_ssh_override(c, *((ssh_alias, ssh_config) if ssh_alias else recorded_way(store, c, ssh_config)))

        def promoter(p) -> int:
            # the round weighed it: a move that preempts the user's runs is made only where they lose less
            return promote_job(p.key, p.to_tier, cluster=c, store=store, repo_root=repo_root, preempt_own=True).job_id

        w_client = c.client()
        w = Watcher(
            c,
            w_client,
            store,
            interval_s=interval,
            heartbeat_s=heartbeat,
            job_ids=tuple(job_ids),
            rebalance=rebalance,
            promoter=promoter if rebalance else None,
            stall=StallRule(min_s=stall_after),
            on_stall=acting,
            probe_window_s=probe_window,
            rate_limit=None if once else rate_limit_of(w_client),
        )
        # a watch whose rounds act (promote, requeue) takes the rounds from one that only says
        rank = Rank.SERVER if serve_ else Rank.REBALANCE if rebalance or acting is OnStall.REQUEUE else Rank.WATCH
        try:
            with Viewer(w, rank=rank) as viewer:  # the poller if none runs, else a reader of its rounds
                if serve_:
                    serve(viewer, linger_s=linger)
                    return
                status = follow(viewer, _emitter(as_json, argv), once=once, since=since)
        except KeyboardInterrupt:
            click.echo("stopped watching; the jobs go on (`roach watch` picks up where this one left)", err=True)
            sys.exit(130)
    if status:
        sys.exit(status)


def rate_limit_of(client: SlurmClient) -> RateLimit | None:
    """The site's RPC rate limit, read once when the watch starts; a controller down then costs only the floor."""
    try:
        return client.capabilities().rate_limit
    except (SlurmError, TransportError):
        return None


def recorded_way(store: Store, c: Cluster, ssh_config: str | None) -> tuple[str | None, str | None]:
    """The ssh alias (and its config file) the unfinished jobs on ``c`` were submitted through, when they
    name one (and only one); ``ssh_config`` given wins over the recorded file."""
    ways = sorted({(r.via, r.via_config or "") for r in store.unfinished(c.name) if r.via})
    if len({alias for alias, _ in ways}) > 1:
        raise UsageError(
            f"the unfinished jobs on {c.name} were submitted through several ssh aliases: "
            f"{', '.join(sorted({a for a, _ in ways}))}",
            hint=f"watch through one of them: --ssh-alias {ways[0][0]}",
        )
    if not ways:
        return None, ssh_config
    return ways[0][0], ssh_config or ways[0][1] or None


# -- why --------------------------------------------------------------------------------------------------
def _find(ref: str, cluster: str | None, store: Store) -> tuple[JobRecord | None, str]:
    try:
        rec = store.find(ref, cluster=cluster)
    except UsageError:
        if not ref.replace("_", "").isdigit() or cluster is None:
            raise
        return None, cluster
    return rec, rec.cluster


@click.command()
@click.argument("ref", metavar="JOB")
@cluster_option
@run_as_option
@json_option
def why(ref: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """Say why JOB is pending, in plain words: will it start by itself, and what to do if not.

    JOB is a run id or job id in roach's store, or any job id with --cluster. Reasons: docs/pending.md.
    """
    with Store() as store:
        rec, name = _find(ref, cluster, store)
    c = cli_cluster(name, run_as)
    client = c.client()
    job = rec.slurm_id if rec else ref

    def named(q: QueueRecord) -> bool:  # a sweep's run is its own task, never the task that holds the array's id
        return q.ref.names(rec.job_id, rec.task) if rec else str(q.ref) == job or str(q.raw_id) == job

    queue = client.squeue()
    mine = [q for q in queue if named(q)]
    if not mine:
        mine = [q for q in client.squeue(job_ids=[job]) if named(q)]
    label = f"job {job}" + (f" (run {rec.run_id})" if rec else "") + f" on {c.name}"
    if not mine or not mine[0].state.is_pending:
        failed = env_failure(ClusterFS(client.transport), rec.bundle_dir) if rec and not mine else None
        if as_json:
            click.echo(json.dumps(why_json(job, rec, mine[0] if mine else None, env_failed=failed), indent=2))
        elif failed:
            click.echo(f"{label} ended before its ranks ran: env_failed, its Python environment could not be built")
            click.echo("\n".join(f"  {line}" for line in failed.splitlines()))
            click.echo("  action:  fix the project's lock file (or --python-env), push, and submit again")
        else:
            state = mine[0].state.value if mine else "not in the queue"
            more = f" on {mine[0].nodelist}" if mine and mine[0].nodelist else ""
            hint = "" if mine else " (`roach status` shows how it ended)"
            click.echo(f"{label} is {state}{more}: it is not pending{hint}")
        return
    q = mine[0]
    exp = explain(q, PendingContext(queue=queue, tiers=c.tiers, req_nodes=req_nodes(client, q)))
    tier = tier_of(c.tiers, q.partition, q.qos)
    now = time.time()
    est = None if exp.never else estimate(client, q, c, now)
    if as_json:
        click.echo(json.dumps(why_json(job, rec, q, exp, tier.name if tier else None, estimate=est, now=now), indent=2))
        return
    click.echo("\n".join(why_lines(label, tier.name if tier else None, exp, est, now)))
