"""Grants: the GPU-hours a person allowed on a metered cluster, and what each submission holds and spent of them.

A grant is made by the person whose budget it is (`roach grant`, at a terminal); the store keeps it and every
*hold* against it: what one submission may spend at worst (GPUs x time limit x runs), taken in the same
transaction that checks the grant's room, so several processes submitting at once cannot pass a grant between
them. Once the submission's jobs are queued the hold names them; once they end, what Slurm's accounting says
they spent replaces the worst case (:mod:`roach.ops.spend`). A hold whose process died before its jobs were
queued holds nothing.

Two tables added on first use (CREATE TABLE IF NOT EXISTS), like the watch's: an older roach ignores them.
"""

from __future__ import annotations

import getpass
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from roach._proc import alive, boot_id
from roach.errors import UsageError
from roach.records.database import Database

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS grants (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- shown as g<id>
        cluster     TEXT    NOT NULL,
        gpu_hours   REAL    NOT NULL,
        experiment  TEXT,             -- NULL: every experiment on the cluster
        until       TEXT,             -- UTC ISO time it ends (NULL: until revoked)
        note        TEXT,
        granted_by  TEXT    NOT NULL,  -- the login of the person at the terminal
        made_at     TEXT    NOT NULL,
        revoked_at  TEXT,
        announced   INTEGER NOT NULL DEFAULT 0)  -- the highest share (50, 80, 100 %) the watch has said""",
    """CREATE TABLE IF NOT EXISTS grant_holds (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        grant_id    INTEGER NOT NULL REFERENCES grants (id),
        cluster     TEXT    NOT NULL,
        experiment  TEXT,             -- the submission's experiment (NULL: none named)
        job_ids     TEXT,             -- JSON list of Slurm job ids; NULL while the submission is being queued
        held        REAL    NOT NULL,  -- GPU-hours: the submission's worst case
        spent       REAL    NOT NULL DEFAULT 0,  -- GPU-hours Slurm's accounting says its jobs spent so far
        base        REAL    NOT NULL DEFAULT 0,  -- GPU-hours its jobs had spent under an earlier grant
        settled     INTEGER NOT NULL DEFAULT 0,  -- 1: every job ended, ``spent`` is final
        what        TEXT    NOT NULL,  -- the submission, in words
        pid         INTEGER NOT NULL,  -- the process queuing it (a reservation of a dead one holds nothing)
        boot        TEXT    NOT NULL,
        made_at     TEXT    NOT NULL,
        budget_held INTEGER NOT NULL DEFAULT 0)  -- 1: its pending jobs were held in Slurm when the grant ran out""",
)

#: The shares of a grant the watch announces, in percent.
THRESHOLDS = (50, 80, 100)


class GrantRefused(UsageError):
    """A metered submission no live grant has room for; nothing was queued."""

    rule = "grant"


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Grant:
    """GPU-hours a person allowed on a cluster (for one experiment, or all of them), until revoked or ``until``."""

    id: int
    cluster: str
    gpu_hours: float
    experiment: str | None
    until: str | None
    note: str | None
    granted_by: str
    made_at: str
    revoked_at: str | None
    announced: int

    @property
    def name(self) -> str:
        return f"g{self.id}"

    def live(self, at: datetime) -> bool:
        return self.revoked_at is None and (self.until is None or at < datetime.fromisoformat(self.until))

    def covers(self, cluster: str, experiment: str | None) -> bool:
        return self.cluster == cluster and (self.experiment is None or self.experiment == experiment)

    @property
    def scope(self) -> str:
        return f"experiment {self.experiment}" if self.experiment else "every experiment"


@dataclass(frozen=True)
class Hold:
    """One submission against a grant: its worst case, and what it spent."""

    id: int
    grant_id: int
    cluster: str
    experiment: str | None
    job_ids: tuple[int, ...] | None  # None: still being queued
    held: float
    spent: float
    base: float  # what its jobs spent under the grant it was moved from (not this grant's)
    settled: bool
    what: str
    pid: int
    boot: str
    made_at: str
    budget_held: bool

    @property
    def counted(self) -> float:
        """What it takes of its grant: what it spent once its jobs ended, else the larger of its worst case and
        what it spent so far (a requeued run may spend more than one attempt's worth)."""
        return self.spent if self.settled else max(self.held, self.spent)

    def orphaned(self) -> bool:
        """A reservation whose process died before it queued anything."""
        return self.job_ids is None and (self.boot != boot_id() or not alive(self.pid))


@dataclass(frozen=True)
class GrantUse:
    """A grant with its holds: what they spent, and what they may still spend."""

    grant: Grant
    holds: tuple[Hold, ...]

    @property
    def spent(self) -> float:
        return sum(h.spent for h in self.holds)

    @property
    def held(self) -> float:
        """What unfinished submissions may still spend beyond what they spent."""
        return sum(h.counted - h.spent for h in self.holds)

    @property
    def used(self) -> float:
        return sum(h.counted for h in self.holds)

    @property
    def left(self) -> float:
        return max(0.0, self.grant.gpu_hours - self.used)

    @property
    def spent_share(self) -> float:
        return self.spent / self.grant.gpu_hours if self.grant.gpu_hours > 0 else 1.0


def _grant(row: Any) -> Grant:
    i, cluster, gh, exp, until, note, by, made, revoked, announced = row
    return Grant(int(i), cluster, float(gh), exp, until, note, by, made, revoked, int(announced))


def _hold(row: Any) -> Hold:
    i, g, cluster, experiment, ids, held, spent, base, settled, what, pid, boot, made, budget_held = row
    job_ids = None if ids is None else tuple(int(j) for j in json.loads(ids))
    return Hold(
        int(i), int(g), cluster, experiment, job_ids, float(held), float(spent), float(base), bool(settled), what,
        int(pid), boot, made, bool(budget_held),
    )  # fmt: skip


_GRANT_COLS = "id, cluster, gpu_hours, experiment, until, note, granted_by, made_at, revoked_at, announced"
_HOLD_COLS = (
    "id, grant_id, cluster, experiment, job_ids, held, spent, base, settled, what, pid, boot, made_at, budget_held"
)


class GrantBook:
    """The grants and holds in one store's file."""

    def __init__(self, db: Database):
        self.db = db
        self._ready = False

    @contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        """The store's connection in a write transaction, the tables made first in it."""
        conn = self.db._db()
        with self.db._converted(doing), self.db._transaction(conn):
            if not self._ready:
                for stmt in SCHEMA:
                    conn.execute(stmt)
                self._ready = True
            yield conn

    @contextmanager
    def _read(self, doing: str) -> Iterator[sqlite3.Connection | None]:
        """The store's connection; None where the store never had a grant (nothing written: a watch round reads
        this every time)."""
        conn = self.db._db()
        with self.db._converted(doing):
            if not self._ready:
                self._ready = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name='grant_holds'").fetchone())
            yield conn if self._ready else None

    # -- grants -------------------------------------------------------------------------------------------
    def make(
        self,
        cluster: str,
        gpu_hours: float,
        *,
        experiment: str | None = None,
        until: datetime | None = None,
        note: str | None = None,
        granted_by: str | None = None,
    ) -> Grant:
        if not gpu_hours > 0:
            raise UsageError(f"a grant's GPU-hours must be more than 0, not {gpu_hours:g}")
        by = granted_by or getpass.getuser()
        end = until.astimezone(UTC).isoformat(timespec="seconds") if until else None
        with self._write("recording a grant") as conn:
            cur = conn.execute(
                "INSERT INTO grants (cluster, gpu_hours, experiment, until, note, granted_by, made_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cluster, gpu_hours, experiment, end, note, by, now_text()),
            )
            row = conn.execute(f"SELECT {_GRANT_COLS} FROM grants WHERE id=?", (cur.lastrowid,)).fetchone()
        return _grant(row)

    def revoke(self, ref: str) -> Grant:
        """End grant ``ref`` (g3 or 3) now: what its submissions hold stays counted, nothing new is covered."""
        gid = parse_ref(ref)
        with self._write("revoking a grant") as conn:
            row = conn.execute(f"SELECT {_GRANT_COLS} FROM grants WHERE id=?", (gid,)).fetchone()
            if row is None:
                raise UsageError(f"no grant {ref!r} in the store", hint="`roach grant --list` lists the grants")
            if row[8] is None:
                conn.execute("UPDATE grants SET revoked_at=? WHERE id=?", (now_text(), gid))
            row = conn.execute(f"SELECT {_GRANT_COLS} FROM grants WHERE id=?", (gid,)).fetchone()
        return _grant(row)

    def uses(self, cluster: str | None = None) -> list[GrantUse]:
        """Every grant (on ``cluster`` if given), oldest first, with its holds."""
        with self._read("reading the grants") as conn:
            return _uses(conn, cluster) if conn is not None else []

    def announce(self, grant_id: int, share: int) -> None:
        with self._write("recording a budget line") as conn:
            conn.execute("UPDATE grants SET announced=MAX(announced, ?) WHERE id=?", (share, grant_id))

    # -- holds --------------------------------------------------------------------------------------------
    def reserve(self, cluster: str, experiment: str | None, need: float, what: str) -> tuple[Grant, Hold]:
        """Hold ``need`` GPU-hours of a live grant covering ``cluster`` and ``experiment``, in one transaction
        (a grant naming the experiment first, then the one that ends soonest); :class:`GrantRefused` if none has
        room. The hold names no job until :meth:`attach`; :meth:`release` drops it."""
        with self._write("holding a grant's GPU-hours") as conn:
            uses = _uses(conn, cluster)
            dead = {h.id for u in uses for h in u.holds if h.orphaned()}
            conn.executemany("DELETE FROM grant_holds WHERE id=?", [(i,) for i in dead])
            alive_uses = [GrantUse(u.grant, tuple(h for h in u.holds if h.id not in dead)) for u in uses]
            g = _choose(alive_uses, cluster, experiment, need, what)
            cur = conn.execute(
                "INSERT INTO grant_holds (grant_id, cluster, experiment, held, what, pid, boot, made_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (g.id, cluster, experiment, need, what, os.getpid(), boot_id(), now_text()),
            )
            row = conn.execute(f"SELECT {_HOLD_COLS} FROM grant_holds WHERE id=?", (cur.lastrowid,)).fetchone()
        return g, _hold(row)

    def check(self, cluster: str, experiment: str | None, need: float, what: str) -> Grant:
        """The grant :meth:`reserve` would hold ``need`` of now, holding nothing (a dry run's answer)."""
        with self._read("reading the grants") as conn:
            if conn is None:
                raise refusal(cluster, experiment, need, what, [])
            return _choose(_uses(conn, cluster), cluster, experiment, need, what)

    def attach(self, hold: Hold, job_ids: Iterable[int]) -> None:
        with self._write("naming a hold's jobs") as conn:
            conn.execute("UPDATE grant_holds SET job_ids=? WHERE id=?", (json.dumps(list(job_ids)), hold.id))

    def release(self, hold: Hold) -> None:
        """Drop a hold whose submission was undone: nothing of it was queued."""
        with self._write("dropping a hold") as conn:
            conn.execute("DELETE FROM grant_holds WHERE id=?", (hold.id,))

    def record_spent(self, spent: dict[int, tuple[float, bool]]) -> None:
        """Each hold's GPU-hours spent so far and whether that is final, in one transaction."""
        with self._write("recording what holds spent") as conn:
            conn.executemany(
                "UPDATE grant_holds SET spent=?, settled=? WHERE id=?", [(s, int(f), i) for i, (s, f) in spent.items()]
            )

    def mark_budget_held(self, hold_ids: Iterable[int]) -> None:
        """Note that these holds' pending jobs were held in Slurm when their grant ran out."""
        with self._write("marking holds held for budget") as conn:
            conn.executemany("UPDATE grant_holds SET budget_held=1 WHERE id=?", [(i,) for i in hold_ids])

    def move_hold(self, hold: Hold, grant_id: int) -> None:
        """Put ``hold``'s jobs under grant ``grant_id`` from now on, in one transaction: the old hold keeps what
        they spent so far, settled; a new one holds their worst case again and counts only what they spend next."""
        with self._write("moving a hold") as conn:
            conn.execute("UPDATE grant_holds SET settled=1, budget_held=0 WHERE id=?", (hold.id,))
            conn.execute(
                "INSERT INTO grant_holds (grant_id, cluster, experiment, job_ids, held, base, what, pid, boot, made_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    grant_id,
                    hold.cluster,
                    hold.experiment,
                    json.dumps(list(hold.job_ids or ())),
                    hold.held,
                    hold.base + hold.spent,
                    hold.what,
                    hold.pid,
                    hold.boot,
                    now_text(),
                ),
            )


