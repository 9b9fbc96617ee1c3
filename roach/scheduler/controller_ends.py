"""slurmctld's own record of jobs that ended: the end where accounting lags behind the controller, in one call.

A job's end is sacct's record, except where slurmdbd never gets it while the controller knows it: Slurm 26.05.5's
backup controller, once it has taken over, queues its accounting and never sends it (docs/faults.md, scenario
24). slurmctld keeps an ended job for ``MinJobAge`` seconds, and ``squeue -t all`` shows it then with its state,
exit code and times. A watch or a wait asks this only for jobs that left the queue a while ago and that sacct
answered for without an end (:data:`ACCOUNTING_LAG_S`), so sacct's reading (a rank's out-of-memory step among
them) stays the end wherever accounting keeps up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from roach.errors import ParseError
from roach.scheduler.client import SlurmClient
from roach.scheduler.fields import parse_time
from roach.scheduler.parse import RS, US, AcctRecord, QueueRecord, squeue_format, squeue_record
from roach.scheduler.rest.client import RestClient

#: How long a job may be out of the queue with sacct answering but holding no end for it, before its end is read
#: from slurmctld: sacct has an end within seconds where accounting keeps up, and slurmctld keeps the job for
#: ``MinJobAge`` (300 s by default; the lab's 60 s).
ACCOUNTING_LAG_S = 20.0


@dataclass
class OutOfQueue:
    """A wait's clock of how long its job (or every run of its sweep) has been out of the queue."""

    since: float | None = None  # when it was first seen out (monotonic); None while it is queued

    def queued(self) -> None:
        self.since = None

    def lagging(self) -> bool:
        """Seen out of the queue now: whether that has lasted :data:`ACCOUNTING_LAG_S`, so a missing end in sacct
        is read from slurmctld."""
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        return now - self.since >= ACCOUNTING_LAG_S


def ended_format() -> str:
    """``squeue -O``: roach's usual fields, then the job's exit code and its end."""
    return squeue_format().removesuffix(RS) + US + ",exit_code:" + US + ",EndTime:" + RS


def ended_argv(job_ids: Iterable[str]) -> list[str]:
    return ["squeue", "--noheader", "--array", "-t", "all", "-O", ended_format(), "--jobs", ",".join(job_ids)]


def parse_exit_status(text: str) -> tuple[int, int]:
    """squeue's ``exit_code``: the job's wait status as one number (22.05.8: ``768`` for exit 3, ``9`` for a
    SIGKILL), or ``code:signal`` as sacct prints it."""
    text = text.strip()
    if ":" in text:
        code, _, sig = text.partition(":")
        if code.isdigit() and sig.isdigit():
            return int(code), int(sig)
    elif text.isdigit():
        status = int(text)
        return (status >> 8) & 0xFF, status & 0x7F
    raise ParseError(f"squeue: an exit code that is neither a wait status nor code:signal: {text!r}")


def parse_ended(text: str) -> list[AcctRecord]:
    """Output of :func:`ended_argv`: each job that ended, as sacct would list its allocation; a job still in the
    queue is left out."""
    out = []
    for chunk in text.split(RS):
        if not chunk.strip():
            continue
        head, end = _split_tail(chunk.lstrip("\n"))
        head, exit_status = _split_tail(head)
        q = squeue_record(head)
        if q.state.is_terminal:
            out.append(_as_allocation(q, parse_exit_status(exit_status), end))
    return out


def _split_tail(chunk: str) -> tuple[str, str]:
    head, sep, tail = chunk.rpartition(US)
    if not sep or not head.strip():
        raise ParseError(f"squeue: a record without its exit code and end: {chunk!r}")
    return head, tail


def _as_allocation(q: QueueRecord, exit: tuple[int, int], end: str) -> AcctRecord:
    return AcctRecord(
        ref=q.ref,
        step=None,
        raw_id=str(q.raw_id),
        name=q.name,
        user=q.user,
        account=q.account,
        partition=q.partition,
        qos=q.qos,
        state=q.state,
        state_text=q.state.value,
        exit_code=exit[0],
        exit_signal=exit[1],
        elapsed_s=q.elapsed_s,
        time_limit_s=q.time_limit_s,
        submit_time=q.submit_time,
        start_time=q.start_time,
        end_time=parse_time(end),
        nodes=q.nodes,
        nodelist=q.nodelist,
        tres=q.tres,
        reason=q.reason,
        reason_text=q.reason_text,
    )


def controller_ends(client: SlurmClient, job_ids: Iterable[str]) -> list[AcctRecord]:
    """The given jobs that slurmctld still holds and says ended, in one ``squeue``; none through slurmrestd,
    whose job list the watch reads otherwise."""
    ids = sorted(set(job_ids))
    if not ids or isinstance(client, RestClient):
        return []
    res = client.run(ended_argv(ids), ok_codes=(0, 1))
    if res.returncode == 1:  # every given id has left the controller too
        return []
    return parse_ended(res.stdout)
