"""The schema of ``roach watch --json``'s lines (and of the JSON ``--exec`` hands each event): ``roach.event``.

Every event has the common fields; each kind adds its own (``KIND_FIELDS``), which its ``if``/``then`` requires.
"""

from __future__ import annotations

from typing import Any

from roach.cli.schemas.build import (
    array,
    boolean,
    enum,
    integer,
    number,
    obj,
    optional,
    record,
    string,
    strings,
)
from roach.cli.schemas.jobs import ESTIMATE
from roach.model.states import PendingReason
from roach.ops.events import EventKind
from roach.ops.pending import Outlook

TIER_ROW = obj(
    "One tier as the user holds it now (the whole queue of the user's counts, other sessions' jobs too).",
    {
        "tier": string("The tier's name."),
        "cap": integer("The per-user GPU cap; null: none.", null=True),
        "claimed": integer("GPUs the user's running and pending jobs hold there (a pending job owns its slot)."),
        "running": integer("GPUs of running jobs."),
        "pending": integer("GPUs of pending jobs."),
        "free": integer("GPUs the user may still claim (`cap - claimed`, at least 0); null: no cap.", null=True),
        "preemptible": boolean("Whether jobs there may be preempted."),
    },
)

HOLDER = obj(
    "A running holder the watch sees.",
    {
        "job_id": string("The holder's job id."),
        "run_id": string("Its run id in the store; null when it has none.", null=True),
        "name": string("Its name; null when none.", null=True),
        "held_s": integer("Seconds it has been charged."),
        "time_limit_s": integer("Its wall clock in seconds; null: none.", null=True),
        "idle": boolean("True: no attempt runs in it (charged for nothing); null: not known.", null=True),
    },
)

_step = integer("The step the run's log last reported; null: none yet.", null=True)

# Each kind's own fields. A field of several kinds has one type and meaning in all of them.
FIELDS: dict[str, dict[str, Any]] = {
    "state": string("Slurm's state name (`RUNNING` when it started; the final one when it finished)."),
    "nodes": string("Where it runs (Slurm's node list)."),
    "tier": string("The tier it is on; null when no tier of the cluster matches.", null=True),
    "gpus": integer("GPUs it holds (a promotion: it would hold)."),
    "restart_count": integer("Slurm's restart count."),
    "why": strings("What showed it went back to the queue (restart count rose, elapsed went backwards, ...)."),
    "step": _step,
    "preemptions_on_tier": integer("How many times this watch saw it preempted on this tier."),
    "checkpoints": boolean("Whether the run checkpoints (from its log); null: not known yet.", null=True),
    "state_text": string("sacct's state as printed (`CANCELLED by 1000`)."),
    "exit_code": string("sacct's `code:signal`."),
    "elapsed_s": integer("Seconds it ran."),
    "ok": boolean("Whether it COMPLETED."),
    "superseded_by": integer("The job it continues as (a promotion, a move); null: none.", null=True),
    "error_line": string(
        "A failed job's cause: the line of its log that says it (git's `fatal:`, `env_failed`, the exception a "
        "rank raised); null: it did not fail, or no line says why.",
        null=True,
    ),
    "attempt": integer("The attempt number its log reports (1, 2, ...)."),
    "silence_s": number("Seconds its log has not moved."),
    "limit_s": number("The silence allowed (3x its usual gap, at least `--stall-after`)."),
    "log": string("The log's path; null when the store has none.", null=True),
    "last": string("The last progress line; null: none.", null=True),
    "checkpoint_step": integer(
        "The run's last checkpoint when the watch acted (its log's `checkpoint at step N`): the next attempt "
        "resumes there, or at a later one its ranks save as Slurm stops them."
    ),
    "reason": enum("Slurm's pending reason, as roach names it (docs/pending.md).", PendingReason.__members__),
    "reason_text": string("The reason as squeue printed it."),
    "outlook": enum("Will it start by itself (`never` for this kind).", [o.value for o in Outlook]),
    "meaning": string("What the reason means."),
    "detail": string("What the queue says of this job in particular (empty when nothing more)."),
    "action": string("What to do."),
    "from_tier": string("The tier it pends on."),
    "to_tier": string("The tier with room."),
    "room": integer("Free GPUs of the user's on `to_tier` before the move; null: no cap (a probe said so).", null=True),
    "preempts": strings(
        "The user's running runs (as squeue names them) Slurm would preempt to start it on `to_tier`; empty: none, "
        "or not weighed (no probe)."
    ),
    "loss_s": number(
        "What those runs lose, in seconds: steps since their checkpoints at their pace, plus a restart each; null: "
        "not known (a move that preempts runs whose loss is not known is not made).",
        null=True,
    ),
    "gain_s": number("How much sooner it starts on `to_tier` than where it pends; null: not known.", null=True),
    "new_job_id": integer("The job it is now."),
    "error": string("What failed, in full."),
    "reservation": string("The reservation's name."),
    "change": enum("`moved` (a new start) or `vanished`.", ["moved", "vanished"]),
    "start": string("The reservation's start now; null: it vanished.", null=True),
    "was_start": string("Its start before; null: not known.", null=True),
    "dir": string("The log directory."),
    "used": integer("Bytes the directory holds; null: not known.", null=True),
    "fs_free": integer("Bytes free on its file system; null: not known.", null=True),
    "fs_size": integer("Its file system's size in bytes; null: not known.", null=True),
    "over": boolean("Whether the directory is over its size limit."),
    "low_free": boolean("Whether its file system's free space is under the limit."),
    "service": string("`slurmctld`, `slurmdbd`, or `the cluster` (the connection)."),
    "down_s": number("Seconds it was unreachable."),
    "not_responding": strings("Its nodes that Slurm marks not responding (sinfo's `*`, as in `idle*`)."),
    "grant": string("The grant (`g3`, as `roach grant --list` shows)."),
    "share": integer("The share of its GPU-hours it passed, in percent: 50, 80 or 100."),
    "spent": number("GPU-hours its submissions' jobs spent (Slurm's accounting, every attempt)."),
    "gpu_hours": number("The GPU-hours it allows."),
    "held_jobs": array("At 100 %: the pending jobs held in Slurm (`scontrol hold`).", integer("A job id.")),
    "hold_error": string("At 100 %: why holding them failed; null: it did not.", null=True),
    "watching": integer("Watched jobs that have not ended."),
    "running": integer("Of them, running."),
    "pending": integer("Of them, pending."),
    "ended": integer("Watched jobs that ended (queue_empty: all of them)."),
    "outages": strings("Each outage going on, in words."),
    "holders": array("The running holders watched: what they are charged.", HOLDER),
    "completed": integer("Of the ended jobs, how many COMPLETED (or continued as another job)."),
    "estimate": ESTIMATE,
}

