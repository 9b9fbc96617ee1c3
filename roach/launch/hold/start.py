"""Hold an allocation: a job that takes the nodes and sleeps, so that attempts start at once as its steps.

:func:`hold` queues the holder the way ``submit`` queues a job (:mod:`roach.launch.pipeline`);
:class:`Holder` is its handle. Attempts run inside it with ``submit(..., inside=<holder>)``
(:mod:`roach.launch.inside`). The holder's batch shell sleeps; Slurm sends it
``USR1`` ``lead`` seconds before its wall clock (``--signal=B:USR1@lead``), and it then stops the running
attempts' ranks the way :meth:`Holder.signal` does, so their last checkpoint is fresh. The guide is
docs/hold.md. Its steps (listing them, telling them apart, the program that signals ranks) live in
:mod:`roach.launch.hold_steps`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, Unpack

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.paths import check_cluster_path
from roach.fleet.route import submitted_record
from roach.fleet.userconfig import configured, fill_resources, get_cluster
from roach.launch import pipeline
from roach.launch.hold_steps import SIGNAL_PROGRAM, STEP_SIGNAL
from roach.launch.holder import HOLD_TARGET, HOLDER_NAME, HolderHandle
from roach.launch.inside_job import InsideJob
from roach.launch.options import SubmitFields
from roach.launch.pipeline import Destination, Written
from roach.launch.prepare import new_run_id, resolve_resources
from roach.launch.submit import submit as submit_run
from roach.model.ids import RecordKind
from roach.model.resources import Resources
from roach.records.bundle import BundlePaths, JobJson
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.scheduler.clusterfs import ClusterFS


class Holder(HolderHandle):
    """The handle :func:`hold` returns: a :class:`~roach.launch.holder.HolderHandle` that attempts are submitted
    into."""

    def submit(
        self,
        target: str,
        args: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        force: bool = False,
        wait_holder_s: float | None = None,
        **fields: Unpack[SubmitFields],
    ) -> InsideJob:
        """``submit(target, args, inside=<this holder>, ...)`` on the holder's cluster; ``resources`` defaults to
        the holder's, ``store`` to its store."""
        if "cluster" in fields:
            raise UsageError(
                f"an attempt runs on its holder's cluster ({self.cluster.name}): cluster= is not an option here",
                hint="leave cluster= out",
            )
        if "resources" not in fields:
            if self.record is None:
                raise UsageError(f"{self} has no record to take resources from", hint="pass resources=")
            fields["resources"] = Resources.from_json(self.record.resources)
        fields.setdefault("store", self.store)
        fields["cluster"] = self.cluster
        return submit_run(
            target,
            args,
            inside=self.job_id,
            run_id=run_id,
            force=force,
            wait_holder_s=wait_holder_s,
            **fields,
        )


# -- hold() ------------------------------------------------------------------------------------------------
def render_holder(
    *, cluster: Cluster, resources: Resources, name: str, hold_id: str, log_root: str, lead_s: int
) -> str:
    """The holder's batch script: sleep; on ``USR1`` (``lead_s`` before the wall clock, up to Slurm's 30 s
    timer earlier) mark the holder as ending (so no attempt starts any more) and stop the attempts' ranks,
    then once more 10 s later for ranks that were starting at that moment."""
    sig = cluster.checkpoint_signal
    opts = [
        f"--job-name={name}",
        f"--output={log_root}/{hold_id}_%j.out",
        "--open-mode=append",
        "--no-requeue",
        f"--signal=B:USR1@{lead_s}",
        *resources.sbatch_options(cluster.gpu_flag),
    ]
    header = "\n".join(f"#SBATCH {o}" for o in opts)
    return f"""#!/bin/bash
{header}
# roach holder {hold_id}: takes the nodes and sleeps; submit(..., inside=<this job>) runs attempts as its
# steps. Slurm sends this shell USR1 {lead_s} s before the wall clock; it then sends the attempts' ranks
# SIG{sig} (checkpoint and leave). See docs/hold.md.
set -u
now() {{ date -u +%Y-%m-%dT%H:%M:%SZ; }}
bundle={shlex.quote(log_root + "/bundles")}/"$SLURM_JOB_ID"
roach_signal_program={shlex.quote(SIGNAL_PROGRAM)}
stop_attempts() {{
  srun --jobid="$SLURM_JOB_ID" --overlap --job-name={STEP_SIGNAL} --nodes="$SLURM_JOB_NUM_NODES" \\
    --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
    bash -c "$roach_signal_program" {STEP_SIGNAL} {sig} "$SLURM_JOB_ID" ""
}}
again_at=
near_end() {{
  now > "$bundle/ending"
  echo "roach: holder $SLURM_JOB_ID: its wall clock is {lead_s} s away ($(now)): \\
stopping the attempts' ranks (SIG{sig})"
  stop_attempts
  again_at=$((SECONDS + 10))
}}
trap near_end USR1
trap 'echo "roach: holder $SLURM_JOB_ID ends: SIGTERM at $(now)"; exit 0' TERM
echo "roach: holder $SLURM_JOB_ID holds $SLURM_JOB_NODELIST ($SLURM_JOB_NUM_NODES node(s)) from $(now); \\
attempts: submit(..., inside=$SLURM_JOB_ID); end it: roach release $SLURM_JOB_ID"
while true; do
  sleep 5 &
  wait $! || true
  kill $! 2>/dev/null || true
  if [ -n "$again_at" ] && [ "$SECONDS" -ge "$again_at" ]; then
    again_at=
    stop_attempts
  fi
done
"""


