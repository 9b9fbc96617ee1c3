"""The schemas of the job commands' records: ``job`` (submit, resume, status, ls), ``cancel``, ``sweep``,
``dry_run`` and ``sweep_dry_run``, ``why``, ``promote``, ``move``, and ``lab.status``."""

from __future__ import annotations

from typing import Any

from roach.cli.schemas.build import (
    anything,
    array,
    boolean,
    enum,
    integer,
    mapping,
    number,
    obj,
    optional,
    record,
    string,
    strings,
)
from roach.model.python_env import EnvSource, PythonEnv
from roach.model.states import PendingReason
from roach.ops.pending import Outlook

JOB_FIELDS: dict[str, dict[str, Any]] = {
    "run_id": string("The run's id: what `resume`, `status`, `logs` take; a sweep's run is `<sweep_id>-<i>`."),
    "job_id": integer(
        "Slurm's job id (a sweep's run: its array's id, with `task`; an attempt inside a holder: the holder's, "
        "with `attempt`)."
    ),
    "cluster": string("The cluster's name in roach (`roach clusters`)."),
    "name": string("The job's name in Slurm."),
    "target": string(
        "What runs: `package.module:function`; `roach:hold` for a holder; the script for a `roach sbatch` job."
    ),
    "state": string(
        "Slurm's state name (`PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...); null "
        "when neither Slurm nor the store knows it yet (`reason` says why).",
        null=True,
    ),
    "status": string(
        "roach's status: `pending`, `running`, or the final one (`completed`, `failed`, `cancelled`, `timeout`, ...)."
    ),
    "reason": string("Why it pends (Slurm's reason), or why its state is not known yet; else null.", null=True),
    "exit_code": string("sacct's `code:signal` once it ended (`0:0`); else null.", null=True),
    "submitted_at": string("When roach submitted it, UTC, ISO 8601 (`2026-01-31T12:00:00Z`)."),
    "log": string("Its log file's path on the cluster."),
    "held_s": integer("A holder: seconds it has been running (charged); else null.", null=True),
    "idle": boolean("A running holder: true when no attempt runs in it (charged for nothing); else null.", null=True),
    "via": string("The ssh alias it was submitted through, when not its cluster's own; else null.", null=True),
    "task": integer("A sweep's run: its task in array `job_id`; else null.", null=True),
    "holder": integer("An attempt inside a holder: the holder's job id; else null.", null=True),
    "attempt": integer("An attempt inside a holder: its number there (1, 2, ...); else null.", null=True),
    "commit": string("The git commit it runs; null for a job that runs no commit (a holder, a script).", null=True),
    "error_line": string(
        "A failed job's cause, the line of its log that says it (git's `fatal:` when the clone failed, "
        "`roach: env_failed: ...`, the rank's `... failed: ValueError: ...`), read when its end was recorded; "
        "null: it did not fail, or no line says why.",
        null=True,
    ),
}

JOB = record(
    "job",
    "One job as roach knows it: from the store, with its live state from Slurm.",
    {
        **JOB_FIELDS,
        "earlier_stage": optional(
            string(
                "`roach status` of a remote-workspace job whose stage is over: where its bundle was archived. "
                "Printed only then."
            )
        ),
    },
)

CANCEL = record(
    "cancel",
    "`roach cancel`: the job as it was (the fields of `roach.job`), and what the cancel did.",
    {
        **JOB_FIELDS,
        "cancelled": boolean("True when it was queued and roach cancelled it; false when it had already ended."),
        "ended": string(
            "Slurm's final state once the job ended within `--wait` (`CANCELLED`, or `COMPLETED` when it ended "
            "first); null when the wait ran out, was 0, or nothing was cancelled.",
            null=True,
        ),
    },
)

SWEEP = record(
    "sweep",
    "`roach sweep`: the sweep's runs as Slurm job arrays.",
    {
        "sweep_id": string("The sweep's id; run i is `<sweep_id>-<i>`."),
        "cluster": string("The cluster's name."),
        "array_ids": array("The job arrays' ids, in task order (one per MaxArraySize runs).", {"type": "integer"}),
        "runs": integer("How many runs (grid entries)."),
        "log_root": string("The directory of the runs' logs, `<sweep_id>_<array>_<task>.out` each."),
        "states": optional(
            mapping("With `--wait`: how many runs ended in each Slurm state.", {"type": "integer"}),
        ),
        "failed": optional(strings("With `--wait`: the run ids that did not complete, sorted.")),
    },
)

_TIER_FIELDS = {
    "tier": string(
        "The tier of the cluster's table it would be queued on (`--tier NAME`, `--tier auto`: `roach plan`'s "
        "choice, else the one its partition and QOS land on); null: none (no tier asked, and the resources land "
        "on none: never preempted nor promoted by roach).",
        null=True,
    ),
    "qos": string("The QOS it would ask for; null: none asked (the account's default QOS applies).", null=True),
    "tier_why": string("Why that tier, in words (`--tier auto`: the plan's reason)."),
}

