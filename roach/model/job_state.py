"""Slurm job states as a typed enum: the one a rank needs too (its requeue decision reads sacct's state).

The names come from Slurm's own tables, 20.11 to 25.11: ``job_state_string``, ``job_state_string_compact``
and ``job_state_string_complete`` (src/common/slurm_protocol_defs.c). Pure: no I/O, nothing runs at import
but building the lookup table. Pending reasons are :mod:`roach.model.states`.
"""

from __future__ import annotations

import enum
import functools
import re

from roach.errors import ParseError

_PENDING, _RUNNING, _ENDED = "pending", "running", "ended"


class JobState(enum.Enum):
    """A job state as squeue (``%T``/``%t``, ``-O State``) and sacct (``State``) print it.

    The value is Slurm's long name. Every state is exactly one of pending, running or terminal:

    * pending: waiting to start, including held requeues (``REQUEUE_HOLD``, ``SPECIAL_EXIT``,
      ``RESV_DEL_HOLD``): they sit in the queue until someone releases them, so they are not terminal
      (``is_held`` says so; the pending reason says why).
    * running: the job holds or is acquiring an allocation: ``CONFIGURING``/``POWER_UP_NODE`` (its
      nodes boot), ``SUSPENDED``/``STOPPED`` (paused, allocation kept), ``COMPLETING``/``STAGE_OUT``/
      ``EXPEDITING`` (the program ended, cleanup runs and the final state is not known yet).
    * terminal: this record ended. ``PREEMPTED`` and ``NODE_FAIL`` are terminal for the sacct record even
      when the job is requeued: the requeued run shows up as a new record.
    """

    _value_: str
    _compact: str
    _phase: str

    def __new__(cls, name: str, compact: str, phase: str) -> JobState:
        obj = object.__new__(cls)
        obj._value_, obj._compact, obj._phase = name, compact, phase
        return obj

    # Base states (enum job_states).
    PENDING = "PENDING", "PD", _PENDING
    RUNNING = "RUNNING", "R", _RUNNING
    SUSPENDED = "SUSPENDED", "S", _RUNNING
    COMPLETED = "COMPLETED", "CD", _ENDED
    CANCELLED = "CANCELLED", "CA", _ENDED
    FAILED = "FAILED", "F", _ENDED
    TIMEOUT = "TIMEOUT", "TO", _ENDED
    NODE_FAIL = "NODE_FAIL", "NF", _ENDED
    PREEMPTED = "PREEMPTED", "PR", _ENDED
    BOOT_FAIL = "BOOT_FAIL", "BF", _ENDED
    DEADLINE = "DEADLINE", "DL", _ENDED
    OUT_OF_MEMORY = "OUT_OF_MEMORY", "OOM", _ENDED
    # Flags that squeue/sacct print instead of the base state.
    COMPLETING = "COMPLETING", "CG", _RUNNING
    STAGE_OUT = "STAGE_OUT", "SO", _RUNNING
    CONFIGURING = "CONFIGURING", "CF", _RUNNING
    RESIZING = "RESIZING", "RS", _RUNNING
    REQUEUED = "REQUEUED", "RQ", _PENDING  # completing on its way back to the queue
    REQUEUE_FED = "REQUEUE_FED", "RF", _PENDING
    REQUEUE_HOLD = "REQUEUE_HOLD", "RH", _PENDING
    SPECIAL_EXIT = "SPECIAL_EXIT", "SE", _PENDING  # requeued and held after the special exit code
    STOPPED = "STOPPED", "ST", _RUNNING
    REVOKED = "REVOKED", "RV", _ENDED  # federation: a sibling cluster runs the job instead
    RESV_DEL_HOLD = "RESV_DEL_HOLD", "RD", _PENDING
    SIGNALING = "SIGNALING", "SI", _RUNNING
    REQUEUED_CRON = "REQUEUED_CRON", "RC", _PENDING  # 20.11 only
    EXPEDITING = "EXPEDITING", "", _RUNNING  # 25.11+, no compact code
    # Flags only in the full state list (squeue --json, job_state_string_complete): no compact code.
    LAUNCH_FAILED = "LAUNCH_FAILED", "", _ENDED
    POWER_UP_NODE = "POWER_UP_NODE", "", _RUNNING
    RECONFIG_FAIL = "RECONFIG_FAIL", "", _PENDING  # node setup failed; the job is requeued
    UPDATE_DB = "UPDATE_DB", "", _RUNNING  # up to 24.05: resend the job start to slurmdbd

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Read a state: ``RUNNING``, ``R``, ``CANCELLED by 1001``, or sacct's cut ``CANCELLED+``/``OUT_OF_ME+``.

        Raises :class:`ParseError` for anything else: an unknown state is a bug to report, not to guess.
        """
        return _parse_state(text)

    @classmethod
    def _parse(cls, text: str) -> JobState:
        s = text.strip()
        cut = s.endswith("+")  # sacct marks a value cut to the column width with a trailing '+'
        s = s.rstrip("+").strip()
        word, rest = (s.split(None, 1) + ["", ""])[:2]
        state = _STATE_BY_NAME.get(word.upper())
        if state is not None and (not rest or cut or re.fullmatch(r"by\s+\S+", rest.strip())):
            return state
        if cut and word and not rest:
            hits = {m for n, m in _STATE_BY_NAME.items() if n.startswith(word.upper()) and n == m.value}
            if len(hits) == 1:
                return hits.pop()
        raise ParseError(
            f"unknown Slurm job state {text!r}; expected one of: {', '.join(m.value for m in cls)}",
            hint="roach knows the states of Slurm 20.11 to 25.11; a newer Slurm may have added one",
        )

    @property
    def compact(self) -> str:
        """squeue's short code (``PD``, ``R``, ``CG``); the long name where Slurm defines none."""
        return self._compact or self._value_

    @property
    def is_pending(self) -> bool:
        """Waiting to start (held ones included)."""
        return self._phase == _PENDING

    @property
    def is_running(self) -> bool:
        """Started and not ended: holds (or is booting) an allocation, paused or cleaning up included."""
        return self._phase == _RUNNING

    @property
    def is_active(self) -> bool:
        """Still in the queue: pending or running."""
        return self._phase != _ENDED

    @property
    def is_terminal(self) -> bool:
        """This record ended and will not run again by itself."""
        return self._phase == _ENDED

    @property
    def is_success(self) -> bool:
        """Ended well: ``COMPLETED`` only (a zero exit code under any other state is not success)."""
        return self is JobState.COMPLETED

    @property
    def is_held(self) -> bool:
        """Requeued into a hold: it waits for ``scontrol release`` and never starts by itself."""
        return self in (JobState.REQUEUE_HOLD, JobState.SPECIAL_EXIT, JobState.RESV_DEL_HOLD)

    @property
    def is_ending(self) -> bool:
        """Its program ended and the allocation is being let go; the final state is not known yet."""
        return self in (JobState.COMPLETING, JobState.STAGE_OUT, JobState.EXPEDITING)

    def after_queue(self) -> JobState:
        """This state as sacct recorded it, for a job no longer in squeue. slurmdbd records a job's end a
        moment after slurmctld lets it go, so an active state there means the end is not accounted yet:
        ``COMPLETING``, never the ``RUNNING`` or ``PENDING`` the job has left."""
        return self if self.is_terminal else JobState.COMPLETING


# Long names and compact codes, upper case (Slurm's own lookup, job_state_num, ignores case too).
_STATE_BY_NAME: dict[str, JobState] = {
    **{m.value: m for m in JobState},
    **{m._compact: m for m in JobState if m._compact},
}


# A queue round parses the same few state texts once per job; the results are enum members, so a cache is safe.
_parse_state = functools.lru_cache(maxsize=1024)(JobState._parse)