def _uses(conn: sqlite3.Connection, cluster: str | None) -> list[GrantUse]:
    where, params = ("WHERE cluster=?", (cluster,)) if cluster else ("", ())
    grants = [_grant(r) for r in conn.execute(f"SELECT {_GRANT_COLS} FROM grants {where} ORDER BY id", params)]
    holds: dict[int, list[Hold]] = {}
    for r in conn.execute(f"SELECT {_HOLD_COLS} FROM grant_holds {where} ORDER BY id", params):
        h = _hold(r)
        holds.setdefault(h.grant_id, []).append(h)
    return [GrantUse(g, tuple(holds.get(g.id, ()))) for g in grants]


def _choose(uses: list[GrantUse], cluster: str, experiment: str | None, need: float, what: str) -> Grant:
    """Of ``uses``, the live grant covering the submission with room for ``need``: one naming its experiment first,
    then the one that ends soonest; :class:`GrantRefused` where none has room."""
    at = datetime.now(UTC)
    uses = [u for u in uses if u.grant.live(at) and u.grant.covers(cluster, experiment)]
    uses.sort(key=lambda u: (u.grant.experiment is None, u.grant.until or "~", u.grant.id))
    fits = [u for u in uses if u.left >= need - 1e-9]
    if not fits:
        raise refusal(cluster, experiment, need, what, uses)
    return fits[0].grant


