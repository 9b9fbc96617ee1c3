"""What a start estimate (:mod:`roach.ops.estimate.starts`) reads, gathered in a constant number of Slurm calls: the cluster's
queue on the pending jobs' partitions (one ``squeue``), the nodes and the reservations (the caller's reads, through
the site cache: at most once in its age), and from the watch's saved state the runs' paces and the lengths of the
jobs it saw end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from roach.model.tiers import Tier
from roach.ops.estimate.starts import Inputs, Pace, Reservation, StartEstimate, estimate_queue
from roach.scheduler.client import SlurmClient
from roach.scheduler.cluster_queue import cluster_queue
from roach.scheduler.parse import QueueRecord
from roach.scheduler.rest.site import hostnames

ENDED_KEPT = 50  # lengths of the jobs seen to end, newest last


def paces_of(views: Mapping[str, Mapping[str, Any]]) -> dict[str, Pace]:
    """Each watched run's pace from its saved view (``points``, ``step``, ``steps_total``)."""
    out = {}
    for key, v in views.items():
        pace = Pace.of(v.get("points") or [], v.get("step"), v.get("steps_total"))
        if pace is not None and not v.get("done"):
            out[key] = pace
    return out


def note_ended(
    ended: Sequence[float],
    running: Mapping[str, Sequence[float]],
    queue: Iterable[QueueRecord],
    now: float,
    max_gap_s: float = 600.0,
) -> tuple[list[float], dict[str, list[float]]]:
    """The lengths of jobs seen to end, with those that ran at the last look (``running``: id -> [time, elapsed])
    and are gone from ``queue`` now, each the midpoint between the two looks (a last look more than ``max_gap_s``
    ago, a watch started again later, says too little of when it ended); and this look's running jobs, for the next."""
    seen = {q.job_id: q for q in queue}
    out = list(ended)
    for key, (t, elapsed) in running.items():
        if key not in seen and now - t <= max_gap_s:
            out.append(round(elapsed + (now - t) / 2, 1))
    return out[-ENDED_KEPT:], {k: [now, q.elapsed_s] for k, q in seen.items() if q.state.is_running}


def estimates(
    client: SlurmClient,
    pending: Sequence[QueueRecord],
    tiers: tuple[Tier, ...],
    views: Mapping[str, Mapping[str, Any]],
    durations: Sequence[float],
    now: float,
    reservations: Callable[[], Sequence[Reservation]] = tuple,
    resv_of: Mapping[str, str] | None = None,
) -> dict[str, StartEstimate]:
    """The start estimates of ``pending`` (the user's pending jobs), from one read of the cluster's queue on their
    partitions, the nodes as the site cache has them and the ``reservations`` (read after those two)."""
    if not pending:
        return {}
    parts = {p for q in pending for p in q.partition.split(",")}
    queue = cluster_queue(client, parts)
    nodes = client.nodes(cached=True)
    resv = tuple(reservations())
    inp = Inputs(queue, nodes, tiers, paces_of(views), tuple(durations), resv, dict(resv_of or {}))
    return estimate_queue(inp, now, only=[q.job_id for q in pending])


def reservation(name: str, start: str, end: str, nodes: str | None = None) -> Reservation | None:
    """A reservation as ``scontrol show reservation`` prints its times (the cluster's local time) and nodes."""
    try:
        t0, t1 = datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp()
    except ValueError:
        return None
    names = tuple(hostnames(nodes)) if nodes and nodes not in ("(null)", "") else None
    return Reservation(name, t0, t1, names)
