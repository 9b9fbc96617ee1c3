"""The one table of pending reasons: what waiting on each means (clears, stalled, never, held, a run's end),
whether it is a limit, and what to do. Keyed by :class:`~roach.model.states.PendingReason` member names and,
for the TRES limit families, by a pattern on the value.
"""

from __future__ import annotations

import enum
import re

# Kinds of pending reason: what waiting on it means for the job.
WAIT = "wait"  # clears by itself as the queue moves (jobs end, time passes)
STALLED = "stalled"  # waits on the cluster (nodes, partitions, usage decay): may clear, may need an admin
NEVER = "never"  # the job as submitted cannot start: someone must change it, or a limit
HELD = "held"  # held: starts only once released
RUN_ENDED = "run_ended"  # why a run ended; on a pending job, its previous run (requeued)


HOLD = "release it with `scontrol release <jobid>`"


# Reasons named one by one: name -> (kind, is_limit, hint).
EXPLICIT: dict[str, tuple[str, bool, str]] = {
    **dict.fromkeys(
        "NONE Priority Resources BeginTime Dependency Prolog Cleaning Licenses Reservation "
        "JobArrayTaskLimit FedJobLock BurstBufferResources BurstBufferStageIn Constraints "
        "MpiPortsBusy MaxPoweredUpNodes NvidiaImexChannels PowerNotAvail PowerReserved".split(),
        (WAIT, False, ""),
    ),
    # Old generic limits (pre-TRES names) on counts or resources: free up as jobs end.
    **dict.fromkeys(
        "AccountingPolicy AssociationJobLimit AssociationResourceLimit QOSJobLimit QOSResourceLimit".split(),
        (WAIT, True, ""),
    ),
    **dict.fromkeys(
        "UNKNOWN ReqNodeNotAvail NodesDownDrained PartitionDown PartitionInactive FrontEndDown "
        "BlockFreeAction BlockMaxError".split(),
        (STALLED, False, ""),
    ),
    # Usage-based limits: clear only as recorded usage decays or is reset.
    **dict.fromkeys("AssociationTimeLimit QOSTimeLimit QOSUsageThreshold".split(), (STALLED, True, "")),
    **dict.fromkeys(
        "NodeDown NonZeroExitCode RaisedSignal TimeLimit OutOfMemory InactiveLimit JobLaunchFailure "
        "SystemFailure BurstBufferOperation SchedDefer".split(),
        (RUN_ENDED, False, ""),
    ),
    "DependencyNeverSatisfied": (
        NEVER,
        False,
        "A job it depends on ended in a way that can never satisfy the "
        "dependency: cancel it or fix it (`scontrol update JobId=<jobid> Dependency=`).",
    ),
    "BadConstraints": (
        NEVER,
        False,
        "No node can ever satisfy the request (features, GRES, CPUs or memory): "
        "cancel it and resubmit a request the cluster can meet.",
    ),
    "PartitionConfig": (
        NEVER,
        True,
        "The request breaks a limit of its partition (see `scontrol show partition`): "
        "change the request or the partition.",
    ),
    "PartitionNodeLimit": (
        NEVER,
        True,
        "The node count is outside the partition's limits: change --nodes or use another partition.",
    ),
    "PartitionTimeLimit": (
        NEVER,
        True,
        "The --time is over the partition's MaxTime: lower it "
        "(`scontrol update JobId=<jobid> TimeLimit=`) or use another partition.",
    ),
    "MaxMemPerLimit": (NEVER, True, "The memory request is over MaxMemPerCPU/MaxMemPerNode: request less memory."),
    "InvalidAccount": (
        NEVER,
        False,
        "The account is not valid for this user: resubmit with an --account from `sacctmgr show assoc user=$USER`.",
    ),
    "InvalidQOS": (NEVER, False, "The QOS is not valid for this user: resubmit with a --qos the association allows."),
    "AccountNotAllowed": (
        NEVER,
        False,
        "The partition does not accept this account: use another --partition or --account.",
    ),
    "QOSNotAllowed": (
        NEVER,
        False,
        "The partition or association does not allow this QOS: use another --qos or --partition.",
    ),
    "ReservationDeleted": (
        NEVER,
        False,
        "The reservation it asked for was deleted: remove --reservation "
        "(`scontrol update JobId=<jobid> Reservation=`) or cancel it.",
    ),
    "ReservationInvalid": (
        NEVER,
        False,
        "The reservation it asked for cannot be used: change or remove --reservation.",
    ),
    "DeadLine": (
        NEVER,
        False,
        "It cannot finish before its --deadline: resubmit with a later deadline or a shorter --time.",
    ),
    "JobHeldUser": (HELD, False, f"Held by its user: {HOLD}."),
    "JobHeldAdmin": (HELD, False, "Held by an administrator: ask one to release it."),
    "JobHoldMaxRequeue": (HELD, False, f"Requeued too many times and held: fix the failure, then {HOLD}."),
    "LaunchFailedRequeuedHeld": (
        HELD,
        False,
        f"The launch failed (often a prolog or node problem) and the job was held: check the node, then {HOLD}.",
    ),
    "JobRequeuedHeld": (HELD, False, f"Requeued into a hold: {HOLD}."),
    "JobRequeuedSpecialExit": (HELD, False, f"It exited with the special exit code and was held: {HOLD} to rerun it."),
    "UserEnvFailedRequeuedHeld": (
        HELD,
        False,
        f"Loading the user environment (--get-user-env) failed: fix the login environment, then {HOLD}.",
    ),
}


# The TRES limit families, by name pattern (fullmatch on the value); first match wins.
RULES: tuple[tuple[str, str, bool, str], ...] = (
    # Running jobs' TRES-minutes: free up as those jobs run on and end.
    (r"(QOS|Assoc)Grp\w*RunMinutes(Limit)?", WAIT, True, ""),
    # Past, present and future usage: clears only as usage decays or an admin resets it.
    (r"(QOS|Assoc)Grp\w*Minutes(Limit)?", STALLED, True, ""),
    # Aggregate limits of the QOS or association: free up as its running jobs end.
    (r"(QOS|Assoc)Grp\w*", WAIT, True, ""),
    # Per-user and per-account caps (the user's own running jobs count): free up as they end. A job that
    # alone exceeds one waits for ever, but Slurm reports that the same way.
    (r"(QOSMax|Max)\w*Per(User|Account)(Limit)?|AssocMax(Jobs|SubmitJob)Limit", WAIT, True, ""),
    (
        r"(QOS|Assoc)MaxWallDurationPerJobLimit",
        NEVER,
        True,
        "The --time is over the MaxWall of its QOS or association: lower it or use another --qos.",
    ),
    # Per-job and per-node caps (and QOS minimums) judge the request alone: it never fits.
    (
        r"QOSM(ax|in)\w*",
        NEVER,
        True,
        "The request is outside a per-job or per-node limit of its QOS: change it or resubmit with another --qos.",
    ),
    (
        r"AssocMax\w*",
        NEVER,
        True,
        "The request is over a per-job or per-node limit of the association: shrink it or ask an admin to raise it.",
    ),
)


def classify(reason: enum.Enum) -> tuple[str, bool, str]:
    if reason.name in EXPLICIT:
        return EXPLICIT[reason.name]
    for pattern, kind, limit, hint in RULES:
        if re.fullmatch(pattern, reason.value):
            return kind, limit, hint
    raise RuntimeError(f"roach.model.states: no classification for PendingReason.{reason.name}")  # a bug here
