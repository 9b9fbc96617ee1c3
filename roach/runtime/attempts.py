"""What a rank does when its run must leave, and the run's attempt bookkeeping in its run directory.

Wall clock and preemption are told apart by what Slurm says, never by elapsed time: the signal that
arrived, and whether the controller set the job's ``PreemptTime``. A wall-clock stop requeues the job
itself (``scontrol requeue``: same job id, same run id) within a per-run limit; a preempted job is
requeued by Slurm; a crash is not requeued at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.run_spec import RunSpec
from roach.runtime.context import Run, RunInterrupted
from roach.runtime.fence import EXIT_SUPERSEDED, Superseded

EXIT_LEFT = 3  # the rank checkpointed (or could not) and left so the run comes back
LAST_EXIT_DELAY_S = 2.0


def state_dir(run_dir: Path) -> Path:
    return run_dir / ".roach"


def done_marker(run_dir: Path) -> Path:
    return state_dir(run_dir) / "done"


def attempt_key(env: dict[str, str] | None = None) -> str:
    """This attempt of the run, the same for all its ranks: the job, Slurm's restart count and the ranks' step.

    A requeue (restart count), a new job (``roach resume``) and another step inside a holder each make a new
    key, so a run that completed is not run again by a later attempt, while no rank of the attempt that
    completed it is turned away by rank 0's marker, whatever order the ranks start and end in."""
    e = os.environ if env is None else env
    step = e.get("SLURM_STEP_ID", e.get("SLURM_STEPID", "0"))
    return f"{e.get('SLURM_JOB_ID', '0')}.{e.get('SLURM_RESTART_COUNT', '0') or '0'}.{step}"


def mark_done(run_dir: Path, job_id: int, key: str, check: Callable[[str], None] | None = None) -> None:
    """The done marker, naming the attempt that completed the run; ``check(what)`` may refuse the write."""
    fenced = None if check is None else (lambda: check("the done marker"))
    atomic_write(done_marker(run_dir), f"completed by job {job_id} (attempt {key})\n", check=fenced)


def completed_before(run_dir: Path, key: str) -> str | None:
    """What the done marker says when an attempt other than ``key`` completed the run; None otherwise.

    A marker without an attempt key (written by an older roach) is another attempt's."""
    try:
        text = done_marker(run_dir).read_text().strip()
    except FileNotFoundError:
        return None
    return None if text.endswith(f"(attempt {key})") else text


def left_marker(run_dir: Path, job_id: str, restart: str) -> Path:
    """Written by rank 0 when it left to come back; the batch script then exits 0, which Slurm needs in
    order to requeue a preempted job that ended within its grace time (a failed one stays FAILED)."""
    return state_dir(run_dir) / f"left.{job_id}.{restart}"


def stall_marker(run_dir: Path | str, restart: str | int) -> str:
    """Written by `roach watch --on-stall requeue` just before it requeues attempt ``restart`` (Slurm's restart count)
    of the run: that attempt's rank 0 then counts the requeue as the watch's, not as a preemption."""
    return f"{run_dir}/.roach/requeued-by-watch.{restart}"


def _counts_path(run_dir: Path) -> Path:
    return state_dir(run_dir) / "requeues.json"


def read_counts(run_dir: Path) -> dict[str, int]:
    try:
        return json.loads(_counts_path(run_dir).read_text())
    except FileNotFoundError:
        return {}


def _bump(run_dir: Path, kind: str) -> int:
    counts = read_counts(run_dir)
    counts[kind] = counts.get(kind, 0) + 1
    atomic_write(_counts_path(run_dir), json.dumps(counts) + "\n")
    return counts[kind]