_PYTHON_ENV = obj(
    "How the job's Python would be made, by whose choice, and why (job.json keeps the same).",
    {
        "env": enum("The environment.", [e.value for e in PythonEnv]),
        "source": enum(
            "Who chose it: `asked` (`--python-env`), `clusters.toml`, `lock` (the commit's uv.lock or "
            "pixi.lock) or `site` (the site file's ROACH_ENV).",
            [s.value for s in EnvSource],
        ),
        "why": string("Why, in words."),
    },
)

DRY_RUN = record(
    "dry_run",
    "`roach submit --dry-run`: every check of a submit made, and what would run; nothing queued or written.",
    {
        "target": string("What would run: `package.module:function`."),
        "cluster": string("The cluster's name."),
        "repo": string("The repository's name."),
        "commit": string("The pushed commit the job would clone."),
        "name": string("The job's name in Slurm."),
        "resources": mapping(
            "The resources it would ask for (presets, the tier and the cluster's defaults applied).",
            anything("A Resources field."),
        ),
        **_TIER_FIELDS,
        "python_env": _PYTHON_ENV,
        "log_root": string("Where its log and bundle would go (may start with `~`)."),
        "queued": boolean("Always false: nothing was queued."),
    },
)

SWEEP_DRY_RUN = record(
    "sweep_dry_run",
    "`roach sweep --dry-run`: every check of a sweep made, and what it would queue; nothing queued or written.",
    {
        "target": string("What would run: `package.module:function`."),
        "cluster": string("The cluster's name."),
        "repo": string("The repository's name."),
        "commit": string("The pushed commit the runs would clone."),
        "name": string("The jobs' name in Slurm."),
        "sweep_id": string("The sweep's id; run i would be `<sweep_id>-<i>`."),
        "runs": integer("How many runs (grid entries)."),
        "arrays": array(
            "The job arrays it would queue, in order (one per MaxArraySize runs).",
            obj(
                "One array.",
                {
                    "first": integer("The index of its first run."),
                    "tasks": integer("How many runs it holds."),
                },
            ),
        ),
        "parallelism": integer("At most this many runs at once (`--parallelism`); null: no limit.", null=True),
        "resources": mapping(
            "The resources each run would ask for (presets, the tier and the cluster's defaults applied).",
            anything("A Resources field."),
        ),
        **_TIER_FIELDS,
        "python_env": _PYTHON_ENV,
        "log_root": string("Where the runs' logs and bundles would go (may start with `~`)."),
        "run_root": string("Where the runs' directories would go (may start with `~`)."),
        "queued": boolean("Always false: nothing was queued."),
    },
)

ESTIMATE = obj(
    "When it starts (roach.ops.estimate.starts): the earliest, likely and latest start from the queue ahead of it, the "
    "running jobs' time limits and their runs' step pace, per-user caps and preemption; null when it gets none "
    "(held, never starts as it is, or the queue could not be read).",
    {
        "earliest": string("The earliest start, local time, ISO 8601; null: no bound.", null=True),
        "likely": string("The likely start, local time, ISO 8601; null: no estimate (`basis` says why).", null=True),
        "latest": string(
            "The latest start: the likely wait taken twice and a minute more, or, where sooner, the start if every "
            "job ahead runs to its time limit and none is asked for later; null: no bound.",
            null=True,
        ),
        "earliest_in_s": number("Seconds from now to `earliest`; null with it.", null=True),
        "likely_in_s": number("Seconds from now to `likely`; null with it.", null=True),
        "latest_in_s": number("Seconds from now to `latest`; null with it.", null=True),
        "basis": string("What the estimate rests on, in one line."),
        "ahead": integer("Pending jobs ahead of it in priority order."),
        "slurm": string("Slurm's own expected start (`squeue --start`); null when it gives none.", null=True),
    },
    null=True,
)

_EXPLAINED = ("reason", "reason_text", "outlook", "meaning", "detail", "action", "tier")
WHY = record(
    "why",
    "`roach why`: why a job pends, in words; for a job that does not pend, only its state.",
    {
        "job_id": string("The job as Slurm names it (`123`, `123_4`)."),
        "run_id": string("Its run id, when roach submitted it; else null.", null=True),
        "state": string("Slurm's state name, or `not in the queue` (it ended: `roach status` says how)."),
        "pending": boolean("Whether it pends; the fields below are printed only when it does."),
        "reason": optional(
            enum("Slurm's pending reason, as roach names it (docs/pending.md).", PendingReason.__members__)
        ),
        "reason_text": optional(string("The reason as squeue printed it.")),
        "outlook": optional(
            enum(
                "Will it start by itself: `clears` as the queue moves, `waits` on the cluster, `never` as it is.",
                [o.value for o in Outlook],
            )
        ),
        "meaning": optional(string("What the reason means.")),
        "detail": optional(string("What the queue says of this job in particular (empty when nothing more).")),
        "action": optional(string("What to do.")),
        "tier": optional(string("The tier it pends on; null when no tier of the cluster matches.", null=True)),
        "estimate": optional(ESTIMATE),
        "env_failed": optional(
            string(
                "A job that ended before its ranks ran because its Python environment could not be built (exit 7): "
                "the node, the tool and the commit, then the tool's last lines of output."
            )
        ),
    },
)
WHY["allOf"] = [{"if": {"properties": {"pending": {"const": True}}}, "then": {"required": list(_EXPLAINED)}}]

