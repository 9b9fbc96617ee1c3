"""Discovery: read a live cluster and propose its tier table for the user's clusters.toml.

``roach clusters discover NAME`` reads ``sinfo``, ``scontrol show partition``, ``scontrol show config``,
``sacctmgr show qos`` and ``sacctmgr show assoc`` for the user, and proposes one tier per (partition, QOS)
the user may use on a GPU partition: its per-user GPU cap (MaxTRESPerUser gres/gpu of the QOS or of the
partition's QOS), whether it can be preempted (by the QOS or partition-priority preemption the site runs),
and, as comments, its PriorityTier, PreemptMode and GraceTime. Top down: higher PriorityTier first, then
higher QOS priority; the user's default QOS is marked, and every QOS the user may use is listed (``qos_names``),
so a tier the user drops stays a QOS they may ask for. Nothing is saved unless asked (``--save``), and never over
what the user wrote.

:func:`propose` is pure (tested on captured text); :func:`discover` does the five reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roach.fleet.cluster import Cluster
from roach.fleet.guardrails import whoami
from roach.fleet.userconfig import cluster_block
from roach.model.tiers import Tier
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_duration, parse_tres
from roach.scheduler.parse_control import NodeRecord


@dataclass(frozen=True)
class ProposedTier:
    tier: Tier
    priority_tier: int
    qos_priority: int
    preempt_mode: str  # the effective mode for jobs here (the cluster's when the QOS says "cluster")
    grace_time_s: int | None
    max_wall: str | None
    cap_from: str  # where the cap was read, e.g. "QOS high MaxTRESPerUser gres/gpu=4"
    default_qos: bool = False  # the user's DefaultQOS: where a job that names no QOS lands

    def note(self) -> str:
        bits = [
            f"PriorityTier {self.priority_tier}",
            f"QOS priority {self.qos_priority}",
            f"PreemptMode {self.preempt_mode}",
            f"GraceTime {self.grace_time_s if self.grace_time_s is not None else '?'}s",
        ]
        if self.max_wall:
            bits.append(f"MaxWall {self.max_wall}")
        bits.append(f"cap: {self.cap_from}" if self.cap_from else "no per-user GPU cap")
        if self.default_qos:
            bits.append("your default QOS (a job that names none lands here)")
        return ", ".join(bits)

    def to_json(self) -> dict[str, Any]:
        t = self.tier
        return {
            "name": t.name,
            "partition": t.partition,
            "qos": t.qos,
            "constraint": t.constraint,
            "gpu_cap": t.gpu_cap,
            "preemptible": t.preemptible,
            "priority_tier": self.priority_tier,
            "qos_priority": self.qos_priority,
            "preempt_mode": self.preempt_mode,
            "grace_time_s": self.grace_time_s,
            "max_wall": self.max_wall,
            "cap_from": self.cap_from,
            "default_qos": self.default_qos,
        }


@dataclass(frozen=True)
class Discovery:
    cluster: str
    user: str | None
    tiers: tuple[ProposedTier, ...]
    accounts: tuple[str, ...]
    partitions: tuple[str, ...]
    default_partition: str | None
    max_gpus_per_node: int | None
    preempt_type: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    qos_names: tuple[str, ...] = ()  # every QOS the user may use

    def values(self) -> dict[str, Any]:
        """The clusters.toml keys proposed besides the tiers."""
        return {
            "account": self.accounts[0] if len(self.accounts) == 1 else None,
            "partitions": list(self.partitions),
            "qos_names": list(self.qos_names),
            "max_gpus_per_node": self.max_gpus_per_node,
        }

    def toml(self) -> str:
        comments = [
            f"proposed by `roach clusters discover {self.cluster}` for user {self.user or '?'} "
            f"({self.preempt_type}); check it, then save it in clusters.toml"
        ]
        if len(self.accounts) > 1:
            comments.append(f"your accounts: {', '.join(self.accounts)}: set account = one of them")
        comments.extend(self.notes)
        return cluster_block(self.cluster, self.values(), [(p.tier, p.note()) for p in self.tiers], comments)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "user": self.user,
            "preempt_type": self.preempt_type,
            "accounts": list(self.accounts),
            "partitions": list(self.partitions),
            "qos_names": list(self.qos_names),
            "default_partition": self.default_partition,
            "max_gpus_per_node": self.max_gpus_per_node,
            "tiers": [p.to_json() for p in self.tiers],
            "notes": list(self.notes),
            "toml": self.toml(),
        }


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return default


def _gpu_cap(tres: str | None) -> int | None:
    if not tres or not tres.strip():
        return None
    gpus = parse_tres(tres).gpus
    return gpus or None


def _effective_mode(own: str | None, cluster_mode: str) -> str:
    own = (own or "").strip()
    return cluster_mode if own.lower() in ("", "cluster", "n/a") else own.upper()


def _preempts_off(mode: str) -> bool:
    return mode.upper().split(",")[0] in ("OFF", "")


def propose(
    name: str,
    *,
    partitions: Sequence[Mapping[str, str]],
    qos: Sequence[Mapping[str, str]],
    assocs: Sequence[Mapping[str, str]],
    nodes: Sequence[NodeRecord],
    config: Mapping[str, str],
    user: str | None = None,
) -> Discovery:
    """The tier table these reads imply (pure)."""
    preempt_type = config.get("PreemptType", "preempt/none")
    cluster_mode = config.get("PreemptMode", "OFF").upper()
    qos_by = {q["Name"]: q for q in qos}
    parts = [p for p in partitions if p.get("State", "UP") == "UP" and p.get("Hidden", "NO") != "YES"]
    node_gpus = {n.name: n.gpus_total for n in nodes}
    part_nodes = {p["PartitionName"]: {n.name for n in nodes if p["PartitionName"] in n.partitions} for p in parts}

    def gpus_of(p: Mapping[str, str]) -> int:
        by_tres = parse_tres(p.get("TRES", "")).gpus if p.get("TRES") else 0
        return by_tres or sum(node_gpus.get(n, 0) for n in part_nodes[p["PartitionName"]])

    gpu_parts = [p for p in parts if gpus_of(p) > 0] or parts
    notes: list[str] = []
    if len(gpu_parts) < len(parts):
        notes.append(
            f"partitions without GPUs left out: {', '.join(p['PartitionName'] for p in parts if p not in gpu_parts)}"
        )
    defaults = [p["PartitionName"] for p in parts if p.get("Default") == "YES"]
    default_part = defaults[0] if defaults else None
    user_assocs = [a for a in assocs if not user or a.get("User") == user]
    accounts = tuple(sorted({a["Account"] for a in user_assocs if a.get("Account")}))
    user_qos = sorted({q for a in user_assocs for q in a.get("QOS", "").split(",") if q})
    if not user_qos:
        user_qos = sorted(qos_by) or [""]
        if user_assocs or not assocs:
            notes.append("no QOS list in your associations: every QOS is proposed; drop the ones you may not use")
    assoc_parts = {a.get("Partition") for a in user_assocs}
    default_qos = {a.get("DefaultQOS") for a in user_assocs if a.get("DefaultQOS")}
    preempted_by: dict[str, set[str]] = {}
    for q in qos:
        for victim in (q.get("Preempt") or "").split(","):
            if victim:
                preempted_by.setdefault(victim, set()).add(q["Name"])

    def part_preemptible(p: Mapping[str, str]) -> bool:
        if preempt_type != "preempt/partition_prio" or _preempts_off(
            _effective_mode(p.get("PreemptMode"), cluster_mode)
        ):
            return False
        mine = part_nodes[p["PartitionName"]]
        return any(
            _int(o.get("PriorityTier")) > _int(p.get("PriorityTier"))
            and (part_nodes[o["PartitionName"]] & mine or not mine)
            for o in parts
            if o is not p
        )

    proposals: list[ProposedTier] = []
    one_part = len(gpu_parts) == 1 and gpu_parts[0]["PartitionName"] == default_part
    for p in gpu_parts:
        pname = p["PartitionName"]
        if user_assocs and "" not in assoc_parts and None not in assoc_parts and pname not in assoc_parts:
            continue
        allow = p.get("AllowQos", "ALL")
        usable = [q for q in user_qos if allow in ("ALL", "") or q in allow.split(",")]
        part_qos = qos_by.get(p.get("QoS", ""), {})
        for qname in usable:
            q = qos_by.get(qname, {})
            caps = [
                (c, f"QOS {qname} MaxTRESPerUser {q.get('MaxTRESPU')}") for c in [_gpu_cap(q.get("MaxTRESPU"))] if c
            ]
            caps += [
                (c, f"partition QOS {p.get('QoS')} MaxTRESPerUser {part_qos.get('MaxTRESPU')}")
                for c in [_gpu_cap(part_qos.get("MaxTRESPU"))]
                if c
            ]
            cap, cap_from = min(caps) if caps else (None, "")
            qmode = _effective_mode(q.get("PreemptMode"), cluster_mode)
            qos_pre = (
                preempt_type == "preempt/qos"
                and bool(preempted_by.get(qname, set()) - {qname})
                and not _preempts_off(qmode)
            )
            preemptible = qos_pre or part_preemptible(p)
            mode = qmode if preempt_type == "preempt/qos" else _effective_mode(p.get("PreemptMode"), cluster_mode)
            grace = parse_duration(q.get("GraceTime", "")) if q.get("GraceTime") else None
            if not grace:
                grace = _int(p.get("GraceTime"), 0) if p.get("GraceTime") else grace
            tier_part = None if one_part else pname
            tier_qos = None if len(usable) == 1 and len(user_qos) == 1 else (qname or None)
            tname = "-".join(x for x in (tier_part, tier_qos) if x) or pname
            wall = q.get("MaxWall") or (p.get("MaxTime") if p.get("MaxTime") not in (None, "UNLIMITED") else None)
            proposals.append(
                ProposedTier(
                    Tier(tname, partition=tier_part, qos=tier_qos, gpu_cap=cap, preemptible=preemptible),
                    priority_tier=_int(p.get("PriorityTier"), 1),
                    qos_priority=_int(q.get("Priority")),
                    preempt_mode=mode,
                    grace_time_s=grace,
                    max_wall=wall or None,
                    cap_from=cap_from,
                    default_qos=bool(tier_qos) and qname in default_qos,
                )
            )
    proposals.sort(key=lambda t: (-t.priority_tier, -t.qos_priority, t.tier.preemptible, t.tier.name))
    max_gpn = max(
        (n.gpus_total for n in nodes if set(n.partitions) & {p["PartitionName"] for p in gpu_parts}), default=0
    )
    return Discovery(
        name,
        user,
        tuple(proposals),
        accounts,
        tuple(p["PartitionName"] for p in parts),
        default_part,
        max_gpn or None,
        preempt_type,
        tuple(notes),
        tuple(q for q in user_qos if q),
    )


def discover(cluster: Cluster, client: SlurmClient | None = None) -> Discovery:
    """Read ``cluster`` now (five reads) and propose its tiers for the user the client acts as."""

    client = client or cluster.client()
    user = whoami(client)
    return propose(
        cluster.name,
        partitions=client.partitions(),
        qos=client.qos(),
        assocs=client.associations(user=user) if user else client.associations(),
        nodes=client.nodes(),
        config=client.config(),
        user=user,
    )
