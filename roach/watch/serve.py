"""``roach watch --serve``: the poller that a waiter starts where no viewer polls, for as long as readers read.

A ``Job.wait``, ``Sweep.wait`` or ``roach logs -f`` never polls Slurm itself: it starts this (through
:mod:`roach.launch.poller`) and reads the ends its rounds record. It takes the rounds of its store and cluster
while any reader is marked (:mod:`roach.records.poller.readers`), ends ``linger_s`` after the last has left,
and gives its lock to any watch or top that starts meanwhile, which polls from then on.
"""

from __future__ import annotations

from roach.records.poller.readers import readers
from roach.watch.shared import Viewer

LINGER_S = 30.0  # how long the poller outlives its last reader: a wait that follows another finds it polling


def serve(viewer: Viewer, *, linger_s: float = LINGER_S) -> None:
    """Take ``viewer``'s rounds while readers read them; return once another viewer polls, or ``linger_s``
    after the last reader left."""
    viewer.open()
    store, cluster = viewer.watcher.store.path, viewer.watcher.cluster.name
    alone_since: float | None = None
    while viewer.polling:
        viewer.step()
        if not viewer.polling:
            return  # handed over, or another took a free lock first
        now = viewer.monotonic()
        if readers(store, cluster, but=viewer.mark):
            alone_since = None
        else:
            alone_since = now if alone_since is None else alone_since
            if now - alone_since >= linger_s:
                return
        viewer.pause()
