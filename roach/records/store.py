"""The submitter's record of runs and jobs: one SQLite file, shared by every roach process of a user.

A sweep submits from several processes while ``roach watch`` records final states, so every write is
its own short ``BEGIN IMMEDIATE`` transaction, the file is in WAL mode (readers never block the
writer) and a busy timeout waits out the others instead of failing. Nothing is opened until the
first call: constructing a :class:`Store` does no I/O.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from typing import TYPE_CHECKING, Any

from roach.errors import UsageError
from roach.model.ids import JobKey, RecordKind
from roach.model.status import FINAL_STATUSES, Status
from roach.records.database import Database
from roach.records.job_record import COLUMNS, FinalRow, JobRecord
from roach.records.schema import (
    EXPERIMENTS_SCHEMA,
    WATCH_SCHEMA,
)

if TYPE_CHECKING:
    from roach.records.watch_log import LastRound, Round, Said

_SELECT = "SELECT " + ", ".join(f'"{c}"' for c in COLUMNS) + " FROM jobs"


class Store(Database):
    """The SQLite store at ``path`` (default :func:`~roach.records.database.default_store_path`): jobs, the
    watch's state, experiments. Constructing one does no I/O."""

    # -- writes -------------------------------------------------------------------------------------
    def add(self, rec: JobRecord) -> None:
        """Record a new submission. Raises :class:`UsageError` if that cluster's job id is already recorded."""
        self.add_many([rec])

    def add_many(self, recs: list[JobRecord]) -> None:
        """Record several submissions (a sweep's tasks) in one transaction: all of them or none."""
        # the fields as they are (dataclasses.astuple deep-copies each record's resources: most of a sweep's add),
        # fetched at once; a resources dict the records share (a sweep's runs) is encoded once
        encoded: dict[int, tuple[Any, str]] = {}
        rows = []
        for values in map(_FIELDS, recs):
            row = list(values)
            res = row[_RESOURCES]
            known = encoded.get(id(res))
            if known is None or known[0] is not res:
                known = encoded[id(res)] = (res, json.dumps(res))
            row[_RESOURCES], row[_KIND] = known[1], row[_KIND].value
            rows.append(row)
        cols = ", ".join(f'"{c}"' for c in COLUMNS)
        try:
            with self._write() as conn:
                conn.executemany(f"INSERT INTO jobs ({cols}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)
        except sqlite3.IntegrityError as e:
            for rec in recs:
                old = self.get(rec.cluster, rec.job_id, rec.task, rec.attempt)
                if old is not None:
                    raise UsageError(
                        f"job {rec.key} on cluster {rec.cluster!r} is already in the store"
                        f" (run {old.run_id}, submitted {old.submitted_at})",
                        hint=(
                            "Slurm numbers jobs anew only after a reset of its database (or, for the lab, a lab made "
                            "afresh in a removed state folder): the record is of a job before that. Keep this store "
                            f"for its records and start another: ROACH_STORE=<new file> (this one: {self.path})"
                        ),
                    ) from None
            # a NOT NULL column left None, or a duplicate within recs: a caller's bug
            what = f"job {recs[0].key}" if len(recs) == 1 else f"{len(recs)} jobs"
            raise UsageError(f"cannot record {what} on {recs[0].cluster!r}: {e}") from e

    def update_final(
        self,
        cluster: str,
        job_id: int,
        status: str,
        slurm_state: str | None,
        exit_code: str | None,
        recorded_at: str,
        task: int | None = None,
    ) -> None:
        """Record a job's (or an array task's) final state (what sacct said once it ended)."""
        if not self.update_final_many(cluster, [(job_id, task, status, slurm_state, exit_code)], recorded_at):
            name = f"{job_id}_{task}" if task is not None else str(job_id)
            raise UsageError(
                f"job {name} on cluster {cluster!r} is not in the store {self.path}",
                hint="`roach ls` lists the recorded jobs",
            )

    def update_final_many(
        self, cluster: str, finals: list[tuple[int, int | None, str, str | None, str | None]], recorded_at: str
    ) -> int:
        """Record many final states in one transaction: ``(job_id, task, status, slurm_state, exit_code)``
        each (a sweep's runs). Rows not in the store are skipped; returns how many were recorded. Only
        :func:`roach.records.job_end.record_ends` records an end (with its job.json); this is its store half."""
        return self.record_ends(
            [FinalRow(cluster, j, t, Status.final(st), state, code, recorded_at) for j, t, st, state, code in finals]
        )

    def record_ends(self, rows: list[FinalRow]) -> int:
        """Record the ends in ``rows`` (any clusters) in one transaction; rows not in the store are skipped.
        Returns how many were recorded."""
        bad = sorted({r.status for r in rows} - set(FINAL_STATUSES))
        if bad:
            raise UsageError(
                f"{', '.join(map(repr, bad))} {'is' if len(bad) == 1 else 'are'} not a final status; "
                f"expected one of: {', '.join(FINAL_STATUSES)}"
            )
        with self._write() as conn:
            cur = conn.executemany(
                "UPDATE jobs SET status=?, slurm_state=?, exit_code=?, recorded_at=?, job_json_at=?,"
                " error_line=IFNULL(?, error_line)"
                " WHERE cluster=? AND job_id=? AND IFNULL(task, -1)=? AND IFNULL(attempt, -1)=?",
                [
                    (
                        r.status,
                        r.slurm_state,
                        r.exit_code,
                        r.recorded_at,
                        r.job_json_at,
                        r.error_line,
                        r.cluster,
                        r.job_id,
                        _null_key(r.task),
                        _null_key(r.attempt),
                    )
                    for r in rows
                ],
            )
        return cur.rowcount

    def delete(self, cluster: str, job_id: int, attempt: int | None = None) -> None:
        """Forget a job, every task of it if an array (never a holder's attempts), or only attempt ``attempt``
        of holder ``job_id``. Only for rolling back a submission that failed after the record was added."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM jobs WHERE cluster=? AND job_id=? AND IFNULL(attempt, -1)=?",
                (cluster, job_id, _null_key(attempt)),
            )

    # -- reads --------------------------------------------------------------------------------------
    def get(self, cluster: str, job_id: int, task: int | None = None, attempt: int | None = None) -> JobRecord | None:
        """The job (or array task ``task`` of array ``job_id``, or attempt ``attempt`` inside holder ``job_id``)
        recorded on ``cluster``."""
        hits = self._query(
            f"{_SELECT} WHERE cluster=? AND job_id=? AND IFNULL(task, -1)=? AND IFNULL(attempt, -1)=?",
            (cluster, job_id, _null_key(task), _null_key(attempt)),
        )
        return hits[0] if hits else None

    def get_key(self, cluster: str, key: JobKey) -> JobRecord | None:
        """The record ``key`` names on ``cluster``."""
        return self.get(cluster, key.job_id, key.task, key.attempt)

    def attempts(self, cluster: str, holder: int) -> list[JobRecord]:
        """Every recorded attempt inside ``holder``, by attempt number."""
        return self._query(
            f"{_SELECT} WHERE cluster=? AND job_id=? AND kind=? ORDER BY attempt",
            (cluster, holder, RecordKind.ATTEMPT.value),
        )

    def sweep_runs(self, sweep_id: str) -> list[JobRecord]:
        """The first submission of every run of sweep ``sweep_id`` (its array tasks), in run order."""
        pattern = sweep_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%"
        recs = self._query(f"{_SELECT} WHERE run_id LIKE ? ESCAPE '\\' AND task IS NOT NULL ORDER BY seq", (pattern,))
        first: dict[str, JobRecord] = {}
        for r in recs:
            if r.run_id[len(sweep_id) + 1 :].isdigit():
                first.setdefault(r.run_id, r)
        return sorted(first.values(), key=lambda r: int(r.run_id[len(sweep_id) + 1 :]))

    def array_tasks(self, cluster: str, job_id: int) -> list[JobRecord]:
        """Every recorded task of array job ``job_id``, by task index."""
        return self._query(
            f"{_SELECT} WHERE cluster=? AND job_id=? AND task IS NOT NULL ORDER BY task", (cluster, job_id)
        )

    def jobs_for_run(self, run_id: str) -> list[JobRecord]:
        """Every submission of a run, oldest first (a run resubmitted after preemption has several)."""
        return self._query(f"{_SELECT} WHERE run_id=? ORDER BY seq", (run_id,))

    def jobs_for_runs(self, run_ids: list[str]) -> list[JobRecord]:
        """Every submission of each of ``run_ids``: in the order of ``run_ids``, each run's oldest first (a few
        queries, not one a run)."""
        ids = list(dict.fromkeys(run_ids))
        by_run: dict[str, list[JobRecord]] = {}
        for i in range(0, len(ids), 500):  # under SQLite's bound on parameters, whatever its version
            chunk = tuple(ids[i : i + 500])
            for r in self._query(f"{_SELECT} WHERE run_id IN ({', '.join('?' * len(chunk))}) ORDER BY seq", chunk):
                by_run.setdefault(r.run_id, []).append(r)
        return [r for run_id in ids for r in by_run.get(run_id, [])]

    def submission_counts(self, run_ids: list[str]) -> dict[str, int]:
        """How many jobs each of ``run_ids`` was submitted as (a few queries, not one a run)."""
        conn = self._db()
        out: dict[str, int] = {}
        ids = sorted(set(run_ids))
        with self._converted("reading"):
            for i in range(0, len(ids), 500):  # under SQLite's bound on parameters, whatever its version
                chunk = ids[i : i + 500]
                out.update(
                    conn.execute(
                        f"SELECT run_id, COUNT(*) FROM jobs WHERE run_id IN "
                        f"({', '.join('?' * len(chunk))}) GROUP BY run_id",
                        chunk,
                    ).fetchall()
                )
        return out

    def latest_for_run(self, run_id: str, cluster: str | None = None) -> JobRecord | None:
        """The most recent submission of ``run_id`` (on ``cluster`` if given)."""
        where, params = _where(run_id=run_id, cluster=cluster)
        hits = self._query(f"{_SELECT} {where} ORDER BY seq DESC LIMIT 1", params)
        return hits[0] if hits else None

    def recent(self, limit: int = 20, cluster: str | None = None) -> list[JobRecord]:
        """The ``limit`` most recent submissions, newest first."""
        where, params = _where(cluster=cluster)
        return self._query(f"{_SELECT} {where} ORDER BY seq DESC LIMIT ?", (*params, limit))

    def find(self, ref: str, cluster: str | None = None) -> JobRecord:
        """The job ``ref`` names: a Slurm job id (``123``, an array task ``123_4``), an attempt inside a holder
        (``123/2``) or a run id (its latest submission).

        Raises :class:`UsageError` when nothing matches, or when a job id is recorded on several clusters
        and ``cluster`` does not say which.
        """
        ref = ref.strip()
        key = JobKey.parse(ref)
        hits: list[JobRecord] = []
        if key is not None and key.kind is not None:  # an array task as Slurm names it, an attempt as roach does
            where, params = _where(job_id=key.job_id, task=key.task, attempt=key.attempt, cluster=cluster)
            hits = self._query(f"{_SELECT} {where} ORDER BY seq DESC", params)
        elif key is not None:
            where, params = _where(job_id=key.job_id, cluster=cluster)
            hits = [h for h in self._query(f"{_SELECT} {where} ORDER BY seq DESC", params) if not h.is_attempt]
            plain = [h for h in hits if h.task is None]
            if hits and not plain:
                first = min(hits, key=lambda h: h.task or 0)
                raise UsageError(
                    f"job {ref} is a sweep's job array of {len(hits)} tasks; name one task",
                    hint=f"e.g. {first.slurm_id} (its run id {first.run_id}); `roach ls` lists them",
                )
            hits = plain
        if len(hits) > 1:
            listed = "; ".join(f"{h.cluster}: job {h.slurm_id}, run {h.run_id}, {h.submitted_at}" for h in hits)
            raise UsageError(
                f"job id {ref} is recorded on {len(hits)} clusters: {listed}",
                hint=f"name the cluster, e.g. --cluster {hits[0].cluster}",
            )
        if hits:
            return hits[0]
        rec = self.latest_for_run(ref, cluster)  # a run id may be all digits too
        if rec is not None:
            return rec
        on = f" on cluster {cluster!r}" if cluster else ""
        raise UsageError(
            f"no job id or run id {ref!r}{on} in the store {self.path}",
            hint="`roach ls` lists recent jobs and their run ids",
        )

    # -- watch state (`roach watch`) ----------------------------------------------------------------
    # Two tables added on first use (CREATE TABLE IF NOT EXISTS), so SCHEMA_VERSION and the jobs table are
    # untouched and an older roach reading this file ignores them. The watch log's module loads in the methods
    # that read or write it: `roach ls` and `status` read jobs only.
    def _watch_db(self) -> sqlite3.Connection:
        from roach.records.watch_log import SCHEMA

        conn = self._db()
        if not getattr(self, "_watch_ready", False):
            with self._converted("creating the watch tables"), self._transaction(conn):
                for stmt in (*WATCH_SCHEMA, *SCHEMA):
                    conn.execute(stmt)
            self._watch_ready = True
        return conn

    def unfinished(self, cluster: str) -> list[JobRecord]:
        """The jobs recorded on ``cluster`` whose final state is not recorded yet, oldest first."""
        return self._query(f"{_SELECT} WHERE cluster=? AND status='submitted' ORDER BY seq", (cluster,))

    def watch_load(self, cluster: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """What the watcher saved for ``cluster``: its view of each job (by squeue's job id), and the rest."""
        conn = self._watch_db()
        with self._converted("reading the watch state"):
            jobs = conn.execute("SELECT key, data FROM watch_jobs WHERE cluster=?", (cluster,)).fetchall()
            meta = conn.execute("SELECT key, value FROM watch_meta WHERE cluster=?", (cluster,)).fetchall()
        return {k: json.loads(v) for k, v in jobs}, {k: json.loads(v) for k, v in meta}

    def watch_save(
        self,
        cluster: str,
        jobs: dict[str, dict[str, Any]],
        meta: dict[str, Any],
        forget: tuple[str, ...] | list[str] = (),
        round: Round | None = None,
    ) -> None:
        """Save one round in one transaction: upsert ``jobs`` and ``meta``, drop the jobs in ``forget``, and add
        a poller's ``round`` (its events) to the watch log."""
        from roach.records.watch_log import write_round

        conn = self._watch_db()
        with self._converted("writing the watch state"), self._transaction(conn):
            if round is not None:
                write_round(conn, cluster, round)
            conn.executemany(
                "INSERT OR REPLACE INTO watch_jobs (cluster, key, data) VALUES (?, ?, ?)",
                [(cluster, k, json.dumps(v)) for k, v in jobs.items()],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO watch_meta (cluster, key, value) VALUES (?, ?, ?)",
                [(cluster, k, json.dumps(v)) for k, v in meta.items()],
            )
            conn.executemany("DELETE FROM watch_jobs WHERE cluster=? AND key=?", [(cluster, k) for k in forget])

    def watch_log(self, cluster: str, *, after: int = 0, round: int | None = None) -> list[Said]:
        """The watch log's events after seq ``after`` (of round ``round`` only, if given), oldest first."""
        from roach.records.watch_log import events

        with self._converted("reading the watch log"):
            return events(self._watch_db(), cluster, after=after, round=round)

    def watch_round(self, cluster: str) -> tuple[LastRound | None, int]:
        """The last poller round on ``cluster`` (None before the first) and the last event's seq."""
        from roach.records.watch_log import last_round, last_seq

        conn = self._watch_db()
        with self._converted("reading the watch log"):
            return last_round(conn, cluster), last_seq(conn, cluster)

    def watch_queue(self, cluster: str) -> str | None:
        """The user's queue as the last poller round read it (JSON), None before the first."""
        from roach.records.watch_log import queue

        with self._converted("reading the watch log"):
            return queue(self._watch_db(), cluster)

    def watch_reset(self, cluster: str) -> None:
        """Forget everything the watcher saved for ``cluster``."""
        conn = self._watch_db()
        with self._converted("resetting the watch state"), self._transaction(conn):
            conn.execute("DELETE FROM watch_jobs WHERE cluster=?", (cluster,))
            conn.execute("DELETE FROM watch_meta WHERE cluster=?", (cluster,))

    # -- experiments (`roach clean`) ------------------------------------------------------------------
    # A table added on first use, like the watch tables: the experiment a job was submitted under, when
    # it was named. Without a row a job's experiment is derived from its log path (roach.ops.clean).
    def _experiments_db(self) -> sqlite3.Connection:
        conn = self._db()
        if not getattr(self, "_experiments_ready", False):
            with self._converted("creating the experiments table"), self._transaction(conn):
                conn.execute(EXPERIMENTS_SCHEMA)
            self._experiments_ready = True
        return conn

    def set_experiment(self, cluster: str, job_id: int, experiment: str) -> None:
        """Record that job ``job_id`` on ``cluster`` belongs to ``experiment``."""
        if not experiment or "/" in experiment:
            raise UsageError(f"experiment name {experiment!r} must be non-empty and have no '/'")
        conn = self._experiments_db()
        with self._converted("writing an experiment"), self._transaction(conn):
            conn.execute(
                "INSERT OR REPLACE INTO experiments (cluster, job_id, experiment) VALUES (?, ?, ?)",
                (cluster, job_id, experiment),
            )

    def experiment_of(self, cluster: str, job_id: int) -> str | None:
        """The experiment job ``job_id`` on ``cluster`` was submitted under (None: none was named)."""
        conn = self._experiments_db()
        with self._converted("reading an experiment"):
            row = conn.execute(
                "SELECT experiment FROM experiments WHERE cluster=? AND job_id=?", (cluster, job_id)
            ).fetchone()
        return str(row[0]) if row else None

    def experiment_names(self) -> dict[tuple[str, int], str]:
        """Every recorded (cluster, job id) -> experiment name."""
        conn = self._experiments_db()
        with self._converted("reading the experiments"):
            rows = conn.execute("SELECT cluster, job_id, experiment FROM experiments").fetchall()
        return {(c, int(j)): e for c, j, e in rows}

    def all_jobs(self, cluster: str | None = None) -> list[JobRecord]:
        """Every recorded job (on ``cluster`` if given), oldest first."""
        where, params = _where(cluster=cluster)
        return self._query(f"{_SELECT} {where} ORDER BY seq", params)


def _null_key(n: int | None) -> int:
    """A task index or attempt number as the key index stores it (-1: none)."""
    return -1 if n is None else n


_FIELDS = operator.attrgetter(*COLUMNS)  # a record's fields, in the columns' order
_RESOURCES, _KIND = COLUMNS.index("resources"), COLUMNS.index("kind")  # held as JSON and as the kind's value


def _where(**conds: Any) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause over the conditions that are not None (column names are ours, never the caller's)."""
    used = {k: v for k, v in conds.items() if v is not None}
    if not used:
        return "", ()
    return "WHERE " + " AND ".join(f'"{k}"=?' for k in used), tuple(used.values())
