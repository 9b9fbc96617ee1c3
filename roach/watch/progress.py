"""What a run's log says in a round (:func:`on_log`): its progress, a stall, the marks of a preemption or a wall-clock stop."""

from __future__ import annotations

from roach.ops.events import Event, EventKind, human_seconds
from roach.watch.jobs import Ctx, JobWatch
from roach.watch.logs import LogFacts, LogLook, StallRule, gaps_of, read_facts


def on_log(w: JobWatch, seen: LogLook, remote_now: float, rule: StallRule, ctx: Ctx, running: bool) -> list[Event]:
    """This round's look at the job's log: progress, attempts that resumed or started over, stalls (only of a
    job that ``running`` now and ran last round too)."""
    events: list[Event] = []
    if not seen.exists:
        return events
    facts: LogFacts = read_facts(seen.lines)
    moved = (seen.size, seen.mtime) != (w.log_size, w.log_mtime)
    if facts.progress is not None and facts.progress != w.progress:
        new_gaps = gaps_of(facts.progress_times, w.last_progress_time)
        if not facts.progress_times and w.log_mtime is not None and w.progress is not None:
            new_gaps = [seen.mtime - w.log_mtime] if seen.mtime > w.log_mtime else []
        w.gaps = (w.gaps + new_gaps)[-20:]
        new_points = [
            [t, s] for t, s in facts.progress_points if w.last_progress_time is None or t > w.last_progress_time
        ]
        if not facts.progress_times and facts.step is not None:
            new_points = [[seen.mtime, facts.step]]  # untimed lines: the log's mtime stands in for the line's time
        w.points = add_points(w.points, new_points)
        w.progress, w.step = facts.progress, facts.step
        w.steps_total = facts.steps_total or w.steps_total
        if facts.progress_times:
            w.last_progress_time = facts.progress_times[-1]
    if facts.env_failed:
        w.env_failed = facts.env_failed
    for line in _unsaid(facts.node_failed, w.node_failed):  # a look may find both the failure and the exclusion
        w.node_failed = line
        events.append(ctx.event(EventKind.NODE_FAILED, w, f"{w.label()}: {line}", error=line))
    if facts.stepping is not None:
        w.stepping = facts.stepping
    if facts.preempted or facts.wall_clock:
        w.last_leave = "preempted" if facts.preempted else "wall clock"
        w.left_step = facts.left_at
    elif facts.finished:
        w.last_leave = "finished"
    if facts.checkpoints is not None:
        w.checkpoints = facts.checkpoints if w.checkpoints is not True else True
    if facts.last_checkpoint is not None:
        w.last_checkpoint = facts.last_checkpoint
    if facts.attempt is not None and facts.attempt != w.attempt and (facts.resumed_at is not None or facts.fresh):
        w.attempt = facts.attempt
        if facts.resumed_at is not None:
            events.append(
                ctx.event(
                    EventKind.RESUMED,
                    w,
                    f"{w.label()} resumed at step {facts.resumed_at} (attempt {facts.attempt})",
                    step=facts.resumed_at,
                    attempt=facts.attempt,
                )
            )
        elif facts.fresh and (facts.attempt > 1 or w.resubmitted):
            events.append(
                ctx.event(
                    EventKind.FROM_THE_TOP,
                    w,
                    f"{w.label()} started again from step 0 (attempt "
                    f"{facts.attempt}): it had no checkpoint to resume from; the work before is lost",
                    attempt=facts.attempt,
                )
            )
    if moved:
        w.stalled = False
    elif running and w.running and w.log_size is not None:
        silence = remote_now - seen.mtime
        limit = rule.threshold(w.gaps)
        if silence > limit and not w.stalled:
            w.stalled = True
            last = f'; last line: "{w.progress}"' if w.progress else ""
            events.append(
                ctx.event(
                    EventKind.STALLED,
                    w,
                    f"{w.label()} stalled: its log has not moved for "
                    f"{human_seconds(silence)} (usual gap {human_seconds(max(w.gaps) if w.gaps else None)}, "
                    f"limit {human_seconds(limit)}){last}",
                    silence_s=round(silence, 1),
                    limit_s=round(limit, 1),
                    log=w.log_path,
                    last=w.progress,
                )
            )
    w.log_size, w.log_mtime = seen.size, seen.mtime
    return events


POINTS_KEPT = 20


def add_points(points: list[list[float]], new: list[list[float]]) -> list[list[float]]:
    """The recent ``[time, step]`` pairs with ``new`` added; a step that goes back (a new attempt resumed from its
    checkpoint, or started over) begins the pace afresh: the attempt before ran at another time."""
    out = list(points)
    for p in new:
        if out and (p[1] < out[-1][1] or p[0] < out[-1][0]):
            out = []
        if not out or p != out[-1]:
            out.append(p)
    return out[-POINTS_KEPT:]


def _unsaid(lines: tuple[str, ...], said: str | None) -> tuple[str, ...]:
    """The lines after the last one said (every line where none of them was)."""
    if said in lines:
        return lines[len(lines) - lines[::-1].index(said) :]
    return lines
