"""How a job ended, read from its steps where the allocation's own state hides it.

A rank killed by Slurm's cgroup for using more than its ``--mem`` ends its *step* OUT_OF_MEMORY, but the batch
script that ran the step then exits non-zero and the allocation reads FAILED (seen on the lab with
``task/cgroup`` on Slurm 22.05: ``2 FAILED 1:0``, ``2.0 OUT_OF_MEMORY 0:125``). The step tells an OOM from a
crash; the allocation alone cannot.
"""

from __future__ import annotations

from dataclasses import replace

from roach.model.job_state import JobState
from roach.scheduler.parse import AcctRecord


def fold_step_ends(allocations: list[AcctRecord], steps: list[AcctRecord]) -> list[AcctRecord]:
    """``allocations`` with each FAILED one whose run had a step end OUT_OF_MEMORY read as OUT_OF_MEMORY.

    ``steps`` is sacct's output without ``--allocations`` for those jobs (allocations and steps). Only steps
    that started within the allocation's run count, so an earlier run of a requeued job (``--duplicates``)
    lends its steps to no later one.
    """
    oom: dict[str, list[AcctRecord]] = {}
    for s in steps:
        if s.step is not None and s.state is JobState.OUT_OF_MEMORY:
            oom.setdefault(s.raw_id.split(".")[0], []).append(s)
    out = []
    for a in allocations:
        hit = [s for s in oom.get(a.raw_id, []) if _within(s, a)] if a.state is JobState.FAILED else []
        if hit:
            a = replace(
                a, state=JobState.OUT_OF_MEMORY, state_text=f"OUT_OF_MEMORY (step {hit[0].step}; the job FAILED)"
            )
        out.append(a)
    return out


def end_recorded(allocation: AcctRecord) -> bool:
    """Whether slurmdbd holds the allocation's end, where its state says it ended. A job that started and ended
    while slurmdbd was down reaches it as its start, sent in the job's ended state with exit 0:0 and no End,
    and its end a few seconds later (seen on the lab, Slurm 22.05.8: ``FAILED 0:0`` with End ``Unknown`` for 7 s,
    then ``FAILED 3:0``): until then its state and exit code are not how it ended."""
    return not allocation.state.is_terminal or allocation.end_time is not None


def _within(step: AcctRecord, run: AcctRecord) -> bool:
    if step.start_time is None or run.start_time is None:
        return True
    return step.start_time >= run.start_time and (run.end_time is None or step.start_time <= run.end_time)
