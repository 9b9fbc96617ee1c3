"""The watch's events for an agent, by cursor.

roach keeps the watch's *state* in the store (what each job looked like last round), not its events: a round of
`roach watch` says only what changed since the last round saved there, by whichever process ran it. The MCP
server runs one such round when asked and numbers what it said in a log of its own, so an agent asks for
"the events after cursor N" and gets them with the next cursor. A server numbers its events from the moment it
started (in microseconds), so a later server's numbers are all above an earlier one's: a cursor from a server
that has restarted since is seen as stale (the events it said before are gone; the jobs' state is not) and gets
all the new server keeps, never a silent skip. Cursor 0 asks for everything kept.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

KEEP = 10_000  # events the server remembers; older cursors get what is left and say how many were dropped


def start_number() -> int:
    """Where a new server's numbers begin: now in microseconds (no server gives a million events a second)."""
    return time.time_ns() // 1000


@dataclass
class EventLog:
    """Events numbered from ``base + 1`` in the order the rounds said them; ``seq`` is the last number given."""

    keep: int = KEEP
    base: int = field(default_factory=start_number)
    seq: int = -1  # -1: base (set after construction)
    _events: deque[dict[str, Any]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.seq < 0:
            self.seq = self.base

    def add(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            self.seq += 1
            self._events.append({"seq": self.seq, **e})
            if len(self._events) > self.keep:
                self._events.popleft()

    def since(self, cursor: int, limit: int | None = None) -> dict[str, Any]:
        """The events after ``cursor`` (at most ``limit``, oldest first), the cursor to ask with next, and how
        many events after ``cursor`` are no longer kept."""
        # a cursor of another server (an earlier one's is below base), or one never given: all that is kept
        stale = cursor != 0 and not self.base <= cursor <= self.seq
        if stale or cursor == 0:
            cursor = self.base
        after = [e for e in self._events if e["seq"] > cursor]
        dropped = (after[0]["seq"] if after else self.seq + 1) - cursor - 1
        if limit is not None:
            after = after[:limit]
        return {
            "events": after,
            "cursor": after[-1]["seq"] if after else cursor,
            "dropped": max(0, dropped),
            "stale_cursor": stale,
        }
