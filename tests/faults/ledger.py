"""The fault suite's two end checks: the step ledger is intact, and no process of the job is left.

The ledger (``<run_dir>/ledger.jsonl``, written by tests/faults/jobs.py) holds, per rank, a ``start`` record for
every attempt (the step it resumed at) and one record per finished step. An attempt's steps that lie at or
after the next attempt's start were recomputed (done again after the interruption); an attempt that starts
after the steps the one before it finished lost a step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from roach.scheduler.client import SlurmClient
from tests.conftest import wait_until


@dataclass(frozen=True)
class Attempt:
    attempt: str  # "<job id>.<restart count>"
    start: int
    steps: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.start + len(self.steps)


def read_ledger(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def attempts_by_rank(records: list[dict]) -> dict[int, list[Attempt]]:
    """Each rank's attempts in the order they started. A step record belongs to its attempt's start, which may not
    be the last one: an attempt cut off from Slurm goes on stepping after the next one started."""
    out: dict[int, list[list]] = {}
    for r in records:
        rank = out.setdefault(r["rank"], [])
        if "start" in r:
            rank.append([r["attempt"], r["start"], []])
        else:
            mine = [a for a in rank if a[0] == r["attempt"]]
            assert mine, f"step record outside its attempt's start: {r}"
            mine[-1][2].append(r["step"])
    return {k: [Attempt(a, s, tuple(st)) for a, s, st in v] for k, v in sorted(out.items())}


def check_ledger(
    run_dir: str | Path,
    steps: int,
    ranks: int = 1,
    *,
    run_id: str | None = None,
    interruptions: int | None = None,
    max_redo: int = 1,
    complete: bool = True,
) -> list[Attempt]:
    """Assert the ledger of a run of ``steps`` steps on ``ranks`` ranks; returns rank 0's attempts.

    - every rank ran the same attempts, each from the same start;
    - within an attempt, steps run one after the other from its start (none skipped);
    - the first attempt starts at 0; each later one at or before where the previous one got to (no step lost),
      and at most ``max_redo`` steps before it (the step in flight; a hard kill loses the steps since the last
      periodic checkpoint: pass that period);
    - after the last checkpoint boundary of each attempt, every step 0..steps-1 is there exactly once per rank;
    - ``interruptions``: the number of attempts is that plus one.
    """
    records = read_ledger(run_dir)
    if run_id is not None:
        assert {r["run_id"] for r in records} == {run_id}, "records of another run in this run's ledger"
    by_rank = attempts_by_rank(records)
    assert sorted(by_rank) == list(range(ranks)), f"ranks in the ledger: {sorted(by_rank)}, expected {ranks}"
    first = by_rank[0]
    for rank, atts in by_rank.items():
        assert [(a.attempt, a.start) for a in atts] == [(a.attempt, a.start) for a in first], (
            f"rank {rank}'s attempts differ from rank 0's: {atts} vs {first}"
        )
        assert atts[0].start == 0, f"rank {rank}'s first attempt starts at {atts[0].start}"
        kept: list[int] = []
        for a, b in zip(atts, atts[1:] + [None]):
            assert list(a.steps) == list(range(a.start, a.end)), f"rank {rank} skipped a step in {a}"
            if b is None:
                kept += a.steps
                continue
            assert b.start <= a.end, (
                f"rank {rank} lost steps {a.end}..{b.start - 1} between {a.attempt} and {b.attempt}"
            )
            assert a.end - b.start <= max_redo, (
                f"rank {rank} recomputed {a.end - b.start} steps after {a.attempt} (at most {max_redo})"
            )
            kept += [s for s in a.steps if s < b.start]
        expected = list(range(steps)) if complete else list(range(atts[-1].end))
        assert kept == expected, f"rank {rank}: steps after the checkpoint boundaries are {kept}, expected {expected}"
    if interruptions is not None:
        assert len(first) == interruptions + 1, f"{len(first)} attempts, expected {interruptions + 1}: {first}"
    return first


def steps_done(job) -> int:
    """The steps rank 0 of ``job``'s run has done so far, over all its attempts (0 before its ledger exists)."""
    try:
        atts = attempts_by_rank(read_ledger(job.record.run_dir)).get(0, [])
    except FileNotFoundError:
        return 0
    return sum(len(a.steps) for a in atts)


# -- processes -------------------------------------------------------------------------------------------------
def processes_of(bundle_dir: str) -> list[str]:
    """``pid cmdline`` of every process on this host (every lab node is a slurmd here) whose environment
    has ``ROACH_BUNDLE=<bundle_dir>``: the batch shell, the node step, the ranks and anything they started."""
    want = f"ROACH_BUNDLE={bundle_dir}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if want in env:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{pid} {cmd.strip()}")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return found


def bundle_dir_of(job) -> str:
    """The directory the job's batch script exports as ROACH_BUNDLE (an array's is the array's)."""
    log_root = job.record.log_path.rsplit("/", 1)[0]
    return f"{log_root}/bundles/{job.job_id}"


def assert_left_no_process(slurm: SlurmClient, job) -> None:
    """Once the job has left the queue (nothing of it pending, running or completing), none of its processes
    is alive on any node."""
    wait_until(
        f"job {job.slurm_id} to leave the queue",
        lambda: not [r for r in slurm.squeue(job_ids=[job.job_id]) if r.state.is_active],
        timeout=120,
    )
    left = processes_of(bundle_dir_of(job))
    assert not left, f"processes of job {job.slurm_id} outlived it:\n" + "\n".join(left)
