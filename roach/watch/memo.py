"""A watch's state between rounds: each job's view and the watch's meta, saved in the store per cluster, and the
last round's own copy of them (its memo), which the next round starts from while nothing else wrote the store."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from roach.model.tiers import Tier
from roach.ops.events import Event
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.records.watch_log import Round
from roach.scheduler import queue_json
from roach.scheduler.parse import AcctRecord, QueueRecord
from roach.watch.jobs import JobWatch, settled

FORGET_DONE_AFTER_S = 7 * 86400  # ended jobs drop out of the saved watch state after a week


@dataclass
class Memo:
    """One round's watch state as it saved it, and the store's version just after."""

    version: tuple[int, int]
    saved: dict[str, dict[str, Any]]  # each view's JSON as the store has it
    meta: dict[str, Any]
    views: dict[str, JobWatch]
    records: dict[str, JobRecord]  # the unfinished ones
    saved_meta: dict[str, str]  # each meta value's JSON as the store has it
    # the queued jobs whose view on_queue would leave as it is while squeue prints the same line for them
    # (jobs.settled): key -> that line's record, the very object (the parser hands out one per distinct line)
    quiet: dict[str, QueueRecord]
    fresh: bool = True  # read from the store this round: every view is compared with its saved JSON


@dataclass
class SavedWatch:
    """The watch state of cluster ``cluster`` in ``store``: ``load()`` at the start of a round, ``save()`` at its
    end; ``memo`` is what the last round left, kept while nothing else wrote to the store."""

    store: Store
    cluster: str
    tiers: tuple[Tier, ...]  # the cluster's, which say whether a queued job's view is settled
    memo: Memo | None = field(default=None, init=False, repr=False)
    queue_text: str | None = field(default=None, init=False, repr=False)  # the queue as this watch last wrote it
    encoder: queue_json.Encoder = field(default_factory=queue_json.Encoder, init=False, repr=False)

    def load(self) -> Memo:
        """The saved watch state and the unfinished records: the last round's own, when the store has not
        changed since it saved them (reading and parsing them again is most of a long queue's round), else
        read from the store. The version is taken before reading, so a write that races the read is seen as
        a change at the end of the round (the store's own commits while reading, its watch tables made on
        first use, are not another writer's)."""
        memo, self.memo = self.memo, None  # a round that fails half-way leaves no memo behind
        version = self.store.version()
        if memo is not None and memo.version == version:
            return memo
        saved, meta = self.store.watch_load(self.cluster)
        views = {k: JobWatch.from_json(v) for k, v in saved.items()}
        # an attempt inside a holder is no Slurm job: it is watched through its holder
        records = {r.slurm_id: r for r in self.store.unfinished(self.cluster) if not r.is_attempt}
        after = self.store.version()
        if after[0] == version[0]:
            version = after
        saved_meta = {k: json.dumps(v) for k, v in meta.items()}
        return Memo(version, saved, meta, views, records, saved_meta, {})

    def save(
        self,
        memo: Memo,
        active: dict[str, QueueRecord],
        looked: set[str],
        ending: list[str],
        finals: list[tuple[JobRecord, AcctRecord]],
        now: float,
        events: Sequence[Event] = (),
        queue: list[QueueRecord] | None = None,
    ) -> None:
        """Write what this round changed, and keep it as the next round's memo if nothing else wrote the store.

        Only what changed is written (a long queue's jobs mostly change nothing in a round; a round that changes
        nothing writes nothing). ``looked``: the views this round may have changed (on_queue's, those anything
        else touched, those not in the queue); every other view is as the last round saved it, unless the views
        were read from the store this round. ``ending``: those that may be done, and forgotten after a week.
        ``finals``: the ends this round recorded, in one transaction of the store's. The round itself (its
        ``events`` and the ``queue`` it read) goes into the watch log in the same transaction."""
        saved, views, quiet = memo.saved, memo.views, memo.quiet
        forget = {
            k
            for k in ending
            if (w := views.get(k)) is not None and w.done and now - (w.left_at or w.first_seen) > FORGET_DONE_AFTER_S
        }
        maybe = views if memo.fresh else [k for k in looked if k in views]
        changed = {k: j for k in maybe if k not in forget and (j := views[k].to_json()) != saved.get(k)}
        meta_json = {k: json.dumps(v) for k, v in memo.meta.items()}
        meta_changed = {k: memo.meta[k] for k, j in meta_json.items() if j != memo.saved_meta.get(k)}
        r = self._round(now, events, queue)
        try:
            self.store.watch_save(self.cluster, changed, meta_changed, sorted(forget), r)
        except BaseException:
            self.encoder = queue_json.Encoder()  # the queue was not written: the next round encodes it whole
            raise
        self.queue_text = r.queue or self.queue_text
        end = self.store.version()
        own = 1 + bool(finals)  # this round's commits: its saved view and log, its final states in one transaction
        if end != (memo.version[0], memo.version[1] + own):
            return  # another writer: the next round reads the store
        for k in forget:
            saved.pop(k, None)
            views.pop(k, None)
            quiet.pop(k, None)
        saved.update(changed)
        memo.saved_meta.update(meta_json)
        for rec, _ in finals:
            memo.records.pop(rec.slurm_id, None)
        for k in looked:
            q = active.get(k)
            if q is not None and k in views and settled(views[k], q, self.tiers):
                quiet[k] = q
            else:
                quiet.pop(k, None)
        memo.version, memo.fresh = end, False
        self.memo = memo

    def save_meta(self, meta: dict[str, Any], now: float, events: Sequence[Event]) -> None:
        """Write the meta and events of a round that could not read the queue; the next round reads the store."""
        self.store.watch_save(self.cluster, {}, meta, round=self._round(now, events, None))

    def _round(self, now: float, events: Sequence[Event], queue: list[QueueRecord] | None) -> Round:
        """The round for the watch log: its events, and the queue where it changed since this watch wrote it."""
        text = None if queue is None else self.encoder.dumps_changed(queue)
        return Round(now, os.getpid(), [e.stored() for e in events], None if text == self.queue_text else text)

    def supersede(self, key: str, job_id: int) -> None:
        """Job ``job_id`` continues the run of watched job ``key`` (promoted outside a round); the next round
        reads the store."""
        saved, _ = self.store.watch_load(self.cluster)
        if key in saved:
            self.store.watch_save(self.cluster, {key: {**saved[key], "superseded_by": job_id}}, {})
        self.memo = None
