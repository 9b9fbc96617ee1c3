"""slurmrestd's JSON of the site's setup as the commands' records: nodes (``sinfo``), partitions (``scontrol show
partition``), reservations (``scontrol show reservation``) and QOS (``sacctmgr show qos``), and a nodelist's host
names. Pure functions; the queue and accounting are :mod:`roach.scheduler.rest.jobs`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from roach.scheduler.fields import parse_gres_gpus
from roach.scheduler.parse_control import NodeRecord
from roach.scheduler.rest.jobs import Json, epoch_time, number, state_word, tres_text


def hostnames(nodelist: str) -> list[str]:
    """A nodelist (``n[1-2],gpu[01-03,07]``) as its host names, in order (``scontrol show hostnames``)."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip()):
        prefix, ranges = m[1], m[2]
        if not ranges:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            out.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1))
    return out


# -- nodes: GET /slurm/v0.0.38/nodes ------------------------------------------------------------------------
def node_records(nodes: Iterable[Json]) -> list[NodeRecord]:
    """``sinfo --Node``'s records of slurmctld's nodes."""
    out = []
    for n in nodes:
        gres = str(n.get("gres") or "")
        used = str(n.get("gres_used") or "")
        out.append(
            NodeRecord(
                name=n["name"],
                state=_node_state(n),
                cpus_alloc=number(n.get("alloc_cpus")) or 0,
                cpus_total=number(n.get("cpus")) or 0,
                gpus_total=parse_gres_gpus(gres),
                gpus_used=parse_gres_gpus(used),
                partitions=tuple(n.get("partitions") or ()),
                memory_mb=number(n.get("real_memory")) or 0,
                alloc_mem_mb=number(n.get("alloc_memory")) or 0,
            )
        )
    return out


def _node_state(n: Json) -> str:
    state = n.get("state")
    return (state[0] if isinstance(state, list) and state else str(state or "")).lower()


# -- partitions: GET /slurm/v0.0.38/partitions --------------------------------------------------------------
def partition_records(partitions: Iterable[Json]) -> list[dict[str, str]]:
    """``scontrol show partition -o``'s keys that roach reads, from slurmctld's partitions. v0.0.38 has a
    partition's own PreemptMode ("OFF" where the cluster's applies) and its Default flag; v0.0.42 has neither (no
    PreemptMode key; Default "NO": which partition is the default cannot be read through it)."""
    return [_partition_v42(p) if "maximums" in p else _partition_v38(p) for p in partitions]


def _partition_v38(p: Json) -> dict[str, str]:
    flags = [str(f).lower() for f in p.get("flags") or ()]
    mode = p.get("preemption_mode") or []
    return {
        "PartitionName": str(p["name"]),
        "Default": "YES" if "default" in flags else "NO",
        "MaxTime": _limit_text(number(p.get("max_time_limit"))),
        "DefaultTime": _limit_text(number(p.get("default_time_limit")), none="NONE"),
        "GraceTime": str(number(p.get("preemption_grace_time")) or 0),
        "PreemptMode": ",".join(str(m).upper() for m in mode) if isinstance(mode, list) else str(mode).upper(),
        "PriorityTier": str(number(p.get("priority_tier")) or 0),
        "Nodes": str(p.get("nodes") or ""),
        "State": str(p.get("state") or ""),
        "QoS": str(p.get("qos") or "N/A"),
        "AllowQos": str(p.get("allowed_qos") or "ALL"),
        "TRES": str(p.get("tres") or ""),
    }


def _partition_v42(p: Json) -> dict[str, str]:
    most, least = p.get("maximums") or {}, p.get("defaults") or {}
    qos = p.get("qos") or {}
    state = (p.get("partition") or {}).get("state") or []
    return {
        "PartitionName": str(p["name"]),
        "Default": "NO",
        "MaxTime": _limit_text(number(most.get("time"))),
        "DefaultTime": _limit_text(number(least.get("time")), none="NONE"),
        "GraceTime": str(number(p.get("grace_time")) or 0),
        "PriorityTier": str(number((p.get("priority") or {}).get("tier")) or 0),
        "Nodes": str((p.get("nodes") or {}).get("configured") or ""),
        "State": str(state[0] if isinstance(state, list) and state else state or ""),
        "QoS": str(qos.get("assigned") or "N/A"),
        "AllowQos": str(qos.get("allowed") or "ALL"),
        "TRES": str((p.get("tres") or {}).get("configured") or ""),
    }


