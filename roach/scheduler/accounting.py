"""Every attempt of a set of jobs as Slurm's accounting kept it: one ``sacct --allocations --duplicates``.

``sacct -X -D`` prints one line per allocation a job ever had: a job requeued twice (preempted, or its wall
clock near) has three, each with its own ``Eligible``, ``Start``, ``End``, ``ElapsedRaw``, ``AllocTRES`` and
``NodeList``; an array task is a job of its own (``123_4``), and a holder is one allocation whatever the
attempts run inside it. :func:`parse_allocations` reads that output (the :data:`LEDGER_FIELDS`: sacct's
usual fields and ``Eligible``) into :class:`Allocation` records, pure and tested on recorded output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from roach.scheduler.fields import parse_time
from roach.scheduler.parse import SACCT_FIELDS, US, AcctRecord, JobRef, acct_record, records

#: sacct's fields for the ledger: :data:`~roach.scheduler.parse.SACCT_FIELDS`, then when the attempt could start.
LEDGER_FIELDS = (*SACCT_FIELDS, "Eligible")


def ledger_argv(job_ids: Iterable[str | int]) -> list[str]:
    """The one ``sacct`` that reads every attempt of ``job_ids`` (each job's own id, an array's id for all its
    tasks): allocations only, each requeued run of a job as a line of its own."""
    ids = ",".join(str(j) for j in job_ids)
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        f"--delimiter={US}",
        f"--format={','.join(LEDGER_FIELDS)}",
        "--jobs",
        ids,
        "--allocations",
        "--duplicates",
        "--starttime",
        "1970-01-01",  # an id alone would otherwise only search since midnight
    ]


@dataclass(frozen=True)
class Allocation:
    """One attempt of a job (one line of ``sacct -X -D``): when it could start, started and ended, on what."""

    record: AcctRecord
    eligible: datetime | None  # None: not eligible yet (held, or a dependency)

    @property
    def ref(self) -> JobRef:
        return self.record.ref

    @property
    def gpus(self) -> int:
        """GPUs allocated (AllocTRES's gres/gpu); 0 for an attempt that never started."""
        return self.record.tres.gpus

    @property
    def started(self) -> bool:
        return self.record.start_time is not None

    @property
    def gpu_seconds(self) -> int:
        """AllocTRES gres/gpu x ElapsedRaw: what the attempt held, so far where it still runs."""
        return self.gpus * self.record.elapsed_s if self.started else 0

    def pending_s(self, now: datetime) -> float | None:
        """Seconds from Eligible to Start (to ``now`` while it waits); None while it is not eligible."""
        if self.eligible is None:
            return None
        until = self.record.start_time or self.record.end_time or now
        return max(0.0, (until - self.eligible).total_seconds())


def parse_allocations(text: str) -> list[Allocation]:
    """Output of :func:`ledger_argv`'s sacct, in its order (a job's attempts oldest first)."""
    n = len(SACCT_FIELDS)
    return [
        Allocation(acct_record(f[:n]), parse_time(f[n]))
        for f in records(text, len(LEDGER_FIELDS), None, "sacct (ledger)")
    ]
