"""The SQLite file under the store: opened on first use, its schema created or climbed to
:data:`~roach.records.schema.SCHEMA_VERSION` (the one migration ladder), in WAL mode, every write its own
short ``BEGIN IMMEDIATE`` transaction, SQLite's errors turned into roach's.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from roach.errors import RoachError, UsageError
from roach.records.job_record import JobRecord, from_row
from roach.records.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

BUSY_TIMEOUT_S = 30.0


def default_store_path() -> Path:
    """``$ROACH_STORE``, else ``$XDG_DATA_HOME/roach/store.sqlite`` (``~/.local/share`` by default)."""
    if os.environ.get("ROACH_STORE"):
        return Path(os.environ["ROACH_STORE"]).expanduser()
    # The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "roach" / "store.sqlite"


class Database:
    """The connection to the store's file at ``path`` (default :func:`default_store_path`); one per object."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self._conn: sqlite3.Connection | None = None
        self._commits = 0  # write transactions this object committed (see version())

    # -- connection ---------------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            with self._converted("opening it"):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # isolation_level=None: no implicit transactions; every write opens its own below.
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                try:
                    self._migrate(conn)
                except BaseException:
                    conn.close()
                    raise
            self._conn = conn
        return self._conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Create the schema in a new file, upgrade an older one; refuse a file written by a newer roach."""
        # Read the version without a lock first, so opening never waits on another process's write.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            self._set_wal(conn)
            with self._transaction(conn):
                # Two processes may create it at once: the one that waited finds it done.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:
                    # executescript() would COMMIT first; run the statements inside this transaction
                    for stmt in filter(str.strip, SCHEMA.split(";")):
                        conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        if version in MIGRATIONS:
            with self._transaction(conn):
                found = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have done it
                for stmt in MIGRATIONS.get(found, ()):
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            version = SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise RoachError(
                f"the roach store {self.path} has schema version {version}; this roach reads up to {SCHEMA_VERSION}",
                hint="upgrade roach, or point $ROACH_STORE at another file",
            )

    @staticmethod
    def _set_wal(conn: sqlite3.Connection) -> None:
        """Put the file in WAL mode (persistent in the file; cannot change inside a transaction).

        Switching takes an exclusive lock for which SQLite does not call its busy handler, so while another
        process is creating the schema the switch fails at once with "database is locked": try again, with
        a short jittered pause, until the busy timeout, as a busy handler would."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise

            time.sleep(0.005 + 0.045 * os.urandom(1)[0] / 255)  # 5-50 ms (no random module at every start)

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first write (no upgrade deadlock)
        try:
            yield
        except BaseException:
            if conn.in_transaction:  # some errors make SQLite roll back by itself
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._commits += 1

    def version(self) -> tuple[int, int]:
        """A token that changes whenever the file's contents may have: another connection (any process)
        committed (SQLite's ``data_version``, which ignores this connection's own commits), or this object
        committed. Equal tokens: what was read in between is still what the file holds."""
        conn = self._db()
        with self._converted("reading"):
            return conn.execute("PRAGMA data_version").fetchone()[0], self._commits

    @contextmanager
    def _converted(self, doing: str) -> Iterator[None]:
        """Turn SQLite's and the file system's failures into :class:`RoachError` (a path that is no store:
        :class:`UsageError`); a constraint violation is left to the caller."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except (sqlite3.Error, OSError) as e:
            if self.path.is_dir() or isinstance(e, sqlite3.DatabaseError) and "not a database" in str(e):
                raise UsageError(
                    f"{self.path} is not a roach store (it is {'a directory' if self.path.is_dir() else 'another file'})",
                    hint="point $ROACH_STORE at a roach store or at a file that does not exist yet; this one is left as it is",
                ) from e
            raise RoachError(
                f"the roach store {self.path} failed while {doing}: {e}",
                hint=f"another roach process may have held it over {BUSY_TIMEOUT_S:.0f} s, or the file is not "
                "writable; check it, or point $ROACH_STORE at another file",
            ) from e

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._db()
        with self._converted("writing"), self._transaction(conn):
            yield conn

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[JobRecord]:
        conn = self._db()
        with self._converted("reading"):
            rows = conn.execute(sql, params).fetchall()
        return [from_row(r) for r in rows]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
