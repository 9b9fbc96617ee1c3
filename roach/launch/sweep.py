"""``sweep``: one function over a grid of arguments as Slurm job arrays, each task a run of its own.

A sweep of N runs is a handful of Slurm calls whatever N: one ``sbatch --hold --array`` per part (a part
is at most the cluster's MaxArraySize tasks), one write of every bundle file (a tar stream), one store
transaction, one ``scontrol release``. The runs are ``<sweep_id>-<i>``, each with its own run directory
and log ``<log_root>/<sweep_id>_<array>_<task>.out``, resumable like any run. Waiting on the sweep is one
``squeue`` and at most one ``sacct`` per round.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Unpack

from roach.errors import SlurmError, UsageError, WaitTimeoutError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.paths import check_cluster_path
from roach.fleet.route import reaching, submitted_route
from roach.fleet.userconfig import configured
from roach.launch import pipeline
from roach.launch import script as batch
from roach.launch.job import READ_TICK_S, Job
from roach.launch.options import Options, SubmitFields
from roach.launch.pipeline import Destination, Written
from roach.launch.poller import Waiting, waiting
from roach.launch.prepare import RUN_ID, Prepared, check_grid, default_run_root, new_run_id, prepare
from roach.launch.shipping import node_script
from roach.model.ids import RecordKind
from roach.model.job_state import JobState
from roach.model.run_spec import SweepRef
from roach.records.bundle import BundlePaths, JobJson, job_json_texts
from roach.records.job_end import End, record_ends
from roach.records.job_record import utc_now
from roach.records.results import NotCompletedError, SweepNotCompletedError, collect, ended
from roach.records.store import Store
from roach.scheduler.client import ARRAY_REFUSED
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.controller_ends import OutOfQueue, controller_ends
from roach.scheduler.parse import AcctRecord, array_ranges


def split(n: int, max_array_size: int) -> list[tuple[int, int]]:
    """``(offset, count)`` of each array a sweep of ``n`` runs needs: Slurm's task indices must stay
    below MaxArraySize, so each array holds at most that many tasks."""
    if n < 1:
        raise UsageError("a sweep needs at least one set of arguments in its grid")
    size = max(1, max_array_size)
    return [(o, min(size, n - o)) for o in range(0, n, size)]


@dataclass
class Sweep:
    """The runs of a sweep: ``sweep.jobs[i]`` is run ``<sweep_id>-<i>`` (a :class:`Job`)."""

    cluster: Cluster
    sweep_id: str
    array_ids: list[int]
    jobs: list[Job]
    store: Store | None = field(default=None, repr=False)

    @classmethod
    def load(cls, sweep_id: str, *, store: Store | None = None, cluster: Cluster | None = None) -> Sweep:
        """The sweep ``sweep_id`` as the store recorded it (from another process, later)."""

        store = store or Store()
        recs = store.sweep_runs(sweep_id)
        if not recs:
            raise UsageError(
                f"no sweep {sweep_id!r} in the store {store.path}",
                hint="`roach ls` lists the runs roach knows; a sweep's runs are <sweep_id>-<i>",
            )
        c = reaching(recs[0], cluster)
        ids = sorted({r.job_id for r in recs})
        return cls(c, sweep_id, ids, [Job(c, r, store) for r in recs], store)

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, i: int) -> Job:
        return self.jobs[i]

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __str__(self) -> str:
        ids = ", ".join(map(str, self.array_ids))
        return f"sweep {self.sweep_id}: {len(self)} runs in array{'s' if len(self.array_ids) > 1 else ''} {ids} on {self.cluster.name}"

    @property
    def client(self):
        return self.jobs[0].client

    def _by_ref(self) -> dict[tuple[int, int], Job]:
        return {(j.job_id, j.task): j for j in self.jobs}  # type: ignore[misc]

    def states(self) -> dict[str, JobState]:
        """Every run's live state (by run id): one squeue, and one sacct for those that left the queue."""
        by_ref = self._by_ref()
        out: dict[str, JobState] = {}
        for r in self.client.squeue(job_ids=self.array_ids):
            indices = [[r.ref.task]] if r.ref.task is not None else array_ranges(r.ref.tasks) or []
            for t in chain.from_iterable(indices):
                if (r.ref.job, t) in by_ref:
                    out[by_ref[r.ref.job, t].run_id] = r.state
        gone = [j for j in self.jobs if j.run_id not in out]
        ended: list[tuple[Job, AcctRecord]] = []
        if gone:
            for a in self._accounting():
                j = by_ref.get((a.ref.job, a.ref.task))  # type: ignore[arg-type]
                if j is not None and j.run_id not in out:
                    out[j.run_id] = a.state
                    if a.state.is_terminal and not j.record.is_final:
                        ended.append((j, a))
        if ended:  # what it learned of the runs' ends is recorded, as wait() records it
            for (j, _), rec in zip(
                ended, record_ends(self.store, self.client.transport, [End.of_acct(j.record, a) for j, a in ended])
            ):
                j.record = rec
        return out

    def _accounting(self) -> list[AcctRecord]:
        return [a for a in self.client.ends(self.array_ids) if a.step is None and a.ref.task is not None]

    def wait(self, timeout: float | None = None, poll_s: float = 5.0) -> dict[str, AcctRecord]:
        """Block until every run ended (sacct says so, or slurmctld where accounting lags; never an empty squeue);
        record each final state in the store and in its job.json (one command for all); return sacct's record of
        each run, by run id.
        The wait reads the ends the store's poller records (a `roach watch` or `roach top`, else a ``roach watch
        --serve`` it starts, shared with every other wait), then asks sacct once; where no poller can run, a
        round is one squeue plus one sacct, whatever the number of runs."""
        poll_s = max(poll_s, self.cluster.min_poll_s)
        w = waiting(self.cluster, self.store, self.client.transport, poll_s)
        with w if w is not None else nullcontext():
            return self._wait(w, timeout, poll_s)

    def _wait(self, w: Waiting | None, timeout: float | None, poll_s: float) -> dict[str, AcctRecord]:
        deadline = None if timeout is None else time.monotonic() + timeout
        out = OutOfQueue()
        while True:
            store = self.store
            runs = store.sweep_runs(self.sweep_id) if store is not None else []
            recorded = bool(runs) and all(r.is_final for r in runs)  # a poller recorded every end
            watched = not recorded and w is not None and w.watched()
            queued = not (recorded or watched) and any(
                r.state.is_active for r in self.client.job_states(self.array_ids)
            )
            if queued:
                out.queued()
            if recorded or not (watched or queued):
                done = self._ended(slurmctld=recorded or out.lagging())
                if len(done) == len(self.jobs):
                    if recorded:
                        by_run = {r.run_id: r for r in runs}
                        for j in self.jobs:
                            j.record = by_run.get(j.run_id, j.record)
                    else:
                        self._record_final(done)
                    return done
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{self} did not end within {timeout:.0f}s",
                    hint="wait again, watch it with `roach watch`, or `roach cancel` its runs",
                )
            time.sleep(min(poll_s, READ_TICK_S) if watched else poll_s)

    def _ended(self, *, slurmctld: bool = False) -> dict[str, AcctRecord]:
        """sacct's record of each run that ended, by run id (one sacct); with ``slurmctld``, where sacct has the end
        of some runs only, the controller's record of the others' (one squeue, :mod:`roach.scheduler.controller_ends`)."""
        by_ref = self._by_ref()
        done = {}
        found = self._accounting()
        if slurmctld and len({(a.ref.job, a.ref.task) for a in found if a.state.is_terminal}) < len(self.jobs):
            found += [a for a in controller_ends(self.client, map(str, self.array_ids)) if a.ref.task is not None]
        for a in found:
            j = by_ref.get((a.ref.job, a.ref.task))  # type: ignore[arg-type]
            if j is not None and a.state.is_terminal and j.run_id not in done:
                done[j.run_id] = a
        return done

    def _record_final(self, done: dict[str, AcctRecord]) -> None:
        """Each run's final state into the store (one transaction) and its job.json (one command, as the
        watch records them)."""
        recs = record_ends(
            self.store, self.client.transport, [End.of_acct(j.record, done[j.run_id]) for j in self.jobs]
        )
        for j, rec in zip(self.jobs, recs):
            j.record = rec

    def cancel(self) -> None:
        """Cancel every run of the sweep (its arrays: one scancel)."""
        self.client.scancel(self.array_ids)

    def results(self, timeout: float | None = None, poll_s: float = 5.0, *, return_errors: bool = False) -> list[Any]:
        """Wait for every run (:meth:`wait`), then return each run's return value in grid order (as
        :meth:`Job.result`: ``result.json``, else ``result.pkl``, unpickled only on this call). A fixed
        number of remote calls reads them all (result files, failed runs' logs), whatever the number of runs.

        Raises :class:`~roach.records.results.SweepNotCompletedError` (exit code 6) when runs did not complete,
        each one's error (final state, failing rank's traceback, log) in its ``failures``; with
        ``return_errors=True`` a run's error stands in its place instead and nothing is raised.
        """

        done = self.wait(timeout, poll_s)
        outcomes = collect(ClusterFS(self.client.transport), [ended(j, done[j.run_id]) for j in self.jobs])
        if return_errors:
            return [o.error if o.error is not None else o.value for o in outcomes]
        failures = {i: o.error for i, o in enumerate(outcomes) if isinstance(o.error, NotCompletedError)}
        if failures:
            raise SweepNotCompletedError(self.sweep_id, len(self), failures)
        return [o.get() for o in outcomes]


