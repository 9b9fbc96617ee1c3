"""Slurm job states and pending reasons as typed enums (:class:`JobState` itself is :mod:`roach.model.job_state`).

The names come from Slurm's own tables, 20.11 to 25.11: ``job_state_string``,
``job_state_string_compact`` and ``job_state_string_complete`` (src/common/slurm_protocol_defs.c) for
states; ``job_reason_string`` (slurm_protocol_defs.c, up to 23.11) and ``job_state_reason_string``
(src/common/job_state_reason.c, 24.05 on) for reasons, plus the fixed ``state_desc`` texts slurmctld
prints in their place (``launch failed requeued held``, ``ReqNodeNotAvail, UnavailableNodes:...``).
Pure: no I/O, nothing runs at import but building the lookup tables.
"""

from __future__ import annotations

import enum
import functools
import re

from roach.model.job_state import JobState

__all__ = ["JobState", "PendingReason"]  # JobState lives in roach.model (a rank needs it); importable here as before


# Kinds of pending reason: what waiting on it means for the job.
_WAIT = "wait"  # clears by itself as the queue moves (jobs end, time passes)
_STALLED = "stalled"  # waits on the cluster (nodes, partitions, usage decay): may clear, may need an admin
_NEVER = "never"  # the job as submitted cannot start: someone must change it, or a limit
_HELD = "held"  # held: starts only once released
_RUN_ENDED = "run_ended"  # why a run ended; on a pending job, its previous run (requeued)


