"""The schema of ``roach top --once --json``: one frame of the screen (:class:`roach.watch.screen.Frame`)."""

from __future__ import annotations

from roach.cli.schemas.build import array, boolean, enum, integer, number, obj, record, string, strings
from roach.cli.schemas.event_lines import TIER_ROW
from roach.cli.schemas.jobs import ESTIMATE
from roach.model.states import PendingReason
from roach.ops.pending import Outlook

_outlooks = [o.value for o in Outlook]

EXPLANATION = obj(
    "Why it pends, as `roach why --json` says it (read with this round's queue); null when it does not pend.",
    {
        "job_id": string("The job as Slurm names it."),
        "reason": enum("Slurm's pending reason, as roach names it (docs/pending.md).", PendingReason.__members__),
        "reason_text": string("The reason as squeue printed it."),
        "outlook": enum("Will it start by itself: `clears`, `waits` on the cluster, `never` as it is.", _outlooks),
        "meaning": string("What the reason means."),
        "detail": string("What the queue says of this job in particular (empty when nothing more)."),
        "action": string("What to do."),
    },
    null=True,
)

ROW = obj(
    "One watched job: a row of the screen.",
    {
        "job_id": string("The job as Slurm names it (`123`, `123_4`)."),
        "run_id": string("Its run id, when roach submitted it; else null.", null=True),
        "name": string("Its name; null when none.", null=True),
        "state": string(
            "Slurm's state name; once it ended, its final state; `ENDING` while accounting has not said how it "
            "ended; `?` when never seen."
        ),
        "tier": string("The tier it runs or pends on; null when no tier matches.", null=True),
        "nodes": string("Its nodes while it runs; else null.", null=True),
        "gpus": integer("GPUs it has (or asks for)."),
        "restarts": integer("Slurm's restart count (a requeue, a preemption)."),
        "preemptions": integer("Preemptions the watch counted, on every tier."),
        "progress": string("The last progress line of its log; null: none yet.", null=True),
        "step": integer("The step of that line; null: not known.", null=True),
        "steps_total": integer("The steps in all (`step N/M`); null: not known.", null=True),
        "steps_per_min": number(
            "Its pace over its recent progress lines (this attempt's); null: fewer than two.", null=True
        ),
        "eta_s": number("Seconds its remaining steps take at that pace; null: no pace or no total.", null=True),
        "stalled": boolean("Whether its log has been silent past its usual gap (`roach watch`'s `stalled`)."),
        "done": boolean("Whether it ended (accounting says so)."),
        "exit_code": string("Once ended, sacct's `code:signal`; else null.", null=True),
        "reason": string("While it pends, the reason as squeue printed it; else null.", null=True),
        "outlook": enum("While it pends, whether it will start by itself; else null.", _outlooks, null=True),
        "why": EXPLANATION,
        "estimate": ESTIMATE,
        "promotion": string("The tier a promotion would move it to now (`p`); null: none.", null=True),
        "superseded_by": integer("The job that continues its run (promoted, moved); null: none.", null=True),
        "holder": boolean("Whether it is a holder (`roach hold`)."),
        "held_s": integer("A running holder's seconds held; else null.", null=True),
        "time_limit_s": integer("A running holder's wall clock in seconds; else null.", null=True),
        "log": string("Its log's path; null when the store has none.", null=True),
    },
)

TOP = record(
    "top",
    "`roach top --once --json`: one round of the watch as the screen shows it.",
    {
        "cluster": string("The cluster."),
        "time": string("When the round ran, UTC, ISO 8601."),
        "tiers": array("The user's tier table (the watch's, from this round's queue).", TIER_ROW),
        "jobs": array("The watched jobs, in job id order (an ended one for an hour after it left).", ROW),
        "outages": strings("What is unreachable (slurmctld, slurmdbd, the cluster), in words; empty: nothing."),
    },
)

SCHEMAS = {"top": TOP}
