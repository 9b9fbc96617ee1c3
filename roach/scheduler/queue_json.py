"""The user's queue (squeue's records) as JSON and back: what a watch round read, kept for the viewers that did
not read it themselves (``roach top`` beside a running watch)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler.fields import Tres
from roach.scheduler.parse import JobRef, QueueRecord


def dumps(queue: list[QueueRecord]) -> str:
    return json.dumps([_row(q) for q in queue], separators=(",", ":"))


@dataclass
class Encoder:
    """:func:`dumps` for one watch's rounds: the parser hands out one record per distinct squeue line, and the
    same list for the same squeue output, so a round encodes only the lines that changed since the last one, and
    nothing when none did (None)."""

    _last: list[QueueRecord] | None = field(default=None, repr=False)
    _rows: dict[int, tuple[QueueRecord, str]] = field(default_factory=dict, repr=False)

    def dumps_changed(self, queue: list[QueueRecord]) -> str | None:
        """The queue's JSON, None where it is the very list the last call had."""
        if queue is self._last:
            return None
        rows = {}
        for q in queue:
            hit = self._rows.get(id(q))
            rows[id(q)] = hit if hit is not None and hit[0] is q else (q, json.dumps(_row(q), separators=(",", ":")))
        self._last, self._rows = queue, rows
        return "[" + ",".join(rows[id(q)][1] for q in queue) + "]"


def loads(text: str) -> list[QueueRecord]:
    return [_record(r) for r in json.loads(text)]


def _row(q: QueueRecord) -> list[object]:
    t = q.tres
    return [
        [q.ref.job, q.ref.task, q.ref.tasks],
        q.raw_id,
        q.name,
        q.user,
        q.account,
        q.partition,
        q.qos,
        q.state.value,
        q.reason.value,
        q.reason_text,
        q.elapsed_s,
        q.time_limit_s,
        q.restart_count,
        q.nodes,
        q.nodelist,
        [t.cpu, t.mem_mb, t.nodes, [list(g) for g in t.gpus_by_type], t.billing],
        q.submit_time.isoformat() if q.submit_time else None,
        q.start_time.isoformat() if q.start_time else None,
    ]


def _record(r: list) -> QueueRecord:
    ref, raw_id, name, user, account, partition, qos, state, reason, text, *rest = r
    elapsed, limit, restarts, nodes, nodelist, (cpu, mem, tnodes, gpus, billing), submit, start = rest
    return QueueRecord(
        ref=JobRef(*ref),
        raw_id=raw_id,
        name=name,
        user=user,
        account=account,
        partition=partition,
        qos=qos,
        state=JobState.parse(state),
        reason=PendingReason(reason),
        reason_text=text,
        elapsed_s=elapsed,
        time_limit_s=limit,
        restart_count=restarts,
        nodes=nodes,
        nodelist=nodelist,
        tres=Tres(cpu, mem, tnodes, tuple((str(k), int(n)) for k, n in gpus), billing),
        submit_time=datetime.fromisoformat(submit) if submit else None,
        start_time=datetime.fromisoformat(start) if start else None,
    )
