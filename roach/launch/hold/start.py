"""Queue a holder: a job that takes the nodes and sleeps, so that attempts start at once as its steps.

:func:`hold` queues it the way ``submit`` queues a job (:mod:`roach.launch.pipeline`), with the batch script
:func:`~roach.launch.hold.scripts.render_holder` writes, and returns its :class:`~roach.launch.hold.holder.Holder`.
The guide is docs/hold.md.
"""

from __future__ import annotations

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.paths import check_cluster_path
from roach.fleet.route import submitted_record
from roach.fleet.userconfig import configured, fill_resources, get_cluster
from roach.launch import pipeline
from roach.launch.hold.holder import HOLD_TARGET, HOLDER_NAME, Holder
from roach.launch.hold.scripts import render_holder
from roach.launch.pipeline import Destination, Written
from roach.launch.prepare import new_run_id, resolve_resources
from roach.model.ids import RecordKind
from roach.model.resources import Resources
from roach.records.bundle import BundlePaths, JobJson
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.scheduler.clusterfs import ClusterFS


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

    job_id, written = pipeline.start_one(
        to,
        text,
        write,
        log_prefix=log_prefix,
        what="queueing holder",
        spend=pipeline.Spend.of(res, None, what=f"holder {hold_id}"),
    )
    return Holder(cluster, job_id, written.records[0], store)
