"""Guardrails checked before anything is submitted: the user's caps, submit hosts, and requests no tier of the
cluster can ever satisfy (a metered cluster's grant is checked where the submission is queued:
:mod:`roach.launch.pipeline`).

:func:`check` is cheap and offline (the cluster's declarations and clusters.toml only); submit() and hold()
call it first. :func:`check_live` asks the cluster once (nodes, the user's associations, partitions) for
what only the cluster knows: a request bigger than every node, a QOS or partition the user cannot use.
Each refusal is a :class:`Refused`: nothing was queued or written.
"""

from __future__ import annotations

import fnmatch
import socket
from collections.abc import Callable

from roach.errors import UsageError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured
from roach.model.resources import Resources
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_duration, parse_memory_mb


class Refused(UsageError):
    """A guardrail refused a submission; nothing was submitted. ``rule`` names the guardrail."""

    def __init__(self, rule: str, message: str, hint: str | None = None):
        super().__init__(message, hint)
        self.rule = rule


def hours(res: Resources) -> float:
    """The request's wall clock in hours."""
    return (parse_duration(str(res.time)) or 0) / 3600


def gpu_hours(res: Resources) -> float:
    return res.total_gpus * hours(res)


def check(cluster: Cluster, resources: Resources, *, allow_metered: bool = False, hostname: str | None = None) -> None:
    """Raise :class:`Refused` when this submission must not happen. Offline: reads clusters.toml only.

    A metered cluster's consent is a grant (:mod:`roach.records.grants`), checked where the submission is
    queued; ``allow_metered`` is accepted and changes nothing."""

    c = configured(cluster)
    check_host(c, hostname)
    check_caps(c, resources)
    check_satisfiable(c, resources)


def _host_names(hostname: str | None) -> list[str]:
    name = hostname if hostname is not None else socket.gethostname()
    return list(dict.fromkeys([name, name.split(".")[0]]))


def check_host(c: Cluster, hostname: str | None = None, host_check: Callable[[], str | None] | None = None) -> None:
    """Refuse a submission from a host that is not a submit host of ``c`` (patterns from its configuration)."""
    names = _host_names(hostname)
    refused = [p for p in c.refused_hosts if any(fnmatch.fnmatch(n, p) for n in names)]
    if refused:
        raise Refused(
            "host",
            f"{names[0]} is not a submit host for {c.name} (it matches refused_hosts "
            f"{refused[0]!r}): {c.refused_host_reason or 'clusters.toml refuses it'}",
            hint=f"submit from a host matching {', '.join(c.submit_hosts)}"
            if c.submit_hosts
            else "submit from one of the cluster's submit hosts",
        )
    if c.submit_hosts and not any(fnmatch.fnmatch(n, p) for n in names for p in c.submit_hosts):
        raise Refused(
            "host",
            f"{names[0]} is not a submit host for {c.name}: submit_hosts are "
            f"{', '.join(c.submit_hosts)}" + (f" ({c.refused_host_reason})" if c.refused_host_reason else ""),
            hint="submit from one of those hosts, or add this one to submit_hosts in clusters.toml if it is one",
        )
    check = host_check or c.host_check
    if hostname is None and check is not None:  # a named host is not this one: its local checks cannot run
        reason = check()
        if reason:
            raise Refused(
                "host",
                f"{names[0]} is not a submit host for {c.name}: {reason}",
                hint="submit from one of the cluster's nodes",
            )


