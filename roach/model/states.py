"""Slurm job states and pending reasons as typed enums (:class:`JobState` itself is :mod:`roach.model.job_state`).

The names come from Slurm's own tables, 20.11 to 25.11: ``job_state_string``,
``job_state_string_compact`` and ``job_state_string_complete`` (src/common/slurm_protocol_defs.c) for
states; ``job_reason_string`` (slurm_protocol_defs.c, up to 23.11) and ``job_state_reason_string``
(src/common/job_state_reason.c, 24.05 on) for reasons, plus the fixed ``state_desc`` texts slurmctld
prints in their place (``launch failed requeued held``, ``ReqNodeNotAvail, UnavailableNodes:...``).
Pure: no I/O, nothing runs at import but building the lookup table of names; a reason's row (what waiting on it
means, :func:`~roach.model.reason_rules.row`) is read the first time it is asked for, and kept. The table of rows
loads with that first question: reading a queue parses reasons, and asks none of them what it means.
"""

from __future__ import annotations

import enum
import functools
import re
from typing import TYPE_CHECKING

from roach.model.job_state import JobState

if TYPE_CHECKING:
    from roach.model.reason_table import Row

__all__ = ["JobState", "PendingReason"]  # JobState lives in roach.model (a rank needs it); importable here as before


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
    # Accounting limits: the old generic names, then the TRES families (classified by name in RULES).
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
        from roach.model.reason_table import WAIT

        return _row(self).kind == WAIT

    @property
    def never_starts(self) -> bool:
        """The job will not start until someone acts: changes the job, releases it, or raises a limit."""
        from roach.model.reason_table import HELD, NEVER

        return _row(self).kind in (NEVER, HELD)

    @property
    def is_held(self) -> bool:
        """A hold: ``scontrol release`` (or an admin) starts it again."""
        from roach.model.reason_table import HELD

        return _row(self).kind == HELD

    @property
    def is_limit(self) -> bool:
        """A QOS, association or partition limit."""
        return _row(self).is_limit

    @property
    def hint(self) -> str:
        """One sentence of what to do, for reasons that never start; ``""`` otherwise."""
        return _row(self).hint


def _row(reason: PendingReason) -> Row:
    """What waiting on ``reason`` means: :func:`~roach.model.reason_rules.row`, whose module loads here."""
    from roach.model.reason_rules import row

    return row(reason)


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


# A round parses the same few state and reason texts once per job: a queue of 1,000 array tasks holds a
# handful of distinct ones. The results are enum members, so a cache is safe.
_parse_reason = functools.lru_cache(maxsize=1024)(PendingReason._parse)
