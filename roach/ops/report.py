"""``report(EXPERIMENT | RUN | SWEEP)``: the GPU-hour ledger of every run it names, and their total.

What the name is comes from the store: a run id, a sweep id (its runs), else an experiment (its jobs' runs).
Per cluster the report makes one ``sacct -X -D`` (every attempt of every job), one ``sacct`` of the holders'
steps where some ran inside a holder, and one command that reads the lines of interest of every run's log,
whatever the number of runs; :mod:`roach.ops.ledger` and :mod:`roach.ops.holder_spans` do the sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Any

from roach.errors import RoachError, UsageError
from roach.fleet.cluster import Cluster
from roach.model.ids import RecordKind
from roach.model.tiers import tier_of
from roach.ops.attempt_log import INTEREST, AttemptLog, read_attempts
from roach.ops.clean import experiments
from roach.ops.fleet_views import reach
from roach.ops.holder_spans import attempt_spans, holder_idle
from roach.ops.ledger import AttemptLedger, Job, RunLedger, Slot, Span, run_ledger, slots_of
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.accounting import Allocation
from roach.scheduler.parse import in_array
from roach.scheduler.rest.client import RestClient
from roach.scheduler.transport import Transport

RS = "\x1e"
# $@: the logs. First the cluster's UTC offset (sacct prints its local time), then each log's lines of interest.
_PROGRAM = f"""
printf '%s\\036' "$(date +%z)"
for p in "$@"; do
  if [ -f "$p" ]; then grep -a -E '{INTEREST}' -- "$p" | tr -d '\\036'; fi
  printf '\\036'
done
"""


class Scope(Enum):
    """What the report's name named."""

    RUN = "run"
    SWEEP = "sweep"
    EXPERIMENT = "experiment"


@dataclass(frozen=True)
class Report:
    """The ledgers of the runs a name covers, in submission order."""

    name: str
    scope: Scope
    runs: tuple[RunLedger, ...]
    generated_at: float  # UTC epoch seconds

    def total(self, what: Callable[[RunLedger], float]) -> float:
        return sum(what(r) for r in self.runs)


def resolve(name: str, store: Store) -> tuple[Scope, list[JobRecord]]:
    """The records of the runs ``name`` names, oldest first: a run id, a sweep id, else an experiment."""
    if recs := store.jobs_for_run(name):
        return Scope.RUN, recs
    if firsts := store.sweep_runs(name):
        return Scope.SWEEP, store.jobs_for_runs([f.run_id for f in firsts])
    by_exp = experiments(store)
    if name in by_exp:
        return Scope.EXPERIMENT, sorted(by_exp[name], key=lambda r: r.submitted_at)
    sweeps = sorted({r.run_id.rsplit("-", 1)[0] for r in store.all_jobs() if r.kind is RecordKind.TASK})
    recent = list(dict.fromkeys(r.run_id for r in store.recent(5)))
    raise UsageError(
        f"no run, sweep or experiment {name!r} in the store {store.path}",
        hint=f"experiments: {', '.join(sorted(by_exp)) or '(none)'}; sweeps: {', '.join(sweeps[-5:]) or '(none)'}; "
        f"recent runs: {', '.join(recent) or '(none)'} (`roach ls` lists more)",
    )


def report(name: str, *, store: Store | None = None, run_as: str | None = None, now: datetime | None = None) -> Report:
    """The GPU-hour ledger of every run ``name`` names (a run id, a sweep id or an experiment), each cluster read
    as ``run_as`` where it is reached locally."""
    now = now or datetime.now(UTC)
    owned = store is None
    store = store or Store()
    try:
        scope, recs = resolve(name, store)
    finally:
        if owned:
            store.close()
    ledgers: dict[str, RunLedger] = {}
    for cluster, group in _by_cluster(recs, run_as):
        for led in cluster_ledgers(cluster, group, now):
            before = ledgers.get(led.run_id)
            ledgers[led.run_id] = led if before is None else merged(before, led)
    order = list(dict.fromkeys(r.run_id for r in recs))
    return Report(name, scope, tuple(ledgers[r] for r in order if r in ledgers), now.timestamp())


def merged(before: RunLedger, led: RunLedger) -> RunLedger:
    """One run's ledger from two groups of its records (resubmitted to another cluster, or reached another way)."""
    clusters = ",".join(dict.fromkeys([*before.cluster.split(","), led.cluster]))
    return replace(
        led,
        cluster=clusters,
        attempts=before.attempts + led.attempts,
        steps_total=led.steps_total or before.steps_total,
        error_line=led.error_line,
    )


