"""The schema of `roach report --json`: a run's, a sweep's or an experiment's GPU-hour ledger."""

from __future__ import annotations

from typing import Any

from roach.cli.schemas.build import array, enum, integer, mapping, number, obj, record, string
from roach.model.job_state import JobState
from roach.ops.attempt_log import LogStop
from roach.ops.report import Scope

_SUMS: dict[str, dict[str, Any]] = {
    "allocated_gpu_h": number("GPU-hours allocated: sacct's AllocTRES gres/gpu x ElapsedRaw, over every attempt."),
    "useful_gpu_h": number("GPU-hours of training whose steps were kept: allocated less idle and recomputed."),
    "recomputed_gpu_h": number(
        "GPU-hours spent doing steps again after a preemption or a crash (from an attempt's first step to the step "
        "the attempt before it had reached)."
    ),
    "idle_gpu_h": number("GPU-hours of each attempt's start-up: from its Start to its first step line."),
    "useful_steps": integer("Steps done and kept."),
    "recomputed_steps": integer("Steps done again: where an attempt resumed behind where the one before stopped."),
    "pending_s_by_tier": mapping("Seconds queued (sacct's Eligible -> Start) per tier.", number("Seconds.")),
    "requeue_s": number(
        "Seconds between an attempt's end and the next attempt's Eligible: the job was requeued, not yet eligible "
        "(completing, then its BeginTime)."
    ),
    "preemptions": integer("Attempts that ended preempted."),
    "wall_clock_stops": integer("Attempts that left at their wall clock and were requeued by roach."),
    "failures": mapping("Attempts that failed, by sacct's state (FAILED, OUT_OF_MEMORY, NODE_FAIL, ...).", integer("")),
    "attempts": integer("Attempts counted."),
}

ATTEMPT = obj(
    "One attempt: one line of `sacct --allocations --duplicates`, with what the run's log says of it.",
    {
        "job": string(
            "Slurm's id of the job: `123`, an array task `123_4`, or `123/2` for attempt 2 inside holder 123."
        ),
        "restart": integer("The job's restart count at this attempt (0 for its first); inside a holder, its number."),
        "tier": string("The tier its partition and QOS count against (else `PARTITION/QOS`)."),
        "state": enum("sacct's state of this attempt.", [s.value for s in JobState]),
        "stop": enum("How it left, as its log says (`none`: no line says).", [s.value for s in LogStop]),
        "nodes": string("Its NodeList (`` for an attempt that never started)."),
        "gpus": integer("GPUs allocated (AllocTRES gres/gpu)."),
        "eligible": string("When it could start (UTC).", null=True),
        "start": string("When it started (UTC).", null=True),
        "end": string("When it ended (UTC).", null=True),
        "pending_s": number("Seconds from Eligible to Start (to now while it waits)."),
        "requeue_s": number("Seconds from the job's attempt before this one ending to this one's Eligible."),
        "elapsed_s": integer("sacct's ElapsedRaw."),
        "starting_s": number("Seconds from Start to its first step line."),
        "recomputed_s": number("Seconds spent on steps done again."),
        "useful_s": number("The rest of its elapsed time."),
        "start_step": integer("The step it started at; null: its log says nothing of it.", null=True),
        "end_step": integer("Steps done when it left (its last logged step where it died without a line).", null=True),
        "recomputed_steps": integer("Steps it did again."),
    },
)

REPORT = record(
    "report",
    "What `roach report NAME` read: every run the name covers, each attempt, and the totals.",
    {
        "name": string("The name asked for."),
        "scope": enum("What it named.", [s.value for s in Scope]),
        "generated_at": string("When the report was made (UTC)."),
        "runs": array(
            "Each run, in submission order.",
            obj(
                "One run over all its submissions.",
                {
                    "run_id": string("The run id."),
                    "cluster": string("Its cluster."),
                    "steps_total": integer("The steps its progress lines name (`step N/M`).", null=True),
                    "error_line": string(
                        "Its latest job failed: the line of its log that says why (as `roach status` gives it); "
                        "null: it did not fail, or no line says why.",
                        null=True,
                    ),
                    **_SUMS,
                    "attempts": array("Its attempts, oldest first.", ATTEMPT),
                },
            ),
        ),
        "total": obj("The sums over every run.", {"runs": integer("Runs."), **_SUMS}),
    },
)

SCHEMAS = {"report": REPORT}
