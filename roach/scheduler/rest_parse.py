"""slurmrestd's JSON as the records Slurm's commands give: what ``squeue``, ``sacct`` and ``sinfo`` would print.

Pure functions, one reader per data version where the shapes differ, each tested on recorded answers of a real
slurmrestd beside the commands' output of the same moment (``tests/data/<release>/rest_*.json``). Times are
seconds since the epoch there; here they are naive local times, as the commands print them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler.fields import Tres, parse_gres_gpus, parse_tres
from roach.scheduler.parse import AcctRecord, JobRef, QueueRecord, array_ranges
from roach.scheduler.parse_control import NodeRecord
from roach.scheduler.queue_states import StateRecord

Json = Mapping[str, Any]


def _time(value: Any) -> datetime | None:
    """Seconds since the epoch as a local time; 0 and null (no such time) as None."""
    number = _number(value)
    return datetime.fromtimestamp(number) if number else None


def _number(value: Any) -> int | None:
    """An integer field: a bare number, or a later version's ``{"set": .., "infinite": .., "number": ..}``."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int):
        raise ParseError(f"slurmrestd: expected a number, got {value!r}")
    return value


def tres_text(items: Iterable[Json]) -> str:
    """A TRES list (``[{"type": "gres", "name": "gpu", "count": 4}, ...]``) as Slurm prints it: ``gres/gpu=4``."""
    parts = []
    for t in items:
        count = _number(t.get("count"))
        if count is None:
            continue
        kind, name = t.get("type", ""), t.get("name") or ""
        key = f"{kind}/{name}" if name else kind
        parts.append(f"{key}={count}M" if kind == "mem" else f"{key}={count}")
    return ",".join(parts)


def _tres(items: Any) -> Tres:
    return parse_tres(tres_text(items) if isinstance(items, list) else str(items or ""))


# -- the queue: GET /slurm/v0.0.38/jobs ------------------------------------------------------------------
def queue_records(jobs: Iterable[Json], now: datetime) -> list[QueueRecord]:
    """``squeue --array``'s records of slurmctld's jobs at ``now``: a still-pending range of array tasks one record
    per task, as ``--array`` prints them."""
    out: list[QueueRecord] = []
    for j in jobs:
        spec = j.get("array_task_string") or ""
        if spec:
            for r in array_ranges(spec) or ():
                out.extend(
                    _queue_record(j, now, JobRef(_number(j.get("array_job_id")) or j["job_id"], task)) for task in r
                )
        else:
            out.append(_queue_record(j, now, _queue_ref(j)))
    return out


def _queue_ref(j: Json) -> JobRef:
    array_job, task = _number(j.get("array_job_id")), _number(j.get("array_task_id"))
    if array_job and task is not None:
        return JobRef(array_job, task)
    return JobRef(j["job_id"])


def _queue_record(j: Json, now: datetime, ref: JobRef) -> QueueRecord:
    state = JobState.parse(_state(j["job_state"]))
    start, end = _time(j.get("start_time")), _time(j.get("end_time"))
    limit = _number(j.get("time_limit"))
    # squeue's Reason: the controller's own words where it has them ("job requeued in held state"), else the reason
    reason = str(j.get("state_description") or j.get("state_reason") or "None")
    return QueueRecord(
        ref=ref,
        raw_id=j["job_id"],
        name=j.get("name") or "",
        user=j.get("user_name") or "",
        account=j.get("account") or "",
        partition=j.get("partition") or "",
        qos=j.get("qos") or "",
        state=state,
        reason=PendingReason.parse(reason),
        reason_text=reason,
        elapsed_s=_elapsed(state, start, end, now),
        time_limit_s=limit * 60 if limit is not None else None,
        restart_count=_number(j.get("restart_cnt")) or 0,
        nodes=_number(j.get("node_count")) or 0,
        nodelist=j.get("nodes") or "",
        tres=parse_tres(j.get("tres_alloc_str") or j.get("tres_req_str") or ""),
        submit_time=_time(j.get("submit_time")),
        start_time=start,
    )