def _by_cluster(recs: Sequence[JobRecord], run_as: str | None) -> list[tuple[Cluster, list[JobRecord]]]:
    groups: dict[tuple[str, str | None], tuple[Cluster, list[JobRecord]]] = {}
    for r in recs:
        key = (r.cluster, r.via)
        if key not in groups:
            groups[key] = (reach(r, run_as=run_as), [])
        groups[key][1].append(r)
    return list(groups.values())


def slurm_id(rec: JobRecord) -> str:
    """The job whose allocation holds ``rec``'s attempts: itself, its array task, or the holder it ran in."""
    if rec.kind is RecordKind.ATTEMPT and rec.holder is not None:
        return str(rec.holder)
    return rec.slurm_id


def query_id(rec: JobRecord) -> str:
    """The id sacct is asked for: an array's own id for its tasks (a task's id leaves out the range of tasks
    that have not started), the holder's for an attempt in it, else the job's."""
    return str(rec.job_id) if rec.kind is RecordKind.TASK else slurm_id(rec)


def by_task(allocations: Sequence[Allocation], recs: Sequence[JobRecord]) -> dict[str, list[Allocation]]:
    """sacct's lines by the job they are an attempt of (``123``, ``123_4``); a pending range of an array's tasks
    (``123_[5-9%2]``) is an attempt of each task in it that has no line of its own yet."""
    out: dict[str, list[Allocation]] = {}
    ranges = []
    for a in allocations:
        if a.ref.tasks is not None:
            ranges.append(a)
        else:
            out.setdefault(str(a.ref), []).append(a)
    for a in ranges:
        for r in recs:
            if r.kind is RecordKind.TASK and r.job_id == a.ref.job and r.task is not None:
                if in_array(a.ref.tasks, r.task) and r.slurm_id not in out:
                    out[r.slurm_id] = [a]
    return out


def cluster_ledgers(cluster: Cluster, recs: Sequence[JobRecord], now: datetime) -> list[RunLedger]:
    """The ledgers of ``recs``' runs on one cluster: one ``sacct -X -D``, one read of the logs, and where some ran
    inside a holder one ``sacct`` of the holders' steps."""
    client = cluster.client()
    by_job = by_task(client.allocations(list(dict.fromkeys(query_id(r) for r in recs))), recs)
    logs = list(dict.fromkeys(r.log_path for r in recs))
    cluster_tz, texts = read_logs(client.transport, logs)
    # sacct prints the cluster's local time; a REST client's records are this machine's local time
    tz = _local_tz() if isinstance(client, RestClient) else cluster_tz
    facts = {p: read_attempts(t.splitlines()) for p, t in zip(logs, texts)}
    held = {r.holder for r in recs if r.kind is RecordKind.ATTEMPT} | {r.job_id for r in recs if _is_holder(r)}
    holders = {
        h: slots[-1].span for h in held if h is not None and (slots := slots_of(by_job.get(str(h), []), tz, now))
    }
    steps = client.sacct(sorted(holders), allocations_only=False) if holders else []
    inside = attempt_spans(steps, holders, tz, now)
    out = []
    by_run: dict[str, list[JobRecord]] = {}
    for r in recs:
        by_run.setdefault(r.run_id, []).append(r)
    for run_id, mine in by_run.items():
        jobs = [_job(r, by_job, facts, holders, inside, tz, now) for r in mine]
        led = run_ledger(run_id, cluster.name, jobs, _namer(cluster))
        out.append(replace(led, error_line=mine[-1].error_line))
    return out


def _is_holder(rec: JobRecord) -> bool:
    return rec.kind is RecordKind.HOLDER


def _job(
    rec: JobRecord,
    by_job: dict[str, list[Allocation]],
    facts: dict[str, dict[tuple[int, int], AttemptLog]],
    holders: dict[int, Span],
    inside: dict[tuple[int, int], Span],
    tz: timezone,
    now: datetime,
) -> Job:
    """One record's attempts: a batch job's allocations, an attempt's steps in its holder, a holder's idle time."""
    logs = facts.get(rec.log_path, {})
    if rec.kind is RecordKind.ATTEMPT and rec.holder is not None and rec.attempt is not None:
        key = (rec.holder, rec.attempt)
        return Job(str(rec.key), [Slot(inside[key], rec.attempt, key)] if key in inside else [], logs)
    slots = slots_of(by_job.get(slurm_id(rec), []), tz, now)
    if _is_holder(rec) and rec.job_id in holders:
        ran = [sp for (h, _), sp in inside.items() if h == rec.job_id]
        slots = [replace(s, span=holder_idle(s.span, ran), log_key=None) for s in slots]
    return Job(slurm_id(rec), slots, logs)