PROMOTE = record(
    "promote",
    "`roach promote`: a pending job resubmitted, with its run id, on another tier.",
    {
        "run_id": string("The run."),
        "old_job": integer("The job it was (held, then cancelled); a sweep's run: its array."),
        "old_task": integer("A sweep's run: its task of array `old_job`, the only one cancelled.", null=True),
        "new_job": integer("The job it is now."),
        "tier": string("The tier it now pends on."),
        "log": string("The new job's log."),
    },
)

MOVE = record(
    "move",
    "`roach move`: a run moved to another tier (checkpointed and resubmitted, or promoted while it pended).",
    {
        "run_id": string("The run."),
        "old_job": integer("The job it was; a sweep's run: its array."),
        "old_task": integer("A sweep's run: its task of array `old_job`, the only one stopped.", null=True),
        "new_job": integer("The job it is now."),
        "tier": string("The tier it moved to."),
        "how": enum(
            "`promoted`: it was pending; `moved`: it ran, checkpointed and was resubmitted.", ["promoted", "moved"]
        ),
        "checkpoint_step": integer("The step its resume.pt holds; null: no checkpoint (it starts over).", null=True),
        "fresh_checkpoint": boolean("Whether it wrote that checkpoint for this move."),
        "resumed_at": integer("The step the new job's log says it resumed at; null: not started yet.", null=True),
        "verified": boolean(
            "True: it resumed at its checkpoint's step; null: the new job did not start within `--wait`.", null=True
        ),
        "log": string("The new job's log."),
    },
)

LAB_LOAD = record(
    "lab.load",
    "`roach lab load status`: other people's load played on the lab from a trace.",
    {
        "playing": boolean("Whether the player is still submitting the trace's jobs."),
        "planned": integer("The jobs the load plays in all (sampled from the trace)."),
        "played": integer("Of them, submitted so far."),
        "running": integer("The load's jobs running now."),
        "pending": integer("The load's jobs pending now."),
        "gpus_busy": integer("GPUs the load's running jobs hold."),
        "lab_gpus": integer("The lab's GPUs in all."),
        "share": mapping("Each load user (`roachload1`, ...): GPUs its running jobs hold.", {"type": "integer"}),
    },
)

LAB_STATUS = record(
    "lab.status",
    "`roach lab status`: the lab cluster's daemons and nodes.",
    {
        "state_dir": string("The lab's state directory."),
        "slurm_conf": string("Its slurm.conf (`SLURM_CONF`)."),
        "ports": mapping("Each daemon's port, by name (`ctld_port`, `n1_port`, ...).", {"type": "integer"}),
        "daemons": array(
            "Each daemon, in start order.",
            obj(
                "A daemon.",
                {
                    "name": string(
                        "`munged`, `mariadbd`, `slurmdbd`, `slurmctld`, `slurmd-n1`, `slurmd-n2`, and on the hosts "
                        "layout each host's own `munged-n1`, `munged-n2`, `munged-login`, `munged-ctl` and `sshd-login`."
                    ),
                    "pid": integer("Its pid from its pid file; null when it has none.", null=True),
                    "log": string("Its log file."),
                    "running": boolean("Whether that pid runs."),
                },
            ),
        ),
        "nodes": mapping("Each node's state as sinfo prints it (`idle`, `mix`, `alloc`, ...).", {"type": "string"}),
        "gpus_per_node": integer("The fake GPUs each node has."),
        "cpus_per_node": integer("The CPUs each node has."),
        "layout": string("`single-host` (every node is this host, at 127.0.0.1) or `hosts` (each its own)."),
        "addresses": mapping(
            "The controller's (`controller`) and each node's address, as slurm.conf gives them, and on the hosts "
            "layout the login host's (`login`).",
            {"type": "string"},
        ),
        "up": boolean("Whether every daemon runs."),
    },
)

SCHEMAS = {
    "job": JOB,
    "cancel": CANCEL,
    "sweep": SWEEP,
    "dry_run": DRY_RUN,
    "sweep_dry_run": SWEEP_DRY_RUN,
    "why": WHY,
    "promote": PROMOTE,
    "move": MOVE,
    "lab.status": LAB_STATUS,
    "lab.load": LAB_LOAD,
}