# The flags squeue prints instead of the base state, in the order Slurm's job_state_string() tests them.
_SHOWN_FLAGS = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def _state(value: Any) -> str:
    """A state as squeue and sacct print it: a word (v0.0.38), or a later version's list of the base state and its
    flags, of which the flag Slurm's job_state_string() shows first wins."""
    if not isinstance(value, list):
        return str(value)
    words = [str(v) for v in value]
    return next((f for f in _SHOWN_FLAGS if f in words[1:]), words[0] if words else "")


def _elapsed(state: JobState, start: datetime | None, end: datetime | None, now: datetime) -> int:
    """squeue's TimeUsed: none before the start, up to the end once the job is ending, else up to now."""
    if start is None or state is JobState.PENDING or start > now:
        return 0
    stop = end if end is not None and (state.is_terminal or state is JobState.COMPLETING) else now
    return max(0, int((min(stop, now) - start).total_seconds()))


def state_records(jobs: Iterable[Json], now: datetime) -> list[StateRecord]:
    return [StateRecord.of(q) for q in queue_records(jobs, now)]


# -- accounting: GET /slurmdb/v0.0.38/jobs -----------------------------------------------------------------
def acct_records(jobs: Iterable[Json], *, allocations_only: bool = True) -> list[AcctRecord]:
    """``sacct``'s records of slurmdbd's jobs: each allocation, then (without ``allocations_only``) its steps."""
    out = []
    for j in jobs:
        alloc = _allocation(j)
        out.append(alloc)
        if not allocations_only:
            out.extend(_step(alloc, s) for s in j.get("steps") or ())
    return out


def _acct_ref(j: Json) -> JobRef:
    array = j.get("array") or {}
    array_job, task = _number(array.get("job_id")), _number(array.get("task_id"))
    if array_job and task is not None:
        return JobRef(array_job, task)
    if array_job and array.get("task"):
        return JobRef(array_job, tasks=str(array["task"]))
    return JobRef(j["job_id"])


def _exit(value: Any) -> tuple[int, int]:
    """(return code, signal) of an exit code object."""
    value = value or {}
    signal = value.get("signal") or {}
    number = signal.get("signal_id", signal.get("id"))  # v0.0.38's signal_id, later versions' id
    return _number(value.get("return_code")) or 0, _number(number) or 0


def _allocation(j: Json) -> AcctRecord:
    t = j.get("time") or {}
    state = j.get("state") or {}
    code, sig = _exit(j.get("exit_code"))
    reason = str(state.get("reason") or "None")
    tres = j.get("tres") or {}
    return AcctRecord(
        ref=_acct_ref(j),
        step=None,
        raw_id=str(j["job_id"]),
        name=j.get("name") or "",
        user=j.get("user") or "",
        account=j.get("account") or "",
        partition=j.get("partition") or "",
        qos=j.get("qos") or "",
        state=JobState.parse(_state(state.get("current"))),
        state_text=_state(state.get("current")),
        exit_code=code,
        exit_signal=sig,
        elapsed_s=_number(t.get("elapsed")) or 0,
        time_limit_s=_minutes(t.get("limit")),
        submit_time=_time(t.get("submission")),
        start_time=_time(t.get("start")),
        end_time=_time(t.get("end")),
        # before it starts sacct counts the nodes asked for
        nodes=_number(j.get("allocation_nodes")) or _tres(tres.get("requested") or []).nodes,
        nodelist=j.get("nodes") or "",
        tres=_tres(tres.get("allocated") or []),
        reason=PendingReason.parse(reason),
        reason_text=reason,
    )


def _minutes(value: Any) -> int | None:
    minutes = _number(value)
    return minutes * 60 if minutes is not None and minutes < 0xFFFFFFFE else None


