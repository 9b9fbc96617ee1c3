"""One pending job explained (:func:`explain`, what ``roach why`` and the watch say): its reason in words, whether it will clear, what to do, and the tiers that could run it now; and a job that ended before its ranks ran because its Python environment could not be built (:func:`env_failure`)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roach.errors import RoachError, UsageError
from roach.model.states import PendingReason as R
from roach.model.tiers import Tier, tier_of
from roach.ops.pending import TABLE, Outlook
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import QueueRecord

# What node.sh writes into a job's bundle when its environment could not be built: a line saying which node,
# tool and commit, then the tool's last lines of output (job.json's failure holds the same).
ENV_FAILED_FILE = "env_failed"


def env_failure(fs: ClusterFS, bundle_dir: str) -> str | None:
    """What the bundle's env_failed says (None: no such file, or it cannot be read): one command."""
    try:
        return fs.read(posixpath.join(bundle_dir, ENV_FAILED_FILE)).strip() or None
    except RoachError:
        return None


# -- explaining one job ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PendingContext:
    """What else is known when a reason is read.

    ``queue``: the user's jobs (one squeue); ``tiers``: the cluster's tiers; ``req_nodes``: the nodelist the
    job was pinned to (``""``: not pinned; None: not known); ``qos_gpu_caps``: per-user GPU caps of QOS
    that are not tiers.
    """

    queue: Sequence[QueueRecord] = ()
    tiers: tuple[Tier, ...] = ()
    req_nodes: str | None = None
    qos_gpu_caps: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """A pending reason explained for one job."""

    job_id: str
    reason: R
    reason_text: str
    outlook: Outlook
    meaning: str
    detail: str  # what the context says about this job ("" when nothing more is known)
    action: str

    @property
    def never(self) -> bool:
        return self.outlook is Outlook.NEVER

    def line(self) -> str:
        """One line: the reason, what it means here, the outlook and the action."""
        said = self.detail or self.meaning
        return f"{self.reason_text or self.reason.value}: {said}; {self.outlook.label}; action: {self.action}"

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "reason": self.reason.name,
            "reason_text": self.reason_text,
            "outlook": self.outlook.value,
            "meaning": self.meaning,
            "detail": self.detail,
            "action": self.action,
        }


# Reasons a per-user GPU cap can be behind (the tiers model GPU caps only).
CAP_REASONS = {R.QOSMaxGRESPerUser, R.QOSJobLimit, R.QOSResourceLimit, R.AccountingPolicy}


def user_cap(record: QueueRecord, ctx: PendingContext) -> tuple[Tier | None, int | None]:
    tier = tier_of(ctx.tiers, record.partition, record.qos)
    cap = tier.gpu_cap if tier is not None and tier.gpu_cap is not None else ctx.qos_gpu_caps.get(record.qos)
    return tier, cap


def other_tiers(record: QueueRecord, ctx: PendingContext, gpus: int) -> list[str]:
    """Tiers other than the job's where its size fits under the per-user cap."""
    here = tier_of(ctx.tiers, record.partition, record.qos)
    return [t.name for t in ctx.tiers if t is not here and (t.gpu_cap is None or t.gpu_cap >= gpus)]


def may_never(record: QueueRecord) -> bool:
    """Whether :func:`explain` could say "never" for this pending record; False means it will not (a watch
    round asks this of every pending job, and the full explanation only of these)."""
    reason = record.reason
    return (
        reason in CAP_REASONS
        or reason in (R.ReqNodeNotAvail, R.NodesDownDrained)
        or TABLE[reason].outlook is Outlook.NEVER
    )


def explain(record: QueueRecord, context: PendingContext | None = None) -> Explanation:
    """The pending reason of ``record`` in plain words, read with ``context``.

    Raises :class:`UsageError` for a job that is not pending.
    """
    if not record.state.is_pending:
        raise UsageError(
            f"job {record.job_id} is {record.state.value}, not pending: there is no pending reason",
            hint="`roach status` shows a started job's state",
        )
    ctx = context or PendingContext()
    reason, job = record.reason, record.job_id
    row = TABLE[reason]
    outlook, detail, action = row.outlook, "", row.action
    gpus = record.tres.gpus
    if reason in CAP_REASONS:
        tier, cap = user_cap(record, ctx)
        where = f"tier {tier.name}" if tier is not None else f"QOS {record.qos}"
        if cap is not None and gpus > cap:
            others = other_tiers(record, ctx, gpus)
            outlook = Outlook.NEVER
            detail = f"it asks for {gpus} GPUs and {where} lets one user claim at most {cap}: it can never start there"
            action = (
                f"move it: `roach promote {job} --to {others[0]}`"
                if others
                else f"cancel it and resubmit with at most {cap} GPUs, or on another QOS"
            )
        elif cap is not None and reason is not R.AccountingPolicy:
            held = sum(q.tres.gpus for q in ctx.queue if q.state.is_running and q.qos == record.qos)
            outlook = Outlook.CLEARS
            if held:
                detail = (
                    f"your running jobs on {where} hold {held} of its {cap} GPUs and it needs {gpus}: it "
                    f"starts when {max(held + gpus - cap, 1)} of them free up"
                )
                action = "nothing, it clears as your own jobs end; or move it to a tier with room"
            else:
                detail = (
                    f"none of your running jobs holds the {cap}-GPU cap of {where} now: it should start at "
                    "the next scheduling pass"
                )
                action = "nothing; if it stays, look for a limit roach does not model: `sacctmgr show qos`"
    elif reason in (R.ReqNodeNotAvail, R.NodesDownDrained):
        unavailable = record.reason_text.partition("UnavailableNodes:")[2].strip()
        if ctx.req_nodes not in (None, "", "(null)"):
            outlook = Outlook.NEVER
            detail = (
                f"it is pinned to {ctx.req_nodes} (--nodelist) and {unavailable or 'those nodes'} cannot "
                "take it; a pinned job waits on exactly those nodes"
            )
            action = "cancel it and resubmit without --nodelist (or with nodes that are up)"
        elif ctx.req_nodes is not None:
            detail = (
                "the nodes it could use"
                + (f" ({unavailable})" if unavailable else "")
                + " are down, drained or reserved"
            )
    return Explanation(job, reason, record.reason_text, outlook, row.meaning, detail, action.replace("<jobid>", job))
