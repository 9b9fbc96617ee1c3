"""The schemas of the cluster commands' records: ``clusters`` (each of ``roach clusters``), ``cluster``
(``clusters show``), ``discover``, ``plan``, ``clean``, ``clone`` and ``grant``."""

from __future__ import annotations

from typing import Any

from roach.cli.schemas.build import (
    anything,
    array,
    boolean,
    integer,
    mapping,
    number,
    obj,
    record,
    string,
    strings,
)
from roach.cli.schemas.event_lines import TIER_ROW

RESOURCES = obj(
    "A request: what `Resources` holds (docs/resources.md); null fields are left to the cluster's defaults.",
    {
        "account": string("Slurm account.", null=True),
        "partition": string("Partition.", null=True),
        "qos": string("QOS.", null=True),
        "constraint": string("Node feature constraint.", null=True),
        "nodes": integer("Nodes."),
        "gpus_per_node": integer("GPUs on each node."),
        "cpus_per_gpu": integer("CPUs per GPU (as --cpus-per-task, one task per GPU).", null=True),
        "cpus_per_task": integer("CPUs per task.", null=True),
        "mem": string("Memory per node (`16G`).", null=True),
        "time": string("Wall clock (`HH:MM:SS`, `D-HH:MM:SS`)."),
        "reservation": string("Reservation.", null=True),
        "gpu_type": string("GPU type in the GRES (`a100`).", null=True),
        "gres_extra": strings("More GRES beside the GPUs (`local:100G`)."),
        "extra": strings("More sbatch options, verbatim."),
    },
)

CLUSTERS = record(
    "clusters",
    "One cluster roach knows (each element of `roach clusters --json`), with clusters.toml applied.",
    {
        "name": string("Its name (`--cluster NAME`)."),
        "metered": boolean("Whether using it costs money: never chosen without `--metered`."),
        "reached": string("`local`, or `ssh ALIAS`."),
        "default": boolean("Whether it is the default cluster."),
        "configured": boolean("Whether clusters.toml has a section for it."),
        "tiers": strings("Its tiers' names, top down."),
        "description": string("What it is, in a line."),
    },
)

TIER = obj(
    "A tier: where a job lands (partition, QOS, constraint) and the user's GPU cap there.",
    {
        "name": string("The tier's name."),
        "partition": string("Its partition; null: the cluster's default.", null=True),
        "qos": string("Its QOS; null: none named.", null=True),
        "constraint": string("Its node constraint; null: none.", null=True),
        "gpu_cap": integer("The user's GPU cap there; null: none.", null=True),
        "preemptible": boolean("Whether jobs there may be preempted."),
    },
)

_SETTINGS: dict[str, dict[str, Any]] = {
    "gpu_flag": string("How GPUs are asked for: `gres` (--gres=gpu:N) or `gpus-per-node`."),
    "signal_lead_s": integer("Seconds before the wall clock the checkpoint signal comes."),
    "checkpoint_signal": string("That signal (`USR1`)."),
    "max_timeout_requeues": integer("Wall-clock requeues per run."),
    "min_poll_s": number("The shortest pause between two looks at the queue."),
    "rank_exit_wait_s": integer("How long other ranks may outlive the first to exit (srun --wait)."),
    "run_as": string("The local user its commands run as; null: the caller.", null=True),
    "git_reachable": boolean("False: jobs cannot reach the git remote (the commit ships as a bundle)."),
    "ssh_config": string("The ssh config file used instead of ~/.ssh/config; null: that one.", null=True),
    "remote_setup": strings("Shell lines run before each remote command."),
    "default_account": string("The account of a request that names none.", null=True),
    "default_partition": string("The partition of a request that names none.", null=True),
    "partitions": strings("Partitions known to exist (another is refused); empty: not checked."),
    "qos_names": strings("QOS known to exist; empty: the tiers' only."),
    "max_gpus": integer("The most GPUs one submission may ask for; null: no cap.", null=True),
    "max_gpu_hours": number("The most GPU-hours per submission; null: no cap.", null=True),
    "gpu_hour_cost": number("What a GPU-hour costs where metered; null: not known.", null=True),
    "max_cost": number("The most one submission may cost; null: no cap.", null=True),
    "max_gpus_per_node": integer("The largest node's GPUs; null: not known.", null=True),
    "submit_hosts": strings("Host patterns roach may submit from; empty: any."),
    "refused_hosts": strings("Host patterns roach never submits from."),
    "refused_host_reason": string("Why those are refused."),
    "node_scratch": strings("Node-local directories where a job keeps scratch."),
    "rest_url": string("slurmrestd's URL, through which every Slurm call goes (docs/rest.md); null: none.", null=True),
    "token_command": strings("The command that prints its JWT (never the token); empty: none."),
    "token_file": string("The file of mode 600 holding its JWT (never the token); null: none.", null=True),
    "shared_fs": boolean("With rest_url: this machine sees the cluster's files at the same paths."),
}

