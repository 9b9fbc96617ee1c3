"""The light status round: ``squeue --only-job-state`` (Slurm 23.11.5+), job ids and states only.

slurmctld answers it from a cache of states without locking the job table, so pollers that need only
"is it still in the queue, and how" (Job.wait, Sweep.wait) cost the controller less than a full squeue.
What it takes, seen on 24.11.5 and 26.05.5: ``--jobs`` and ``--states``, never a user filter (24.11 then
lists nothing, 26.05 refuses); an id that left the queue, or never was, is simply not listed (exit 0);
an unreachable controller reads ``slurm_load_job_state: Unable to query jobs state: Unspecified error``.
"""

from __future__ import annotations

from dataclasses import dataclass

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.scheduler.parse import JobRef, QueueRecord

ONLY_JOB_STATE = "--only-job-state"


@dataclass(frozen=True)
class StateRecord:
    """A job (or array task, or still-pending range of tasks) and its state."""

    ref: JobRef
    state: JobState

    @classmethod
    def of(cls, rec: QueueRecord) -> StateRecord:
        return cls(rec.ref, rec.state)


def parse_squeue_states(text: str) -> list[StateRecord]:
    """Output of ``squeue --noheader --only-job-state``: a right-aligned id (``12``, ``12_0``, ``12_[2-3]``)
    and squeue's short state code (``PD``, ``R``, ``CG``) per line; a header line, if any, is skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts == ["JOBID", "ST"]:
            continue
        if len(parts) != 2:
            raise ParseError(f"squeue --only-job-state: expected a job id and a state, got {line!r}")
        out.append(StateRecord(JobRef.parse(parts[0]), JobState.parse(parts[1])))
    return out
