"""Reservations the watched jobs ask for: the queue with each job's reservation, and what changed.

The round's one ``squeue`` asks for one more field than :meth:`SlurmClient.squeue` does, the job's
reservation (squeue's ``%v``), and is otherwise the same call read by the same parser. Only in a round where
a watched pending job asks for a reservation does the watch ask ``scontrol show reservation`` (once, for
all of them). A reservation whose start time changed since the last round is said to have moved; one that
no longer exists (Slurm deletes a reservation when it ends, and its pending jobs then lose it and wait
held, ``RESV_DEL_HOLD``) has vanished: the job asked for it is remembered from the rounds before.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass

from roach.errors import ParseError
from roach.model.tiers import Tier
from roach.ops.events import Event, EventKind, TierRow, tier_table
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import RS, US, QueueRecord, squeue_format, squeue_record
from roach.scheduler.parse_control import parse_key_values
from roach.scheduler.rest.client import RestClient

_NULL = {"", "(null)", "N/A", "None"}


def queue_format() -> str:
    """``squeue -O``: roach's usual fields, then the reservation."""
    return squeue_format().removesuffix(RS) + US + ",Reservation:" + RS


def parse_queue(text: str) -> tuple[list[QueueRecord], dict[str, str]]:
    """Output of ``squeue -O <queue_format()>``: the records, and the reservation of each job that has one
    (by squeue's id: ``123`` or ``123_4``).

    Each distinct record is read once while it is seen (a round reads the same lines again and again) and its
    record is the same object each time: the watch knows a line that did not change by it."""
    got = list(filter(None, map(_queue_record, text.split(RS))))  # map and filter: no Python code per line
    return list(map(_RECORD, got)), {r.job_id: n for r, n in filter(_RESERVATION, got) if n}


_RECORD, _RESERVATION = operator.itemgetter(0), operator.itemgetter(1)


@functools.lru_cache(maxsize=65536)
def _queue_record(chunk: str) -> tuple[QueueRecord, str | None] | None:
    """One record of :func:`parse_queue` and its reservation (None: none); None for a blank chunk."""
    if not chunk.strip():
        return None
    head, sep, name = chunk.rpartition(US)
    if not sep:
        raise ParseError(f"squeue: a record without its reservation field: {chunk!r}")
    head = head.lstrip("\n")
    if not head.strip():
        raise ParseError(f"squeue: a record without its fields: {chunk!r}")
    name = name.strip()
    return squeue_record(head), (None if name in _NULL else name)


@dataclass(frozen=True, eq=False)
class Queue:
    """One round's look at the user's queue: squeue's text, its records, each job's reservation, the jobs still
    in the queue by squeue's id, and the tier table they make. Read only: a round keeps it for the next."""

    text: str
    records: list[QueueRecord]
    resv_of: dict[str, str]
    active: dict[str, QueueRecord]
    tiers: tuple[Tier, ...]
    rows: tuple[TierRow, ...]


def read_queue(client: SlurmClient, tiers: tuple[Tier, ...], last: Queue | None = None) -> Queue:
    """The user's queue (one ``squeue``, as :meth:`SlurmClient.squeue` asks it) with each job's reservation.
    A queue that prints what it printed at the ``last`` look is that queue: a long pending array's round
    reads and counts nothing again."""
    if isinstance(client, RestClient):  # slurmctld's job list through slurmrestd, one request
        text, recs, resv = client.queue_reservations()
        if last is not None and last.text == text and last.tiers == tiers:
            return last
    else:
        text = client.run(["squeue", "--noheader", "--array", "-O", queue_format(), "--me"]).stdout
        if last is not None and last.text == text and last.tiers == tiers:
            return last
        recs, resv = parse_queue(text)
    return Queue(text, recs, resv, {q.job_id: q for q in recs if q.state.is_active}, tiers, tier_table(tiers, recs))


@dataclass(frozen=True)
class Reservation:
    name: str
    start: str  # as scontrol prints it: the cluster's local time, YYYY-MM-DDTHH:MM:SS
    end: str
    state: str
    nodes: str = ""  # its nodelist ("": not known)


def parse_reservations(text: str) -> dict[str, Reservation]:
    """``scontrol show reservation -o``: one line per reservation (or "No reservations in the system")."""
    out = {}
    for line in text.splitlines():
        if "ReservationName=" not in line:
            continue
        kv = parse_key_values(line)
        name = kv.get("ReservationName", "")
        if not name:
            raise ParseError(f"scontrol show reservation: no name in {line!r}")
        nodes = kv.get("Nodes", "")
        out[name] = Reservation(
            name, kv.get("StartTime", ""), kv.get("EndTime", ""), kv.get("State", ""), "" if nodes in _NULL else nodes
        )
    return out


def show_reservations(client: SlurmClient, *, cached: bool = False) -> dict[str, Reservation]:
    """One ``scontrol show reservation`` (through slurmrestd: one ``GET .../reservations``, without nodes) for every
    reservation on the cluster; ``cached``: what the site cache read within its age will do."""
    if isinstance(client, RestClient):
        return {r.name: Reservation(r.name, r.start, r.end, r.state) for r in client.reservations()}
    return parse_reservations(client.reservations_text(cached=cached))


def asked(
    watched: Iterable[str], views: dict, active: dict[str, QueueRecord], resv_of: dict[str, str]
) -> dict[str, str]:
    """The watched pending jobs that ask for a reservation, and its name: this round's, or the one it asked for
    in an earlier round (a job whose reservation ended has none any more). A vanished one is not asked again."""
    out = {}
    for key in watched:
        w = views[key]
        name = resv_of.get(key) or w.reservation
        if not name or (w.resv_gone and name == w.reservation):
            continue
        q = active.get(key)
        if q is not None and q.state.is_pending:
            out[key] = name
    return out


def on_reservation(w, name: str, found: dict[str, Reservation], ctx) -> list[Event]:
    """This round's look at the reservation job ``w`` asks for: a line when it moved or vanished, once each."""
    r = found.get(name)
    if r is None:
        w.reservation, w.resv_gone = name, True
        return [
            ctx.event(
                EventKind.RESERVATION,
                w,
                f"{w.label()} asks for reservation {name}, which no longer exists: "
                f"it will not start as it is; remove the reservation (`scontrol update JobId={w.key} "
                f"Reservation=`) or cancel it and submit again",
                reservation=name,
                change="vanished",
                start=None,
                was_start=w.resv_start,
            )
        ]
    events = []
    if name == w.reservation and w.resv_start and r.start != w.resv_start:
        events.append(
            ctx.event(
                EventKind.RESERVATION,
                w,
                f"{w.label()}: its reservation {name} moved: it starts at "
                f"{r.start} (was {w.resv_start}), ends at {r.end}",
                reservation=name,
                change="moved",
                start=r.start,
                was_start=w.resv_start,
            )
        )
    w.reservation, w.resv_start, w.resv_gone = name, r.start, False
    return events
