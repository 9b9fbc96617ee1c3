"""How a job record reaches its cluster: the ssh alias a submission went through, kept in the record, and
the cluster a later read of that job uses (the same alias and config file)."""

from __future__ import annotations

from typing import Any, TypedDict

from roach.fleet.cluster import Cluster, known_clusters
from roach.fleet.userconfig import configured, get_cluster
from roach.model.status import Status
from roach.records.job_record import JobRecord


class Route(TypedDict):
    """The two columns of a job record that say how its submission reached the cluster."""

    via: str | None
    via_config: str | None


def submitted_route(cluster: Cluster) -> Route:
    """What a job record keeps of how a submission reached ``cluster``: ``via`` (see :func:`submitted_via`)
    and ``via_config``, the ssh config file that alias came from (None: ssh's default)."""
    via = submitted_via(cluster)
    return {"via": via, "via_config": cluster.ssh_config if via else None}


def submitted_record(cluster: Cluster, route: Route | None = None, **fields: Any) -> JobRecord:
    """A job record as a submission makes it: ``cluster``'s name and route (``route``: one computed already),
    SUBMITTED, no end yet; ``fields`` are the rest of :class:`JobRecord`'s."""
    return JobRecord(
        cluster=cluster.name,
        status=Status.SUBMITTED,
        slurm_state=None,
        exit_code=None,
        recorded_at=None,
        **(route if route is not None else submitted_route(cluster)),
        **fields,
    )


def as_recorded(cluster: Cluster, rec: JobRecord) -> Cluster:
    """``cluster`` reached the way ``rec``'s job was submitted: its recorded alias and config file, if any."""
    return cluster.with_(ssh_alias=rec.via, ssh_config=rec.via_config) if rec.via else cluster


def reaching(rec: JobRecord, cluster: Cluster | str | None = None) -> Cluster:
    """The cluster that reaches ``rec``'s job: ``cluster`` as given when it is a Cluster object, else the
    record's cluster (clusters.toml applied) reached the way the job was submitted."""
    return cluster if isinstance(cluster, Cluster) else as_recorded(get_cluster(rec.cluster), rec)


def submitted_via(cluster: Cluster) -> str | None:
    """The ssh alias a submission to ``cluster`` goes through when it is not the cluster's own (an override
    such as ``--ssh-alias``), else None: what the store's ``via`` records, so that later reads of the job go
    the same way."""
    if cluster.ssh_alias is None:
        return None
    own = configured(get_cluster(cluster.name)).ssh_alias if cluster.name in known_clusters() else None
    return cluster.ssh_alias if cluster.ssh_alias != own else None
