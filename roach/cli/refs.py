"""A job named on the command line (a run id or a job id) and the options that say where: found in the store, reached the way it was submitted.

Light on purpose: ``roach status`` and ``ls`` import it, so the job handles (:func:`roach.cli.inspect.job_of_ref`)
are not here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from roach.errors import TransportError
from roach.fleet.userconfig import get_cluster
from roach.records.job_record import JobRecord
from roach.records.store import Store

cluster_option = click.option(
    "--cluster",
    metavar="NAME",
    default=None,
    help="Only look on this cluster (needed when a job id is recorded on several).",
)


ssh_alias_option = click.option(
    "--ssh-alias",
    metavar="ALIAS",
    default=None,
    help="Reach the cluster by `ssh ALIAS` [default: the alias the job was submitted through, else the "
    "cluster's own way].",
)


def record_of_ref(ref: str, cluster: str | None, store: Store) -> JobRecord:
    """The recorded job ``ref`` names (run id or job id); roach only acts on jobs in its store."""
    if cluster is not None:
        get_cluster(cluster)  # an unknown name lists the known ones
    return store.find(ref, cluster=cluster)


@contextmanager
def explained(rec: JobRecord, ssh_alias: str | None) -> Iterator[None]:
    """An ssh failure on the alias the store recorded (not one given now) says where that alias came from."""
    try:
        yield
    except TransportError as err:
        if rec.via and not ssh_alias:
            err.hint = (
                f"{err.hint + '; ' if err.hint else ''}job {rec.slurm_id} was submitted through ssh alias "
                f"{rec.via!r}" + (f" (from {rec.via_config})" if rec.via_config else "") + ", so roach reads "
                "it that way: pass --ssh-config FILE if that alias is now defined in another file, or "
                "--ssh-alias ALIAS to reach the cluster another way"
            )
        raise
