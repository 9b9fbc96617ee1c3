"""RPC counts from ``sdiag`` (slurmctld) and ``sacctmgr show stats`` (slurmdbd): parse, subtract.

Both print the same two sections, "Remote Procedure Call statistics by message type" and "... by user",
one ``NAME ( ID) count:N ave_time:A total_time:T`` line per entry, and a "Data since ... (EPOCH)" line.
A benchmark takes a snapshot before and after what it measures and subtracts. The by-user counts of the
benchmark's own user are exact; the by-type counts are the whole controller's (anyone else's RPCs
included). The controller resets its counters (at midnight, or on ``sdiag --reset``): a snapshot pair
across a reset raises :class:`StatsReset`, and the caller measures that repetition again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY = re.compile(r"^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)\s*$")
_SINCE = re.compile(r"^Data since\s+.*\((\d+)\)\s*$")
_SECTIONS = {
    "Remote Procedure Call statistics by message type": "type",
    "Remote Procedure Call statistics by user": "user",
}


class StatsError(ValueError):
    """The text is not what ``sdiag`` / ``sacctmgr show stats`` print."""


class StatsReset(StatsError):
    """The counters were reset between two snapshots: the difference means nothing."""


@dataclass(frozen=True)
class RpcStats:
    """RPC counts (and total server time, microseconds) by message type and by user."""

    since: int | None = None  # epoch seconds the counters start from
    by_type: dict[str, int] = field(default_factory=dict)
    by_user: dict[str, int] = field(default_factory=dict)
    time_by_user: dict[str, int] = field(default_factory=dict)

    def user(self, name: str) -> int:
        return self.by_user.get(name, 0)

    def minus(self, before: RpcStats) -> RpcStats:
        """What happened between ``before`` and this snapshot (``self`` is the later one)."""
        if before.since is not None and self.since is not None and before.since != self.since:
            raise StatsReset(f"counters were reset between the snapshots (data since {before.since} -> {self.since})")
        diff = {}
        for name in ("by_type", "by_user", "time_by_user"):
            a, b = getattr(self, name), getattr(before, name)
            d = {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}
            if any(v < 0 for v in d.values()):
                raise StatsReset(f"a counter went down between the snapshots ({name}): they were reset")
            diff[name] = {k: v for k, v in d.items() if v}
        return RpcStats(self.since, **diff)


def parse(text: str) -> RpcStats:
    """The RPC sections of ``sdiag`` or ``sacctmgr show stats`` output."""
    since = None
    by: dict[str, dict[str, int]] = {"type": {}, "user": {}}
    time_by_user: dict[str, int] = {}
    section = None
    seen = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            section = _SECTIONS.get(line.strip())
            if section:
                seen.add(section)
            m = _SINCE.match(line.strip())
            if m:
                since = int(m[1])
            continue
        if section is None:
            continue
        m = _ENTRY.match(line)
        if not m:
            raise StatsError(f"unexpected line in the RPC statistics ({section} section): {line!r}")
        name, _, count, _, total = m.groups()
        by[section][name] = by[section].get(name, 0) + int(count)
        if section == "user":
            time_by_user[name] = time_by_user.get(name, 0) + int(total)
    if not seen:
        raise StatsError(f"no 'Remote Procedure Call statistics' section in the output: {text[:200]!r}...")
    return RpcStats(since, by["type"], by["user"], time_by_user)
