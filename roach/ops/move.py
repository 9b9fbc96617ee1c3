"""Moving a run to another tier: it checkpoints where it runs (scancel: TERM at a step boundary) and resumes from that checkpoint on the other."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from roach.errors import RoachError, UsageError
from roach.fleet.cluster import Cluster
from roach.launch.job import Job
from roach.launch.submit import resume
from roach.model.ids import JobKey
from roach.model.job_state import JobState
from roach.model.tiers import Tier, tier_of
from roach.ops.rebalance import MoveError, on_tier, promote, queued, record_resources, resolve, resume_commit
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.runtime.checkpoint import RESUME_FILE
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS


# -- move -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoveResult:
    """What a move did: the old and new job, the step it checkpointed at, where the new job resumed."""

    run_id: str
    old_job: int
    old_task: int | None  # a sweep's run: its task of array old_job
    new_job: int
    tier: str
    how: str  # "promoted" (it was pending) or "moved" (it ran, checkpointed, was resubmitted)
    checkpoint_step: int | None  # the step resume.pt holds (None: no checkpoint: it starts from the top)
    fresh_checkpoint: bool
    resumed_at: int | None  # what the new log says (None: not started yet, or started from the top)
    verified: bool | None  # True: resumed at its step; None: not started within the wait
    log: str

    @property
    def old_ref(self) -> str:
        """The old job as Slurm names it: ``123``, or ``123_4`` for a sweep's run."""
        return str(JobKey(self.old_job, self.old_task))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


CKPT = re.compile(r"checkpoint at step (\d+)")


RESUMED = re.compile(r"resumed at step (\d+)")


NONE_YET = (None, False, None, None)  # a promotion: no checkpoint, none fresh, not resumed, not verified yet


MARKS = ("resumed at step", "fresh start: no resume.pt", "checkpoint at step")


def checkpoints(log_text: str, resume_pt_exists: bool) -> bool:
    """Does the run checkpoint? It used run.resume()/checkpoint() (its log says so), or left a resume.pt."""
    return resume_pt_exists or any(m in log_text for m in MARKS)


