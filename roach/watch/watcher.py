"""``roach watch``: one persistent monitor of a user's jobs, their tiers and the cluster.

A round makes a fixed number of calls whatever the number of jobs: one ``squeue`` (all of the user's
jobs, with the reservation each asks for), at most one ``sacct`` (the watched jobs that left the queue and
are not known to have ended), at most one command that looks at every running run's log (size, mtime, last
lines of interest) and the log directories' disk use, at most one ``squeue`` for the pinned nodelists of jobs
newly pending on ReqNodeNotAvail, at most one ``sbatch --test-only`` per tier when the start probe is on, at
most one ``scontrol show reservation`` (only while a watched pending job asks for a reservation), at most one
``squeue`` of the cluster's queue on the partitions of the watched jobs pending on a reason that clears (their start
estimates, :mod:`roach.watch.starts`), at most one command writing the final states of the jobs that ended into their
``job.json`` files, and in a heartbeat's
round at most one ``squeue -s`` for the running holders. What it saw is kept in the store and each round
compares with the previous one, never with zero.

A failed ``squeue`` is an outage, said once and retried with backoff; it is never read as "the jobs
ended": a job is done only when ``sacct`` says so, or, where sacct answers without an end for a while after the
job left the queue, when slurmctld's own record does (one ``squeue -t all`` for those jobs,
:mod:`roach.scheduler.controller_ends`).

Watched jobs: every job in roach's store on this cluster whose end is not recorded yet, plus ``job_ids``
(any job of the user's, e.g. plain sbatch jobs). The tier table counts all of the user's jobs, since they
all count against the same per-user caps.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

from roach.errors import RoachError, SlurmError, TransportError
from roach.fleet.cluster import Cluster
from roach.ops.events import Event, EventKind, TierRow
from roach.ops.explain import PendingContext, explain
from roach.records.job_end import End, record_ends
from roach.records.job_record import JobRecord
from roach.records.results import JOB_NOT_COMPLETED  # `roach watch` exits so when a watched job did not complete
from roach.records.store import Store
from roach.records.workspace_job import array_end, is_workspace_array
from roach.scheduler.capabilities import RateLimit
from roach.scheduler.client import SlurmClient
from roach.scheduler.controller_ends import ACCOUNTING_LAG_S, controller_ends
from roach.scheduler.parse import AcctRecord, QueueRecord
from roach.scheduler.parse_control import dead_argv, parse_dead_nodes
from roach.watch import logs as watch_logs
from roach.watch.adopting import Adopter, Roster
from roach.watch.budget import budget_events
from roach.watch.ends import match_acct, on_accounting, on_left, with_causes
from roach.watch.health import disk_events, node_events, outage_events, recovered_events
from roach.watch.heartbeat import Heartbeat
from roach.watch.jobs import Ctx, JobWatch, on_queue
from roach.watch.logs import Look, StallRule
from roach.watch.memo import SavedWatch
from roach.watch.progress import on_log
from roach.watch.promoting import Promoter, Rebalancer
from roach.watch.resv import Queue, on_reservation, read_queue, show_reservations
from roach.watch.resv import asked as reservations_asked
from roach.watch.stalls import OnStall, act_on_stalls, release_held
from roach.watch.starts import on_estimates

ROUND_RPCS = 3  # Slurm calls in one round whatever the number of jobs (bench/ counts them); the rate-limit floor


@dataclass(slots=True)
class Watcher:
    """Watches one cluster for one user. ``round()`` is one look; ``run()`` loops until the queue empties.

    Its parts, each a dataclass that owns what it uses: ``saved`` (the watch state in the store, and the last
    round's memo of it), ``adopter`` (which jobs a round looks at: ``job_ids``), ``rebalancer`` (the tier moves:
    ``rebalance``, ``promoter``, ``probe_window_s``) and ``heartbeat`` (``heartbeat_s``). Those arguments are
    read on their part, e.g. ``watcher.rebalancer.rebalance``; the watcher keeps no copy of them."""

    cluster: Cluster
    client: SlurmClient
    store: Store
    clock: Callable[[], float] = time.time
    interval_s: float = 60.0
    heartbeat_s: InitVar[float] = 900.0
    sleep: Callable[[float], None] = time.sleep
    job_ids: InitVar[tuple[str, ...]] = ()  # more jobs to watch: ids of the user's jobs that are not in the store
    rebalance: InitVar[bool] = False
    promoter: InitVar[Promoter | None] = None  # how --rebalance promotes (default: nothing; the CLI passes one)
    stall: StallRule = field(default_factory=StallRule)
    # REQUEUE: a stalled run of the store that checkpoints is requeued, one Slurm held after a failed launch released
    on_stall: OnStall = OnStall.SAY
    lost_after_s: float = 600.0
    max_backoff_s: float = 300.0
    probe_window_s: InitVar[float | None] = None  # None: no start probe
    disk_every_s: float = 300.0
    budget_every_s: float = 60.0  # the least time between two reads of what a metered cluster's grants spent
    nodes_every_s: float = 60.0  # the least time between two looks at the nodes not responding (sinfo --dead)
    log_dir_max_bytes: int | None = 10 * 2**30
    free_min_fraction: float = 0.05
    rate_limit: RateLimit | None = None  # the site's RPC token bucket: rounds never come faster than it refills
    finished: bool = field(default=False, init=False)  # the queue went empty
    failures: int = field(default=0, init=False)  # rounds in a row that could not reach Slurm
    # watched jobs that ended: their run (a job of no run: its own key), job id, and COMPLETED?
    ended: dict[str, tuple[str, int, bool]] = field(default_factory=dict, init=False)
    queue: list[QueueRecord] = field(default_factory=list, init=False)  # the last round's squeue (`roach top`)
    _queue: Queue | None = field(default=None, init=False, repr=False)  # the last round's squeue, as read
    saved: SavedWatch = field(init=False)
    adopter: Adopter = field(init=False)
    rebalancer: Rebalancer = field(init=False)
    heartbeat: Heartbeat = field(init=False)

    def __post_init__(
        self,
        heartbeat_s: float,
        job_ids: tuple[str, ...],
        rebalance: bool,
        promoter: Promoter | None,
        probe_window_s: float | None,
    ) -> None:
        self.saved = SavedWatch(self.store, self.cluster.name, self.cluster.tiers)
        self.adopter = Adopter(self.client, self.store, job_ids)
        self.rebalancer = Rebalancer(self.cluster, self.client, self.store, rebalance, promoter, probe_window_s)
        self.heartbeat = Heartbeat(self.cluster.name, self.client, heartbeat_s)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, emit: Callable[[Event], None], *, once: bool = False) -> int:
        """Rounds until the watched queue is empty (or one round with ``once``); returns the exit status:
        0, or :data:`JOB_NOT_COMPLETED` when a job ended other than COMPLETED."""
        while True:
            for event in self.round():
                emit(event)
            if once or self.finished:
                return self.exit_status()
            self.sleep(self.next_delay())

    def next_delay(self) -> float:
        """The interval (never under the cluster's ``min_poll_s``, nor faster than its RPC rate limit refills),
        doubled for each round in a row that could
        not reach Slurm, up to max_backoff_s."""
        interval = max(
            self.interval_s,
            float(getattr(self.cluster, "min_poll_s", 0.0)),
            self.rate_limit.min_interval_s(ROUND_RPCS) if self.rate_limit else 0.0,
        )
        if not self.failures:
            return interval
        return min(interval * 2 ** min(self.failures, 16), max(self.max_backoff_s, interval))

    def exit_status(self) -> int:
        return JOB_NOT_COMPLETED if any(ok is False for ok in self.run_outcomes().values()) else 0

    def run_outcomes(self) -> dict[str, bool]:
        """Each watched run that ended: did it complete? What its latest job did: a run moved, promoted or resumed
        ends as the job that continued it; a job of the user's that is no run counts as its own."""
        return {run: ok for run, (_, ok) in self._latest().items()}

    def _latest(self) -> dict[str, tuple[int, bool]]:
        """Each run's latest ended job: its id, and COMPLETED?"""
        latest: dict[str, tuple[int, bool]] = {}
        for run, job, ok in self.ended.values():
            if run not in latest or job >= latest[run][0]:
                latest[run] = (job, ok)
        return latest

    # -- one round -----------------------------------------------------------------------------------------
    def round(self) -> list[Event]:
        """One look at the queue, then at the watched jobs it leaves out, their logs, reservations and tiers:
        what changed since the last round, as events, and the watch state saved for the next."""
        now = self.clock()
        name = self.cluster.name
        memo = self.saved.load()
        meta, views, records, quiet = memo.meta, memo.views, memo.records, memo.quiet
        events: list[Event] = []
        try:
            look = self._queue = read_queue(self.client, self.cluster.tiers, self._queue)
        except (SlurmError, TransportError) as err:
            return self._unreachable(err, meta, views, now)  # no memo: the next round reads the store
        queue, resv_of, active, rows = look.records, look.resv_of, look.active, look.rows  # read only
        self.failures, self.queue = 0, queue
        events += recovered_events(name, meta, ("slurmctld", "the cluster"), now)
        meta["tiers"] = [r.to_json() for r in rows]
        touched: set[str] = set()  # views changed in place this round by anything but on_queue
        first = self.adopter.adopt(views, records, active, now, touched)
        roster = Roster.of(views)
        watched = roster.watched

        ask = [k for k in watched if k not in active]  # they may have ended; only sacct says so
        acct, array_ends = self._accounting(views, ask, watched, meta, now, events, records)
        self.adopter.ask_req_nodes(views, active, watched, touched)

        # one look at the logs of the runs that run (or ran last round), and at the log directories
        seen = self._look(views, [k for k in roster.logged if k in views], active, meta, now)
        remote_now = seen.now if seen is not None and seen.now else now
        ctx = Ctx(name, self.cluster.tiers, now, lambda rec: explain(rec, self._pending_context(rec, queue, views)))
        finals: list[tuple[JobRecord, AcctRecord]] = []
        ran: list[str] = []  # the queued jobs on_queue looked at
        for key in watched:
            q = active.get(key)
            if seen is not None and (w := views[key]).log_path in seen.logs:
                events += on_log(
                    w, seen.logs[w.log_path], remote_now, self.stall, ctx, running=q is not None and q.state.is_running
                )
                touched.add(key)
            if q is not None and quiet.get(key) is q and key not in touched and key not in first:
                continue  # the same line as when its view settled: on_queue would change nothing, say nothing
            w = views[key]
            if q is not None:
                ran.append(key)
                events += on_queue(w, q, ctx, first=key in first)
            else:
                quiet.pop(key, None)
                on_left(w, now)
                if acct is not None:
                    done = on_accounting(w, acct.get(key), ctx, self.lost_after_s)
                    events += done
                    for e in done:
                        if e.kind is EventKind.FINISHED:
                            ok = bool(e.data.get("ok")) or w.superseded_by is not None
                            self.ended[key] = (w.run_id or key, w.job_id, ok)
                            if key in records:
                                finals.append((records[key], acct[key]))
        events = act_on_stalls(events, views, records, self.on_stall, self.client, ctx)
        events += release_held(views, records, active, self.on_stall, self.client, ctx, touched)
        events = with_causes(events, self._record_finals(finals, array_ends))
        events += self._nodes(views, watched, active, meta, ctx, touched)
        events += budget_events(self.store, self.client, name, meta, active, now, self.budget_every_s)
        events += on_estimates(
            self.client, self.cluster.tiers, views, watched, active, queue, meta, ctx, touched, resv_of
        )
        asking = roster.reserving.union(resv_of)
        events += self._reservations(views, active, resv_of, [k for k in watched if k in asking], ctx, touched)
        runs = [k for k in roster.runs if k in views]
        events += self.rebalancer.promotions(meta, rows, views, runs, active, seen, now, touched)
        if seen is not None and seen.disks:
            events += disk_events(name, meta, seen.disks, now, self.log_dir_max_bytes, self.free_min_fraction)
        events += self.heartbeat.beat(meta, now, views, rows, active)
        # an array recorded as one job is watched as its tasks, and not over until its own end is recorded
        open_arrays = {k for k, r in records.items() if is_workspace_array(r)} - {str(e.rec.key) for e in array_ends}
        if (
            not any(not w.done and "lost" not in w.reported for w in views.values())
            and not meta.get("outage_slurmdbd")
            and not open_arrays
        ):
            events.append(self._queue_empty(now, rows))
            self.finished = True
        self.saved.save(memo, active, {*ran, *touched, *ask}, [*roster.done, *ask], finals, now, events, queue)
        return events

    def _unreachable(
        self, err: SlurmError | TransportError, meta: dict[str, Any], views: dict[str, JobWatch], now: float
    ) -> list[Event]:
        """A round whose ``squeue`` failed: an outage (said once), the heartbeat when due, and ``meta`` saved."""
        self.failures += 1
        name = self.cluster.name
        events = outage_events(name, meta, "slurmctld" if isinstance(err, SlurmError) else "the cluster", err, now)
        events += self.heartbeat.beat(meta, now, views, None, {})
        self.saved.save_meta(meta, now, events)
        return events

    def _accounting(
        self,
        views: dict[str, JobWatch],
        ask: list[str],
        watched: list[str],
        meta: dict[str, Any],
        now: float,
        events: list[Event],
        records: dict[str, JobRecord],
    ) -> tuple[dict[str, AcctRecord] | None, list[End]]:
        """One ``sacct`` for the watched jobs not in the queue (``ask``): each one's record, or None when slurmdbd
        could not be reached (``events`` gets the outage, or its end). A given array id found there is watched
        as its tasks from then on, in ``views``, ``ask`` and ``watched``; the ends of the store's arrays recorded
        as one job (:func:`~roach.records.workspace_job.array_end`) come with the records."""
        if not ask:
            return {}, []
        # a task that never started is in sacct only as its array's pending range: ask the array too
        arrays = sorted({k.split("_")[0] for k in ask if "_" in k} - set(ask))
        try:
            found = self.client.ends([*ask, *arrays])
        except (SlurmError, TransportError) as err:
            events += outage_events(self.cluster.name, meta, "slurmdbd", err, now)
            return None, []
        events += recovered_events(self.cluster.name, meta, ("slurmdbd",), now)
        # an array recorded as one job ends as the worst of its tasks, never as the one sacct lists by its id
        whole = {k: records[k] for k in ask if k in records and is_workspace_array(records[k])}
        ends = [array_end(r, [a for a in found if a.step is None and a.ref.job == r.job_id]) for r in whole.values()]
        self.adopter.adopt_tasks(views, ask, found, now, watched)
        keys = [k for k in ask if k not in whole]
        matched = match_acct(keys, found)
        lagging = [k for k in keys if _accounting_lags(views.get(k), matched.get(k), now)]
        if lagging:  # accounting has no end for them a while after they left: slurmctld's own record, one call
            matched |= match_acct(lagging, controller_ends(self.client, lagging))
        return matched, [e for e in ends if e is not None]

    def _queue_empty(self, now: float, rows: tuple[TierRow, ...]) -> Event:
        """The last event: every watched job ended, and how many of them completed."""
        n = len(self.ended)
        latest = self._latest()
        done = sum(ok for _, ok in latest.values())
        # a job that a later job of its run continued (a move, a promotion, a resume) counts as its run did
        ok = sum(1 for run, job, fine in self.ended.values() if fine or (job < latest[run][0] and latest[run][1]))
        said = f"all {n} watched job{'s' if n != 1 else ''} ended ({ok} completed)" if n else "no job to watch"
        if len(latest) < n:
            said += f"; {len(latest)} run{'s' if len(latest) != 1 else ''}, {done} completed (each as its latest job)"
        data = {"ended": n, "completed": ok}
        return Event(EventKind.QUEUE_EMPTY, now, self.cluster.name, f"queue empty: {said}", data=data, tiers=rows)

    def supersede(self, key: str, job_id: int) -> None:
        """A watched job was promoted outside a round (``roach top``'s ``p``): job ``job_id`` continues its run."""
        self.saved.supersede(key, job_id)

    def _pending_context(
        self, rec: QueueRecord, queue: list[QueueRecord], views: dict[str, JobWatch]
    ) -> PendingContext:
        w = views.get(rec.job_id)
        return PendingContext(queue=queue, tiers=self.cluster.tiers, req_nodes=w.req_nodes if w else None)

    def _record_finals(self, finals: list[tuple[JobRecord, AcctRecord]], more: list[End]) -> list[JobRecord]:
        """The final states this round saw (and ``more`` ends): into each job's job.json on the cluster, all of
        them in one command, and the store, in one transaction (:func:`~roach.records.job_end.record_ends`).
        Returns the records as recorded (a failed job's with its error line)."""
        ends = [*(End.of_acct(rec, final) for rec, final in finals), *more]
        return record_ends(self.store, self.client.transport, ends)

    def _reservations(
        self,
        views: dict[str, JobWatch],
        active: dict[str, QueueRecord],
        resv_of: dict[str, str],
        watched: list[str],
        ctx: Ctx,
        touched: set[str],
    ) -> list[Event]:
        """Only when a watched pending job asks for a reservation: one ``scontrol show reservation`` for all."""
        wanted = reservations_asked(watched, views, active, resv_of)
        if not wanted:
            return []
        try:
            found = show_reservations(self.client)
        except RoachError:
            return []  # asked again next round; a failed look is never read as "it vanished"
        touched.update(wanted)
        return [e for key, resv in wanted.items() for e in on_reservation(views[key], resv, found, ctx)]

    def _nodes(
        self,
        views: dict[str, JobWatch],
        watched: list[str],
        active: dict[str, QueueRecord],
        meta: dict[str, Any],
        ctx: Ctx,
        touched: set[str],
    ) -> list[Event]:
        """Once watched jobs have run for ``nodes_every_s`` on end, and then at most every ``nodes_every_s``: one
        ``sinfo --dead`` for the nodes Slurm marks not responding, and a line for each running job on one (once per
        job and node). A job shorter than that costs no look (Slurm waits SlurmdTimeout, 300 s by default, before
        it fails such a node)."""
        running = {k: q for k in watched if (q := active.get(k)) is not None and q.state.is_running and q.nodelist}
        if not running:
            meta["running_since"] = None
            return []
        since = meta["running_since"] = meta.get("running_since") or ctx.now
        if ctx.now - since < self.nodes_every_s or ctx.now - (meta.get("nodes_at") or 0) < self.nodes_every_s:
            return []
        meta["nodes_at"] = ctx.now
        try:  # Slurm sets such a node DOWN once silent for SlurmdTimeout, and fails or requeues its jobs
            dead = parse_dead_nodes(self.client.run(dead_argv()).stdout)
        except (RoachError, TransportError):
            return []  # looked at again next time; a failed look says nothing of the nodes
        events = node_events(views, running, set(dead), ctx)
        touched.update(e.job_id for e in events if e.job_id)
        return events

    # -- logs and disk ---------------------------------------------------------------------------------------
    def _look(
        self,
        views: dict[str, JobWatch],
        watched: list[str],
        active: dict[str, QueueRecord],
        meta: dict[str, Any],
        now: float,
    ) -> Look | None:
        logs: list[str] = sorted(
            {
                views[k].log_path or ""
                for k in watched
                if views[k].log_path and _log_worth_a_look(views[k], active.get(k))
            }
        )
        dirs: list[str] = []
        if logs and now - (meta.get("disk_at") or 0) >= self.disk_every_s:
            dirs = sorted({posixpath.dirname(p) for p in logs})
            meta["disk_at"] = now
        if not logs:
            return None
        try:
            return watch_logs.look(self.client.transport, logs, dirs)
        except (RoachError, TransportError):
            return None  # the logs are looked at again next round; Slurm's view is what decides states


def _accounting_lags(w: JobWatch | None, rec: AcctRecord | None, now: float) -> bool:
    """Whether a job out of the queue for :data:`ACCOUNTING_LAG_S` still has no end in sacct's answer."""
    if w is None or w.left_at is None or now - w.left_at < ACCOUNTING_LAG_S:
        return False
    return rec is None or not rec.state.is_terminal


def _log_worth_a_look(w: JobWatch, q: QueueRecord | None) -> bool:
    """Whether this round reads a job's log: it runs now or ran last round, or it left the queue since last round
    (it may have run and ended between the two: the one look its log gets after its end)."""
    return (q is not None and q.state.is_running) or w.running or (q is None and w.in_queue)


# An InitVar's default stays behind as a class attribute, where ``watcher.rebalance`` would read the default
# whatever the watcher was given; without it, reading or setting one of these names fails loudly.
for _name in ("heartbeat_s", "job_ids", "rebalance", "promoter", "probe_window_s"):
    delattr(Watcher, _name)
del _name
