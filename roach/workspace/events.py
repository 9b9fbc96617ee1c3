"""One line of a wait: a state change, squeue's failure, the job gone, or a note of roach's own."""

from __future__ import annotations

from dataclasses import dataclass

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.records.job_record import utc_now


@dataclass(frozen=True)
class WaitEvent:
    """One line of the watch: ``state`` (a change), ``error`` (squeue failed), ``gone``, or ``note`` (roach's)."""

    kind: str
    at_utc: str
    text: str

    def __str__(self) -> str:
        return f"{self.at_utc} {self.kind} {self.text}".rstrip()

    @classmethod
    def parse(cls, line: str) -> WaitEvent:
        kind, _, rest = line.strip().partition(" ")
        at, _, text = rest.partition(" ")
        if kind not in ("state", "error", "gone"):
            return cls("note", utc_now(), line.strip())  # the login shell printed something of its own
        return cls(kind, at, text)

    @property
    def status(self) -> str | None:
        """``running`` if any entry runs, else ``pending``; None for lines that are not states."""
        if self.kind != "state":
            return None
        states = [_state(part.split("=", 1)[0]) for part in self.text.split(",")]
        return "pending" if all(st is not None and st.is_pending for st in states) else "running"


def _state(name: str) -> JobState | None:
    try:
        return JobState.parse(name)
    except ParseError:
        return None
