"""The watch's heartbeat: every ``every_s`` one line of what it watches, the running holders included
(one ``squeue -s`` for all of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roach.errors import RoachError
from roach.launch.hold.steps import idle_holders
from roach.ops.events import Event, TierRow
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.watch.health import heartbeat_event
from roach.watch.jobs import JobWatch


@dataclass
class Heartbeat:
    """One watcher's heartbeat on cluster ``cluster``: due ``every_s`` after the last one the store keeps
    (``meta["heartbeat_at"]``), and always in this watcher's first round (``beating`` says it has beaten)."""

    cluster: str
    client: SlurmClient
    every_s: float = 900.0
    beating: bool = field(default=False, init=False)

    def beat(
        self,
        meta: dict[str, Any],
        now: float,
        views: dict[str, JobWatch],
        rows: tuple[TierRow, ...] | None,
        active: dict[str, QueueRecord],
    ) -> list[Event]:
        """The heartbeat's event when one is due (none otherwise); ``meta`` keeps when it was said."""
        last = meta.get("heartbeat_at")
        if self.beating and last is not None and now - last < self.every_s:
            return []
        meta["heartbeat_at"], self.beating = now, True
        return [heartbeat_event(self.cluster, meta, now, views, rows, self.holders(views, active))]

    def holders(self, views: dict[str, JobWatch], active: dict[str, QueueRecord]) -> list[dict[str, Any]]:
        """The watched holders that run, which are charged: held time, time limit and whether one is idle (no
        attempt runs in it), asked with one ``squeue -s`` for all, only in a heartbeat's round."""
        held = {
            k: active[k]
            for k, w in views.items()
            if w.holder and not w.done and k in active and active[k].state.is_running
        }
        if not held:
            return []
        try:
            idle = idle_holders(self.client, [q.raw_id for q in held.values()])
        except RoachError:
            idle = {}  # not known this time; the next heartbeat asks again
        return [
            {
                "job_id": k,
                "run_id": views[k].run_id,
                "name": views[k].name or None,
                "held_s": q.elapsed_s,
                "time_limit_s": q.time_limit_s,
                "idle": idle.get(q.raw_id),
            }
            for k, q in held.items()
        ]
