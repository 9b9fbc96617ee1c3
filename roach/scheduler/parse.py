"""Pure parsers from what Slurm's commands print to typed records.

No I/O here: every function takes text and returns dataclasses, so each is tested on output captured
from real clusters (``tests/data``). Anything that cannot be read raises :class:`ParseError` with the
offending line in ``repr`` form, never a silent default.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler.fields import (
    Tres,
    parse_duration,
    parse_exit_code,
    parse_int,
    parse_minutes,
    parse_time,
    parse_tres,
)

# Separators that cannot occur in a job name typed at a shell: unit and record separators.
US = "\x1f"
RS = "\x1e"

# squeue -O fields in order; ``tres-alloc`` gives requested TRES for pending jobs too ("claimed").
SQUEUE_FIELDS = (
    "JobID",
    "JobArrayID",
    "ArrayJobID",
    "ArrayTaskID",
    "Name",
    "UserName",
    "Account",
    "Partition",
    "QOS",
    "State",
    "Reason",
    "TimeUsed",
    "TimeLimit",
    "RestartCnt",
    "NumNodes",
    "NodeList",
    "tres-alloc",
    "SubmitTime",
    "StartTime",
)
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "QOS",
    "State",
    "ExitCode",
    "ElapsedRaw",
    "TimelimitRaw",
    "Submit",
    "Start",
    "End",
    "NNodes",
    "NodeList",
    "AllocTRES",
    "Reason",
)


def squeue_format() -> str:
    """The ``squeue -O`` argument matching :func:`parse_squeue`: US after each field, RS ends a record."""
    return ",".join(f"{f}:{US}" for f in SQUEUE_FIELDS[:-1]) + f",{SQUEUE_FIELDS[-1]}:{RS}"


# -- records ----------------------------------------------------------------------------------------
def array_ranges(spec: str | None) -> list[range] | None:
    """The task indices an ``--array`` value or squeue's pending range names (``0-99%10``, ``1,3,8-10:2``),
    as ranges; None if there is none or it cannot be read."""
    if not spec:
        return None
    ranges = []
    for part in spec.split("%", 1)[0].split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+)(?::(\d+))?)?\s*", part)
        if not m:
            return None
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        if hi < lo or step < 1:
            return None
        ranges.append(range(lo, hi + 1, step))
    return ranges


def in_array(spec: str | None, task: int) -> bool:
    """Whether task index ``task`` is one an ``--array`` value (or squeue's pending range) names."""
    return any(task in r for r in array_ranges(spec) or ())


@dataclass(frozen=True)
class JobRef:
    """A job as Slurm names it: ``123``, an array task ``123_4``, or a pending range ``123_[5-9%2]``."""

    job: int
    task: int | None = None
    tasks: str | None = None  # pending range, e.g. "5-9%2"

    @classmethod
    def parse(cls, text: str) -> JobRef:
        m = re.fullmatch(r"(\d+)(?:_(\d+)|_\[([^\]]+)\])?(?:\+\d+)?", text.strip())
        if not m:
            raise ParseError(f"cannot read a job id from {text!r}", hint="expected 123, 123_4 or 123_[5-9%2]")
        return cls(int(m[1]), int(m[2]) if m[2] else None, m[3])

    def __str__(self) -> str:
        if self.task is not None:
            return f"{self.job}_{self.task}"
        return f"{self.job}_[{self.tasks}]" if self.tasks else str(self.job)

    def names(self, job: int, task: int | None) -> bool:
        """Whether this line is job ``job`` or, with ``task``, that task of array ``job`` (never a sibling task,
        whatever raw id Slurm gave it)."""
        if self.job != job:
            return False
        if task is None:
            return self.task is None and self.tasks is None
        return self.task == task or in_array(self.tasks, task)


@dataclass(frozen=True)
class QueueRecord:
    """One line of ``squeue``: a job, an array task, or a still-pending range of array tasks."""

    ref: JobRef
    raw_id: int
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: JobState
    reason: PendingReason
    reason_text: str
    elapsed_s: int
    time_limit_s: int | None
    restart_count: int
    nodes: int
    nodelist: str
    tres: Tres
    submit_time: datetime | None
    start_time: datetime | None

    @functools.cached_property  # the watch keys every record by it, every round (the record is reused)
    def job_id(self) -> str:
        return str(self.ref)


def records(text: str, nfields: int, record_sep: str | None, what: str) -> Iterator[list[str]]:
    """Split output into records of ``nfields`` US-separated fields; names may hold newlines."""
    if record_sep:
        chunks = [c.lstrip("\n") for c in text.split(record_sep)]
        chunks = [c for c in chunks if c.strip()]
    else:
        # sacct has no record separator: join lines until a record has all its separators.
        chunks, buf = [], ""
        for line in text.splitlines():
            buf = f"{buf}\n{line}" if buf else line
            if buf.count(US) >= nfields - 1:
                chunks.append(buf)
                buf = ""
        if buf.strip():
            raise ParseError(f"{what}: incomplete record {buf!r}", hint=f"expected {nfields} fields")
    for chunk in chunks:
        fields_ = chunk.split(US)
        if len(fields_) != nfields:
            raise ParseError(
                f"{what}: expected {nfields} fields, got {len(fields_)} in {chunk!r}",
                hint="the cluster's Slurm prints a format roach does not know; report it with this line",
            )
        yield fields_


def parse_squeue(text: str) -> list[QueueRecord]:
    """Output of ``squeue -h -O <squeue_format()>``.

    A round of the watch reads the same lines again and again (a held array of 1,000 tasks prints 1,000
    lines that change only when a task does): each distinct line is parsed once, and its record (frozen)
    reused while it is seen."""
    chunks = [c.lstrip("\n") for c in text.split(RS)]
    return [_squeue_record(c) for c in chunks if c.strip()]


def squeue_record(chunk: str) -> QueueRecord:
    """One record of :func:`parse_squeue`'s text, without its record separator (and uncached: a caller that
    keeps records by line, as the watch does, caches them itself)."""
    for f in records(chunk + RS, len(SQUEUE_FIELDS), RS, "squeue"):
        (
            jobid,
            arrayid,
            _arrjob,
            _arrtask,
            name,
            user,
            account,
            partition,
            qos,
            state,
            reason,
            used,
            limit,
            restarts,
            nnodes,
            nodelist,
            tres,
            submit,
            start,
        ) = f
        reason_text = reason.strip()
        return QueueRecord(
            ref=JobRef.parse(arrayid),
            raw_id=parse_int(jobid, "a job id"),
            name=name,
            user=user.strip(),
            account=account.strip(),
            partition=partition.strip(),
            qos=qos.strip(),
            state=JobState.parse(state),
            reason=PendingReason.parse(reason_text),
            reason_text=reason_text,
            elapsed_s=parse_duration(used) or 0,
            time_limit_s=parse_duration(limit),
            restart_count=parse_int(restarts, "a restart count"),
            nodes=parse_int(nnodes, "a node count"),
            nodelist=nodelist.strip(),
            tres=parse_tres(tres),
            submit_time=parse_time(submit),
            start_time=parse_time(start),
        )
    raise ParseError(f"squeue: no record in {chunk!r}")


_squeue_record = functools.lru_cache(maxsize=65536)(squeue_record)


@dataclass(frozen=True)
class AcctRecord:
    """One line of ``sacct``: an allocation (``step is None``) or one of its steps (``batch``, ``extern``, ``0``)."""

    ref: JobRef
    step: str | None
    raw_id: str
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: JobState
    state_text: str
    exit_code: int
    exit_signal: int
    elapsed_s: int
    time_limit_s: int | None
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    nodes: int
    nodelist: str
    tres: Tres
    reason: PendingReason
    reason_text: str

    @property
    def job_id(self) -> str:
        return str(self.ref) if self.step is None else f"{self.ref}.{self.step}"


def parse_sacct(text: str) -> list[AcctRecord]:
    """Output of ``sacct -n -P --delimiter=US --format=<SACCT_FIELDS>``."""
    return [acct_record(f) for f in records(text, len(SACCT_FIELDS), None, "sacct")]


def acct_record(f: list[str]) -> AcctRecord:
    """One sacct record from its :data:`SACCT_FIELDS` fields, in order."""
    (
        jobid,
        raw,
        name,
        user,
        account,
        partition,
        qos,
        state,
        exit_code,
        elapsed,
        limit,
        submit,
        start,
        end,
        nnodes,
        nodelist,
        tres,
        reason,
    ) = f
    base, _, step = jobid.strip().partition(".")
    code, sig = parse_exit_code(exit_code)
    return AcctRecord(
        ref=JobRef.parse(base),
        step=step or None,
        raw_id=raw.strip(),
        name=name,
        user=user.strip(),
        account=account.strip(),
        partition=partition.strip(),
        qos=qos.strip(),
        state=JobState.parse(state),
        state_text=state.strip(),
        exit_code=code,
        exit_signal=sig,
        elapsed_s=parse_int(elapsed, "elapsed seconds"),
        time_limit_s=parse_minutes(limit),
        submit_time=parse_time(submit),
        start_time=parse_time(start),
        end_time=parse_time(end),
        nodes=parse_int(nnodes, "a node count"),
        nodelist=nodelist.strip(),
        tres=parse_tres(tres),
        reason=PendingReason.parse(reason.strip()),
        reason_text=reason.strip(),
    )
