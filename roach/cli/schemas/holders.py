"""The schemas of the holder commands' records: ``hold``, ``steps``, ``signal``, ``release``."""

from __future__ import annotations

from roach.cli.schemas.build import array, boolean, enum, integer, obj, record, string, strings
from roach.launch.hold.steps import StepKind

_state = string("Slurm's state name of the holder (`PENDING`, `RUNNING`, ...).")

HOLD = record(
    "hold",
    "`roach hold`: the holder queued, and what Slurm says of it (after `--wait`, once it runs).",
    {
        "job_id": integer("The holder's job id: `roach submit --inside JOB_ID` starts attempts in it."),
        "cluster": string("The cluster."),
        "log": string("The holder's log."),
        "state": _state,
        "reason": string("Why it pends; null when it does not.", null=True),
        "nodelist": string("Its nodes (empty while it pends)."),
        "nodes": integer("Nodes it holds (or asks for)."),
        "gpus": integer("GPUs in all."),
        "held_s": integer("Seconds it has run: what it has been charged for."),
        "time_limit_s": integer("Its wall clock in seconds; null: none.", null=True),
    },
)

STEP = obj(
    "One step of the holder (`squeue --steps`).",
    {
        "holder": integer("The holder's job id."),
        "step": string("The step (`3`, `batch`, `extern`)."),
        "id": string("`HOLDER.STEP`."),
        "name": string("The step's name."),
        "tasks": integer("Its tasks."),
        "nodelist": string("Its nodes."),
        "elapsed_s": integer("Seconds it has run."),
        "state": string("Slurm's state of the step."),
        "kind": enum(
            "`ranks` (an attempt's ranks, one task per GPU), `node` (an attempt's node step), `signal` (roach "
            "signal's own), `batch` (the holder's sleeping shell), `extern`, `other` (not roach's).",
            [k.value for k in StepKind],
        ),
        "attempt": integer("The attempt it belongs to; null: none.", null=True),
        "what": string("The kind in words."),
        "run_id": string("The attempt's run id; null: not an attempt's, or not in the store.", null=True),
    },
)

STEPS = record(
    "steps",
    "`roach steps HOLDER`: the holder and its steps.",
    {
        "holder": integer("The holder's job id."),
        "state": _state,
        "idle": boolean("True when it runs and no attempt (nor another's step) runs in it: charged for nothing."),
        "held_s": integer("Seconds it has run."),
        "time_limit_s": integer("Its wall clock in seconds; null: none.", null=True),
        "steps": array("Its steps (none while it pends).", STEP),
    },
)

SIGNAL = record(
    "signal",
    "`roach signal HOLDER`: the signal sent to one attempt's ranks.",
    {
        "holder": integer("The holder's job id."),
        "step": string("The ranks' step signalled (`412.3`)."),
        "attempt": integer("The attempt."),
        "signal": string("The signal (`USR1`)."),
        "ranks": integer("Processes signalled, over all nodes (0: none found; it may have just ended)."),
        "lines": strings("What the signalling step printed, one line per node."),
        "run_id": string("The attempt's run id; null: not in the store.", null=True),
        "log": string("The attempt's log; null: not in the store.", null=True),
    },
)

RELEASE = record(
    "release",
    "`roach release HOLDER`: the holder ended.",
    {
        "holder": integer("The holder's job id."),
        "was": string("Its state before."),
        "state": string("Its state after (its final one once it ended)."),
        "held_s": integer("Seconds it had run."),
        "stopped_steps": strings("The attempts' ranks' steps it stopped (SIGTERM: they checkpoint first)."),
    },
)

SCHEMAS = {"hold": HOLD, "steps": STEPS, "signal": SIGNAL, "release": RELEASE}