def remote_now(client: SlurmClient) -> float:
    res = client.transport.run(["date", "+%s"])
    return float(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip().isdigit() else time.time()


def remote_mtime(client: SlurmClient, path: str) -> float | None:
    res = client.transport.run(["stat", "-c", "%Y", "--", path])
    return float(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip().isdigit() else None


def move(
    ref: str | int,
    tier: Tier | str,
    *,
    cluster: Cluster,
    store: Store,
    repo_root: str | Path = ".",
    force: bool = False,
    allow_new_commit: bool = False,
    preempt_own: bool = False,
    wait_s: float = 300.0,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> MoveResult:
    """Move run ``ref`` to ``tier``: a pending job is promoted; a running one is signalled, checkpoints and is
    resubmitted with its run id; then the new log must say ``resumed at step N`` (checked for ``wait_s``).

    Refuses a running run that does not checkpoint (it would start over) unless ``force``, and a pending one whose
    promotion Slurm says would preempt running jobs of the user's unless ``preempt_own`` (a running run frees the
    slot its next job needs).
    """

    rec = store.find(str(ref), cluster=cluster.name)
    target = resolve(cluster, tier)
    client = cluster.client()
    fs = ClusterFS(client.transport)
    q = queued(client, rec)
    if q is not None and q.state.is_pending:
        new = promote(
            ref,
            target,
            cluster=cluster,
            store=store,
            repo_root=repo_root,
            client=client,
            allow_new_commit=allow_new_commit,
            preempt_own=preempt_own,
        )
        log = new.record.log_path
        return MoveResult(rec.run_id, rec.job_id, rec.task, new.job_id, target.name, "promoted", *NONE_YET, log)
    if q is None:
        raise UsageError(
            f"job {rec.slurm_id} (run {rec.run_id}) is not in the queue: there is nothing to move",
            hint=f"to continue the run elsewhere: roach.slurm.resume({rec.run_id!r}, resources=...)",
        )
    if tier_of(cluster.tiers, q.partition, q.qos) == target:
        raise UsageError(f"job {rec.slurm_id} (run {rec.run_id}) already runs on tier {target.name}")
    commit = resume_commit(rec, repo_root, allow_new_commit)
    run_dir = fs.expand(rec.run_dir)
    resume_pt = f"{run_dir.rstrip('/')}/{RESUME_FILE}"
    log_text = fs.tail(rec.log_path, 5000) if fs.exists(rec.log_path) else ""
    if not checkpoints(log_text, fs.exists(resume_pt)) and not force:
        raise UsageError(
            f"run {rec.run_id} does not checkpoint (its log never says it resumed, started fresh or checkpointed, "
            "and it has no resume.pt): moving it starts it over and loses what it has done",
            hint="pass --force to move it anyway, or let it finish where it is",
        )
    signalled_at = remote_now(client)
    # TERM to this run's task alone: its ranks checkpoint at their step boundary and leave for good
    client.scancel([rec.slurm_id])
    ended = Job(cluster, rec, store).wait(timeout=max(wait_s, 120.0), poll_s=poll_s)
    if ended.state is JobState.COMPLETED:  # it finished before the TERM reached it: nothing is left to move
        raise UsageError(
            f"job {rec.slurm_id} (run {rec.run_id}) completed before it could be moved: nothing was resubmitted",
            hint=f"its result is in place: roach status {rec.run_id}",
        )
    until_released(client, rec, sleep, clock)
    after = fs.tail(rec.log_path, 5000) if fs.exists(rec.log_path) else ""
    mtime = remote_mtime(client, resume_pt)
    fresh = mtime is not None and mtime >= signalled_at - 1
    steps = [int(n) for n in CKPT.findall(after)]
    step = steps[-1] if steps and mtime is not None else None
    new = resume(
        rec.run_id,
        resources=on_tier(record_resources(rec), target),
        cluster=cluster,
        repo_root=repo_root,
        store=store,
        commit=commit,
    )
    resumed_at, verified = verify(new, step, wait_s, poll_s, sleep, clock)
    result = MoveResult(
        rec.run_id,
        rec.job_id,
        rec.task,
        new.job_id,
        target.name,
        "moved",
        step,
        fresh,
        resumed_at,
        verified,
        new.record.log_path,
    )
    if verified is False:
        said = f"resumed at step {resumed_at}" if resumed_at is not None else "started from the top"
        raise MoveError(
            f"run {rec.run_id} moved to tier {target.name} as job {new.job_id}, but its log says it {said}"
            f" where job {rec.slurm_id} ({ended.state.value}) checkpointed at step {step}",
            hint=f"read both logs: roach logs {rec.slurm_id}; roach logs {new.job_id}",
        )
    return result


RELEASE_WAIT_S = 60.0  # the longest a move waits for the ended job to leave the queue before resubmitting


def until_released(
    client: SlurmClient, rec: JobRecord, sleep: Callable[[float], None], clock: Callable[[], float]
) -> None:
    """Wait (at most :data:`RELEASE_WAIT_S`) until the ended job has left the queue, COMPLETING too. Accounting
    has its end before its node lets its GPUs go, and a job submitted while they are still held finds no room
    there but what preempting another run would free."""
    deadline = clock() + RELEASE_WAIT_S
    while queued(client, rec) is not None and clock() < deadline:
        sleep(1.0)


def verify(
    new: Job, step: int | None, wait_s: float, poll_s: float, sleep: Callable[[float], None], clock: Callable[[], float]
) -> tuple[int | None, bool | None]:
    """Wait for the new job's log to say where it started: (resumed step or None, as expected?)."""
    deadline = clock() + wait_s
    while True:
        log = new.log()
        found = RESUMED.findall(log)
        if found:
            at = int(found[-1])
            return at, step is not None and at == step
        if "fresh start: no resume.pt" in log or "from the top" in log:
            return None, step is None
        if step is None and " roach rank 0: starting " in log:
            return None, True  # nothing to resume from: it was to start over, and it has started
        if clock() >= deadline:
            return None, None
        try:
            if new.state().is_terminal:
                return None, False
        except RoachError:
            pass
        sleep(poll_s)