def parse_ref(ref: str) -> int:
    text = ref.strip().lower().removeprefix("g")
    if not text.isdigit():
        raise UsageError(f"{ref!r} is not a grant id", hint="a grant id is g<number>, as `roach grant --list` shows")
    return int(text)


def refusal(cluster: str, experiment: str | None, need: float, what: str, uses: list[GrantUse]) -> GrantRefused:
    """Why no grant covers a submission: none is live for it, or each that is has too little left."""
    make = f"roach grant {cluster} --gpu-hours H" + (f" --experiment {experiment}" if experiment else "")
    ask = (
        f"the person whose budget {cluster} spends makes a grant at a terminal (`{make}`); a grant is the budget "
        "owner's to make, never an agent's"
    )
    scope = f" for experiment {experiment}" if experiment else ""
    if not uses:
        return GrantRefused(
            f"cluster {cluster} is metered and no live grant covers it{scope}: {what} needs {need:.2f} GPU-hours; "
            "nothing was queued",
            hint=ask,
        )
    best = max(uses, key=lambda u: u.left)
    return GrantRefused(
        f"grant {best.grant.name} on {cluster} ({best.grant.scope}) has {best.left:.2f} of its "
        f"{best.grant.gpu_hours:.4g} GPU-hours left (spent {best.spent:.2f}, held {best.held:.2f}); {what} needs "
        f"{need:.2f} GPU-hours; nothing was queued",
        hint=f"ask for less (fewer runs, GPUs or a shorter time limit), or {ask}",
    )