def check_caps(c: Cluster, res: Resources, *, runs: int | None = None, parallelism: int | None = None) -> None:
    """The user's caps per submission (GPUs, GPU-hours, money) on ``c`` as configured. A sweep of ``runs`` runs
    is one submission: the GPUs its runs may hold at once (all of them, or ``parallelism``), and the GPU-hours
    and cost of every run together."""
    at_once = 1 if runs is None else min(runs, parallelism or runs)
    gpus, gh = at_once * res.total_gpus, (runs or 1) * gpu_hours(res)
    cost = gh * c.gpu_hour_cost if c.gpu_hour_cost is not None else None
    where = "clusters.toml" if c.max_gpus is not None or c.max_gpu_hours is not None or c.max_cost is not None else ""
    cap = f"raise the cap in [clusters.{c.name}] of {where or 'clusters.toml'} if the person whose budget it is said so"
    if runs is None:
        asked = (
            f"{res.total_gpus} GPUs ({res.nodes} node(s) x {res.gpus_per_node}) is",
            f"{gh:g} GPU-hours ({res.total_gpus} GPUs x {hours(res):g} h) is",
            f"{gh:g} GPU-hours at {c.gpu_hour_cost:g} per GPU-hour costs {cost:.2f}," if cost is not None else "",
        )
        hint = f"ask for less, or {cap}"
    else:
        asked = (
            f"a sweep of {runs} runs of {res.total_gpus} GPUs may hold {gpus} GPUs at once ({at_once} runs),",
            f"a sweep of {runs} runs of {gpu_hours(res):g} GPU-hours asks for {gh:g} GPU-hours,",
            f"a sweep of {runs} runs ({gh:g} GPU-hours at {c.gpu_hour_cost:g}) costs {cost:.2f},"
            if cost is not None
            else "",
        )
        hint = f"let fewer run at once (parallelism / --parallelism), ask for fewer runs or less time, or {cap}"
    if c.max_gpus is not None and gpus > c.max_gpus:
        raise Refused(
            "cap", f"{asked[0]} more than the {c.max_gpus} GPUs per submission allowed on {c.name}", hint=hint
        )
    if c.max_gpu_hours is not None and gh > c.max_gpu_hours:
        raise Refused(
            "cap",
            f"{asked[1]} more than the {c.max_gpu_hours:g} GPU-hours per submission allowed on {c.name}",
            hint=hint,
        )
    if c.max_cost is not None and cost is not None and cost > c.max_cost:
        raise Refused("cap", f"{asked[2]} more than the {c.max_cost:g} per submission allowed on {c.name}", hint=hint)


def _tiers_text(c: Cluster) -> str:
    parts = []
    for t in c.tiers:
        how = ", ".join(f"{k} {v}" for k, v in (("partition", t.partition), ("qos", t.qos)) if v)
        parts.append(f"{t.name} ({how or 'any'})")
    return "; ".join(parts) or "(none declared)"


def check_satisfiable(c: Cluster, res: Resources) -> None:
    """Offline: a QOS that is not one of ``c``'s (its ``qos_names``, else its tiers'), a partition that no tier (or
    no known partition) of ``c`` has; more GPUs per node than its largest node."""
    if res.qos is not None and c.qos_names and res.qos not in c.qos_names:
        raise Refused(
            "unsatisfiable",
            f"qos {res.qos!r} is not a QOS of {c.name}",
            hint=f"its QOS: {', '.join(c.qos_names)}; tiers, top down: {_tiers_text(c)}",
        )
    if res.qos is not None and not c.qos_names and c.tiers and not any(t.qos in (None, res.qos) for t in c.tiers):
        raise Refused(
            "unsatisfiable", f"qos {res.qos!r} is in no tier of {c.name}", hint=f"tiers, top down: {_tiers_text(c)}"
        )
    # a known QOS outside the tiers (the lab's default, normal) fits any partition as far as roach can tell offline
    tier_qos = not c.qos_names or any(t.qos == res.qos for t in c.tiers)
    if res.partition is not None:
        if c.partitions and res.partition not in c.partitions:
            raise Refused(
                "unsatisfiable",
                f"partition {res.partition!r} is not a partition of {c.name}",
                hint=f"partitions: {', '.join(c.partitions)}",
            )
        if not c.partitions and c.tiers and not any(t.partition in (None, res.partition) for t in c.tiers):
            raise Refused(
                "unsatisfiable",
                f"partition {res.partition!r} is in no tier of {c.name}",
                hint=f"tiers, top down: {_tiers_text(c)}",
            )
    if (
        tier_qos
        and res.qos is not None
        and res.partition is not None
        and c.tiers
        and not any(t.matches(res.partition, res.qos) for t in c.tiers)
        and not c.partitions
    ):
        raise Refused(
            "unsatisfiable",
            f"partition {res.partition!r} with qos {res.qos!r} is no tier of {c.name}",
            hint=f"tiers, top down: {_tiers_text(c)}",
        )
    if c.max_gpus_per_node is not None and res.gpus_per_node > c.max_gpus_per_node:
        raise Refused(
            "unsatisfiable",
            f"{res.gpus_per_node} GPUs per node is more than any node of {c.name} has ({c.max_gpus_per_node})",
            hint=f"spread them: nodes={-(-res.total_gpus // c.max_gpus_per_node)}, "
            f"gpus_per_node<={c.max_gpus_per_node}",
        )