_PROMOTION = ("from_tier", "to_tier", "gpus", "room", "preempts", "loss_s", "gain_s")
_EXPLANATION = ("reason", "reason_text", "outlook", "meaning", "detail", "action")
KIND_FIELDS: dict[EventKind, tuple[str, ...]] = {
    EventKind.STARTED: ("state", "nodes", "tier", "gpus", "restart_count"),
    EventKind.FINISHED: ("state", "state_text", "exit_code", "elapsed_s", "ok", "superseded_by", "error_line"),
    EventKind.REQUEUED: ("tier", "why", "restart_count", "step", "preemptions_on_tier", "checkpoints"),
    EventKind.PREEMPTED: ("tier", "why", "restart_count", "step", "preemptions_on_tier", "checkpoints"),
    EventKind.RESUMED: ("step", "attempt"),
    EventKind.FROM_THE_TOP: ("attempt",),
    EventKind.NODE_FAILED: ("error",),
    EventKind.STALLED: ("silence_s", "limit_s", "log", "last"),
    EventKind.STALL_REQUEUED: ("checkpoint_step", "silence_s"),
    EventKind.STALL_REQUEUE_FAILED: ("checkpoint_step", "error"),
    EventKind.HELD_RELEASED: ("reason", "restart_count"),
    EventKind.HELD_RELEASE_FAILED: ("reason", "restart_count", "error"),
    EventKind.NEVER_STARTS: _EXPLANATION,
    EventKind.PENDING: ("reason", "reason_text", "estimate"),
    EventKind.PROMOTION: _PROMOTION,
    EventKind.PROMOTED: (*_PROMOTION, "new_job_id"),
    EventKind.PROMOTE_FAILED: (*_PROMOTION, "error"),
    EventKind.NOT_PROMOTED: _PROMOTION,
    EventKind.RESERVATION: ("reservation", "change", "start", "was_start"),
    EventKind.LOST: (),
    EventKind.DISK: ("dir", "used", "fs_free", "fs_size", "over", "low_free"),
    EventKind.OUTAGE: ("service", "error"),
    EventKind.RECOVERED: ("service", "down_s"),
    EventKind.NODE_NOT_RESPONDING: ("nodes", "not_responding"),
    EventKind.BUDGET: ("grant", "share", "spent", "gpu_hours", "held_jobs", "hold_error"),
    EventKind.HEARTBEAT: ("watching", "running", "pending", "ended", "outages", "holders"),
    EventKind.QUEUE_EMPTY: ("ended", "completed"),
}