def sweep(
    target: str,
    grid: Sequence[Mapping[str, Any]],
    options: Options | None = None,
    *,
    parallelism: int | None = None,
    sweep_id: str | None = None,
    max_array_size: int | None = None,
    **fields: Unpack[SubmitFields],
) -> Sweep:
    """Run ``pkg.module:function`` once per entry of ``grid`` (its keyword arguments) as Slurm job arrays.

    Run ``i`` is ``<sweep_id>-<i>`` with its own run directory under ``run_root``. ``parallelism=K`` lets
    at most K runs go at once (``--array=0-N%K``). A grid larger than the cluster's MaxArraySize (or
    ``max_array_size``, if smaller) is split into several arrays; with ``parallelism``, as many of them run at
    once as K allows (K // the largest array's size, at least one), each later one after the one that many before
    it, so that K still holds. ``fields`` are :class:`~roach.launch.options.Options`', as :func:`submit`'s.
    """
    grid, p, sweep_id, run_root = prepare_sweep(
        target, grid, Options.of(options, fields), parallelism, sweep_id, max_array_size
    )
    log_prefix = f"{p.abs_log_root}/{sweep_id}_"  # every array's log: <sweep id>_<array>_<task>.out
    to = Destination(p.cluster, p.client, p.fs, p.store)
    scripts = _ArrayScripts(p, sweep_id, len(grid), parallelism, max_array_size, run_root)
    # MaxArraySize: task indices 0 .. MaxArraySize-1, that many an array. The site cache's copy saves a call;
    # where an admin lowered it since, sbatch refuses the array, and it is asked again fresh.
    cached_limit = p.client.max_array_size(cached=True)

    def queue() -> list[tuple[int, str]]:
        try:
            return pipeline.queue_held(to, scripts.limited(cached_limit), log_prefix)
        except SlurmError as err:
            fresh = p.client.max_array_size() if ARRAY_REFUSED in err.stderr else cached_limit
            if fresh == cached_limit:
                raise
            return pipeline.queue_held(to, scripts.limited(fresh), log_prefix)

    def write(queued: list[tuple[int, str]]) -> Written:
        w = Written([], {}, [], runtime_root=p.bundle_root, experiment=p.options.experiment)
        for part, (array_id, text) in zip(scripts.parts, queued):
            _add_array(w, p, part, array_id, text, grid)
        return w

    queued, written = pipeline.queue_and_start(
        to,
        queue,
        write,
        log_prefix=log_prefix,
        what=lambda _ids: f"submission of sweep {sweep_id}",
        spend=pipeline.Spend.of(p.resources, p.options.experiment, len(grid), what=f"sweep {sweep_id}"),
    )
    ids = [j for j, _ in queued]
    return Sweep(p.cluster, sweep_id, ids, [Job(p.cluster, r, p.store) for r in written.records], p.store)


