"""The one table of pending reasons: for each reason Slurm prints beside a pending job, what waiting on it means
for the job (its kind: clears, stalled, never, held, a run's end), whether it is a limit, what it means in plain words
and what to do. Keyed by :class:`~roach.model.states.PendingReason` member names; the TRES limit families, too many
to name, are rules on the name (:mod:`roach.model.reason_rules`). ``docs/pending.md`` is rendered from it
(``python -m roach.ops.pending``). Pure data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Kinds of pending reason: what waiting on it means for the job.
WAIT = "wait"  # clears by itself as the queue moves (jobs end, time passes)
STALLED = "stalled"  # waits on the cluster (nodes, partitions, usage decay): may clear, may need an admin
NEVER = "never"  # the job as submitted cannot start: someone must change it, or a limit
HELD = "held"  # held: starts only once released
RUN_ENDED = "run_ended"  # why a run ended; on a pending job, its previous run (requeued): it is back in the queue


class Outlook(enum.Enum):
    """Will a job pending on a reason start by itself?"""

    CLEARS = "clears"  # as the queue moves: jobs end, time passes, a running limit frees up
    WAITS = "waits"  # on the cluster (nodes, partitions, usage decay): may clear, may need an admin
    NEVER = "never"  # not as submitted: someone must change, release or cancel it

    @property
    def label(self) -> str:
        return {
            "clears": "clears by itself",
            "waits": "waits on the cluster (may need an admin)",
            "never": "never starts as it is",
        }[self.value]


OUTLOOK = {
    WAIT: Outlook.CLEARS,
    RUN_ENDED: Outlook.CLEARS,
    STALLED: Outlook.WAITS,
    NEVER: Outlook.NEVER,
    HELD: Outlook.NEVER,
}


@dataclass(frozen=True)
class Row:
    """One reason: its ``kind``, whether it ``is_limit``, its ``meaning``, the ``action`` to take (``""``: read from
    the kind and the hint, :func:`roach.model.reason_rules.row`), and ``hint``, one sentence of what to do for a
    reason that never starts. ``<jobid>`` in a text stands for the job's id."""

    kind: str
    is_limit: bool
    meaning: str
    action: str = ""
    hint: str = ""

    @property
    def outlook(self) -> Outlook:
        return OUTLOOK[self.kind]


NOTHING = "nothing: it starts when that changes"
ADMIN = "check `sinfo -R` and `scontrol show partition`; if it lasts, ask the admins, or cancel it and submit elsewhere"

