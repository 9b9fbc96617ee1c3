"""The watch's events for an agent, by cursor.

roach keeps the watch's *state* in the store (what each job looked like last round), not its events: a round of
`roach watch` says only what changed since the last round saved there, by whichever process ran it. The MCP
server runs one such round when asked and numbers what it said in a log of its own, so an agent asks for
"the events after cursor N" and gets them with the next cursor; a cursor is a number in this server's log and
starts again at 0 when the server restarts (the events it said before are then gone; the jobs' state is not).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

KEEP = 10_000  # events the server remembers; older cursors get what is left and say how many were dropped


@dataclass
class EventLog:
    """Events numbered from 1 in the order the rounds said them; ``seq`` is the last number given."""

    keep: int = KEEP
    seq: int = 0
    _events: deque[dict[str, Any]] = field(default_factory=deque)

    def add(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            self.seq += 1
            self._events.append({"seq": self.seq, **e})
            if len(self._events) > self.keep:
                self._events.popleft()

    def since(self, cursor: int, limit: int | None = None) -> dict[str, Any]:
        """The events after ``cursor`` (at most ``limit``, oldest first), the cursor to ask with next, and how
        many events after ``cursor`` are no longer kept."""
        stale = cursor < 0 or cursor > self.seq  # a cursor from before this server started: all it keeps
        if stale:
            cursor = 0
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
