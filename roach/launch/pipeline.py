"""The one way a batch job starts: queued held, its records and bundle written, then released.

``submit``, ``sweep`` and ``hold`` each render their scripts and say what to write; :func:`start` does the
rest, in this order: every script queued ``sbatch --hold`` (a lost answer found and cancelled,
:mod:`roach.launch.lost`), the records added in one transaction, the bundle files written in one remote call,
one ``scontrol release``. If anything fails between, the held jobs are cancelled, their records deleted and
their bundles removed: never a job without a record, nor a record without a job.

A controller that fails over (its backup takes over from a primary killed before it saved its state) may no
longer know held jobs it answered for moments before: their release says "Invalid job id". Nothing of them
is left to run, so :func:`queue_and_start` undoes the submission and queues it once more, at the backup.

On a metered cluster :func:`queue_and_start` first holds the submission's worst case (:class:`Spend`) against a
live grant that covers it (:mod:`roach.records.grants`), in one transaction, before anything is queued: no grant
with room, nothing queued. The hold names the jobs as soon as they are queued held, and is dropped if the
submission is undone.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from roach.errors import RoachError, SlurmError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured
from roach.launch import lost
from roach.launch.shipping import ship_runtime, write_bundle
from roach.model.resources import Resources
from roach.records.grants import GrantBook, Hold
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS


@dataclass(frozen=True)
class Destination:
    """Where a submission goes: the cluster, its client and files, and the store that records it."""

    cluster: Cluster
    client: SlurmClient
    fs: ClusterFS
    store: Store


@dataclass
class Written:
    """What a submission writes once its jobs are queued held."""

    records: list[JobRecord]
    files: dict[str, str]  # path on the cluster -> text
    dirs: list[str]  # the bundle directories, removed if the submission is undone
    runtime_root: str | None = None  # ship the runtime copy under it with the files
    experiment: str | None = None
    before: Callable[[], object] | None = field(default=None, repr=False)  # run first (a commit pushed to a mirror)


def queue_held(
    to: Destination, render: Callable[[Sequence[int]], str | None], log_prefix: str
) -> list[tuple[int, str]]:
    """Each script ``render`` gives (it is shown the job ids queued so far; None when done) queued held, with its
    text; if one is refused, those before it are cancelled."""
    queued: list[tuple[int, str]] = []
    try:
        while (text := render([j for j, _ in queued])) is not None:
            queued.append((lost.sbatch_held(to.client, to.store, to.cluster, text, log_prefix), text))
    except BaseException:
        if queued:
            to.client.scancel([j for j, _ in queued])
        raise
    return queued


@dataclass(frozen=True)
class Spend:
    """What a submission may spend at worst (GPUs x time limit x runs), the experiment it is under, and it in words."""

    gpu_hours: float
    experiment: str | None
    what: str

    @classmethod
    def of(cls, res: Resources, experiment: str | None, runs: int = 1, what: str = "a run") -> Spend:
        """``runs`` attempts of ``res`` each to its time limit."""
        each = f"{res.total_gpus} GPUs x {guardrails.hours(res):.3g} h"
        return cls(
            runs * guardrails.gpu_hours(res),
            experiment,
            f"{what} ({runs} x {each})" if runs > 1 else f"{what} ({each})",
        )


def _reserve(book: GrantBook, cluster: Cluster, spend: Spend) -> Hold | None:
    """The submission's hold on a grant where its cluster is metered (:class:`~roach.records.grants.GrantRefused`
    where no live grant has room); None where it is not metered."""
    if not configured(cluster).metered:
        return None
    _, hold = book.reserve(cluster.name, spend.experiment, spend.gpu_hours, spend.what)
    return hold


class HeldJobsLost(RoachError):
    """The controller no longer knows the held jobs it queued: their release said "Invalid job id"."""


def queue_and_start(
    to: Destination,
    queue: Callable[[], list[tuple[int, str]]],
    write: Callable[[list[tuple[int, str]]], Written],
    *,
    log_prefix: str,
    what: Callable[[list[int]], str],
    spend: Spend,
) -> tuple[list[tuple[int, str]], Written]:
    """:func:`queue_held` (through ``queue``) then :func:`start`; where the controller lost the held jobs before
    their release (:class:`HeldJobsLost`: undone, nothing left), queued once more. ``spend``: what it may cost,
    held against a grant first where the cluster is metered."""
    book = GrantBook(to.store)
    hold = _reserve(book, to.cluster, spend)
    try:
        for tries_left in (1, 0):
            queued = queue()
            ids = [j for j, _ in queued]
            if hold is not None:
                book.attach(hold, ids)
            try:
                written = start(
                    to, queued, functools.partial(_write_queued, write, queued), log_prefix=log_prefix, what=what(ids)
                )
            except HeldJobsLost:
                if not tries_left:
                    raise
                continue
            return queued, written
        raise AssertionError("unreachable")
    except BaseException:
        if hold is not None:  # undone: its held jobs were cancelled before they ran
            book.release(hold)
        raise


def start_one(
    to: Destination,
    text: str,
    write: Callable[[list[tuple[int, str]]], Written],
    *,
    log_prefix: str,
    what: str,
    spend: Spend,
) -> tuple[int, Written]:
    """:func:`queue_and_start` for one script (a job, a holder): its job id and what was written. ``what`` names
    it in a failure, with its job id after it."""
    queued, written = queue_and_start(
        to,
        lambda: queue_held(to, one(text), log_prefix),
        write,
        log_prefix=log_prefix,
        what=lambda ids: f"{what} {ids[0]}",
        spend=spend,
    )
    return queued[0][0], written


def _write_queued(
    write: Callable[[list[tuple[int, str]]], Written], queued: list[tuple[int, str]], _ids: list[int]
) -> Written:
    return write(queued)


def one(text: str) -> Callable[[Sequence[int]], str | None]:
    """The ``render`` of :func:`queue_held` for a single script."""
    return lambda queued: None if queued else text


def start(
    to: Destination,
    queued: Sequence[tuple[int, str]],
    write: Callable[[list[int]], Written],
    *,
    log_prefix: str | None,
    what: str,
    release: Callable[[], object] | None = None,
    unqueue: Callable[[], object] | None = None,
) -> Written:
    """Write what ``write`` gives for the held jobs ``queued`` and release them; undo everything on a failure.

    ``release`` and ``unqueue`` replace ``scontrol release`` and ``scancel`` of the queued ids where the job is
    not a batch job (an attempt in a holder: its driver started, its claimed bundle removed)."""
    ids = [j for j, _ in queued]
    written: Written | None = None
    added = releasing = False
    try:
        written = write(ids)
        if written.before is not None:
            written.before()
        # the records first: the store's commit syncs its file, which would wait for the files made before it
        to.store.add_many(written.records)
        added = True
        if written.experiment:
            for j in ids:
                to.store.set_experiment(to.cluster.name, j, written.experiment)
        _write_files(to.fs, written)
        releasing = True
        (release or (lambda: to.client.release(",".join(map(str, ids)))))()
    except BaseException as exc:
        try:
            (unqueue or (lambda: to.client.scancel(ids)))()
        finally:
            for job_id, attempt in {(r.job_id, r.attempt) for r in written.records} if written and added else ():
                to.store.delete(to.cluster.name, job_id, attempt)  # an array's tasks go with their job id
            if written is not None:
                to.fs.remove_bundles(written.dirs)
        if releasing and isinstance(exc, SlurmError) and "Invalid job id" in exc.stderr:
            raise HeldJobsLost(f"{what}: the controller no longer knows job {', '.join(map(str, ids))}") from exc
        if isinstance(exc, RoachError):
            raise
        raise RoachError(f"{what} failed and was undone: {exc}") from exc
    if log_prefix is not None:
        lost.forget(to.store, to.cluster.name, log_prefix)
    return written


def _write_files(fs: ClusterFS, w: Written) -> None:
    """The files in one remote call: with the runtime copy where they share a directory (a job's bundle)."""
    if w.runtime_root is not None and len({posixpath.dirname(p) for p in w.files}) == 1:
        write_bundle(fs, w.runtime_root, w.files)
        return
    if w.runtime_root is not None:
        ship_runtime(fs, w.runtime_root)
    fs.write_many(w.files)
