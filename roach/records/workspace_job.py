"""``dsi-slurm-artifacts/<JOB_ID>/job.json`` of the remote-workspace backend, how a job's end is read from
sacct, and the job's row in roach's store (pure: records in, record out)."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace

from roach.errors import RoachError
from roach.model.status import FINAL_STATUSES, Status, status_from_state
from roach.records.bundle import ENDED, LIVE_STATES, legacy_status
from roach.records.job_end import End
from roach.records.job_record import JobRecord, utc_now
from roach.scheduler.parse import AcctRecord, array_ranges

# The store's rows of sbatch jobs say so in their resources (a roach run's are a Resources' fields).
WORKSPACE_BACKEND = "remote-workspace"

# The eight keys of the skill's job.json schema, in its order; always strings.
SKILL_KEYS = (
    "job_id",
    "status",
    "slurm_state",
    "exit_code",
    "script",
    "description",
    "submitted_at_utc",
    "recorded_at_utc",
)
# Where an array's tasks disagree, the job's status is the first of these that any task has.
_WORST_FIRST = ("failed", "timeout", "preempted", "cancelled", "unknown", "completed")


@dataclass(frozen=True, kw_only=True)
class WorkspaceJob:
    """``dsi-slurm-artifacts/<JOB_ID>/job.json``: the eight keys users write by hand, then roach's own."""

    job_id: str
    status: str = "unknown"  # always one of FINAL_STATUSES: "unknown" until the end is recorded
    slurm_state: str | None = None  # raw sacct State, e.g. "COMPLETED"; a string once ended
    exit_code: str | None = None  # raw sacct ExitCode, e.g. "0:0"; a string once ended
    script: str = ""  # relative to the workspace
    description: str = ""
    submitted_at_utc: str | None = None
    recorded_at_utc: str | None = None  # set when the end is recorded
    # roach's own
    live_state: str = "submitted"  # LIVE_STATES: submitted, pending, running (a wait's last look), then ended
    cluster: str | None = None
    array: str | None = None  # the --array value
    tasks: dict[str, dict[str, str]] = field(default_factory=dict)  # array task -> status, slurm_state, exit_code
    last_seen_utc: str | None = None  # when a wait last saw the job (set when a wait was cut off)

    @property
    def is_final(self) -> bool:
        """The end is recorded (a record written by hand may say so by its status alone)."""
        return self.recorded_at_utc is not None or self.status in FINAL_STATUSES and self.status != "unknown"

    def to_json(self) -> str:
        data = asdict(self)
        for key in SKILL_KEYS:  # the skill's eight keys are strings, never null ("" until known)
            data[key] = "" if data[key] is None else str(data[key])
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "job.json") -> WorkspaceJob:
        """Read a job.json (also one written by hand: unknown keys are ignored, missing ones default)."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RoachError(f"{where} is not JSON ({exc}): {text[:200]!r}") from None
        if not isinstance(data, dict) or "job_id" not in data:
            raise RoachError(f"{where} is not a job record (no job_id): {text[:200]!r}")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in legacy_status(data).items() if k in known}
        for key in ("slurm_state", "exit_code", "recorded_at_utc"):  # "" is how to_json writes "not known yet"
            if values.get(key) == "":
                values[key] = None
        if values.get("status", "unknown") not in FINAL_STATUSES:  # written by hand: "done", "?"...
            values["status"] = "unknown"
        if values["live_state"] not in LIVE_STATES:
            values["live_state"] = ENDED if values.get("recorded_at_utc") else "submitted"
        values["job_id"] = str(values["job_id"])
        if not isinstance(values.get("tasks", {}), dict):
            values.pop("tasks")
        return cls(**values)


def array_size(spec: str | None) -> int | None:
    """How many tasks an ``--array`` value names (``0-99%10``: 100, ``1,3,8-10``: 5, ``0-9:3``: 4); None if unreadable."""
    ranges = array_ranges(spec)
    return None if ranges is None else sum(len(r) for r in ranges)


def worst_status(statuses: Sequence[str]) -> str:
    """The status of an array whose tasks ended with ``statuses``: the worst of them (failed, timeout, preempted,
    cancelled, unknown, completed)."""
    return min(statuses, key=lambda s: _WORST_FIRST.index(s) if s in _WORST_FIRST else 0)


def final_record(
    base: WorkspaceJob, accounting: Sequence[AcctRecord], now: str, *, partial: bool = False
) -> WorkspaceJob | None:
    """``base`` with the final state of its allocation(s) in ``accounting``; None while one is still active
    (or, for an array, while sacct does not list every task yet, unless ``partial``).

    No record at all gives ``unknown``. For an array the job's status is the worst of its tasks'
    (failed, timeout, preempted, cancelled, unknown, completed), each task's kept in ``tasks``.
    """
    recs = [r for r in accounting if r.step is None and str(r.ref.job) == base.job_id]
    if not recs:
        return replace(
            base, status="unknown", slurm_state="UNKNOWN", exit_code="unknown", recorded_at_utc=now, live_state=ENDED
        )
    if any(r.state.is_active for r in recs):
        return None
    is_array = base.array is not None or any(r.ref.task is not None or r.ref.tasks for r in recs)
    if is_array and not partial:
        listed = sum(
            1 if r.ref.task is not None else (array_size(r.ref.tasks) or 1) if r.ref.tasks else 0 for r in recs
        )
        expected = array_size(base.array)
        if listed == 0 or any(r.ref.task is None and not r.ref.tasks for r in recs) or (expected and listed < expected):
            return None  # accounting has not caught up with every task yet
    per = [(r, status_from_state(r.state, r.state_text)) for r in recs]
    worst = worst_status([s for _, s in per])
    rep = next(r for r, s in per if s == worst)
    tasks = {}
    if is_array:
        tasks = {
            str(r.ref).split("_", 1)[-1]: {
                "status": s,
                "slurm_state": r.state_text,
                "exit_code": f"{r.exit_code}:{r.exit_signal}",
            }
            for r, s in per
        }
    submitted = base.submitted_at_utc
    if not submitted and rep.submit_time is not None:
        submitted = rep.submit_time.strftime("%Y-%m-%dT%H:%M:%SZ")  # sacct's time, for a job roach did not submit
    return replace(
        base,
        status=worst,
        slurm_state=rep.state_text,
        exit_code=f"{rep.exit_code}:{rep.exit_signal}",
        recorded_at_utc=now,
        tasks=tasks,
        submitted_at_utc=submitted,
        live_state=ENDED,
    )


def array_end(rec: JobRecord, rows: Sequence[AcctRecord]) -> End | None:
    """The end of an array recorded as one job (a remote-workspace array) from sacct's ``rows`` of its tasks: the
    worst of them once accounting lists every task ended; None until then."""
    array = rec.resources.get("array") if is_workspace_record(rec) else None
    final = final_record(WorkspaceJob(job_id=str(rec.job_id), array=array), rows, utc_now()) if rows else None
    if final is None or final.slurm_state is None:
        return None
    return End(rec, Status.final(final.status), final.slurm_state, final.exit_code or "unknown")


def is_workspace_array(rec: JobRecord) -> bool:
    """Whether a store row is a remote-workspace array: one row whose tasks Slurm lists one by one."""
    return rec.task is None and is_workspace_record(rec) and rec.resources.get("array") is not None


def run_id_of(job_id: str | int) -> str:
    """The run id a sbatch job has in roach's store: ``sbatch-<JOB_ID>``."""
    return f"sbatch-{job_id}"


