"""The reasons the table does not name one by one: the TRES limit families (``QOSMaxGRESPerUser``,
``AssocGrpCPURunMinutes``, ...), read from the name by pattern, and each reason's row made whole (its action read
from its kind and hint where the table gives none). Pure.
"""

from __future__ import annotations

import enum
import functools
import re

from roach.model.reason_table import ADMIN, EXPLICIT, NEVER, STALLED, WAIT, Outlook, Row

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


def family_meaning(reason: enum.Enum) -> str:
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


def _rule(reason: enum.Enum) -> Row:
    for pattern, kind, limit, hint in RULES:
        if re.fullmatch(pattern, reason.value):
            return Row(kind, limit, family_meaning(reason), "", hint)
    raise RuntimeError(f"roach.model.reason_rules: no row for PendingReason.{reason.name}")  # a bug here


@functools.cache
def row(reason: enum.Enum) -> Row:
    """The reason's row, whole: named in the table, else its family's; its action read from its kind and hint
    where the table gives none."""
    r = EXPLICIT.get(reason.name) or _rule(reason)
    if r.action:
        return r
    if r.hint:  # the hint's sentence, as a clause
        action = r.hint.split(": ", 1)[-1].rstrip(".")
    elif r.outlook is Outlook.CLEARS:
        action = "nothing: it starts as your (or others') running jobs end"
    elif r.is_limit:
        action = "wait for the usage to decay, or move it to another QOS or account"
    else:
        action = ADMIN
    return Row(r.kind, r.is_limit, r.meaning, action, r.hint)