CLUSTER = record(
    "cluster",
    "`roach clusters show NAME`: everything roach knows of one cluster: its site module, clusters.toml, page.",
    {
        "name": string("Its name."),
        "description": string("What it is."),
        "budget": string("What using it spends, in words."),
        "metered": boolean("Whether using it costs money."),
        "reached": string("How roach reaches it, in words."),
        "backend": string("`roach` (functions run from a clone) or `remote-workspace` (`roach sbatch`)."),
        "page": string("Its page: `docs/clusters/NAME.md`."),
        "module": string("Its site module: `roach.slurm.clusters.NAME`."),
        "site_file": string("Its site shell file: `roach/slurm/clusters/NAME.sh`."),
        "config": obj(
            "clusters.toml.",
            {
                "path": string("The file."),
                "configured": boolean("Whether it has a section for this cluster."),
                "default_cluster": boolean("Whether it makes this the default cluster."),
            },
        ),
        **_SETTINGS,
        "host_check": string("What the site checks of the host before a submit, in words; null: nothing.", null=True),
        "python_env": string(
            "clusters.toml's `python_env` (`uv`, `pixi`, `venv`, `system`): every job's Python there, over the "
            "commit's lock file; null: not set.",
            null=True,
        ),
        "site_python_env": string(
            "The site file's `ROACH_ENV`: the Python of a job whose commit has no `uv.lock` or `pixi.lock`."
        ),
        "presets": mapping(
            "Each `--resources` preset.",
            obj(
                "A preset.",
                {
                    "resources": mapping("Its Resources fields that are set.", anything("A Resources field.")),
                    "sbatch": strings("The sbatch options it makes."),
                },
            ),
        ),
        "tiers": array("Its tiers, top down.", TIER),
        "site_file_text": string("The site file's text; null: none.", null=True),
    },
)

_PROPOSED = obj(
    "A proposed tier, with what it was read from.",
    {
        **TIER["properties"],
        "priority_tier": integer("The partition's PriorityTier."),
        "qos_priority": integer("The QOS's priority."),
        "preempt_mode": string("The effective PreemptMode for jobs there."),
        "grace_time_s": integer("The preemption GraceTime; null: not known.", null=True),
        "max_wall": string("The QOS's MaxWall; null: none.", null=True),
        "cap_from": string("Where the cap was read (`QOS high MaxTRESPerUser gres/gpu=4`); empty when no cap."),
        "default_qos": boolean("Whether it is the user's DefaultQOS."),
    },
)

DISCOVER = record(
    "discover",
    "`roach clusters discover NAME`: the cluster read now, and the clusters.toml block proposed.",
    {
        "cluster": string("Its name."),
        "user": string("The user it was read as; null: not known.", null=True),
        "preempt_type": string("Slurm's PreemptType."),
        "accounts": strings("The user's accounts."),
        "partitions": strings("The partitions."),
        "qos_names": strings("Every QOS the user may use."),
        "default_partition": string("The default partition; null: none.", null=True),
        "max_gpus_per_node": integer("The largest node's GPUs; null: none has GPUs.", null=True),
        "tiers": array("The proposed tiers, top down.", _PROPOSED),
        "notes": strings("What to check by hand."),
        "toml": string("The proposed clusters.toml block."),
        "saved": string("With `--save`: the file it was appended to; else null.", null=True),
    },
)

PLACEMENT = obj(
    "The request on one tier, and what the tier table and `sbatch --test-only` said.",
    {
        "tier": string("The tier."),
        "resources": RESOURCES,
        "preemptible": boolean("Whether the tier is preemptible."),
        "start": string(
            "When Slurm would start it, cluster local time, ISO 8601; null: not asked or refused.", null=True
        ),
        "finish": string("When it would end; null as `start`.", null=True),
        "nodes": string("Where Slurm would start it; null: not known.", null=True),
        "possible": boolean("Whether it may go there (cap, Slurm's answer)."),
        "why": string("What was found, in words."),
        "runs_now": integer(
            "How many of the plan's runs would start now there: within the cap's room and (for a sweep) the nodes' "
            "idle GPUs; 0 when it starts later or cannot go there."
        ),
    },
)