def prepare_sweep(
    target: str,
    grid: Sequence[Mapping[str, Any]],
    o: Options,
    parallelism: int | None,
    sweep_id: str | None,
    max_array_size: int | None,
) -> tuple[list[dict[str, Any]], Prepared, str, str]:
    """Every check a sweep makes before it queues anything: the grid, :func:`prepare`, the caps for the sweep as a
    whole, its id and run root; the checked grid, the prepared submission, the sweep id and run root."""
    checked = _checked(grid, parallelism, max_array_size, sweep_id)
    p = prepare(target, o, grid=checked)
    guardrails.check_caps(configured(p.cluster), p.resources, runs=len(checked), parallelism=parallelism)
    sweep_id = sweep_id or new_run_id(p.name)
    return checked, p, sweep_id, _new_sweep_root(p, sweep_id, len(checked))


def _new_sweep_root(p: Prepared, sweep_id: str, n: int) -> str:
    """The sweep's run root, once its id is new and its cluster can take it; refused (UsageError) otherwise."""
    taken = [r for r in (p.store.latest_for_run(batch.sweep_run_id(sweep_id, i)) for i in (0, n - 1)) if r]
    if taken:
        raise UsageError(
            f"sweep id {sweep_id} is already used (run {taken[0].run_id}, job {taken[0].slurm_id})",
            hint="omit sweep_id for a new one, or resume its runs one by one with `roach resume RUN`",
        )
    run_root = p.options.run_root or default_run_root(p.log_root)
    check_cluster_path("run_root", run_root)
    if not p.cluster.git_reachable:
        raise UsageError(
            f"cluster {p.cluster.name} cannot reach the git remote: sweeps there are not supported yet",
            hint="submit the runs one by one with submit(), which ships the commit as a git bundle",
        )
    guardrails.check_live(p.cluster, p.resources, p.client)
    return run_root


