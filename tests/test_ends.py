"""How a job ended when its allocation's state hides it: a step OUT_OF_MEMORY under a FAILED allocation.

Recorded on a lab with ``--memory-cgroup`` (Slurm 22.05.8): job 1 ran out of memory in its batch step (the
allocation reads OUT_OF_MEMORY itself), job 2 in an srun step (2.0), after which its batch script exited 1
(the allocation reads FAILED).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from roach.model.job_state import JobState
from roach.scheduler.ends import fold_step_ends
from roach.scheduler.parse import parse_sacct

DATA = Path(__file__).parent / "data"


def _read(name: str):
    return parse_sacct((DATA / name).read_bytes().decode())


def test_a_failed_allocation_whose_step_ran_out_of_memory_reads_out_of_memory():
    allocations, steps = _read("sacct_X_lab_22.05_oom_cgroup.txt"), _read("sacct_steps_lab_22.05_oom_cgroup.txt")
    assert [(a.raw_id, a.state) for a in allocations] == [("1", JobState.OUT_OF_MEMORY), ("2", JobState.FAILED)]
    folded = fold_step_ends(allocations, steps)
    assert [(a.raw_id, a.state) for a in folded] == [("1", JobState.OUT_OF_MEMORY), ("2", JobState.OUT_OF_MEMORY)]
    assert folded[1].state_text == "OUT_OF_MEMORY (step 0; the job FAILED)"
    assert folded[0] is allocations[0]  # Slurm's own OUT_OF_MEMORY is kept as it is


def test_a_crash_stays_failed_and_an_earlier_runs_step_lends_nothing():
    allocations, steps = _read("sacct_X_lab_22.05_oom_cgroup.txt"), _read("sacct_steps_lab_22.05_oom_cgroup.txt")
    failed = allocations[1]
    crash_steps = [replace(s, state=JobState.FAILED) if s.step == "0" else s for s in steps]
    assert fold_step_ends([failed], crash_steps)[0].state is JobState.FAILED
    # A later run of the same job (a requeue): the OOM step started before it, in the run before.
    later = replace(failed, start_time=failed.start_time + timedelta(minutes=5), end_time=None)
    assert fold_step_ends([later], steps)[0].state is JobState.FAILED
