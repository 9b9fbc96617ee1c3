"""A watched job that left the queue: its end as accounting says it, and the cause its log gives once recorded.

Pure, like :mod:`roach.watch.jobs`: each function takes the job's view and what sacct (or the store) says now.
"""

from __future__ import annotations

from dataclasses import replace

from roach.model.job_state import JobState
from roach.ops.events import Event, EventKind, human_seconds
from roach.records.job_record import JobRecord
from roach.scheduler.parse import AcctRecord, in_array
from roach.watch.jobs import Ctx, JobWatch


def on_left(w: JobWatch, now: float) -> None:
    """The job is not in this round's squeue: it is done only once sacct says so."""
    if w.in_queue or w.left_at is None:
        w.left_at = now
    w.in_queue = False


def env_failed_text(w: JobWatch) -> str:
    """What a finished line adds for a job whose Python environment could not be built (exit 7): its log's line,
    or, where no look saw it, what exit 7 means."""
    if w.env_failed:
        return f"; {w.env_failed}"
    if w.exit_code == "7:0" and not w.holder:
        return f"; exit 7: env_failed, its Python environment could not be built (`roach why {w.key}` says why)"
    return ""


def on_accounting(w: JobWatch, rec: AcctRecord | None, ctx: Ctx, lost_after_s: float) -> list[Event]:
    """sacct's record of a job that left the queue (None: sacct has none yet), or slurmctld's where accounting
    lags (:mod:`roach.scheduler.controller_ends`). A job that neither has an end for ``lost_after_s`` is lost."""
    if rec is None or not rec.state.is_terminal:
        if w.left_at is not None and ctx.now - w.left_at > lost_after_s and "lost" not in w.reported:
            w.reported.append("lost")
            held = "no record of it" if rec is None else f"no end for it (it says {rec.state.value})"
            return [
                ctx.event(
                    EventKind.LOST,
                    w,
                    f"{w.label()} left the queue {human_seconds(ctx.now - w.left_at)} "
                    f"ago and accounting has {held}: check `sacct -j {w.key}`",
                )
            ]
        return []
    events: list[Event] = []
    if "started" not in w.reported and rec.start_time is not None and rec.nodelist not in ("", "None assigned"):
        # it started and ended between two rounds: say that it started, once, before it finished
        w.reported.append("started")
        events.append(
            ctx.event(
                EventKind.STARTED,
                w,
                f"{w.label()} started on {rec.nodelist} (seen once it had ended)",
                state=JobState.RUNNING.value,
                nodes=rec.nodelist,
                tier=w.tier,
                gpus=w.gpus,
                restart_count=0,
            )
        )
    w.final_state, w.exit_code, w.done, w.in_queue = rec.state.value, f"{rec.exit_code}:{rec.exit_signal}", True, False
    w.state = rec.state.value
    ran = f", ran {human_seconds(rec.elapsed_s)}" if rec.elapsed_s else ""
    moved = f" (continued as job {w.superseded_by})" if w.superseded_by else ""
    return events + [
        ctx.event(
            EventKind.FINISHED,
            w,
            f"{w.label()} finished: {rec.state_text}, exit {w.exit_code}{ran}{moved}{env_failed_text(w)}",
            state=rec.state.value,
            state_text=rec.state_text,
            exit_code=w.exit_code,
            elapsed_s=rec.elapsed_s,
            ok=rec.state.is_success,
            superseded_by=w.superseded_by,
            error_line=None,  # the store's, once the end is recorded (with_causes)
        )
    ]


def with_causes(events: list[Event], recorded: list[JobRecord]) -> list[Event]:
    """The round's events, each ``finished`` of a job whose end was recorded with an error line (the cause in
    its log, :func:`~roach.records.error_line.error_line`) saying it."""
    lines = {str(r.key): r.error_line for r in recorded if r.error_line}
    return [
        _with_cause(e, lines[e.job_id]) if e.kind is EventKind.FINISHED and e.job_id in lines else e for e in events
    ]


def _with_cause(e: Event, line: str) -> Event:
    said = e.message if line in e.message else f"{e.message}: {line}"
    return replace(e, message=said, data={**e.data, "error_line": line})


def match_acct(keys: list[str], found: list[AcctRecord]) -> dict[str, AcctRecord]:
    """sacct's allocation record for each key: by id, by raw id, or a pending array range that holds it."""
    allocs = [r for r in found if r.step is None]
    by_ref = {str(r.ref): r for r in allocs}
    by_raw = {r.raw_id: r for r in allocs}
    out = {}
    for key in keys:
        hit = by_ref.get(key) or by_raw.get(key)
        if hit is None and "_" in key:
            job, task = key.split("_", 1)
            for r in allocs:
                if str(r.ref.job) == job and task.isdigit() and in_array(r.ref.tasks, int(task)):
                    hit = r
                    break
            # an array none of whose tasks started: sacct may list it under the array's own id for a while.
            # Only then: a record under the bare id that ran is one task whose task id slurmdbd has not been
            # told yet (just after the array ended), never the fate of the others.
            bare = by_ref.get(job)
            if hit is None and bare is not None and bare.start_time is None:
                hit = bare
        if hit is not None:
            out[key] = hit
    return out