def _step(alloc: AcctRecord, s: Json) -> AcctRecord:
    t = s.get("time") or {}
    step = s.get("step") or {}
    sid = str(step["id"] if step.get("id") is not None else step.get("name") or "")
    sid = sid.rsplit(".", 1)[-1]  # later versions name a step "123.batch"
    code, sig = _exit(s.get("exit_code"))
    nodes = s.get("nodes") or {}
    state = _state(s.get("state"))
    return AcctRecord(
        ref=alloc.ref,
        step=sid,
        raw_id=f"{alloc.raw_id}.{sid}",
        name=str(step.get("name") or sid),
        user="",
        account=alloc.account,
        partition="",
        qos="",
        state=JobState.parse(state),
        state_text=state,
        exit_code=code,
        exit_signal=sig,
        elapsed_s=_number(t.get("elapsed")) or 0,
        time_limit_s=None,
        submit_time=_time(t.get("start")),  # sacct's Submit of a step is when it started
        start_time=_time(t.get("start")),
        end_time=_time(t.get("end")),
        nodes=_number(nodes.get("count")) or 0,
        nodelist=str(nodes.get("range") or ""),
        tres=_tres((s.get("tres") or {}).get("allocated") or []),
        reason=PendingReason.NONE,
        reason_text="",  # sacct prints no reason for a step
    )


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
                cpus_alloc=_number(n.get("alloc_cpus")) or 0,
                cpus_total=_number(n.get("cpus")) or 0,
                gpus_total=parse_gres_gpus(gres),
                gpus_used=parse_gres_gpus(used),
                partitions=tuple(n.get("partitions") or ()),
                memory_mb=_number(n.get("real_memory")) or 0,
                alloc_mem_mb=_number(n.get("alloc_memory")) or 0,
            )
        )
    return out


def _node_state(n: Json) -> str:
    state = n.get("state")
    return (state[0] if isinstance(state, list) and state else str(state or "")).lower()


# -- partitions: GET /slurm/v0.0.38/partitions --------------------------------------------------------------
def partition_records(partitions: Iterable[Json]) -> list[dict[str, str]]:
    """``scontrol show partition -o``'s keys that roach reads, from slurmctld's partitions (a partition's
    PreemptMode is its own: where it has none, "OFF" here, the cluster's applies, as scontrol would print)."""
    out = []
    for p in partitions:
        flags = [str(f).lower() for f in p.get("flags") or ()]
        mode = p.get("preemption_mode") or []
        out.append(
            {
                "PartitionName": str(p["name"]),
                "Default": "YES" if "default" in flags else "NO",
                "MaxTime": _limit_text(_number(p.get("max_time_limit"))),
                "DefaultTime": _limit_text(_number(p.get("default_time_limit")), none="NONE"),
                "GraceTime": str(_number(p.get("preemption_grace_time")) or 0),
                "PreemptMode": ",".join(str(m).upper() for m in mode) if isinstance(mode, list) else str(mode).upper(),
                "PriorityTier": str(_number(p.get("priority_tier")) or 0),
                "Nodes": str(p.get("nodes") or ""),
                "State": str(p.get("state") or ""),
                "QoS": str(p.get("qos") or "N/A"),
                "TRES": str(p.get("tres") or ""),
            }
        )
    return out


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
        start, end = _time(r.get("start_time")), _time(r.get("end_time"))
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
        wall = _number(((most.get("wall_clock") or {}).get("per") or {}).get("job"))
        preempt = q.get("preempt") or {}
        modes = [str(m).lower() for m in preempt.get("mode") or ()]
        out.append(
            {
                "Name": str(q["name"]),
                "Priority": str(_number(q.get("priority")) or 0),
                "Preempt": ",".join(str(p) for p in preempt.get("list") or ()),
                "PreemptMode": ",".join(modes) or "cluster",  # sacctmgr's word for none of its own
                "GraceTime": _clock(_number(limits.get("grace_time")) or 0),
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