KIND_TEXT: dict[EventKind, str] = {
    EventKind.STARTED: "a job started running (each attempt; once, late, for one that started and ended between rounds)",
    EventKind.FINISHED: "accounting says a job ended",
    EventKind.REQUEUED: "a job went back to the queue",
    EventKind.PREEMPTED: "a job went back to the queue by preemption (a preemptible tier, or its log says so)",
    EventKind.RESUMED: "a new attempt's log says it resumed at a step",
    EventKind.FROM_THE_TOP: "a new attempt of a run that had progress started from step 0",
    EventKind.NODE_FAILED: (
        "its log says a node could not hold the clone (no space left, a read-only file system) or a rank's write "
        "found no room, or that the job was requeued without such a node"
    ),
    EventKind.STALLED: (
        "a running job's log has not moved for longer than its usual gap (with `--on-stall requeue`, a run that is "
        "not requeued says why)"
    ),
    EventKind.STALL_REQUEUED: (
        "`--on-stall requeue` requeued a stalled run of the store (`scontrol requeue`): it resumes from its checkpoint"
    ),
    EventKind.STALL_REQUEUE_FAILED: "`--on-stall requeue` tried to requeue a stalled run and Slurm refused",
    EventKind.HELD_RELEASED: (
        "`--on-stall requeue` released a run of the store that Slurm held after its launch failed (`scontrol "
        "release`, once per attempt): it starts where Slurm can place it and resumes from its checkpoint"
    ),
    EventKind.HELD_RELEASE_FAILED: "`--on-stall requeue` tried to release a run Slurm held and Slurm refused",
    EventKind.NEVER_STARTS: "a job pends on a reason that will not clear as it is",
    EventKind.PENDING: "a job pends: when it will likely start (said after two rounds pending, and when that moves)",
    EventKind.PROMOTION: "a tier has room while a job pends lower: a move to make (`roach promote`)",
    EventKind.PROMOTED: "`--rebalance` made that move",
    EventKind.PROMOTE_FAILED: "`--rebalance` tried that move and could not",
    EventKind.NOT_PROMOTED: (
        "`--rebalance` weighed that move and did not make it: it would preempt the user's own runs for more than "
        "it gains"
    ),
    EventKind.RESERVATION: "the reservation a pending job asks for moved or vanished",
    EventKind.LOST: "a job left the queue and accounting has no record or no end of it after a long wait",
    EventKind.DISK: "a log directory's size or its file system's free space crossed its limit",
    EventKind.OUTAGE: "slurmctld, slurmdbd or the connection is unreachable (said once per outage)",
    EventKind.RECOVERED: "it is reachable again",
    EventKind.NODE_NOT_RESPONDING: (
        "a running job's node stopped answering Slurm (said once per job and node): Slurm sets it DOWN after "
        "SlurmdTimeout and fails the job, or requeues it"
    ),
    EventKind.BUDGET: (
        "a metered cluster's grant passed 50, 80 or 100 % of its GPU-hours (said once each); at 100 % its pending "
        "jobs are held in Slurm until a person makes a new grant (`roach grant`), and running jobs finish"
    ),
    EventKind.HEARTBEAT: "every `--heartbeat` seconds, whatever happened",
    EventKind.QUEUE_EMPTY: "every watched job has ended; the watch exits after it",
}


def kinds_of(field: str) -> list[str]:
    """The kinds that carry ``field``."""
    return [k.value for k, names in KIND_FIELDS.items() if field in names]


EVENT = record(
    "event",
    "One line of `roach watch --json` (and the stdin of `--exec`): a change, a heartbeat, or the end.",
    {
        "event": enum("The kind (below); a new kind may be added without a new version.", [k.value for k in EventKind]),
        "time": string("When the watch saw it, UTC (`2026-01-31T12:00:00Z`)."),
        "cluster": string("The cluster watched."),
        "job_id": string("The job as squeue names it (`123`, `123_4`); null for a cluster-wide event.", null=True),
        "run_id": string("Its run id, when roach submitted it; else null.", null=True),
        "name": string("The job's name; null for a cluster-wide event.", null=True),
        "message": string("The human line (what `roach watch` prints without `--json`), without time and kind."),
        **{
            k: optional({**v, "description": f"{v['description']} Kinds: {', '.join(kinds_of(k))}."})
            for k, v in FIELDS.items()
        },
        "tiers": array(
            "The tier table (heartbeat, promotion, promoted, promote_failed, queue_empty); else empty.", TIER_ROW
        ),
        "seq": optional(
            integer(
                "Its number in the watch log the one poller of this store and cluster writes: in the order said, "
                "never reused; `roach watch --since SEQ` (the MCP tool's cursor) gives what came after it."
            )
        ),
    },
)
EVENT["allOf"] = [
    {
        "if": {"properties": {"event": {"const": k.value}}},
        "then": {"description": KIND_TEXT[k], "required": list(names)},
    }
    for k, names in KIND_FIELDS.items()
]
