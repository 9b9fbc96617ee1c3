"""The watch's heartbeat: every ``heartbeat_s`` one line of what it watches, the running holders included
(one ``squeue -s`` for all of them)."""

from __future__ import annotations

from typing import Any

from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.launch.hold_steps import idle_holders
from roach.ops.events import Event, TierRow
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import QueueRecord
from roach.watch.health import heartbeat_event
from roach.watch.jobs import (
    JobWatch,
)


class Heartbeat:
    """The heartbeat part of :class:`~roach.watch.watcher.Watcher`; the fields are the watcher's."""

    cluster: Cluster
    client: SlurmClient
    heartbeat_s: float
    beating: bool

    # -- heartbeat ---------------------------------------------------------------------------------------------
    def _heartbeat(
        self,
        meta: dict[str, Any],
        now: float,
        views: dict[str, JobWatch],
        rows: tuple[TierRow, ...] | None,
        active: dict[str, QueueRecord],
    ) -> list[Event]:
        last = meta.get("heartbeat_at")
        if self.beating and last is not None and now - last < self.heartbeat_s:
            return []
        meta["heartbeat_at"], self.beating = now, True
        return [heartbeat_event(self.cluster.name, meta, now, views, rows, self._holders(views, active))]

    def _holders(self, views: dict[str, JobWatch], active: dict[str, QueueRecord]) -> list[dict[str, Any]]:
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