class PendingReason(enum.Enum):
    """Why a job is pending (squeue ``%r``, ``Reason=``; sacct ``Reason``). The value is Slurm's exact text.

    Member names are Slurm's names, so ``PendingReason.QOSMaxGRESPerUser`` reads like the squeue column;
    ``NONE`` ("None") and ``UNKNOWN`` (a reason this table lacks) are the exceptions.
    """

    NONE = "None"
    UNKNOWN = "?"
    # Scheduling: clear as the queue moves.
    Priority = "Priority"
    Resources = "Resources"
    BeginTime = "BeginTime"
    Dependency = "Dependency"
    Prolog = "Prolog"
    Cleaning = "Cleaning"
    Licenses = "Licenses"
    Reservation = "Reservation"
    JobArrayTaskLimit = "JobArrayTaskLimit"
    FedJobLock = "FedJobLock"
    BurstBufferResources = "BurstBufferResources"
    BurstBufferStageIn = "BurstBufferStageIn"
    Constraints = "Constraints"
    MpiPortsBusy = "MpiPortsBusy"
    MaxPoweredUpNodes = "MaxPoweredUpNodes"
    NvidiaImexChannels = "NvidiaImexChannels"
    PowerNotAvail = "PowerNotAvail"
    PowerReserved = "PowerReserved"
    # Cluster state.
    ReqNodeNotAvail = "ReqNodeNotAvail"
    NodesDownDrained = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    PartitionDown = "PartitionDown"
    PartitionInactive = "PartitionInactive"
    FrontEndDown = "FrontEndDown"
    BlockFreeAction = "BlockFreeAction"
    BlockMaxError = "BlockMaxError"
    # The job as submitted cannot run here.
    DependencyNeverSatisfied = "DependencyNeverSatisfied"
    BadConstraints = "BadConstraints"
    PartitionConfig = "PartitionConfig"
    PartitionNodeLimit = "PartitionNodeLimit"
    PartitionTimeLimit = "PartitionTimeLimit"
    MaxMemPerLimit = "MaxMemPerLimit"
    InvalidAccount = "InvalidAccount"
    InvalidQOS = "InvalidQOS"
    AccountNotAllowed = "AccountNotAllowed"
    QOSNotAllowed = "QOSNotAllowed"
    ReservationDeleted = "ReservationDeleted"
    ReservationInvalid = "ReservationInvalid"
    DeadLine = "DeadLine"
    # Holds (the lower-case ones are slurmctld's state_desc texts, printed instead of JobHeldUser).
    JobHeldUser = "JobHeldUser"
    JobHeldAdmin = "JobHeldAdmin"
    JobHoldMaxRequeue = "JobHoldMaxRequeue"
    LaunchFailedRequeuedHeld = "launch failed requeued held"
    JobRequeuedHeld = "job requeued in held state"
    JobRequeuedSpecialExit = "job requeued in special exit state"
    UserEnvFailedRequeuedHeld = "user env retrieval failed requeued held"
    # Why a run ended.
    NodeDown = "NodeDown"
    NonZeroExitCode = "NonZeroExitCode"
    RaisedSignal = "RaisedSignal"
    TimeLimit = "TimeLimit"
    OutOfMemory = "OutOfMemory"
    InactiveLimit = "InactiveLimit"
    JobLaunchFailure = "JobLaunchFailure"
    SystemFailure = "SystemFailure"
    BurstBufferOperation = "BurstBufferOperation"
    SchedDefer = "SchedDefer"
    # Accounting limits: the old generic names, then the TRES families (classified by name in _RULES).
    AccountingPolicy = "AccountingPolicy"
    AssociationJobLimit = "AssociationJobLimit"
    AssociationResourceLimit = "AssociationResourceLimit"
    AssociationTimeLimit = "AssociationTimeLimit"
    QOSJobLimit = "QOSJobLimit"
    QOSResourceLimit = "QOSResourceLimit"
    QOSTimeLimit = "QOSTimeLimit"
    QOSUsageThreshold = "QOSUsageThreshold"
    # Association limits.
    AssocGrpBB = "AssocGrpBB"
    AssocGrpBBMinutes = "AssocGrpBBMinutes"
    AssocGrpBBRunMinutes = "AssocGrpBBRunMinutes"
    AssocGrpBilling = "AssocGrpBilling"
    AssocGrpBillingMinutes = "AssocGrpBillingMinutes"
    AssocGrpBillingRunMinutes = "AssocGrpBillingRunMinutes"
    AssocGrpCPUMinutesLimit = "AssocGrpCPUMinutesLimit"
    AssocGrpCPURunMinutesLimit = "AssocGrpCPURunMinutesLimit"
    AssocGrpCpuLimit = "AssocGrpCpuLimit"
    AssocGrpEnergy = "AssocGrpEnergy"
    AssocGrpEnergyMinutes = "AssocGrpEnergyMinutes"
    AssocGrpEnergyRunMinutes = "AssocGrpEnergyRunMinutes"
    AssocGrpGRES = "AssocGrpGRES"
    AssocGrpGRESMinutes = "AssocGrpGRESMinutes"
    AssocGrpGRESRunMinutes = "AssocGrpGRESRunMinutes"
    AssocGrpJobsLimit = "AssocGrpJobsLimit"
    AssocGrpLicense = "AssocGrpLicense"
    AssocGrpLicenseMinutes = "AssocGrpLicenseMinutes"
    AssocGrpLicenseRunMinutes = "AssocGrpLicenseRunMinutes"
    AssocGrpMemLimit = "AssocGrpMemLimit"
    AssocGrpMemMinutes = "AssocGrpMemMinutes"
    AssocGrpMemRunMinutes = "AssocGrpMemRunMinutes"
    AssocGrpNodeLimit = "AssocGrpNodeLimit"
    AssocGrpNodeMinutes = "AssocGrpNodeMinutes"
    AssocGrpNodeRunMinutes = "AssocGrpNodeRunMinutes"
    AssocGrpSubmitJobsLimit = "AssocGrpSubmitJobsLimit"
    AssocGrpUnknown = "AssocGrpUnknown"
    AssocGrpUnknownMinutes = "AssocGrpUnknownMinutes"
    AssocGrpUnknownRunMinutes = "AssocGrpUnknownRunMinutes"
    AssocGrpWallLimit = "AssocGrpWallLimit"
    AssocMaxBBMinutesPerJob = "AssocMaxBBMinutesPerJob"
    AssocMaxBBPerJob = "AssocMaxBBPerJob"
    AssocMaxBBPerNode = "AssocMaxBBPerNode"
    AssocMaxBillingMinutesPerJob = "AssocMaxBillingMinutesPerJob"
    AssocMaxBillingPerJob = "AssocMaxBillingPerJob"
    AssocMaxBillingPerNode = "AssocMaxBillingPerNode"
    AssocMaxCpuMinutesPerJobLimit = "AssocMaxCpuMinutesPerJobLimit"
    AssocMaxCpuPerJobLimit = "AssocMaxCpuPerJobLimit"
    AssocMaxCpuPerNode = "AssocMaxCpuPerNode"
    AssocMaxEnergyMinutesPerJob = "AssocMaxEnergyMinutesPerJob"
    AssocMaxEnergyPerJob = "AssocMaxEnergyPerJob"
    AssocMaxEnergyPerNode = "AssocMaxEnergyPerNode"
    AssocMaxGRESMinutesPerJob = "AssocMaxGRESMinutesPerJob"
    AssocMaxGRESPerJob = "AssocMaxGRESPerJob"
    AssocMaxGRESPerNode = "AssocMaxGRESPerNode"
    AssocMaxJobsLimit = "AssocMaxJobsLimit"
    AssocMaxLicenseMinutesPerJob = "AssocMaxLicenseMinutesPerJob"
    AssocMaxLicensePerJob = "AssocMaxLicensePerJob"
    AssocMaxMemMinutesPerJob = "AssocMaxMemMinutesPerJob"
    AssocMaxMemPerJob = "AssocMaxMemPerJob"
    AssocMaxMemPerNode = "AssocMaxMemPerNode"
    AssocMaxNodeMinutesPerJob = "AssocMaxNodeMinutesPerJob"
    AssocMaxNodePerJobLimit = "AssocMaxNodePerJobLimit"
    AssocMaxSubmitJobLimit = "AssocMaxSubmitJobLimit"
    AssocMaxUnknownMinutesPerJob = "AssocMaxUnknownMinutesPerJob"
    AssocMaxUnknownPerJob = "AssocMaxUnknownPerJob"
    AssocMaxUnknownPerNode = "AssocMaxUnknownPerNode"
    AssocMaxWallDurationPerJobLimit = "AssocMaxWallDurationPerJobLimit"
    # QOS limits.
    QOSGrpBB = "QOSGrpBB"
    QOSGrpBBMinutes = "QOSGrpBBMinutes"
    QOSGrpBBRunMinutes = "QOSGrpBBRunMinutes"
    QOSGrpBilling = "QOSGrpBilling"
    QOSGrpBillingMinutes = "QOSGrpBillingMinutes"
    QOSGrpBillingRunMinutes = "QOSGrpBillingRunMinutes"
    QOSGrpCPUMinutesLimit = "QOSGrpCPUMinutesLimit"
    QOSGrpCPURunMinutesLimit = "QOSGrpCPURunMinutesLimit"
    QOSGrpCpuLimit = "QOSGrpCpuLimit"
    QOSGrpEnergy = "QOSGrpEnergy"
    QOSGrpEnergyMinutes = "QOSGrpEnergyMinutes"
    QOSGrpEnergyRunMinutes = "QOSGrpEnergyRunMinutes"
    QOSGrpGRES = "QOSGrpGRES"
    QOSGrpGRESMinutes = "QOSGrpGRESMinutes"
    QOSGrpGRESRunMinutes = "QOSGrpGRESRunMinutes"
    QOSGrpJobsLimit = "QOSGrpJobsLimit"
    QOSGrpLicense = "QOSGrpLicense"
    QOSGrpLicenseMinutes = "QOSGrpLicenseMinutes"
    QOSGrpLicenseRunMinutes = "QOSGrpLicenseRunMinutes"
    QOSGrpMemLimit = "QOSGrpMemLimit"
    QOSGrpMemoryMinutes = "QOSGrpMemoryMinutes"
    QOSGrpMemoryRunMinutes = "QOSGrpMemoryRunMinutes"
    QOSGrpNodeLimit = "QOSGrpNodeLimit"
    QOSGrpNodeMinutes = "QOSGrpNodeMinutes"
    QOSGrpNodeRunMinutes = "QOSGrpNodeRunMinutes"
    QOSGrpSubmitJobsLimit = "QOSGrpSubmitJobsLimit"
    QOSGrpUnknown = "QOSGrpUnknown"
    QOSGrpUnknownMinutes = "QOSGrpUnknownMinutes"
    QOSGrpUnknownRunMinutes = "QOSGrpUnknownRunMinutes"
    QOSGrpWallLimit = "QOSGrpWallLimit"
    QOSMaxBBMinutesPerJob = "QOSMaxBBMinutesPerJob"  # documented; Slurm prints AssocMaxBBMinutesPerJob for it
    QOSMaxBBPerJob = "QOSMaxBBPerJob"
    QOSMaxBBPerNode = "QOSMaxBBPerNode"
    QOSMaxBBPerUser = "QOSMaxBBPerUser"
    QOSMaxBillingMinutesPerJob = "QOSMaxBillingMinutesPerJob"
    QOSMaxBillingPerJob = "QOSMaxBillingPerJob"
    QOSMaxBillingPerNode = "QOSMaxBillingPerNode"
    QOSMaxBillingPerUser = "QOSMaxBillingPerUser"
    QOSMaxCpuMinutesPerJobLimit = "QOSMaxCpuMinutesPerJobLimit"
    QOSMaxCpuPerJobLimit = "QOSMaxCpuPerJobLimit"
    QOSMaxCpuPerNode = "QOSMaxCpuPerNode"
    QOSMaxCpuPerUserLimit = "QOSMaxCpuPerUserLimit"
    QOSMaxEnergyMinutesPerJob = "QOSMaxEnergyMinutesPerJob"
    QOSMaxEnergyPerJob = "QOSMaxEnergyPerJob"
    QOSMaxEnergyPerNode = "QOSMaxEnergyPerNode"
    QOSMaxEnergyPerUser = "QOSMaxEnergyPerUser"
    QOSMaxGRESMinutesPerJob = "QOSMaxGRESMinutesPerJob"
    QOSMaxGRESPerJob = "QOSMaxGRESPerJob"
    QOSMaxGRESPerNode = "QOSMaxGRESPerNode"
    QOSMaxGRESPerUser = "QOSMaxGRESPerUser"
    QOSMaxJobsPerUserLimit = "QOSMaxJobsPerUserLimit"
    QOSMaxLicenseMinutesPerJob = "QOSMaxLicenseMinutesPerJob"
    QOSMaxLicensePerJob = "QOSMaxLicensePerJob"
    QOSMaxLicensePerUser = "QOSMaxLicensePerUser"
    QOSMaxMemoryMinutesPerJob = "QOSMaxMemoryMinutesPerJob"
    QOSMaxMemoryPerJob = "QOSMaxMemoryPerJob"
    QOSMaxMemoryPerNode = "QOSMaxMemoryPerNode"
    QOSMaxMemoryPerUser = "QOSMaxMemoryPerUser"
    QOSMaxNodeMinutesPerJob = "QOSMaxNodeMinutesPerJob"
    QOSMaxNodePerJobLimit = "QOSMaxNodePerJobLimit"
    QOSMaxNodePerUserLimit = "QOSMaxNodePerUserLimit"
    QOSMaxSubmitJobPerUserLimit = "QOSMaxSubmitJobPerUserLimit"
    QOSMaxUnknownMinutesPerJob = "QOSMaxUnknownMinutesPerJob"
    QOSMaxUnknownPerJob = "QOSMaxUnknownPerJob"
    QOSMaxUnknownPerNode = "QOSMaxUnknownPerNode"
    QOSMaxUnknownPerUser = "QOSMaxUnknownPerUser"
    QOSMaxWallDurationPerJobLimit = "QOSMaxWallDurationPerJobLimit"
    QOSMinBB = "QOSMinBB"
    QOSMinBilling = "QOSMinBilling"
    QOSMinCpuNotSatisfied = "QOSMinCpuNotSatisfied"
    QOSMinEnergy = "QOSMinEnergy"
    QOSMinGRES = "QOSMinGRES"
    QOSMinLicense = "QOSMinLicense"
    QOSMinMemory = "QOSMinMemory"
    QOSMinNode = "QOSMinNode"
    QOSMinUnknown = "QOSMinUnknown"
    # QOS per-account caps, and per-user/per-account running TRES-minutes (24.05+).
    MaxBBPerAccount = "MaxBBPerAccount"
    MaxBBRunMinsPerAccount = "MaxBBRunMinsPerAccount"
    MaxBBRunMinsPerUser = "MaxBBRunMinsPerUser"
    MaxBillingPerAccount = "MaxBillingPerAccount"
    MaxBillingRunMinsPerAccount = "MaxBillingRunMinsPerAccount"
    MaxBillingRunMinsPerUser = "MaxBillingRunMinsPerUser"
    MaxCpuPerAccount = "MaxCpuPerAccount"
    MaxCpuRunMinsPerAccount = "MaxCpuRunMinsPerAccount"
    MaxCpuRunMinsPerUser = "MaxCpuRunMinsPerUser"
    MaxEnergyPerAccount = "MaxEnergyPerAccount"
    MaxEnergyRunMinsPerAccount = "MaxEnergyRunMinsPerAccount"
    MaxEnergyRunMinsPerUser = "MaxEnergyRunMinsPerUser"
    MaxGRESPerAccount = "MaxGRESPerAccount"
    MaxGRESRunMinsPerAccount = "MaxGRESRunMinsPerAccount"
    MaxGRESRunMinsPerUser = "MaxGRESRunMinsPerUser"
    MaxJobsPerAccount = "MaxJobsPerAccount"
    MaxLicensePerAccount = "MaxLicensePerAccount"
    MaxLicenseRunMinsPerAccount = "MaxLicenseRunMinsPerAccount"
    MaxLicenseRunMinsPerUser = "MaxLicenseRunMinsPerUser"
    MaxMemoryPerAccount = "MaxMemoryPerAccount"
    MaxMemoryRunMinsPerAccount = "MaxMemoryRunMinsPerAccount"
    MaxMemoryRunMinsPerUser = "MaxMemoryRunMinsPerUser"
    MaxNodePerAccount = "MaxNodePerAccount"
    MaxNodeRunMinsPerAccount = "MaxNodeRunMinsPerAccount"
    MaxNodeRunMinsPerUser = "MaxNodeRunMinsPerUser"
    MaxSubmitJobsPerAccount = "MaxSubmitJobsPerAccount"
    MaxUnknownPerAccount = "MaxUnknownPerAccount"
    MaxUnknownRunMinsPerAccount = "MaxUnknownRunMinsPerAccount"
    MaxUnknownRunMinsPerUser = "MaxUnknownRunMinsPerUser"

    @classmethod
    def parse(cls, text: str) -> PendingReason:
        """Read a reason as squeue or sacct prints it; never raises.

        Exact names first (any case, ``_`` for space), then the name before a ``,``/``:``/``(`` detail
        (``ReqNodeNotAvail, UnavailableNodes:n[1-2]``), then known free-text prefixes. ``(Resources)``
        (squeue ``%R``) is unwrapped; empty, ``(null)`` and ``None`` are ``NONE``; the rest is ``UNKNOWN``,
        because each Slurm release adds reasons and a monitor must not crash on one.
        """
        return _parse_reason(text)

    @classmethod
    def _parse(cls, text: str) -> PendingReason:
        s = text.strip()
        if s.startswith("(") and s.endswith(")") and s != "(null)":
            s = s[1:-1].strip()
        if s in ("", "(null)"):
            return cls.NONE
        head = re.split(r"[,:(]", s, maxsplit=1)[0]
        hit = _REASON_BY_KEY.get(_key(s)) or _REASON_BY_KEY.get(_key(head))
        if hit is not None:
            return hit
        key = _key(s)
        return next((r for prefix, r in _REASON_PREFIXES if key.startswith(prefix)), cls.UNKNOWN)

    @property
    def will_clear(self) -> bool:
        """Clears by itself as the queue moves: other jobs end, time passes, a limit frees up."""
        return _REASON_INFO[self][0] == _WAIT

    @property
    def never_starts(self) -> bool:
        """The job will not start until someone acts: changes the job, releases it, or raises a limit."""
        return _REASON_INFO[self][0] in (_NEVER, _HELD)

    @property
    def is_held(self) -> bool:
        """A hold: ``scontrol release`` (or an admin) starts it again."""
        return _REASON_INFO[self][0] == _HELD

    @property
    def is_limit(self) -> bool:
        """A QOS, association or partition limit."""
        return _REASON_INFO[self][1]

    @property
    def hint(self) -> str:
        """One sentence of what to do, for reasons that never start; ``""`` otherwise."""
        return _REASON_INFO[self][2]


