"""slurmrestd's JSON as the records Slurm's commands give: what ``squeue`` and ``sacct`` would print.

Pure functions, one reader per data version where the shapes differ, each tested on recorded answers of a real
slurmrestd beside the commands' output of the same moment (``tests/data/<release>/rest_*.json``). Times are
seconds since the epoch there; here they are naive local times, as the commands print them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler.accounting import Allocation
from roach.scheduler.fields import Tres, parse_tres
from roach.scheduler.parse import AcctRecord, JobRef, QueueRecord, array_ranges

Json = Mapping[str, Any]
NO_VAL = 0xFFFFFFFE  # Slurm's "not set" of a 32-bit field (26.05 answers it for a run that never started)


def epoch_time(value: Any) -> datetime | None:
    """Seconds since the epoch as a local time; 0, null and Slurm's NO_VAL (no such time) as None."""
    seconds = number(value)
    return datetime.fromtimestamp(seconds) if seconds and seconds < NO_VAL else None


def number(value: Any) -> int | None:
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
        count = number(t.get("count"))
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
    per task, as ``--array`` prints them. A round reads the same jobs again and again (a held array of 10,000 tasks
    is 10,000 records that change only when a task does): each distinct record is made once while it is seen."""
    out: list[QueueRecord] = []
    for j in jobs:
        fields = _queue_fields(j, now)
        spec = j.get("array_task_string") or ""
        if spec:
            job = number(j.get("array_job_id")) or j["job_id"]
            for r in array_ranges(spec) or ():
                out.extend(_queue_record(JobRef(job, task), *fields) for task in r)
        else:
            out.append(_queue_record(_queue_ref(j), *fields))
    return out


def _queue_ref(j: Json) -> JobRef:
    array_job, task = number(j.get("array_job_id")), number(j.get("array_task_id"))
    if array_job and task is not None:
        return JobRef(array_job, task)
    return JobRef(j["job_id"])


def _queue_fields(j: Json, now: datetime) -> tuple[Any, ...]:
    """What a queue record is made of, as hashable values (the key of :func:`_queue_record`'s cache)."""
    state = state_word(j["job_state"])
    start, end = number(j.get("start_time")), number(j.get("end_time"))
    # squeue's Reason: the controller's own words where it has them ("job requeued in held state"), else the reason
    reason = str(j.get("state_description") or j.get("state_reason") or "None")
    limit = number(j.get("time_limit"))
    return (
        j["job_id"],
        j.get("name") or "",
        j.get("user_name") or "",
        j.get("account") or "",
        j.get("partition") or "",
        j.get("qos") or "",
        state,
        reason,
        _elapsed(JobState.parse(state), epoch_time(start), epoch_time(end), now),
        limit * 60 if limit is not None else None,
        number(j.get("restart_cnt")) or 0,
        number(j.get("node_count")) or 0,
        j.get("nodes") or "",
        j.get("tres_alloc_str") or j.get("tres_req_str") or "",
        number(j.get("submit_time")),
        start,
    )


@functools.lru_cache(maxsize=65536)
def _queue_record(
    ref: JobRef,
    raw_id: int,
    name: str,
    user: str,
    account: str,
    partition: str,
    qos: str,
    state: str,
    reason: str,
    elapsed_s: int,
    time_limit_s: int | None,
    restart_count: int,
    nodes: int,
    nodelist: str,
    tres: str,
    submit: int | None,
    start: int | None,
) -> QueueRecord:
    return QueueRecord(
        ref=ref,
        raw_id=raw_id,
        name=name,
        user=user,
        account=account,
        partition=partition,
        qos=qos,
        state=JobState.parse(state),
        reason=PendingReason.parse(reason),
        reason_text=reason,
        elapsed_s=elapsed_s,
        time_limit_s=time_limit_s,
        restart_count=restart_count,
        nodes=nodes,
        nodelist=nodelist,
        tres=parse_tres(tres),
        submit_time=epoch_time(submit),
        start_time=epoch_time(start),
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


def state_word(value: Any) -> str:
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


# -- accounting: GET /slurmdb/v0.0.38/jobs -----------------------------------------------------------------
def acct_records(jobs: Iterable[Json], *, allocations_only: bool = True, duplicates: bool = False) -> list[AcctRecord]:
    """``sacct``'s records of slurmdbd's jobs: each allocation, then (without ``allocations_only``) its steps. A
    requeued job is a record per run (v0.0.42 lists every run, v0.0.38 the latest): without ``duplicates`` only its
    latest run is kept, as sacct without ``--duplicates`` does."""
    out = []
    for j in jobs if duplicates else _latest_runs(jobs):
        alloc = _allocation(j)
        out.append(alloc)
        if not allocations_only:
            out.extend(_step(alloc, s) for s in j.get("steps") or ())
    return out


def allocations(jobs: Iterable[Json]) -> list[Allocation]:
    """The ledger's records of slurmdbd's jobs (``sacct -X -D`` with ``Eligible``): each run of each job, a job's
    runs oldest first."""
    runs = sorted(jobs, key=lambda j: (number(j.get("job_id")) or 0, _submitted(j)))
    return [Allocation(_allocation(j), epoch_time((j.get("time") or {}).get("eligible"))) for j in runs]


def _latest_runs(jobs: Iterable[Json]) -> list[Json]:
    """Each job's latest run (the last submitted), in the order the jobs came."""
    latest: dict[Any, Json] = {}
    for j in jobs:
        seen = latest.get(j["job_id"])
        if seen is None or _submitted(j) >= _submitted(seen):
            latest[j["job_id"]] = j
    return list(latest.values())


def _submitted(j: Json) -> int:
    return number((j.get("time") or {}).get("submission")) or 0


def _acct_ref(j: Json) -> JobRef:
    array = j.get("array") or {}
    array_job, task = number(array.get("job_id")), number(array.get("task_id"))
    if array_job and task is not None:
        return JobRef(array_job, task)
    if array_job and array.get("task"):
        return JobRef(array_job, tasks=str(array["task"]))
    return JobRef(j["job_id"])


def _exit(value: Any) -> tuple[int, int]:
    """(return code, signal) of an exit code object."""
    value = value or {}
    signal = value.get("signal") or {}
    sig = signal.get("signal_id", signal.get("id"))  # v0.0.38's signal_id, later versions' id
    return number(value.get("return_code")) or 0, number(sig) or 0


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
        state=JobState.parse(state_word(state.get("current"))),
        state_text=state_word(state.get("current")),
        exit_code=code,
        exit_signal=sig,
        elapsed_s=number(t.get("elapsed")) or 0,
        time_limit_s=_minutes(t.get("limit")),
        submit_time=epoch_time(t.get("submission")),
        start_time=epoch_time(t.get("start")),
        end_time=epoch_time(t.get("end")),
        # before it starts sacct counts the nodes asked for
        nodes=number(j.get("allocation_nodes")) or _tres(tres.get("requested") or []).nodes,
        nodelist=j.get("nodes") or "",
        tres=_tres(tres.get("allocated") or []),
        reason=PendingReason.parse(reason),
        reason_text=reason,
    )


def _minutes(value: Any) -> int | None:
    minutes = number(value)
    return minutes * 60 if minutes is not None and minutes < 0xFFFFFFFE else None


def _step(alloc: AcctRecord, s: Json) -> AcctRecord:
    t = s.get("time") or {}
    step = s.get("step") or {}
    sid = str(step["id"] if step.get("id") is not None else step.get("name") or "")
    sid = sid.rsplit(".", 1)[-1]  # later versions name a step "123.batch"
    code, sig = _exit(s.get("exit_code"))
    nodes = s.get("nodes") or {}
    state = state_word(s.get("state"))
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
        elapsed_s=number(t.get("elapsed")) or 0,
        time_limit_s=None,
        submit_time=epoch_time(t.get("start")),  # sacct's Submit of a step is when it started
        start_time=epoch_time(t.get("start")),
        end_time=epoch_time(t.get("end")),
        nodes=number(nodes.get("count")) or 0,
        nodelist=str(nodes.get("range") or ""),
        tres=_tres((s.get("tres") or {}).get("allocated") or []),
        reason=PendingReason.NONE,
        reason_text="",  # sacct prints no reason for a step
    )