def _namer(cluster: Cluster) -> Callable[[str, str], str]:
    def name(partition: str, qos: str) -> str:
        t = tier_of(cluster.tiers, partition, qos)
        return t.name if t is not None else f"{partition}/{qos}"

    return name


def read_logs(transport: Transport, paths: Sequence[str]) -> tuple[timezone, list[str]]:
    """The cluster's UTC offset and each log's lines of interest ("" where it is missing), in one command."""
    res = transport.run(["sh", "-c", _PROGRAM, "sh", *paths])
    parts = res.stdout.split(RS)
    if res.returncode != 0 or len(parts) < len(paths) + 1:
        raise RoachError(
            f"reading {len(paths)} run logs on the cluster failed: {res.stderr.strip()[-300:] or 'output cut short'}",
            hint="check that the submitting user may read the log root (--run-as)",
        )
    return _offset(parts[0].strip()), [p.lstrip("\n") for p in parts[1 : len(paths) + 1]]


def _local_tz() -> timezone:
    offset = datetime.now().astimezone().utcoffset()
    return timezone(offset) if offset is not None else UTC


def _offset(text: str) -> timezone:
    """``date +%z``'s ``+0100`` as a timezone (UTC where it cannot be read)."""
    if len(text) == 5 and text[0] in "+-" and text[1:].isdigit():
        sign = -1 if text[0] == "-" else 1
        return timezone(sign * timedelta(hours=int(text[1:3]), minutes=int(text[3:])))
    return UTC


# -- as JSON (the `report` record of docs/json.md) ------------------------------------------------------------
def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def attempt_json(a: AttemptLedger) -> dict[str, Any]:
    return {
        "job": a.job,
        "restart": a.restart,
        "tier": a.tier,
        "state": a.state.value,
        "stop": a.stop.value,
        "nodes": a.nodes,
        "gpus": a.gpus,
        "eligible": _iso(a.eligible),
        "start": _iso(a.start),
        "end": _iso(a.end),
        "pending_s": round(a.pending_s, 1),
        "requeue_s": round(a.requeue_s, 1),
        "elapsed_s": a.elapsed_s,
        "starting_s": round(a.starting_s, 1),
        "recomputed_s": round(a.recomputed_s, 1),
        "useful_s": round(a.useful_s, 1),
        "start_step": a.start_step,
        "end_step": a.end_step,
        "recomputed_steps": a.recomputed_steps,
    }


def _sums(runs: Sequence[RunLedger]) -> dict[str, Any]:
    pending: dict[str, float] = {}
    failures: dict[str, int] = {}
    for r in runs:
        for tier, s in r.pending_s_by_tier.items():
            pending[tier] = pending.get(tier, 0.0) + s
        for kind, n in r.failures.items():
            failures[kind] = failures.get(kind, 0) + n
    return {
        "allocated_gpu_h": round(sum(r.allocated_gpu_h for r in runs), 6),
        "useful_gpu_h": round(sum(r.useful_gpu_h for r in runs), 6),
        "recomputed_gpu_h": round(sum(r.recomputed_gpu_h for r in runs), 6),
        "idle_gpu_h": round(sum(r.idle_gpu_h for r in runs), 6),
        "useful_steps": sum(r.useful_steps for r in runs),
        "recomputed_steps": sum(r.recomputed_steps for r in runs),
        "pending_s_by_tier": {t: round(s, 1) for t, s in sorted(pending.items())},
        "requeue_s": round(sum(r.requeue_s for r in runs), 1),
        "preemptions": sum(r.preemptions for r in runs),
        "wall_clock_stops": sum(r.wall_clock_stops for r in runs),
        "failures": dict(sorted(failures.items())),
        "attempts": sum(len(r.attempts) for r in runs),
    }


def report_json(rep: Report) -> dict[str, Any]:
    """The report as the ``report`` record (without its ``schema`` field, which the CLI stamps)."""
    return {
        "name": rep.name,
        "scope": rep.scope.value,
        "generated_at": _iso(rep.generated_at),
        "runs": [
            {
                "run_id": r.run_id,
                "cluster": r.cluster,
                "steps_total": r.steps_total,
                "error_line": r.error_line,
                **_sums([r]),
                "attempts": [attempt_json(a) for a in r.attempts],
            }
            for r in rep.runs
        ],
        "total": {"runs": len(rep.runs), **_sums(rep.runs)},
    }
