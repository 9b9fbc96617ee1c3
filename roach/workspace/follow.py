"""``roach wait`` as a reader of the one poller: the job's states from the queue the poller's last round read, its
end from the store, which the poller records.

A wait marks itself a waiter of its store and cluster (:mod:`roach.launch.poller`) and starts ``roach watch
--serve`` where no viewer polls; any number of waits, watches and tops then cost one poller's Slurm calls. A job
the store does not hold (submitted by hand), or a cluster that command cannot reach as the wait does, is watched
by the one-session loop of :mod:`roach.workspace.wait` instead.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from roach.launch.poller import Waiting
from roach.ops.events import EventKind, iso
from roach.records.store import Store
from roach.records.workspace_job import array_size
from roach.scheduler.queue_json import loads
from roach.workspace.events import WaitEvent

TICK_S = 0.5  # how often a wait looks at the store: a round the poller took shows within this


def queue_states(queue_json: str | None, job_id: str) -> str:
    """The job's live entries in the poller's queue as the loop prints them: ``RUNNING=1``, ``PENDING=2,RUNNING=1``
    (names sorted); empty when none is pending or running."""
    counts: Counter[str] = Counter()
    for q in loads(queue_json) if queue_json else []:
        if str(q.ref.job) == job_id and q.state.is_active:
            counts[q.state.value] += (array_size(q.ref.tasks) or 1) if q.ref.tasks else 1
    return ",".join(f"{name}={n}" for name, n in sorted(counts.items()))


def follow(
    store: Store,
    cluster: str,
    job_id: str,
    waiter: Waiting,
    on_event: Callable[[WaitEvent], None],
    *,
    on_outage: Callable[[WaitEvent | None, str], None] = lambda last, message: None,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitEvent | None:
    """Show the job's state changes from the poller's rounds until the store records its end, then ``gone``.

    Each outage the poller reports meanwhile goes to ``on_outage`` with the last state shown and the poller's words.
    Returns the last ``state`` event shown (None where none was), or raises :class:`NotFollowed` once no poller
    can be had, for the caller to watch the job itself."""
    last: WaitEvent | None = None
    shown_round = -1
    seq = store.watch_round(cluster)[1]  # what the log said before the wait is not news to it
    while True:
        row = store.get(cluster, int(job_id))
        if row is None:
            raise NotFollowed(f"job {job_id} left the store")
        if row.is_final:
            on_event(WaitEvent("gone", row.recorded_at or iso(time.time()), ""))
            return last
        if not waiter.watched():
            raise NotFollowed("no poller took the rounds")
        at, _ = store.watch_round(cluster)
        if at is not None and at.round != shown_round:
            shown_round = at.round
            for said in store.watch_log(cluster, after=seq):
                seq = said.seq
                if said.data.get("kind") == EventKind.OUTAGE.value:
                    on_outage(last, str(said.data.get("message", "")))
            text = queue_states(store.watch_queue(cluster), job_id)
            if text and (last is None or text != last.text):
                last = WaitEvent("state", iso(at.at), text)
                on_event(last)
        sleep(TICK_S)


class NotFollowed(Exception):
    """The poller's rounds cannot be read for this job: the caller watches it on its own."""