def _limit_text(minutes: int | None, none: str = "UNLIMITED") -> str:
    """Minutes as scontrol prints a time limit (``1-00:00:00``, ``2:00:00``); none or -1 as ``none``."""
    if minutes is None or minutes < 0 or minutes >= 0xFFFFFFFE:
        return none
    days, rest = divmod(minutes, 1440)
    text = f"{rest // 60}:{rest % 60:02d}:00"
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else text


# -- reservations: GET /slurm/v0.0.38/reservations ------------------------------------------------------------
@dataclass(frozen=True)
class ReservationRecord:
    """A reservation as ``scontrol show reservation`` names it: its times as the cluster's local time."""

    name: str
    start: str  # YYYY-MM-DDTHH:MM:SS
    end: str
    state: str  # ACTIVE or INACTIVE, as scontrol says it


def reservation_records(reservations: Iterable[Json], now: datetime) -> list[ReservationRecord]:
    out = []
    for r in reservations:
        start, end = epoch_time(r.get("start_time")), epoch_time(r.get("end_time"))
        active = start is not None and start <= now and (end is None or now < end)
        out.append(
            ReservationRecord(
                str(r["name"]),
                start.isoformat() if start else "",
                end.isoformat() if end else "",
                "ACTIVE" if active else "INACTIVE",
            )
        )
    return out


# -- QOS: GET /slurmdb/v0.0.38/qos ----------------------------------------------------------------------------
def qos_records(qos: Iterable[Json]) -> list[dict[str, str]]:
    """``sacctmgr show qos format=Name,Priority,Preempt,PreemptMode,GraceTime,MaxTRESPU,MaxWall,Flags``'s rows."""
    out = []
    for q in qos:
        limits = q.get("limits") or {}
        most = limits.get("max") or {}
        per_user = ((most.get("tres") or {}).get("per") or {}).get("user") or []
        wall = number(((most.get("wall_clock") or {}).get("per") or {}).get("job"))
        preempt = q.get("preempt") or {}
        # v0.0.42 says DISABLED where the QOS has no mode of its own, which sacctmgr calls "cluster"
        modes = [str(m).lower() for m in preempt.get("mode") or () if str(m).upper() != "DISABLED"]
        out.append(
            {
                "Name": str(q["name"]),
                "Priority": str(number(q.get("priority")) or 0),
                "Preempt": ",".join(str(p) for p in preempt.get("list") or ()),
                "PreemptMode": ",".join(modes) or "cluster",  # sacctmgr's word for none of its own
                "GraceTime": _clock(number(limits.get("grace_time")) or 0),
                "MaxTRESPU": tres_text(per_user),
                "MaxWall": _clock(wall * 60) if wall is not None else "",
                "Flags": ",".join(str(f) for f in q.get("flags") or ()),
            }
        )
    return out


def _clock(seconds: int) -> str:
    """Seconds as sacctmgr prints a duration: ``HH:MM:SS``, ``D-HH:MM:SS`` from a day."""
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# -- one job: GET /slurm/v0.0.38/job/{job_id} ---------------------------------------------------------------
def show_job_keys(j: Json) -> dict[str, str]:
    """``scontrol show job -o``'s keys of one of slurmctld's jobs, as scontrol prints them: those that slurmrestd's
    record says in the same words (who, where, its state and why, what it asked of the nodes)."""
    out = {
        "JobId": str(j["job_id"]),
        "JobName": str(j.get("name") or "").replace("\n", " "),  # as the one-line record reads
        "UserId": f"{j.get('user_name') or ''}({number(j.get('user_id')) or 0})",
        "Account": str(j.get("account") or ""),
        "QOS": str(j.get("qos") or ""),
        "JobState": state_word(j.get("job_state")),
        # the controller's own words where it has them, as scontrol writes them: job_requeued_in_held_state
        "Reason": str(j.get("state_description") or j.get("state_reason") or "None").replace(" ", "_"),
        "Requeue": "1" if j.get("requeue") else "0",
        "Restarts": str(number(j.get("restart_cnt")) or 0),
        "BatchFlag": "1" if j.get("batch_flag") else "0",
        "Partition": str(j.get("partition") or ""),
        "ReqNodeList": str(j.get("required_nodes") or "(null)"),
        "ExcNodeList": str(j.get("excluded_nodes") or "(null)"),
        "NodeList": str(j.get("nodes") or ""),
        "WorkDir": str(j.get("current_working_directory") or ""),
    }
    array_job, task = number(j.get("array_job_id")), number(j.get("array_task_id"))
    if array_job and task is not None:
        out |= {"ArrayJobId": str(array_job), "ArrayTaskId": str(task)}
    return out