@dataclass
class _ArrayScripts:
    """Each array's script, rendered as the pipeline queues it: K runs at once over several arrays means
    K // (the largest array) arrays at once (one at least, which holds K itself by its %K), each after the one
    that many before it. ``parts``: the arrays rendered for the last limit tried."""

    p: Prepared
    sweep_id: str
    n: int
    parallelism: int | None
    max_array_size: int | None
    run_root: str
    parts: list[batch.ArrayPart] = field(default_factory=list)

    def limited(self, limit: int) -> Callable[[Sequence[int]], str | None]:
        chunks = split(self.n, min(limit, self.max_array_size or limit))
        k = self.parallelism
        at_once = max(1, k // max(c for _, c in chunks)) if k else len(chunks)
        self.parts.clear()

        def render(queued: Sequence[int]) -> str | None:
            i = len(queued)
            if i == len(chunks):
                return None
            after = queued[i - at_once] if i >= at_once else None
            part = batch.ArrayPart(self.sweep_id, chunks[i][1], chunks[i][0], k, self.run_root, after=after)
            self.parts.append(part)
            return self.p.script(run_id=self.sweep_id, run_dir=self.run_root, array=part)

        return render


def _checked(
    grid: Sequence[Mapping[str, Any]], parallelism: int | None, max_array_size: int | None, sweep_id: str | None
) -> list[dict[str, Any]]:
    """The grid, checked with the sweep's own values before anything else is."""
    if not isinstance(grid, Sequence) or isinstance(grid, (str, bytes)):
        raise UsageError("grid must be a list of dicts (each run's keyword arguments)")
    checked = check_grid(grid)  # each a dict with string keys, JSON-serialisable
    if parallelism is not None and (not isinstance(parallelism, int) or parallelism < 1):
        raise UsageError(f"parallelism must be a positive number of runs, got {parallelism!r}")
    if max_array_size is not None and max_array_size < 1:
        raise UsageError(f"max_array_size must be at least 1, got {max_array_size}")
    if sweep_id is not None and not RUN_ID.match(f"{sweep_id}-{len(grid)}"):
        raise UsageError(
            f"sweep id {sweep_id!r} is not valid",
            hint="letters, digits, . _ - (its run ids <sweep_id>-<i> must fit in 128)",
        )
    if not checked:
        raise UsageError("the grid is empty: a sweep needs at least one set of arguments")
    return checked


def _add_array(
    w: Written, p: Prepared, part: batch.ArrayPart, array_id: int, text: str, grid: Sequence[Mapping[str, Any]]
) -> None:
    """One array's records, files and bundle directories, added to ``w``."""
    sweep_id, run_root = part.sweep_id, part.run_root
    shared = BundlePaths(p.abs_log_root, sweep_id, array_id)
    spec = p.run_spec(
        run_id=sweep_id,
        run_dir=run_root,
        args={},
        sweep=SweepRef(sweep_id, part.offset, run_root),
        grid=[dict(g) for g in grid[part.offset : part.offset + part.count]],
    )
    # node.sh is sourced and run with bash: no exec bit needed
    w.files.update({shared.script: text, shared.spec: spec.to_json(), shared.node_sh: node_script()})
    w.dirs.append(shared.bundle_dir)
    runs = [(f"{array_id}_{t}", part.run_id(t)) for t in range(part.count)]
    same = {
        "submitted_at": utc_now(),
        "resources": p.resources.to_json(),  # one dict for every run: the store encodes it once
        "route": submitted_route(p.cluster),
        "kind": RecordKind.TASK,
    }
    records = [
        p.record(
            job_id=array_id,
            run_id=run_id,
            run_dir=posixpath.join(run_root, run_id),
            log_path=batch.sweep_log(p.abs_log_root, sweep_id, array_id, t),
            bundle_dir=f"{p.bundle_root}/{job_id}",  # BundlePaths(p.abs_log_root, run_id, job_id).bundle_dir
            task=t,
            **same,
        )
        for t, (job_id, run_id) in enumerate(runs)
    ]
    jj = JobJson.submitted(
        records[0], shared.script, p.options.description, job_id=runs[0][0], python_env=p.python_env.to_json()
    )
    for rec, job_json in zip(records, job_json_texts(jj, runs)):
        w.files[f"{rec.bundle_dir}/job.json"] = job_json
        w.dirs.append(rec.bundle_dir)
    w.records += records