def whoami(client: SlurmClient) -> str | None:
    r = client.transport.run(["id", "-un"])
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def check_live(cluster: Cluster, res: Resources, client: SlurmClient | None = None) -> None:
    """Ask the cluster (three reads) whether any of its nodes, partitions and the user's associations could ever
    run ``res``; raise :class:`Refused` if none could. Node states are ignored: a drained node may come back.

    The nodes and partitions may come from the client's site cache (a few minutes old); a refusal is only
    ever made on what Slurm says now, so a partition added since is never refused."""
    c = configured(cluster)
    client = client or c.client()
    try:
        _check_live(c, res, client, cached=True)
    except Refused:
        if client.site_cache is None:
            raise
        _check_live(c, res, client, cached=False)


def _check_live(c: Cluster, res: Resources, client: SlurmClient, cached: bool) -> None:
    nodes = client.nodes(cached=cached)  # the nodes' sizes and partitions: a few minutes old will do
    part = res.partition
    if part is None:
        defaults = [p.get("PartitionName") for p in client.partitions(cached=cached) if p.get("Default") == "YES"]
        part = defaults[0] if defaults else None
    else:
        names = {p.get("PartitionName"): p for p in client.partitions(cached=cached)}
        if part not in names:
            raise Refused(
                "unsatisfiable",
                f"partition {part!r} does not exist on {c.name}",
                hint=f"partitions: {', '.join(sorted(n for n in names if n))}",
            )
        allow = names[part].get("AllowQos", "ALL")
        if res.qos and allow not in ("ALL", "") and res.qos not in allow.split(","):
            raise Refused("unsatisfiable", f"partition {part} does not allow qos {res.qos}", hint=f"it allows: {allow}")
    pool = [n for n in nodes if part is None or part in n.partitions]
    cpus = res.tasks_per_node * (res.cpus_per_gpu or res.cpus_per_task or 1)
    mem = parse_memory_mb(res.mem) if res.mem else 0
    fit = [n for n in pool if n.gpus_total >= res.gpus_per_node and n.cpus_total >= cpus and n.memory_mb >= mem]
    if len(fit) < res.nodes:
        biggest = max((n.gpus_total for n in pool), default=0)
        raise Refused(
            "unsatisfiable",
            f"{res.nodes} node(s) with {res.gpus_per_node} GPUs, {cpus} CPUs"
            + (f", {res.mem} memory" if res.mem else "")
            + f" each: {len(fit)} node(s) of "
            f"{c.name}{' partition ' + part if part else ''} could ever run that (of {len(pool)}; "
            f"the largest has {biggest} GPUs)",
            hint="ask for fewer GPUs (or CPUs, memory) per node and more nodes",
        )
    if res.qos or res.account:
        user = whoami(client)
        assocs = client.associations(user=user) if user else []
        if assocs:
            if res.account and res.account not in {a["Account"] for a in assocs}:
                raise Refused(
                    "unsatisfiable",
                    f"account {res.account!r} is not one of yours on {c.name}",
                    hint=f"your accounts: {', '.join(sorted({a['Account'] for a in assocs}))}",
                )
            mine = [a for a in assocs if not res.account or a["Account"] == res.account]
            qos = {q for a in mine for q in a["QOS"].split(",") if q}
            if res.qos and qos and res.qos not in qos:
                raise Refused(
                    "unsatisfiable",
                    f"qos {res.qos!r} is not one you may use on {c.name}",
                    hint=f"your QOS: {', '.join(sorted(qos))}",
                )
