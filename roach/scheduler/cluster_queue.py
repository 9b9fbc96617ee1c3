"""The cluster's queue on some partitions, every user's jobs with their scheduling priority: what a start estimate
reads (the jobs ahead of a pending job, and what the running ones hold), in one call whatever the number of jobs.

``squeue`` with roach's usual fields and ``PriorityLong``, for the running, completing and pending jobs of the given
partitions; through slurmrestd (:class:`~roach.scheduler.rest.client.RestClient`) the same records from its one
job list, without priorities (None: the estimate orders them by tier and submit time).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from roach.errors import ParseError
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import RS, US, QueueRecord, squeue_format, squeue_record
from roach.scheduler.rest.client import RestClient

STATES = "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED"


@dataclass(frozen=True)
class Queued:
    """One job of the cluster's queue and its priority (None: not known)."""

    record: QueueRecord
    priority: int | None


def queue_format() -> str:
    """``squeue -O``: roach's usual fields, then the job's priority."""
    return squeue_format().removesuffix(RS) + US + ",PriorityLong:" + RS


def queue_argv(partitions: Iterable[str] = ()) -> list[str]:
    """The one ``squeue`` of :func:`cluster_queue` (every user: neither ``--me`` nor ``--user``)."""
    argv = ["squeue", "--noheader", "--array", "-t", STATES, "-O", queue_format()]
    parts = sorted({p for p in partitions if p})
    return argv + (["--partition", ",".join(parts)] if parts else [])


def parse_cluster_queue(text: str) -> list[Queued]:
    """Output of ``squeue -O <queue_format()>``, in squeue's order."""
    return [q for q in map(_queued, text.split(RS)) if q is not None]


@functools.lru_cache(maxsize=65536)  # a round reads the same lines again and again
def _queued(chunk: str) -> Queued | None:
    if not chunk.strip():
        return None
    head, sep, prio = chunk.rpartition(US)
    if not sep or not head.strip():
        raise ParseError(f"squeue: a record without its priority field: {chunk!r}")
    prio = prio.strip()
    return Queued(squeue_record(head.lstrip("\n")), int(prio) if prio.isdigit() else None)


def cluster_queue(client: SlurmClient, partitions: Iterable[str] = ()) -> list[Queued]:
    """Every user's active jobs on ``partitions`` (all partitions when none is given), in one call."""
    parts = {p for p in partitions if p}
    if isinstance(client, RestClient):
        recs = client.squeue(all_users=True)
        keep = [r for r in recs if r.state.is_active and (not parts or set(r.partition.split(",")) & parts)]
        return [Queued(r, None) for r in keep]
    return parse_cluster_queue(client.run(queue_argv(parts)).stdout)