def _scontrol(*argv: str) -> str:
    try:
        return subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _fields(text: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


def _unset(value: str | None) -> bool:
    return value in (None, "", "None", "Unknown", "(null)")


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job -o``'s ``Key=Value`` pairs for this job ({} when the controller cannot be asked)."""
    return _fields(_scontrol("show", "job", "-o", job_id)) if job_id else {}


def preempted(job_id: str, fields: dict[str, str] | None = None) -> bool:
    """Has the controller marked this job for preemption (``PreemptTime`` set)?"""
    f = job_fields(job_id) if fields is None else fields
    return not _unset(f.get("PreemptTime"))


def settled_fields(job_id: str, restart: str, sig: signal.Signals, wait_s: float = 5.0) -> dict[str, str]:
    """The job's fields, for deciding how this attempt ends. After a TERM they are asked again, for up to
    ``wait_s``, until they say something: requeued by Slurm, marked for preemption, or cancelled. The TERM of a
    GraceTime-0 preemption can come a moment before the controller shows the preemption or the requeue behind
    it (seen under load on 22.05), and an empty answer (the controller busy) says nothing either: either one,
    read at once, made a preemption look like a cancel."""
    deadline = time.monotonic() + wait_s
    while True:
        f = job_fields(job_id)
        said = requeued_by_slurm(f, restart) or preempted(job_id, f) or f.get("JobState", "").startswith("CANCELLED")
        if sig != signal.SIGTERM or said or time.monotonic() >= deadline:
            return f
        time.sleep(0.5)


def requeued_by_slurm(fields: dict[str, str], restart: str) -> bool:
    """Has Slurm already requeued this job, past this attempt (its ``Restarts`` beyond ours)?

    With GraceTime 0 a REQUEUE preemption requeues the job at once, before rank 0 asks, and the requeue clears
    ``PreemptTime``; an admin's ``scontrol requeue`` looks the same."""
    try:
        return int(fields.get("Restarts", "")) > int(restart or 0)
    except ValueError:
        return False


# How Slurm ended an attempt it requeued itself, by the attempt's accounting state: its count in requeues.json,
# the log's word for the stop and for the count ("preempted at step" is what roach watch reads as a preemption).
# REQUEUED is not told apart: a QOS preemption that Slurm requeues at once is accounted REQUEUED (22.05, recorded
# in tests/data/ledger_sacct_XD_lab_22.05_sweep_preempted.txt), as an admin's `scontrol requeue` is.
_NODE_FAIL = ("node_fail", "node failure", "node failure")
_PREEMPTED = ("preempted", "preempted", "preemption")
_STALLED = ("stalled", "requeued by roach watch after its log stalled", "stall requeue")


def cause_words(cause: JobState | None) -> tuple[str, str, str]:
    """(requeues.json's key, the log's word for the stop, its word for the count) of a requeue by Slurm."""
    return _NODE_FAIL if cause is JobState.NODE_FAIL else _PREEMPTED


def requeue_cause(job_id: str, restart: str, wait_s: float = 5.0) -> JobState | None:
    """The state Slurm accounted for this attempt (the job's ``restart``-th run in ``sacct -D``): PREEMPTED,
    NODE_FAIL, REQUEUED (a preemption requeued at once, or an admin's ``scontrol requeue``). slurmdbd records it a
    moment after the requeue, so this asks again for up to ``wait_s``; None when it is not recorded by then (or
    slurmdbd is down)."""
    n = int(restart or 0)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            out = subprocess.run(
                ["sacct", "-X", "-D", "-n", "-P", "-o", "State", "-j", job_id],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout
            states = [JobState.parse(line) for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError, ParseError):
            states = []
        if n < len(states) and states[n].is_terminal:
            return states[n]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def preempt_mode(fields: dict[str, str]) -> str:
    """How the site preempts this job: its QOS's PreemptMode, else the cluster's (``REQUEUE``, ``CANCEL``, ...);
    "" when it cannot be read (then roach requeues, as it always did)."""
    qos = fields.get("QOS", "")
    mode = ""
    if qos:
        mode = _fields(_scontrol("show", "assoc_mgr", "flags=qos", f"qos={qos}")).get("PreemptMode", "")
    if mode.upper() in ("", "OFF", "CLUSTER"):  # the QOS names none: the cluster's applies
        for line in _scontrol("show", "config").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "PreemptMode":
                mode = value.strip()
    return mode.upper()


def leave(run: Run, stop: RunInterrupted, spec: RunSpec) -> int:
    """Finish the attempt after a caught signal: rank 0 decides whether the job comes back; all ranks exit.

    - already requeued by Slurm (its Restarts beyond ours: a GraceTime 0 preemption): nothing to do, it comes back.
    - preempted where the site cancels preempted jobs (PreemptMode=CANCEL): not requeued; `roach resume` continues.
    - preempted (the controller set PreemptTime): requeue now, so the preemptor need not wait out the
      grace time and the job is not recorded as ended (a job that ends within its grace time is not
      requeued by Slurm). Unlimited.
    - the checkpoint signal without preemption: the wall clock is near; requeue within the run's limit.
    - TERM without preemption: cancelled (or killed by an admin); the job does not come back.
    - inside a holder (``ROACH_INSIDE_HOLDER``, set by submit(inside=...)): whatever the signal, nothing is
      requeued (the job is the holder; ``roach signal`` and the holder's near-end send USR1).
    """
    sig = stop.signal
    job = os.environ.get("SLURM_JOB_ID", "")
    restart = os.environ.get("SLURM_RESTART_COUNT", "0") or "0"
    holder = os.environ.get("ROACH_INSIDE_HOLDER")  # a step of a holder (submit(inside=...)): never requeue it
    if run.is_main:
        try:  # a later attempt holds the run: this one neither requeues the job nor writes its counts
            run.check_fence("a requeue or its counts")
        except Superseded as gone:
            run.log("%s", gone.line(run.run_id, stop.step))
            return EXIT_SUPERSEDED
        saved = "checkpointed" if stop.checkpointed else "no checkpoint"
        name = sig.name.removeprefix("SIG")
        if holder:
            run.log(
                "%s at step %d (%s) inside holder %s: a step is not requeued; submit again with run_id=%s to continue",
                name,
                stop.step,
                saved,
                holder,
                run.run_id,
            )
            # The attempt's driver reads it: the attempt left, whatever the ranks' step's exit code then says (a
            # rank that dies of its own teardown after this, an extension's abort at exit, must not make it FAILED).
            if marker := os.environ.get("ROACH_LEFT_MARKER"):
                atomic_write(Path(marker), f"{name} at step {stop.step} ({saved}) inside holder {holder}\n")
        elif requeued_by_slurm(fields := settled_fields(job, restart, sig), restart):
            # A preemption Slurm requeued at once (or an admin's requeue), or a node failure, or the watch's requeue
            # of a stalled run: each counted apart.
            if os.path.exists(stall_marker(run.run_dir, restart)):
                kind, said, counted = _STALLED
            else:
                kind, said, counted = cause_words(requeue_cause(job, restart))
            n = _bump(run.run_dir, kind)
            run.log(
                "%s at step %d (%s, %s): Slurm requeued job %s already (restart count %s; %s %d)",
                said,
                stop.step,
                saved,
                name,
                job,
                fields.get("Restarts"),
                counted,
                n,
            )
            atomic_write(
                left_marker(run.run_dir, job, restart), f"{name} at step {stop.step}, {said}: requeued by Slurm\n"
            )
        elif preempted(job, fields) and preempt_mode(fields).startswith("CANCEL"):
            run.log(
                "preempted at step %d (%s, %s): this site cancels preempted jobs (PreemptMode=CANCEL), so job %s "
                "does not come back; `roach resume %s` continues it",
                stop.step,
                saved,
                name,
                job,
                run.run_id,
            )
        elif preempted(job, fields):
            n = _bump(run.run_dir, "preempted")
            run.log("preempted at step %d (%s, %s): requeueing job %s (preemption %d)", stop.step, saved, name, job, n)
            _requeue(run, job, restart, f"{name} at step {stop.step}")
        elif sig != signal.SIGTERM:
            limit = spec.max_timeout_requeues
            used = read_counts(run.run_dir).get("timeout", 0)
            if used >= limit:
                run.log(
                    "wall clock at step %d (%s); the run has used its %d wall-clock requeues: not requeueing. "
                    "Resubmit with run_id=%s to continue.",
                    stop.step,
                    saved,
                    limit,
                    run.run_id,
                )
                _barrier()
                return 1
            n = _bump(run.run_dir, "timeout")
            run.log(
                "wall clock at step %d (%s, %s): requeueing job %s (wall-clock requeue %d of %d)",
                stop.step,
                saved,
                name,
                job,
                n,
                limit,
            )
            _requeue(run, job, restart, f"{name} at step {stop.step}")
        else:
            run.log(
                "TERM at step %d (%s) without preemption: cancelled; the job does not come back "
                "(resubmit with run_id=%s to continue)",
                stop.step,
                saved,
                run.run_id,
            )
    _barrier()
    # Non-zero ranks exit 0 so that srun --kill-on-bad-exit cannot kill rank 0 mid-requeue; rank 0 exits a
    # moment after them, so srun does not kill them either (its exit status would then read 143, not 3).
    if run.is_main and run.world_size > 1:
        time.sleep(LAST_EXIT_DELAY_S)
    return EXIT_LEFT if run.is_main else 0


def _requeue(run: Run, job: str, restart: str, why: str) -> None:
    # The marker first: the requeue ends this attempt at once.
    atomic_write(left_marker(run.run_dir, job, restart), why + "\n")
    r = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        left_marker(run.run_dir, job, restart).unlink(missing_ok=True)
        run.log("scontrol requeue %s failed: %s", job, r.stderr.strip())


def _barrier() -> None:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()