PLAN = record(
    "plan",
    "`roach plan`: where N GPUs would finish soonest now (with `--runs`: where a sweep of such runs starts the most "
    "of them now).",
    {
        "cluster": string("The cluster."),
        "gpus": integer("GPUs asked for (with `--runs`: each run's)."),
        "runs": integer("Runs asked for (`--runs`; 1: one job)."),
        "nodes": integer("Nodes asked for."),
        "time": string("Wall clock asked for."),
        "now": string("The cluster's clock when read, local time, ISO 8601."),
        "tiers": array("The user's tier table now.", TIER_ROW),
        "placements": array("Each tier's candidate, top down.", PLACEMENT),
        "chosen": {**PLACEMENT, "type": ["object", "null"], "description": "The one chosen; null: none possible."},
        "reasoning": strings("Why, line by line."),
        "written": string("With `--write FILE`: the file written; else null.", null=True),
        "python_env": {
            "type": ["object", "null"],
            "description": "The Python environment a job of `--repo-root`'s HEAD would get there (`env`, `source`, "
            "`why`: as `roach submit --dry-run` says); null: not in a git repository.",
            "properties": {"env": {"type": "string"}, "source": {"type": "string"}, "why": {"type": "string"}},
            "required": ["env", "source", "why"],
            "additionalProperties": False,
        },
    },
)

CLEAN = record(
    "clean",
    "What `roach clean EXPERIMENT` did (with `--dry-run`: would do) on one cluster; one element per cluster.",
    {
        "experiment": string("The experiment."),
        "cluster": string("The cluster."),
        "dry_run": boolean("Whether nothing was done."),
        "jobs": array("Every recorded job of the experiment there.", {"type": "integer"}),
        "cancelled": strings("`ID STATE` of each active job cancelled."),
        "logs": strings("Logs, bundles and emptied log roots deleted."),
        "nodes": strings("The nodes whose scratch was looked at."),
        "scratch": strings("`node:path` of scratch deleted (dry run: the patterns)."),
        "failed": strings("What could not be done, each with why."),
        "checkpoints_kept": strings("Every resume.pt found, which stays."),
    },
)

CLONE = record(
    "clone",
    "One clone on one node (each element of `roach clones --json`, and of `clones prune`).",
    {
        "node": string("The node."),
        "name": string("`<repo>-<commit>`, or a half-made `<repo>-<commit>.tmp.<host>.<pid>`."),
        "size_kib": integer("Its size in KiB."),
        "complete": boolean("Whether it was finished."),
        "used": boolean("Whether a process on the node runs from it, or a running job of the store's is at it."),
        "used_by": array("The store's running jobs at it on that node.", {"type": "integer"}),
        "action": string("`kept`, `pruned` or `failed` (`kept` when listing)."),
    },
)

GRANT = record(
    "grant",
    "`roach grant`: one grant (each of `roach grant --list`): the GPU-hours a person allowed on a metered cluster, "
    "and what its submissions spent and hold.",
    {
        "id": string("The grant's id (`g3`)."),
        "cluster": string("The metered cluster it covers."),
        "gpu_hours": number("The GPU-hours it allows."),
        "experiment": string("The one experiment it covers; null: every experiment.", null=True),
        "until": string("When it ends (UTC, ISO 8601); null: until revoked.", null=True),
        "note": string("The note it was made with.", null=True),
        "granted_by": string("The login of the person who made it."),
        "made_at": string("When it was made (UTC, ISO 8601)."),
        "revoked_at": string("When it was revoked; null: it was not.", null=True),
        "live": boolean("True while it covers new submissions (not revoked, not ended)."),
        "spent": number("GPU-hours its submissions' jobs spent, from Slurm's accounting (every attempt)."),
        "held": number("GPU-hours its unfinished submissions may still spend at worst."),
        "left": number("GPU-hours a new submission may still take: its GPU-hours less spent and held."),
        "submissions": integer("The submissions held against it."),
    },
)


SCHEMAS = {
    "clusters": CLUSTERS,
    "cluster": CLUSTER,
    "discover": DISCOVER,
    "plan": PLAN,
    "clean": CLEAN,
    "clone": CLONE,
    "grant": GRANT,
}
