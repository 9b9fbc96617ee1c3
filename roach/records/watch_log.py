"""The shared watch's log in the store: each poller round's number, time and pid, the user's queue as it last
saw it, and the round's events numbered in order. Every viewer of a cluster reads the one poller's rounds here.

The functions take the store's connection: :meth:`~roach.records.store.Store.watch_save` writes a round in the
transaction that saves the watch state, so a round's events and its state are kept together or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

KEEP_EVENTS = 10_000  # events kept per cluster; a reader further behind is told how many it missed

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS watch_rounds (
        cluster TEXT PRIMARY KEY,
        round   INTEGER NOT NULL,  -- the last round's number
        at      REAL    NOT NULL,  -- its time (epoch seconds)
        pid     INTEGER NOT NULL,  -- the poller that took it
        queue   TEXT)              -- the user's queue as that poller last read it (JSON)""",
    """CREATE TABLE IF NOT EXISTS watch_events (
        cluster TEXT    NOT NULL,
        seq     INTEGER NOT NULL,  -- in the order the rounds said them, never reused
        round   INTEGER NOT NULL,
        data    TEXT    NOT NULL,  -- the event (JSON)
        PRIMARY KEY (cluster, seq))""",
)


@dataclass(frozen=True)
class Round:
    """What one poller round adds to the log."""

    at: float
    pid: int
    events: list[dict[str, Any]]  # each event's stored form
    queue: str | None = None  # the queue's JSON; None: as the last round left it


@dataclass(frozen=True)
class LastRound:
    round: int
    at: float
    pid: int


@dataclass(frozen=True)
class Said:
    """One event of the log."""

    seq: int
    round: int
    data: dict[str, Any]


def write_round(conn: sqlite3.Connection, cluster: str, r: Round) -> int:
    """Add round ``r`` inside the caller's transaction; returns its number."""
    row = conn.execute("SELECT round FROM watch_rounds WHERE cluster=?", (cluster,)).fetchone()
    n = (row[0] if row else 0) + 1
    conn.execute(
        "INSERT INTO watch_rounds (cluster, round, at, pid, queue) VALUES (?, ?, ?, ?, ?) ON CONFLICT(cluster) DO "
        "UPDATE SET round=excluded.round, at=excluded.at, pid=excluded.pid, queue=COALESCE(excluded.queue, queue)",
        (cluster, n, r.at, r.pid, r.queue),
    )
    if r.events:
        (last,) = conn.execute("SELECT IFNULL(MAX(seq), 0) FROM watch_events WHERE cluster=?", (cluster,)).fetchone()
        conn.executemany(
            "INSERT INTO watch_events (cluster, seq, round, data) VALUES (?, ?, ?, ?)",
            [(cluster, last + i, n, json.dumps(e)) for i, e in enumerate(r.events, 1)],
        )
        conn.execute(
            "DELETE FROM watch_events WHERE cluster=? AND seq <= ?", (cluster, last + len(r.events) - KEEP_EVENTS)
        )
    return n


def events(conn: sqlite3.Connection, cluster: str, *, after: int = 0, round: int | None = None) -> list[Said]:
    """The events after seq ``after`` (of round ``round`` only, if given), oldest first."""
    sql = "SELECT seq, round, data FROM watch_events WHERE cluster=? AND seq > ?"
    args: tuple[Any, ...] = (cluster, after)
    if round is not None:
        sql, args = sql + " AND round=?", (*args, round)
    return [Said(s, n, json.loads(d)) for s, n, d in conn.execute(sql + " ORDER BY seq", args)]


def last_round(conn: sqlite3.Connection, cluster: str) -> LastRound | None:
    row = conn.execute("SELECT round, at, pid FROM watch_rounds WHERE cluster=?", (cluster,)).fetchone()
    return LastRound(*row) if row else None


def last_seq(conn: sqlite3.Connection, cluster: str) -> int:
    (seq,) = conn.execute("SELECT IFNULL(MAX(seq), 0) FROM watch_events WHERE cluster=?", (cluster,)).fetchone()
    return int(seq)


def queue(conn: sqlite3.Connection, cluster: str) -> str | None:
    row = conn.execute("SELECT queue FROM watch_rounds WHERE cluster=?", (cluster,)).fetchone()
    return row[0] if row else None