# Reasons named one by one.
EXPLICIT: dict[str, Row] = {
    "NONE": Row(
        WAIT,
        False,
        "no reason given yet: the scheduler has not looked at the job since it was queued",
        "nothing: the next scheduling pass gives a reason or starts it",
    ),
    "Priority": Row(WAIT, False, "jobs of higher priority are ahead of it in the queue", NOTHING),
    "Resources": Row(WAIT, False, "it is next in line, but the nodes it needs are busy", NOTHING),
    "BeginTime": Row(
        WAIT,
        False,
        "its start time (--begin, or the short wait Slurm adds after a requeue) has not come yet",
        "nothing: it becomes eligible at its begin time",
    ),
    "Dependency": Row(
        WAIT,
        False,
        "it waits for the jobs it depends on (--dependency) to reach the state asked for",
        "nothing, as long as those jobs can still satisfy it",
    ),
    "Prolog": Row(WAIT, False, "its prolog is running on the allocated nodes", "nothing"),
    "Cleaning": Row(WAIT, False, "it was requeued and Slurm is still cleaning up its previous run", "nothing"),
    "Licenses": Row(WAIT, False, "the licenses it asked for (--licenses) are in use", NOTHING),
    "Reservation": Row(
        WAIT,
        False,
        "it waits for its advanced reservation to start or to have room",
        "nothing while the reservation exists; check it with `scontrol show reservation`",
    ),
    "JobArrayTaskLimit": Row(
        WAIT,
        False,
        "its array already runs as many tasks at once as its %N limit allows",
        "nothing: the next task starts when one ends",
    ),
    "FedJobLock": Row(WAIT, False, "a federated sibling cluster holds the job's lock", "nothing"),
    "BurstBufferResources": Row(WAIT, False, "the burst buffer space it asked for is in use", NOTHING),
    "BurstBufferStageIn": Row(WAIT, False, "its burst buffer stage-in is running", "nothing"),
    "Constraints": Row(WAIT, False, "the nodes with the features it asked for (--constraint) are busy", NOTHING),
    "MpiPortsBusy": Row(WAIT, False, "the MPI reserved ports it needs are in use", NOTHING),
    "MaxPoweredUpNodes": Row(WAIT, False, "the cluster already powers up as many nodes as it may at once", NOTHING),
    "NvidiaImexChannels": Row(WAIT, False, "no free NVIDIA IMEX channel for it", NOTHING),
    "PowerNotAvail": Row(WAIT, False, "the power the job needs is not available yet", NOTHING),
    "PowerReserved": Row(WAIT, False, "the power the job needs is reserved for other jobs", NOTHING),
    "AccountingPolicy": Row(
        WAIT,
        True,
        "an accounting limit (QOS or association) stops it for now",
        "nothing, unless the job alone is above the limit: compare with `sacctmgr show qos` and `sacctmgr show assoc user=$USER`",
    ),
    "AssociationJobLimit": Row(WAIT, True, "your association already runs as many jobs as it may", NOTHING),
    "AssociationResourceLimit": Row(WAIT, True, "your association's jobs already hold as much as it may", NOTHING),
    "QOSJobLimit": Row(
        WAIT,
        True,
        "its QOS already runs as many jobs (or as much) as it may for you",
        "nothing, unless the job alone is above the QOS limit (`sacctmgr show qos`): then move it to another QOS or shrink it",
    ),
    "QOSResourceLimit": Row(WAIT, True, "the jobs of its QOS already hold as much as the QOS allows", NOTHING),
    "UNKNOWN": Row(
        STALLED,
        False,
        "a reason this version of roach does not know (a newer Slurm added it)",
        "read it in `scontrol show job <jobid>` and Slurm's squeue man page",
    ),
    "ReqNodeNotAvail": Row(
        STALLED,
        False,
        "a node it needs is down, drained, or reserved (often for maintenance, or for a higher-priority job the backfill planned)",
        "if the job is pinned (--nodelist), cancel it and resubmit without the pin; else check `sinfo -R` and `scontrol show partition`; if it lasts, ask the admins, or cancel it and submit elsewhere",
    ),
    "NodesDownDrained": Row(
        STALLED,
        False,
        "the nodes it needs are down, drained, or reserved for jobs in higher-priority partitions",
        ADMIN,
    ),
    "PartitionDown": Row(STALLED, False, "its partition is down", ADMIN),
    "PartitionInactive": Row(STALLED, False, "its partition is inactive", ADMIN),
    "FrontEndDown": Row(STALLED, False, "no front end node is available to launch it", ADMIN),
    "BlockFreeAction": Row(STALLED, False, "(BlueGene) a block is being freed", ADMIN),
    "BlockMaxError": Row(STALLED, False, "(BlueGene) too many blocks in error", ADMIN),
    "AssociationTimeLimit": Row(
        STALLED,
        True,
        "your association used up its time (TRES-minutes) budget",
        "wait for the usage to decay, or ask the admins to reset or raise it",
    ),
    "QOSTimeLimit": Row(
        STALLED,
        True,
        "its QOS used up its time (TRES-minutes) budget",
        "wait for the usage to decay, or move it to another QOS",
    ),
    "QOSUsageThreshold": Row(
        STALLED,
        True,
        "its QOS's usage is over the QOS's UsageThreshold",
        "wait for the usage to decay, or move it to another QOS",
    ),
    "NodeDown": Row(
        RUN_ENDED,
        False,
        "its previous run ended (a node of it went down) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "NonZeroExitCode": Row(
        RUN_ENDED,
        False,
        "its previous run ended (it exited non-zero) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "RaisedSignal": Row(
        RUN_ENDED,
        False,
        "its previous run ended (it was killed by a signal) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "TimeLimit": Row(
        RUN_ENDED,
        False,
        "its previous run ended (it hit its time limit) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "OutOfMemory": Row(
        RUN_ENDED,
        False,
        "its previous run ended (it ran out of memory) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "InactiveLimit": Row(
        RUN_ENDED,
        False,
        "its previous run ended (srun was inactive too long) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "JobLaunchFailure": Row(
        RUN_ENDED,
        False,
        "its previous run ended (its launch failed) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "SystemFailure": Row(
        RUN_ENDED,
        False,
        "its previous run ended (a system failure) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "BurstBufferOperation": Row(
        RUN_ENDED,
        False,
        "its previous run ended (a burst buffer operation failed) and it is back in the queue",
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    ),
    "SchedDefer": Row(
        WAIT,
        False,
        "the cluster defers scheduling at submit time (SchedulerParameters=defer)",
        "nothing: the next scheduling pass looks at it",
    ),
    "DependencyNeverSatisfied": Row(
        NEVER,
        False,
        "a job it depends on ended in a way that can never satisfy the dependency",
        "",
        "A job it depends on ended in a way that can never satisfy the dependency: cancel it or fix it (`scontrol update JobId=<jobid> Dependency=`).",
    ),
    "BadConstraints": Row(
        NEVER,
        False,
        "no node can ever satisfy the request (features, GRES, CPUs or memory)",
        "",
        "No node can ever satisfy the request (features, GRES, CPUs or memory): cancel it and resubmit a request the cluster can meet.",
    ),
    "PartitionConfig": Row(
        NEVER,
        True,
        "the request breaks a limit or setting of its partition",
        "",
        "The request breaks a limit of its partition (see `scontrol show partition`): change the request or the partition.",
    ),
    "PartitionNodeLimit": Row(
        NEVER,
        True,
        "the node count is outside what its partition allows",
        "",
        "The node count is outside the partition's limits: change --nodes or use another partition.",
    ),
    "PartitionTimeLimit": Row(
        NEVER,
        True,
        "its --time is over the partition's MaxTime",
        "",
        "The --time is over the partition's MaxTime: lower it (`scontrol update JobId=<jobid> TimeLimit=`) or use another partition.",
    ),
    "MaxMemPerLimit": Row(
        NEVER,
        True,
        "its memory request is over MaxMemPerCPU/MaxMemPerNode",
        "",
        "The memory request is over MaxMemPerCPU/MaxMemPerNode: request less memory.",
    ),
    "InvalidAccount": Row(
        NEVER,
        False,
        "its account is not valid for this user (or was removed)",
        "",
        "The account is not valid for this user: resubmit with an --account from `sacctmgr show assoc user=$USER`.",
    ),
    "InvalidQOS": Row(
        NEVER,
        False,
        "its QOS is not valid for this user (or was removed)",
        "",
        "The QOS is not valid for this user: resubmit with a --qos the association allows.",
    ),
    "AccountNotAllowed": Row(
        NEVER,
        False,
        "its partition does not accept the job's account",
        "",
        "The partition does not accept this account: use another --partition or --account.",
    ),
    "QOSNotAllowed": Row(
        NEVER,
        False,
        "its partition or association does not allow the job's QOS",
        "",
        "The partition or association does not allow this QOS: use another --qos or --partition.",
    ),
    "ReservationDeleted": Row(
        NEVER,
        False,
        "the reservation it asked for was deleted",
        "",
        "The reservation it asked for was deleted: remove --reservation (`scontrol update JobId=<jobid> Reservation=`) or cancel it.",
    ),
    "ReservationInvalid": Row(
        NEVER,
        False,
        "the reservation it asked for cannot be used by this job",
        "",
        "The reservation it asked for cannot be used: change or remove --reservation.",
    ),
    "DeadLine": Row(
        NEVER,
        False,
        "it can no longer finish before its --deadline",
        "",
        "It cannot finish before its --deadline: resubmit with a later deadline or a shorter --time.",
    ),
    "JobHeldUser": Row(
        HELD,
        False,
        "held by its user (sbatch --hold, or scontrol hold)",
        "",
        "Held by its user: release it with `scontrol release <jobid>`.",
    ),
    "JobHeldAdmin": Row(
        HELD, False, "held by an administrator", "", "Held by an administrator: ask one to release it."
    ),
    "JobHoldMaxRequeue": Row(
        HELD,
        False,
        "requeued more times than the cluster allows, then held",
        "",
        "Requeued too many times and held: fix the failure, then release it with `scontrol release <jobid>`.",
    ),
    "LaunchFailedRequeuedHeld": Row(
        HELD,
        False,
        "its launch failed (often a prolog or node problem); it was requeued held",
        "",
        "The launch failed (often a prolog or node problem) and the job was held: check the node, then release it with `scontrol release <jobid>`.",
    ),
    "JobRequeuedHeld": Row(
        HELD,
        False,
        "it was requeued into a hold (scontrol requeuehold)",
        "",
        "Requeued into a hold: release it with `scontrol release <jobid>`.",
    ),
    "JobRequeuedSpecialExit": Row(
        HELD,
        False,
        "it exited with the special exit code and was requeued held",
        "",
        "It exited with the special exit code and was held: release it with `scontrol release <jobid>` to rerun it.",
    ),
    "UserEnvFailedRequeuedHeld": Row(
        HELD,
        False,
        "loading the user's environment (--get-user-env) failed; requeued held",
        "",
        "Loading the user environment (--get-user-env) failed: fix the login environment, then release it with `scontrol release <jobid>`.",
    ),
}