def is_workspace_record(rec: JobRecord) -> bool:
    """Whether a store row is a remote-workspace sbatch job (not a roach run: no commit, no spec to resubmit)."""
    return isinstance(rec.resources, dict) and rec.resources.get("backend") == WORKSPACE_BACKEND


def log_path(output: str, job_id: str, job_name: str, remote_root: str) -> str:
    """Where a script's ``--output`` pattern puts the log of job ``job_id``, absolute on the cluster: ``%j``/``%A``
    are the job id, ``%x`` the name, ``%%`` a percent sign; an array's ``%a`` (and other patterns) stay."""
    out = re.sub(r"%(%|j|A|x)", lambda m: {"%": "%", "j": job_id, "A": job_id, "x": job_name}[m[1]], output)
    return out if out.startswith("/") else posixpath.join(remote_root, out)


def store_record(
    rec: WorkspaceJob,
    *,
    name: str,
    log: str,
    bundle: str,
    remote_root: str,
    workspace: str,
    requests: dict[str, str],
    via: str | None,
    via_config: str | None = None,
) -> JobRecord:
    """The store's row of a submitted sbatch job, so that ``roach ls``/``status``/``logs`` see it: its run id is
    ``sbatch-<JOB_ID>``, its target the script (workspace-relative), its run directory the remote root."""
    return JobRecord(
        cluster=rec.cluster or "",
        job_id=int(rec.job_id),
        run_id=run_id_of(rec.job_id),
        name=name,
        target=rec.script,
        commit="",
        repo=posixpath.basename(workspace.rstrip("/")),
        log_path=log,
        bundle_dir=bundle,
        run_dir=remote_root,
        submitted_at=rec.submitted_at_utc or "",
        resources={"backend": WORKSPACE_BACKEND, "workspace": workspace, "array": rec.array, **requests},
        status=Status.SUBMITTED,
        slurm_state=None,
        exit_code=None,
        recorded_at=None,
        via=via,
        via_config=via_config,
    )
