"""Why a job is pending, in plain words: whether it will start by itself, and what to do if not.

One table, keyed on :class:`~roach.model.states.PendingReason` (every reason Slurm 20.11 to 25.11 can
print): what the reason means, its outlook (clears by itself, waits on the cluster, never starts as it
is) and the action. :func:`explain` then reads the reason with what else is known (the user's queue, the
cluster's tiers, the job's pinned nodelist), because the same reason can mean both: QOSMaxGRESPerUser
clears while the user's own running jobs hold the cap, and never clears for a job that alone asks for
more than the cap. ``docs/pending.md`` is rendered from this table (``python -m roach.ops.pending``).
Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from roach.model.states import PendingReason as R


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


@dataclass(frozen=True)
class ReasonInfo:
    """The table's row for one reason; ``<jobid>`` in ``action`` stands for the job's id."""

    meaning: str
    outlook: Outlook
    action: str


_RELEASE = "release it: `scontrol release <jobid>`"
_NOTHING = "nothing: it starts when that changes"
_ADMIN = (
    "check `sinfo -R` and `scontrol show partition`; if it lasts, ask the admins, or cancel it and submit elsewhere"
)

# Reasons named one by one: name -> (meaning, outlook or None for the kind states.py gives, action or None).
_EXPLICIT: dict[str, tuple[str, Outlook | None, str | None]] = {
    "NONE": (
        "no reason given yet: the scheduler has not looked at the job since it was queued",
        None,
        "nothing: the next scheduling pass gives a reason or starts it",
    ),
    "UNKNOWN": (
        "a reason this version of roach does not know (a newer Slurm added it)",
        Outlook.WAITS,
        "read it in `scontrol show job <jobid>` and Slurm's squeue man page",
    ),
    "Priority": ("jobs of higher priority are ahead of it in the queue", None, _NOTHING),
    "Resources": ("it is next in line, but the nodes it needs are busy", None, _NOTHING),
    "BeginTime": (
        "its start time (--begin, or the short wait Slurm adds after a requeue) has not come yet",
        None,
        "nothing: it becomes eligible at its begin time",
    ),
    "Dependency": (
        "it waits for the jobs it depends on (--dependency) to reach the state asked for",
        None,
        "nothing, as long as those jobs can still satisfy it",
    ),
    "SchedDefer": (
        "the cluster defers scheduling at submit time (SchedulerParameters=defer)",
        Outlook.CLEARS,
        "nothing: the next scheduling pass looks at it",
    ),
    "Prolog": ("its prolog is running on the allocated nodes", None, "nothing"),
    "Cleaning": ("it was requeued and Slurm is still cleaning up its previous run", None, "nothing"),
    "Licenses": ("the licenses it asked for (--licenses) are in use", None, _NOTHING),
    "Reservation": (
        "it waits for its advanced reservation to start or to have room",
        None,
        "nothing while the reservation exists; check it with `scontrol show reservation`",
    ),
    "JobArrayTaskLimit": (
        "its array already runs as many tasks at once as its %N limit allows",
        None,
        "nothing: the next task starts when one ends",
    ),
    "FedJobLock": ("a federated sibling cluster holds the job's lock", None, "nothing"),
    "BurstBufferResources": ("the burst buffer space it asked for is in use", None, _NOTHING),
    "BurstBufferStageIn": ("its burst buffer stage-in is running", None, "nothing"),
    "Constraints": ("the nodes with the features it asked for (--constraint) are busy", None, _NOTHING),
    "MpiPortsBusy": ("the MPI reserved ports it needs are in use", None, _NOTHING),
    "MaxPoweredUpNodes": ("the cluster already powers up as many nodes as it may at once", None, _NOTHING),
    "NvidiaImexChannels": ("no free NVIDIA IMEX channel for it", None, _NOTHING),
    "PowerNotAvail": ("the power the job needs is not available yet", None, _NOTHING),
    "PowerReserved": ("the power the job needs is reserved for other jobs", None, _NOTHING),
    "ReqNodeNotAvail": (
        "a node it needs is down, drained, or reserved (often for maintenance, or for a "
        "higher-priority job the backfill planned)",
        None,
        "if the job is pinned (--nodelist), cancel it and resubmit without the pin; else " + _ADMIN,
    ),
    "NodesDownDrained": (
        "the nodes it needs are down, drained, or reserved for jobs in higher-priority partitions",
        None,
        _ADMIN,
    ),
    "PartitionDown": ("its partition is down", None, _ADMIN),
    "PartitionInactive": ("its partition is inactive", None, _ADMIN),
    "FrontEndDown": ("no front end node is available to launch it", None, _ADMIN),
    "BlockFreeAction": ("(BlueGene) a block is being freed", None, _ADMIN),
    "BlockMaxError": ("(BlueGene) too many blocks in error", None, _ADMIN),
    "DependencyNeverSatisfied": (
        "a job it depends on ended in a way that can never satisfy the dependency",
        None,
        None,
    ),
    "BadConstraints": ("no node can ever satisfy the request (features, GRES, CPUs or memory)", None, None),
    "PartitionConfig": ("the request breaks a limit or setting of its partition", None, None),
    "PartitionNodeLimit": ("the node count is outside what its partition allows", None, None),
    "PartitionTimeLimit": ("its --time is over the partition's MaxTime", None, None),
    "MaxMemPerLimit": ("its memory request is over MaxMemPerCPU/MaxMemPerNode", None, None),
    "InvalidAccount": ("its account is not valid for this user (or was removed)", None, None),
    "InvalidQOS": ("its QOS is not valid for this user (or was removed)", None, None),
    "AccountNotAllowed": ("its partition does not accept the job's account", None, None),
    "QOSNotAllowed": ("its partition or association does not allow the job's QOS", None, None),
    "ReservationDeleted": ("the reservation it asked for was deleted", None, None),
    "ReservationInvalid": ("the reservation it asked for cannot be used by this job", None, None),
    "DeadLine": ("it can no longer finish before its --deadline", None, None),
    "JobHeldUser": ("held by its user (sbatch --hold, or scontrol hold)", None, None),
    "JobHeldAdmin": ("held by an administrator", None, None),
    "JobHoldMaxRequeue": ("requeued more times than the cluster allows, then held", None, None),
    "LaunchFailedRequeuedHeld": (
        "its launch failed (often a prolog or node problem); it was requeued held",
        None,
        None,
    ),
    "JobRequeuedHeld": ("it was requeued into a hold (scontrol requeuehold)", None, None),
    "JobRequeuedSpecialExit": ("it exited with the special exit code and was requeued held", None, None),
    "UserEnvFailedRequeuedHeld": ("loading the user's environment (--get-user-env) failed; requeued held", None, None),
    "AccountingPolicy": (
        "an accounting limit (QOS or association) stops it for now",
        None,
        "nothing, unless the job alone is above the limit: compare with `sacctmgr show qos` "
        "and `sacctmgr show assoc user=$USER`",
    ),
    "AssociationJobLimit": ("your association already runs as many jobs as it may", None, _NOTHING),
    "AssociationResourceLimit": ("your association's jobs already hold as much as it may", None, _NOTHING),
    "AssociationTimeLimit": (
        "your association used up its time (TRES-minutes) budget",
        None,
        "wait for the usage to decay, or ask the admins to reset or raise it",
    ),
    "QOSJobLimit": (
        "its QOS already runs as many jobs (or as much) as it may for you",
        None,
        "nothing, unless the job alone is above the QOS limit (`sacctmgr show qos`): then move it "
        "to another QOS or shrink it",
    ),
    "QOSResourceLimit": ("the jobs of its QOS already hold as much as the QOS allows", None, _NOTHING),
    "QOSTimeLimit": (
        "its QOS used up its time (TRES-minutes) budget",
        None,
        "wait for the usage to decay, or move it to another QOS",
    ),
    "QOSUsageThreshold": (
        "its QOS's usage is over the QOS's UsageThreshold",
        None,
        "wait for the usage to decay, or move it to another QOS",
    ),
}
# Why a run ended. On a pending job: its previous run ended that way and it was requeued.
for _name, _why in (
    ("NodeDown", "a node of it went down"),
    ("NonZeroExitCode", "it exited non-zero"),
    ("RaisedSignal", "it was killed by a signal"),
    ("TimeLimit", "it hit its time limit"),
    ("OutOfMemory", "it ran out of memory"),
    ("InactiveLimit", "srun was inactive too long"),
    ("JobLaunchFailure", "its launch failed"),
    ("SystemFailure", "a system failure"),
    ("BurstBufferOperation", "a burst buffer operation failed"),
):
    _EXPLICIT[_name] = (
        f"its previous run ended ({_why}) and it is back in the queue",
        Outlook.CLEARS,
        "nothing, unless the previous run failed for a reason that will repeat: read its log",
    )

# The TRES-limit families, read from the reason's name.
_TRES = {
    "BB": "burst buffer",
    "Billing": "billing units",
    "CPU": "CPUs",
    "Cpu": "CPUs",
    "Energy": "energy",
    "GRES": "GRES (GPUs)",
    "License": "licenses",
    "Mem": "memory",
    "Memory": "memory",
    "Node": "nodes",
    "Unknown": "unnamed TRES",
    "Jobs": "jobs",
    "SubmitJob": "submitted jobs",
    "SubmitJobs": "submitted jobs",
    "Wall": "wall time",
    "WallDuration": "wall time",
}
_NAME = re.compile(
    r"(QOS|Assoc)?(Grp|Max|Min)?(BB|Billing|CPU|Cpu|Energy|GRES|License|Memory|Mem|Node|Unknown|"
    r"Jobs|SubmitJobs|SubmitJob|WallDuration|Wall)(.*?)(Limit)?"
)


def _family(reason: R) -> str:
    """A plain-words meaning for a TRES limit reason, from its name."""
    m = _NAME.fullmatch(reason.value)
    if not m:
        return f"a limit of the cluster ({reason.value})"
    scope, kind, tres_key, rest, _ = m.groups()
    tres = _TRES[tres_key]
    where = {"QOS": "the job's QOS", "Assoc": "your association (user and account)", None: "the job's QOS"}[scope]
    if kind == "Min" or rest == "NotSatisfied":
        return f"it asks for less {tres} than the minimum of {where}"
    if kind == "Grp":
        if rest == "RunMinutes":
            return f"the running jobs of {where} already hold as many {tres}-minutes (size x time left) as it allows"
        if rest == "Minutes":
            return f"{where} used up its {tres}-minutes budget (past usage counts until it decays)"
        if tres_key in ("Jobs", "SubmitJobs", "SubmitJob"):
            return f"{where} already has as many {tres} as it allows"
        return f"the running jobs of {where} already hold all the {tres} it allows at once"
    if rest in ("PerUser", "PerAccount"):
        who = "one user" if rest == "PerUser" else "one account"
        return f"{who}'s running jobs already hold all the {tres} that {where} allows {who}"
    if rest in ("RunMinsPerUser", "RunMinsPerAccount"):
        who = "one user" if rest.endswith("User") else "one account"
        return f"{who}'s running jobs already hold as many {tres}-minutes as {where} allows {who}"
    if rest == "MinutesPerJob":
        return f"the job asks for more {tres}-minutes (size x time limit) than {where} allows one job"
    if rest == "PerNode":
        return f"the job asks for more {tres} per node than {where} allows"
    if rest in ("PerJob", "DurationPerJob") or (kind == "Max" and tres_key in ("WallDuration",)):
        return f"the job asks for more {tres} than {where} allows one job"
    if tres_key in ("Jobs", "SubmitJob", "SubmitJobs"):
        return f"you already have as many {tres} as {where} allows"
    return f"a {tres} limit of {where}"


def _outlook_of(reason: R) -> Outlook:
    if reason.will_clear:
        return Outlook.CLEARS
    if reason.never_starts:
        return Outlook.NEVER
    return Outlook.WAITS


def _default_action(reason: R, outlook: Outlook) -> str:
    if reason.hint:  # states.py's sentence, as a clause
        return reason.hint.split(": ", 1)[-1].rstrip(".")
    if outlook is Outlook.CLEARS:
        return "nothing: it starts as your (or others') running jobs end"
    if reason.is_limit:
        return "wait for the usage to decay, or move it to another QOS or account"
    return _ADMIN


def _build() -> dict[R, ReasonInfo]:
    out = {}
    for reason in R:
        meaning, outlook, action = _EXPLICIT.get(reason.name, (None, None, None))
        meaning = meaning or _family(reason)
        outlook = outlook or _outlook_of(reason)
        out[reason] = ReasonInfo(meaning, outlook, action or _default_action(reason, outlook))
    return out


TABLE: Mapping[R, ReasonInfo] = _build()


def info(reason: R) -> ReasonInfo:
    return TABLE[reason]


# -- docs/pending.md --------------------------------------------------------------------------------------
_GROUPS = (
    (
        "Scheduling: the queue is working",
        lambda r: (
            r.name in _EXPLICIT
            and TABLE[r].outlook is Outlook.CLEARS
            and not r.is_limit
            and "previous run" not in TABLE[r].meaning
        ),
    ),
    ("Cluster state", lambda r: r.name in _EXPLICIT and TABLE[r].outlook is Outlook.WAITS and not r.is_limit),
    (
        "The job as submitted cannot start",
        lambda r: r.name in _EXPLICIT and TABLE[r].outlook is Outlook.NEVER and not r.is_held,
    ),
    ("Holds", lambda r: r.is_held),
    ("Why the previous run ended (shown on a requeued job)", lambda r: "previous run" in TABLE[r].meaning),
    ("Accounting limits", lambda r: r.is_limit),
)


def render_markdown() -> str:
    """``docs/pending.md``: every reason, grouped, with its meaning, outlook and action."""
    lines = [
        "# Pending reasons",
        "",
        "<!-- Generated by `python -m roach.ops.pending > docs/pending.md` from roach/ops/pending.py; "
        "edit the table there. -->",
        "",
        "What each reason squeue prints beside a pending job means, whether the job starts by itself, and",
        "what to do. `roach why JOB` prints the row for one job, read with what else is known; the watch",
        "(`roach watch`) prints a `never` line for a job whose reason will not clear. Outlooks:",
        "",
        f"- **{Outlook.CLEARS.label}**: the queue is working; the job starts as other jobs end or time passes.",
        f"- **{Outlook.WAITS.label}**: it waits on nodes, partitions or usage decay; it may clear, it may need an admin.",
        f"- **{Outlook.NEVER.label}**: someone must change, release or cancel it.",
        "",
        "Read with context, a reason can change outlook:",
        "",
        "- `QOSMaxGRESPerUser` (and `QOSJobLimit`, `QOSResourceLimit`, `AccountingPolicy`) on a capped tier clears",
        "  while your own running jobs hold the cap, and **never** clears for a job that alone asks for more GPUs",
        "  than the cap.",
        "- `ReqNodeNotAvail` on a job pinned with `--nodelist` **never** clears by itself: the job waits on",
        "  exactly those nodes. Resubmit it without the pin.",
        "- A held job (`JobHeldUser`, `JobHeldAdmin`, the `requeued held` texts) starts only once released.",
        "",
        "`<jobid>` in an action stands for the job's id.",
        "",
    ]
    seen: set[R] = set()
    for title, pick in _GROUPS:
        rows = [r for r in R if r not in seen and pick(r)]
        seen.update(rows)
        lines += [f"## {title}", "", "| reason | means | outlook | action |", "|---|---|---|---|"]
        lines += [_row(r) for r in rows]
        lines.append("")
    rest = [r for r in R if r not in seen]
    if rest:
        lines += ["## Other", "", "| reason | means | outlook | action |", "|---|---|---|---|"]
        lines += [_row(r) for r in rest]
        lines.append("")
    return "\n".join(lines)


def _row(r: R) -> str:
    row = TABLE[r]
    name = f"`{r.value}`" if r.value == r.name else f"`{r.value}` ({r.name})"
    if r is R.UNKNOWN:
        name = "anything else (UNKNOWN)"
    if r is R.NONE:
        name = "`None`"
    cells = (name, row.meaning, row.outlook.label, row.action)
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


if __name__ == "__main__":
    print(render_markdown(), end="")
