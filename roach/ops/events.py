"""What the watch says: typed events, the per-tier table, and their human and JSON forms.

Pure: building, rendering and counting only. The watcher (:mod:`roach.watch.watcher`) decides when an
event happens; the CLI decides where it goes (stdout, ``--json``, ``--exec``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from roach.model.tiers import Tier, tier_of
from roach.ops.event_schema import EVENT_SCHEMA
from roach.scheduler.parse import QueueRecord


class EventKind(enum.Enum):
    """Every line the watch prints. Edge events fire once per change; heartbeat on a clock."""

    STARTED = "started"  # pending -> running (each attempt)
    FINISHED = "finished"  # sacct says it ended: state and exit code
    REQUEUED = "requeued"  # back in the queue: restart count rose, elapsed went backwards, running -> pending
    PREEMPTED = "preempted"  # a requeue on a preemptible tier, or the run's log says it was preempted
    RESUMED = "resumed"  # a new attempt's log says "resumed at step N"
    FROM_THE_TOP = "from_the_top"  # a new attempt of a run that had progress started from step 0
    NODE_FAILED = "node_failed"  # its log: a node could not hold the clone or a write found no room (node excluded)
    STALLED = "stalled"  # the log has not moved for longer than the run's usual gap
    STALL_REQUEUED = "stall_requeued"  # --on-stall requeue requeued a stalled run to resume from its checkpoint
    STALL_REQUEUE_FAILED = "stall_requeue_failed"  # --on-stall requeue tried and scontrol refused
    HELD_RELEASED = "held_released"  # --on-stall requeue released a run Slurm held after its launch failed
    HELD_RELEASE_FAILED = "held_release_failed"  # --on-stall requeue tried and scontrol refused
    NEVER_STARTS = "never_starts"  # pending on a reason that will not clear as it is
    PENDING = "pending"  # pending: when it will likely start (first seen pending, and when that moves)
    PROMOTION = "promotion"  # a tier has room while a job of the user's pends lower: a move to make now
    PROMOTED = "promoted"  # --rebalance made that move
    PROMOTE_FAILED = "promote_failed"  # --rebalance tried and could not
    NOT_PROMOTED = "not_promoted"  # weighed and not made: it would preempt the user's runs for more than it gains
    RESERVATION = "reservation"  # the reservation a pending job asks for moved (new start) or vanished
    LOST = "lost"  # left the queue and accounting has no record or no end of it after a long wait
    DISK = "disk"  # a log directory's size or its file system's free space crossed a threshold
    OUTAGE = "outage"  # slurmctld / slurmdbd / the connection is unreachable (said once)
    RECOVERED = "recovered"  # reachable again
    NODE_NOT_RESPONDING = "node_not_responding"  # a running job's node stopped answering Slurm (sinfo's `*`)
    BUDGET = "budget"  # a metered cluster's grant passed 50, 80 or 100 % of its GPU-hours (at 100: pending jobs held)
    HEARTBEAT = "heartbeat"  # every heartbeat interval, whatever happened: the tier table in every line
    QUEUE_EMPTY = "queue_empty"  # every watched job has ended: the watch exits


@dataclass(frozen=True)
class TierRow:
    """One tier as the user holds it now. Claimed = running + pending GPUs (a pending job owns its slot)."""

    name: str
    cap: int | None
    claimed: int
    running: int
    pending: int
    preemptible: bool = False

    @property
    def free(self) -> int | None:
        """GPUs the user may still claim here (None: no per-user cap)."""
        return None if self.cap is None else max(self.cap - self.claimed, 0)

    def text(self) -> str:
        if self.cap is None:
            return f"{self.name} {self.claimed} claimed"
        return f"{self.name} {self.claimed}/{self.cap} claimed, {self.free} free"

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.name,
            "cap": self.cap,
            "claimed": self.claimed,
            "running": self.running,
            "pending": self.pending,
            "free": self.free,
            "preemptible": self.preemptible,
        }


def tier_table(tiers: Sequence[Tier], queue: Iterable[QueueRecord]) -> tuple[TierRow, ...]:
    """Recount every tier top down from the user's whole queue (other sessions' jobs count too)."""
    running = {t.name: 0 for t in tiers}
    pending = {t.name: 0 for t in tiers}
    tiers = tuple(tiers)
    where: dict[tuple[str, str], Tier | None] = {}  # a long queue has few (partition, qos) pairs: each found once
    for q in queue:
        if not q.state.is_active:
            continue
        at = (q.partition, q.qos)
        t = where[at] if at in where else where.setdefault(at, tier_of(tiers, *at))
        if t is None:
            continue
        (running if q.state.is_running else pending)[t.name] += q.tres.gpus
    return tuple(
        TierRow(t.name, t.gpu_cap, running[t.name] + pending[t.name], running[t.name], pending[t.name], t.preemptible)
        for t in tiers
    )


def tiers_text(rows: Sequence[TierRow]) -> str:
    return "; ".join(r.text() for r in rows) if rows else "no tiers declared"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    """One thing the watch says. ``data`` holds the kind's own fields (state, exit_code, reason, tier...)."""

    kind: EventKind
    time: float  # epoch seconds
    cluster: str
    message: str  # the human line, without time and kind
    job_id: str | None = None  # squeue's id: 123 or 123_4
    run_id: str | None = None
    name: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    tiers: tuple[TierRow, ...] = ()
    seq: int | None = None  # its number in the store's watch log, once a poller's round put it there

    def line(self) -> str:
        """The human line: time, kind, message, and the tier table on heartbeats and promotions."""
        text = f"{iso(self.time)} {self.kind.value:<12} {self.message}"
        if self.tiers and self.kind in (EventKind.HEARTBEAT, EventKind.PROMOTION, EventKind.PROMOTED):
            text += f" | tiers: {tiers_text(self.tiers)}"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": EVENT_SCHEMA,
            "event": self.kind.value,
            "time": iso(self.time),
            "cluster": self.cluster,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "name": self.name,
            "message": self.message,
        }
        out.update({k: v for k, v in self.data.items() if k != "schema"})
        out["tiers"] = [r.to_json() for r in self.tiers]
        if self.seq is not None:
            out["seq"] = self.seq
        return out

    def stored(self) -> dict[str, Any]:
        """The event as the watch log keeps it (:meth:`from_stored` reads it back)."""
        return {
            "kind": self.kind.value,
            "time": self.time,
            "cluster": self.cluster,
            "message": self.message,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "name": self.name,
            "data": dict(self.data),
            "tiers": [r.to_json() for r in self.tiers],
        }

    @classmethod
    def from_stored(cls, d: Mapping[str, Any], seq: int | None = None) -> Event:
        tiers = tuple(
            TierRow(t["tier"], t["cap"], t["claimed"], t["running"], t["pending"], t["preemptible"]) for t in d["tiers"]
        )
        return cls(
            EventKind(d["kind"]),
            d["time"],
            d["cluster"],
            d["message"],
            d["job_id"],
            d["run_id"],
            d["name"],
            d["data"],
            tiers,
            seq,
        )


def job_label(job_id: str | None, run_id: str | None, name: str | None = None) -> str:
    """``job 123 (run r-1)``, ``job 123 (name)``, ``job 123``."""
    if run_id:
        return f"job {job_id} (run {run_id})"
    return f"job {job_id} ({name})" if name else f"job {job_id}"


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
