"""The views of a user's jobs across clusters: :func:`grouped_views`, one :func:`~roach.launch.job_view.live_views`
per cluster and ssh alias, for ``roach ls``; and :func:`reach`, the cluster as a command reaches a recorded job.

A job is read the way it was submitted: through the ssh alias the store records as its ``via`` when it went
through another alias than its cluster's own; :func:`grouped_views` makes one ``squeue`` per (cluster, alias).
What a job's view is, and how it is decided from the store and Slurm, is :mod:`roach.launch.job_view`.
"""

from __future__ import annotations

from roach.fleet.cluster import Cluster, with_ssh_override
from roach.fleet.userconfig import configured, get_cluster
from roach.launch.job_view import JobView, live_views
from roach.records.job_record import JobRecord
from roach.records.store import Store


def reach(
    rec: JobRecord, *, run_as: str | None = None, ssh_alias: str | None = None, ssh_config: str | None = None
) -> Cluster:
    """The cluster as a command reaches ``rec``'s job: through ``ssh_alias`` (``--ssh-alias``) if given, else
    the alias it was submitted through (the store's ``via``), else the cluster's own way. ``ssh_config`` names
    the config file that defines the alias; ``run_as`` applies when the cluster is reached locally."""

    c = configured(get_cluster(rec.cluster))
    if run_as:
        c = c.with_(run_as=run_as)
    if ssh_alias is None and rec.via:  # the way it was submitted: the recorded alias and its config file
        return with_ssh_override(c, rec.via, ssh_config or rec.via_config)
    return with_ssh_override(c, ssh_alias, ssh_config)


def grouped_views(
    records: list[JobRecord],
    store: Store,
    *,
    run_as: str | None = None,
    ssh_alias: str | None = None,
    ssh_config: str | None = None,
) -> list[JobView]:
    """The views of ``records`` (any clusters), in their order: one :func:`live_views` (one ``squeue`` of the
    user's queue, at most one ``sacct``) per cluster and the alias it is reached through. ``ssh_config``
    applies to the groups reached over SSH only."""
    groups: dict[tuple[str, str | None, str | None], list[int]] = {}
    for i, rec in enumerate(records):
        way = (ssh_alias, None) if ssh_alias else (rec.via, rec.via_config)
        groups.setdefault((rec.cluster, *way), []).append(i)
    out: list[JobView | None] = [None] * len(records)
    for idx in groups.values():
        c = reach(records[idx[0]], run_as=run_as, ssh_alias=ssh_alias)
        if ssh_config is not None and c.ssh_alias is not None:
            c = with_ssh_override(c, None, ssh_config)
        for i, view in zip(idx, live_views(c.client(), [records[i] for i in idx], store, whole_queue=True)):
            out[i] = view
    return [v for v in out if v is not None]