def _key(text: str) -> str:
    """Case, ``_``-for-space and spacing-insensitive form: squeue output is seen with all of those."""
    return " ".join(text.replace("_", " ").split()).lower()


_REASON_BY_KEY: dict[str, PendingReason] = {_key(r.value): r for r in PendingReason}

# Free text slurmctld prints in place of a reason (state_desc), matched on _key form.
_REASON_PREFIXES: tuple[tuple[str, PendingReason], ...] = (
    (_key("Nodes required for job are DOWN"), PendingReason.NodesDownDrained),
    (_key("ReqNodeNotAvail"), PendingReason.ReqNodeNotAvail),
    # A QOS/association TRES-minutes limit killed the job (the reason behind it is TimeLimit).
    (_key("Job is at or exceeds"), PendingReason.TimeLimit),
)

_HOLD = "release it with `scontrol release <jobid>`"
# Reasons named one by one: name -> (kind, is_limit, hint).
_EXPLICIT: dict[str, tuple[str, bool, str]] = {
    **dict.fromkeys("NONE Priority Resources BeginTime Dependency Prolog Cleaning Licenses Reservation "
                    "JobArrayTaskLimit FedJobLock BurstBufferResources BurstBufferStageIn Constraints "
                    "MpiPortsBusy MaxPoweredUpNodes NvidiaImexChannels PowerNotAvail PowerReserved".split(),
                    (_WAIT, False, "")),
    # Old generic limits (pre-TRES names) on counts or resources: free up as jobs end.
    **dict.fromkeys("AccountingPolicy AssociationJobLimit AssociationResourceLimit QOSJobLimit "
                    "QOSResourceLimit".split(), (_WAIT, True, "")),
    **dict.fromkeys("UNKNOWN ReqNodeNotAvail NodesDownDrained PartitionDown PartitionInactive FrontEndDown "
                    "BlockFreeAction BlockMaxError".split(), (_STALLED, False, "")),
    # Usage-based limits: clear only as recorded usage decays or is reset.
    **dict.fromkeys("AssociationTimeLimit QOSTimeLimit QOSUsageThreshold".split(), (_STALLED, True, "")),
    **dict.fromkeys("NodeDown NonZeroExitCode RaisedSignal TimeLimit OutOfMemory InactiveLimit JobLaunchFailure "
                    "SystemFailure BurstBufferOperation SchedDefer".split(), (_RUN_ENDED, False, "")),
    "DependencyNeverSatisfied": (_NEVER, False, "A job it depends on ended in a way that can never satisfy the "
                                 "dependency: cancel it or fix it (`scontrol update JobId=<jobid> Dependency=`)."),
    "BadConstraints": (_NEVER, False, "No node can ever satisfy the request (features, GRES, CPUs or memory): "
                       "cancel it and resubmit a request the cluster can meet."),
    "PartitionConfig": (_NEVER, True, "The request breaks a limit of its partition (see `scontrol show partition`): "
                        "change the request or the partition."),
    "PartitionNodeLimit": (_NEVER, True, "The node count is outside the partition's limits: "
                           "change --nodes or use another partition."),
    "PartitionTimeLimit": (_NEVER, True, "The --time is over the partition's MaxTime: lower it "
                           "(`scontrol update JobId=<jobid> TimeLimit=`) or use another partition."),
    "MaxMemPerLimit": (_NEVER, True, "The memory request is over MaxMemPerCPU/MaxMemPerNode: request less memory."),
    "InvalidAccount": (_NEVER, False, "The account is not valid for this user: resubmit with an --account "
                       "from `sacctmgr show assoc user=$USER`."),
    "InvalidQOS": (_NEVER, False, "The QOS is not valid for this user: resubmit with a --qos the association allows."),
    "AccountNotAllowed": (_NEVER, False, "The partition does not accept this account: "
                          "use another --partition or --account."),
    "QOSNotAllowed": (_NEVER, False, "The partition or association does not allow this QOS: "
                      "use another --qos or --partition."),
    "ReservationDeleted": (_NEVER, False, "The reservation it asked for was deleted: remove --reservation "
                           "(`scontrol update JobId=<jobid> Reservation=`) or cancel it."),
    "ReservationInvalid": (_NEVER, False, "The reservation it asked for cannot be used: "
                           "change or remove --reservation."),
    "DeadLine": (_NEVER, False, "It cannot finish before its --deadline: "
                 "resubmit with a later deadline or a shorter --time."),
    "JobHeldUser": (_HELD, False, f"Held by its user: {_HOLD}."),
    "JobHeldAdmin": (_HELD, False, "Held by an administrator: ask one to release it."),
    "JobHoldMaxRequeue": (_HELD, False, f"Requeued too many times and held: fix the failure, then {_HOLD}."),
    "LaunchFailedRequeuedHeld": (_HELD, False, "The launch failed (often a prolog or node problem) and the job "
                                 f"was held: check the node, then {_HOLD}."),
    "JobRequeuedHeld": (_HELD, False, f"Requeued into a hold: {_HOLD}."),
    "JobRequeuedSpecialExit": (_HELD, False, "It exited with the special exit code and was held: "
                               f"{_HOLD} to rerun it."),
    "UserEnvFailedRequeuedHeld": (_HELD, False, f"Loading the user environment (--get-user-env) failed: fix the "
                                  f"login environment, then {_HOLD}."),
}

