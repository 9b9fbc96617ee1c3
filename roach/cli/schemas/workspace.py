"""The schemas of the remote-workspace commands' records: ``doctor``, ``sync``, ``sbatch``, ``wait``, ``pull``,
``verify`` (docs/remote-workspace.md)."""

from __future__ import annotations

from typing import Any

from roach.cli.schemas.build import array, boolean, mapping, obj, optional, record, string, strings

DOCTOR = record(
    "doctor",
    "`roach doctor`: a cluster's prerequisites, checked in order.",
    {
        "cluster": string("The cluster."),
        "ok": boolean("Whether every check passed (exit 0; else 7)."),
        "checks": array(
            "Each check, in order.",
            obj(
                "One prerequisite.",
                {
                    "name": string("What was checked (`ssh`, `rsync`, `slurm commands`, ...)."),
                    "ok": boolean("Whether it holds."),
                    "detail": string("What was found."),
                    "hint": string("What to do when it does not hold; null when it does.", null=True),
                },
            ),
        ),
    },
)

SYNC = record(
    "sync",
    "`roach sync`: the workspace copied up to its remote root.",
    {
        "source": string("The local workspace."),
        "destination": string("rsync's destination."),
        "excludes": strings("The patterns left out."),
        "changed": strings("Files sent (a dry run: that would be)."),
        "deleted": strings("Remote files removed (only with `--delete`)."),
        "dry_run": boolean("Whether nothing was sent."),
    },
)

SBATCH = record(
    "sbatch",
    "`roach sbatch SCRIPT`: the script's job, submitted and recorded.",
    {
        "job_id": string("Slurm's job id."),
        "run_id": string("Its run in roach's store: `sbatch-<JOB_ID>`."),
        "cluster": string("The cluster."),
        "script": string("The script, relative to the workspace."),
        "added": strings("The lines roach added to the script (log lines, requeue and signal)."),
        "notes": strings("What the check noticed but did not refuse."),
        "remote_bundle": string("Its bundle on the cluster: `dsi-slurm-artifacts/<JOB_ID>/`."),
        "local_bundle": string("Its bundle here."),
    },
)

PULL_FIELDS: dict[str, dict[str, Any]] = {
    "job_id": string("The job."),
    "status": string("Its job.json status (`completed`, `failed`, ..., `unknown` until its end is recorded)."),
    "bundle": string("The bundle here."),
    "bundle_found": boolean("Whether the bundle was on the cluster (false: exit 7)."),
    "copied": strings("Outputs copied back, relative to the workspace."),
    "missing": strings("Outputs not on the cluster."),
    "still_queued": strings("The job's states when it has not ended (job.json is then not final)."),
    "notes": strings("Notes."),
}

PULL = record("pull", "`roach pull JOB`: the bundle and outputs copied back.", PULL_FIELDS)

WAIT = record(
    "wait",
    "`roach wait JOB`: the job's final record (its job.json, here and on the cluster).",
    {
        "job_id": string("The job."),
        "status": string("`completed`, `failed`, `cancelled`, `timeout`, ...; `unknown` while not recorded."),
        "slurm_state": string("sacct's State (`COMPLETED`); null until it ended.", null=True),
        "exit_code": string("sacct's ExitCode (`0:0`); null until it ended.", null=True),
        "script": string("The script, relative to the workspace."),
        "description": string("Its description."),
        "submitted_at_utc": string("When it was submitted; null: not known.", null=True),
        "recorded_at_utc": string("When its end was recorded; null: not yet.", null=True),
        "live_state": string("`submitted`, `pending`, `running` (the last look), then `ended`."),
        "cluster": string("The cluster; null: not known.", null=True),
        "array": string("Its `--array` value; null: not an array.", null=True),
        "tasks": mapping(
            "An array's tasks: each task's `status`, `slurm_state`, `exit_code`.",
            {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
        ),
        "last_seen_utc": string("When a wait last saw it (set when a wait was cut off); else null.", null=True),
        "pull": optional(obj("With `--pull`: what was copied back (the fields of `roach.pull`).", PULL_FIELDS)),
    },
)

VERIFY = record(
    "verify",
    "`roach verify`: every file scoring/interface.md names, checked.",
    {
        "interface": string("The interface file read."),
        "ok": boolean("Whether every required file is usable (exit 0; else 7)."),
        "required": strings("The required files."),
        "missing": strings("Required files that do not exist."),
        "problems": array(
            "Each missing or invalid required file (or unmet any-of group), with why.",
            obj("A problem.", {"path": string("The file."), "reason": string("Why it is not usable.")}),
        ),
        "notes": strings("Optional files missing or invalid, how any-of groups were met."),
    },
)

SCHEMAS = {"doctor": DOCTOR, "sync": SYNC, "sbatch": SBATCH, "wait": WAIT, "pull": PULL, "verify": VERIFY}
