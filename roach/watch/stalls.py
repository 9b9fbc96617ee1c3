"""What the watch does with a stalled run (``--on-stall``): say it, or requeue it to resume from its checkpoint;
and, with ``requeue``, what it does with a run Slurm held after its launch failed: release it.

A run's log that stops while the job still runs (a rank stopped, a hung collective, a node that lost its file
system) keeps its GPUs until the time limit. ``requeue`` hands such a run back to Slurm (``scontrol requeue``):
its next attempt resumes from its last checkpoint, as after a preemption, with no change to the user's function.
Only runs of roach's store are requeued (never a job the watch follows by ``--job``, never another user's), only
runs whose log shows a checkpoint and whose current attempt has logged a step (not one still starting), and once
per stall; a run that stalls again before its next checkpoint is said, not requeued again (the hang then comes
back with the run).

A run whose launch failed waits held (``launch failed requeued held``) until someone releases it: a node that refused
it (Slurm drains that node), or a controller that failed over as it started the job and launched it a second time
("Duplicate jobid"). Releasing it loses nothing, so any run of the store is released, once per attempt; a hold of
any other kind (the user's, an admin's) is left alone."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import replace

from roach.errors import RoachError, TransportError
from roach.model.states import PendingReason
from roach.ops.events import Event, EventKind
from roach.records.job_record import JobRecord
from roach.runtime.attempts import stall_marker
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import QueueRecord
from roach.watch.jobs import Ctx, JobWatch


class OnStall(enum.Enum):
    """What a round does with a run it finds stalled."""

    SAY = "say"  # the stalled line only
    REQUEUE = "requeue"  # and `scontrol requeue` a run of the store that checkpoints


def why_not_requeued(w: JobWatch, records: Mapping[str, JobRecord]) -> str | None:
    """Why a stalled run is not requeued, in words for its line; None: it is requeued."""
    if w.key not in records:
        return "not a run of roach's store (only those are requeued)"
    if w.checkpoints is False:
        return "it does not checkpoint, so a requeue would start it over from step 0"
    if w.last_checkpoint is None:
        return "its log shows no checkpoint to resume from, so a requeue would start it over from step 0"
    if w.stepping is False:
        return "its current attempt has not logged a step yet (it is starting: the clone, imports, rendezvous)"
    if w.stall_requeued_at is not None and w.last_checkpoint <= w.stall_requeued_at:
        return (
            f"it stalled again before a checkpoint past step {w.stall_requeued_at}, where the watch's last requeue "
            "resumed it: the stall comes back with the run; look at its log"
        )
    return None


def act_on_stalls(
    events: list[Event],
    views: Mapping[str, JobWatch],
    records: Mapping[str, JobRecord],
    on_stall: OnStall,
    client: SlurmClient,
    ctx: Ctx,
) -> list[Event]:
    """``events`` with each ``stalled`` one acted on: with ``REQUEUE``, a run that qualifies is requeued (one
    ``scontrol requeue`` each, and a ``stall_requeued`` or ``stall_requeue_failed`` event after its line), and
    the line of one that does not says why."""
    if on_stall is OnStall.SAY:
        return events
    out: list[Event] = []
    for e in events:
        w = views.get(e.job_id or "") if e.kind is EventKind.STALLED else None
        if w is None:
            out.append(e)
            continue
        why = why_not_requeued(w, records)
        if why is not None:
            out.append(replace(e, message=f"{e.message}; not requeued: {why}"))
            continue
        out += [e, requeue_stalled(w, client, ctx, e.data.get("silence_s"), records[w.key].run_dir)]
    return out


def requeue_stalled(
    w: JobWatch, client: SlurmClient, ctx: Ctx, silence_s: float | None, run_dir: str | None = None
) -> Event:
    """``scontrol requeue`` the stalled run ``w`` (an array's task by its own id, ``123_4``), and what came of it;
    first the marker in ``run_dir`` that tells its rank 0 the requeue is the watch's."""
    step = w.last_checkpoint
    try:
        if run_dir:  # the attempt's rank 0 reads it and counts the requeue as this, not as a preemption
            fs = ClusterFS(client.transport)
            fs.write(stall_marker(fs.expand(run_dir), w.restart_count), f"stalled at step {w.step}\n")
        client.requeue(w.key)
    except (RoachError, TransportError) as err:
        return ctx.event(
            EventKind.STALL_REQUEUE_FAILED,
            w,
            f"{w.label()} stalled and could not be requeued: {_first_line(err)}",
            checkpoint_step=step,
            error=str(err),
        )
    w.stall_requeued_at = step
    return ctx.event(
        EventKind.STALL_REQUEUED,
        w,
        f"{w.label()} requeued (`scontrol requeue {w.key}`) after its log stalled: its next attempt resumes from "
        f"its last checkpoint, step {step} or one its ranks save as Slurm stops them",
        checkpoint_step=step,
        silence_s=silence_s,
    )


def release_held(
    views: Mapping[str, JobWatch],
    records: Mapping[str, JobRecord],
    active: Mapping[str, QueueRecord],
    on_stall: OnStall,
    client: SlurmClient,
    ctx: Ctx,
    touched: set[str],
) -> list[Event]:
    """With ``REQUEUE``: each run of the store that Slurm holds after its launch failed, released (one ``scontrol
    release`` each, once per attempt), and what came of it; the views it changed go into ``touched``."""
    if on_stall is OnStall.SAY:
        return []
    out = []
    for key, q in active.items():
        w = views.get(key)
        if w is None or key not in records or q.reason is not PendingReason.LaunchFailedRequeuedHeld:
            continue
        if w.held_released != q.restart_count:
            w.held_released = q.restart_count
            touched.add(key)
            out.append(_release(w, q, client, ctx))
    return out


def _release(w: JobWatch, q: QueueRecord, client: SlurmClient, ctx: Ctx) -> Event:
    fields = {"reason": q.reason.name, "restart_count": q.restart_count}
    try:
        client.release(w.key)
    except (RoachError, TransportError) as err:
        return ctx.event(
            EventKind.HELD_RELEASE_FAILED,
            w,
            f"{w.label()} is held after its launch failed and could not be released: {_first_line(err)}",
            error=str(err),
            **fields,
        )
    return ctx.event(
        EventKind.HELD_RELEASED,
        w,
        f"{w.label()} released (`scontrol release {w.key}`): Slurm held it after its launch failed; it starts where "
        "Slurm can place it, and resumes from its last checkpoint",
        **fields,
    )


def _first_line(err: Exception) -> str:
    """What an event's line says of Slurm's refusal: its first line (the event's ``error`` keeps all of it)."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__