# The TRES limit families, by name pattern (fullmatch on the value); first match wins.
_RULES: tuple[tuple[str, str, bool, str], ...] = (
    # Running jobs' TRES-minutes: free up as those jobs run on and end.
    (r"(QOS|Assoc)Grp\w*RunMinutes(Limit)?", _WAIT, True, ""),
    # Past, present and future usage: clears only as usage decays or an admin resets it.
    (r"(QOS|Assoc)Grp\w*Minutes(Limit)?", _STALLED, True, ""),
    # Aggregate limits of the QOS or association: free up as its running jobs end.
    (r"(QOS|Assoc)Grp\w*", _WAIT, True, ""),
    # Per-user and per-account caps (the user's own running jobs count): free up as they end. A job that
    # alone exceeds one waits for ever, but Slurm reports that the same way.
    (r"(QOSMax|Max)\w*Per(User|Account)(Limit)?|AssocMax(Jobs|SubmitJob)Limit", _WAIT, True, ""),
    (r"(QOS|Assoc)MaxWallDurationPerJobLimit", _NEVER, True,
     "The --time is over the MaxWall of its QOS or association: lower it or use another --qos."),
    # Per-job and per-node caps (and QOS minimums) judge the request alone: it never fits.
    (r"QOSM(ax|in)\w*", _NEVER, True,
     "The request is outside a per-job or per-node limit of its QOS: change it or resubmit with another --qos."),
    (r"AssocMax\w*", _NEVER, True,
     "The request is over a per-job or per-node limit of the association: shrink it or ask an admin to raise it."),
)


def _classify(reason: PendingReason) -> tuple[str, bool, str]:
    if reason.name in _EXPLICIT:
        return _EXPLICIT[reason.name]
    for pattern, kind, limit, hint in _RULES:
        if re.fullmatch(pattern, reason.value):
            return kind, limit, hint
    raise RuntimeError(f"roach.model.states: no classification for PendingReason.{reason.name}")  # a bug here


_REASON_INFO: dict[PendingReason, tuple[str, bool, str]] = {r: _classify(r) for r in PendingReason}


# A round parses the same few state and reason texts once per job: a queue of 1,000 array tasks holds a
# handful of distinct ones. The results are enum members, so a cache is safe.
_parse_reason = functools.lru_cache(maxsize=1024)(PendingReason._parse)