def _checked(cluster: Cluster, name: str, log_root: str, lead_s: int | None) -> int:
    """The holder's name and log root checked; its lead (seconds before its wall clock), the cluster's by default."""
    if not HOLDER_NAME.fullmatch(name):
        raise UsageError(
            f"holder name {name!r} has characters Slurm logs and file names do not take",
            hint="use letters, digits and . _ - + = @ :",
        )
    lead = cluster.signal_lead_s if lead_s is None else lead_s
    if not isinstance(lead, int) or lead < 1:
        raise UsageError(f"lead_s={lead!r} must be a whole number of seconds >= 1")
    check_cluster_path("log_root", log_root)
    if any(c in log_root for c in "\n\r"):  # it becomes an #SBATCH line
        raise UsageError(f"log_root {log_root!r} has a line break")
    return lead


def _written(
    cluster: Cluster, job_id: int, paths: BundlePaths, res: Resources, name: str, text: str, description: str
) -> Written:
    """The holder's record, its script and its job.json."""
    record = submitted_record(
        cluster,
        job_id=job_id,
        run_id=paths.run_id,
        name=name,
        target=HOLD_TARGET,
        commit="",
        repo="",
        log_path=paths.log,
        bundle_dir=paths.bundle_dir,
        run_dir="",
        submitted_at=utc_now(),
        resources=res.to_json(),
        holder=job_id,
        kind=RecordKind.HOLDER,
    )
    jj = JobJson.submitted(record, paths.script, description)
    return Written([record], {paths.script: text, paths.job_json: jj.to_json()}, [paths.bundle_dir])


def hold(
    resources: Resources | str,
    *,
    cluster: Cluster | str,
    name: str = "hold",
    log_root: str = "~/roach/holders",
    time: str | None = None,
    lead_s: int | None = None,
    description: str = "",
    allow_metered: bool = False,
    store: Store | None = None,
) -> Holder:
    """Queue a holder: a job with ``resources`` (``time`` overrides theirs) that takes the nodes and sleeps.

    It is charged while it sleeps: release it (:meth:`Holder.release`) once an attempt trains correctly.
    ``lead_s`` (default: the cluster's ``signal_lead_s``) is how long before its wall clock it stops the
    running attempt, so that the attempt's last checkpoint is fresh.
    """
    cluster = configured(get_cluster(cluster))
    res = fill_resources(cluster, resolve_resources(resources, cluster))
    if time is not None:
        res = res.replace(time=time)
    guardrails.check(cluster, res, allow_metered=allow_metered)
    lead = _checked(cluster, name, log_root, lead_s)
    store = store or Store()
    client = cluster.client()
    fs = ClusterFS(client.transport)
    abs_log_root = fs.expand(log_root)
    hold_id = new_run_id(f"hold-{name}")
    text = render_holder(cluster=cluster, resources=res, name=name, hold_id=hold_id, log_root=abs_log_root, lead_s=lead)
    log_prefix = f"{abs_log_root}/{hold_id}_"
    to = Destination(cluster, client, fs, store)

    def write(queued: list[tuple[int, str]]) -> Written:
        ((job_id, _),) = queued
        return _written(cluster, job_id, BundlePaths(abs_log_root, hold_id, job_id), res, name, text, description)

    queued, written = pipeline.queue_and_start(
        to,
        lambda: pipeline.queue_held(to, pipeline.one(text), log_prefix),
        write,
        log_prefix=log_prefix,
        what=lambda ids: f"queueing holder {ids[0]}",
        spend=pipeline.Spend.of(res, None, what=f"holder {hold_id}"),
    )
    return Holder(cluster, queued[0][0], written.records[0], store)
