"""The SQLite store of runs and jobs: round trips, lookups, errors, and two processes' views of one file."""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from roach.errors import RoachError, UsageError
from roach.records.database import default_store_path
from roach.records.job_record import JobRecord, utc_now
from roach.records.schema import SCHEMA_VERSION
from roach.records.store import Store


def rec(job_id: int = 100, run_id: str = "r-abc", cluster: str = "ilc", **kw) -> JobRecord:
    base = JobRecord(
        cluster=cluster,
        job_id=job_id,
        run_id=run_id,
        name="train",
        target="pkg.mod:main",
        commit="deadbeef",
        repo="/home/u/repo",
        log_path=f"/scratch/logs/{run_id}_{job_id}.out",
        bundle_dir=f"/scratch/logs/bundles/{job_id}",
        run_dir=f"/scratch/runs/{run_id}",
        submitted_at="2026-01-02T03:04:05Z",
        resources={"gpus": 4, "partition": "gpu", "nested": {"a": [1, 2]}},
        status="submitted",
        slurm_state=None,
        exit_code=None,
        recorded_at=None,
    )
    return replace(base, **kw)


def test_utc_now_format():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_now())


def test_default_path_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("ROACH_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "roach" / "store.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "roach" / "store.sqlite"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "roach" / "store.sqlite"


def test_construction_does_no_io_and_first_use_creates_dirs(tmp_path):
    path = tmp_path / "a" / "b" / "store.sqlite"
    s = Store(path)
    assert not (tmp_path / "a").exists()
    assert s.recent() == []
    assert path.is_file()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    s.close()


def test_round_trip(store):
    r = rec(holder=42)
    store.add(r)
    assert store.get("ilc", 100) == r
    assert store.get("ilc", 101) is None
    assert store.get("marlowe", 100) is None


def test_duplicate_job_raises_usage_error(store):
    store.add(rec())
    with pytest.raises(UsageError, match=r"job 100 on cluster 'ilc' is already in the store \(run r-abc") as err:
        store.add(rec(run_id="r-other"))
    # what to do: a lab made afresh numbers its jobs from 1 again; another store keeps this one's records
    assert "lab made afresh" in (err.value.hint or "") and f"ROACH_STORE=<new file> (this one: {store.path})" in (
        err.value.hint or ""
    )
    store.add(rec(cluster="marlowe"))  # same job id on another cluster is fine
    assert len(store.recent()) == 2


def test_update_final(store):
    store.add(rec())
    store.update_final("ilc", 100, "cancelled", "CANCELLED by 1001", "0:15", "2026-01-02T04:00:00Z")
    got = store.get("ilc", 100)
    assert (got.status, got.slurm_state, got.exit_code, got.recorded_at) == (
        "cancelled",
        "CANCELLED by 1001",
        "0:15",
        "2026-01-02T04:00:00Z",
    )
    assert got.is_final and got.resources == rec().resources


def test_update_final_rejects_bad_status_and_unknown_job(store):
    store.add(rec())
    with pytest.raises(UsageError, match="'running' is not a final status; expected one of: completed"):
        store.update_final("ilc", 100, "running", None, None, utc_now())
    with pytest.raises(UsageError, match="job 7 on cluster 'ilc' is not in the store"):
        store.update_final("ilc", 7, "completed", "COMPLETED", "0:0", utc_now())
    assert store.get("ilc", 100).status == "submitted"


def test_find_by_run_id_and_job_id(store):
    store.add(rec(100, "r-a"))
    store.add(rec(101, "r-b"))
    store.add(rec(102, "r-a"))  # r-a resubmitted
    assert store.find("r-a").job_id == 102
    assert store.find("r-b").job_id == 101
    assert store.find("100").run_id == "r-a"
    assert store.find(" 101 ").run_id == "r-b"


def test_find_digit_run_id_falls_back_to_run(store):
    store.add(rec(100, "20260102"))
    assert store.find("20260102").job_id == 100


def test_find_ambiguous_job_id_lists_matches(store):
    store.add(rec(100, "r-a", cluster="ilc"))
    store.add(rec(100, "r-m", cluster="marlowe"))
    with pytest.raises(UsageError) as e:
        store.find("100")
    msg = str(e.value)
    assert "job id 100 is recorded on 2 clusters" in msg
    assert "ilc: job 100, run r-a" in msg and "marlowe: job 100, run r-m" in msg
    assert "--cluster marlowe" in msg  # newest first
    assert store.find("100", cluster="marlowe").run_id == "r-m"


def test_find_unknown_says_how_to_list(store):
    store.add(rec())
    with pytest.raises(UsageError) as e:
        store.find("nope")
    assert "no job id or run id 'nope'" in str(e.value)
    assert "roach ls" in str(e.value)
    with pytest.raises(UsageError, match="on cluster 'aws'"):
        store.find("100", cluster="aws")


def test_recent_newest_first_limit_and_cluster(store):
    for i in range(5):
        store.add(rec(200 + i, f"r{i}", cluster="ilc" if i % 2 == 0 else "aws"))
    assert [r.job_id for r in store.recent()] == [204, 203, 202, 201, 200]
    assert [r.job_id for r in store.recent(limit=2)] == [204, 203]
    assert [r.job_id for r in store.recent(cluster="aws")] == [203, 201]


def test_runs(store):
    store.add(rec(1, "r-a"))
    store.add(rec(2, "r-b", cluster="aws"))
    store.add(rec(3, "r-a", cluster="aws"))
    assert [r.job_id for r in store.jobs_for_run("r-a")] == [1, 3]
    assert store.latest_for_run("r-a").job_id == 3
    assert store.latest_for_run("r-a", cluster="ilc").job_id == 1
    assert store.latest_for_run("r-zzz") is None
    assert store.jobs_for_run("r-zzz") == []


def test_delete(store):
    store.add(rec(1))
    store.add(rec(2))
    store.delete("ilc", 1)
    assert store.get("ilc", 1) is None
    assert [r.job_id for r in store.recent()] == [2]
    store.add(rec(3))
    assert [r.job_id for r in store.recent()] == [3, 2]


def test_two_stores_on_one_file_see_each_others_writes(tmp_path):
    path = tmp_path / "s.sqlite"
    a, b = Store(path), Store(path)
    a.add(rec(1))
    assert b.get("ilc", 1) == rec(1)
    b.add(rec(2))
    b.update_final("ilc", 1, "completed", "COMPLETED", "0:0", "2026-01-02T05:00:00Z")
    assert [r.job_id for r in a.recent()] == [2, 1]
    assert a.get("ilc", 1).status == "completed"
    with pytest.raises(UsageError):
        a.add(rec(2))
    a.close()
    b.close()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(
        RoachError, match=f"schema version {SCHEMA_VERSION + 1}; this roach reads up to {SCHEMA_VERSION}"
    ):
        Store(path).recent()


def test_unusable_path_is_a_roach_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RoachError, match="failed while opening it") as e:
        Store(tmp_path / "file" / "s.sqlite").recent()
    assert "ROACH_STORE" in str(e.value)


def test_missing_required_value_is_not_called_a_duplicate(store):
    with pytest.raises(UsageError, match="cannot record job 100 on 'ilc': NOT NULL") as e:
        store.add(rec(name=None))
    assert "already" not in str(e.value)
    assert store.recent() == []


def test_a_lock_held_too_long_is_a_roach_error(tmp_path, monkeypatch):
    import roach.records.database as store_mod

    path = tmp_path / "s.sqlite"
    Store(path).recent()  # schema in place
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process mid-write
    s = Store(path)
    assert s.recent() == []  # WAL: readers are not blocked by the writer
    with pytest.raises(RoachError, match="failed while writing: database is locked"):
        s.add(rec())
    other.execute("ROLLBACK")
    s.add(rec())  # the failed attempt left no transaction open
    assert s.get("ilc", 100) == rec()
    other.close()
    s.close()


def test_context_manager_closes(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        s.add(rec())
    assert s._conn is None
    assert Store(tmp_path / "s.sqlite").get("ilc", 100) == rec()


def test_opening_a_fresh_file_waits_for_another_process_s_lock(tmp_path):
    """SQLite fails the switch to WAL at once, without its busy handler, while another connection holds a
    lock: opening waits for that lock, as every other store call does, instead of failing."""
    path = tmp_path / "s.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a writer that has not yet created the schema (rollback journal)
    released = threading.Timer(0.5, lambda: other.execute("ROLLBACK"))
    released.start()
    try:
        with Store(path) as s:
            s.add(rec())
            assert s.get("ilc", 100) == rec()
    finally:
        released.join()
        other.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_version_changes_with_every_commit_of_any_connection_and_only_then(tmp_path):
    with Store(tmp_path / "s.sqlite") as a, Store(tmp_path / "s.sqlite") as b:
        a.add(rec())
        a.watch_load("ilc")  # the first look at the watch state makes its tables: a commit
        v = a.version()
        a.get("ilc", 100), a.recent(), a.watch_load("ilc")  # reads change nothing
        b.get("ilc", 100)
        assert a.version() == v
        b.update_final("ilc", 100, "completed", "COMPLETED", "0:0", utc_now())  # another connection commits
        assert a.version() != v
        v = a.version()
        a.watch_save("ilc", {}, {"seen": 1})  # this one commits
        assert a.version() != v
        v = a.version()
        with pytest.raises(UsageError):
            a.add(rec())  # refused: rolled back, nothing committed
        assert a.version() == v


def _add_many(path: str, cluster: str) -> None:
    with Store(path) as s:
        for i in range(25):
            s.add(rec(i, f"r-{cluster}-{i}", cluster=cluster))
        s.update_final(cluster, 0, "completed", "COMPLETED", "0:0", utc_now())


def test_concurrent_processes_on_a_fresh_file(tmp_path):
    """Several submitters at once, the first of them creating the schema: none fails, nothing is lost."""
    path = str(tmp_path / "new" / "s.sqlite")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(path, f"c{n}")) for n in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    with Store(path) as s:
        assert len(s.recent(limit=1000)) == 150
        assert all(s.get(f"c{n}", 0).status == "completed" for n in range(6))


# The version 1 schema, as roach 0.1 wrote it: an older user's store must open and keep every row.
_V1 = """
CREATE TABLE jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, job_id INTEGER NOT NULL, run_id TEXT NOT NULL,
    name TEXT NOT NULL, target TEXT NOT NULL, "commit" TEXT NOT NULL, repo TEXT NOT NULL, log_path TEXT NOT NULL,
    bundle_dir TEXT NOT NULL, run_dir TEXT NOT NULL, submitted_at TEXT NOT NULL, resources TEXT NOT NULL,
    status TEXT NOT NULL, slurm_state TEXT, exit_code TEXT, recorded_at TEXT, holder INTEGER,
    UNIQUE (cluster, job_id));
CREATE INDEX jobs_run ON jobs (run_id, seq);
CREATE INDEX jobs_job ON jobs (job_id);
INSERT INTO jobs VALUES (7, 'lab', 41, 'r-old', 'n', 'p.m:f', 'c0ffee', '/r', '/l/r-old_41.out', '/l/bundles/41',
    '/runs/r-old', '2026-01-01T00:00:00Z', '{"gpus": 1}', 'completed', 'COMPLETED', '0:0', '2026-01-01T00:01:00Z', NULL);
PRAGMA user_version=1;
"""


def test_a_version_1_store_is_upgraded_in_place_keeping_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_V1)
    conn.close()
    s = Store(path)
    old = s.find("41", cluster="lab")
    assert (old.run_id, old.status, old.exit_code, old.task, old.via) == ("r-old", "completed", "0:0", None, None)
    s.add(rec(41, cluster="lab", run_id="r-sweep-0", task=0))  # same array id, a task: no clash any more
    assert [r.run_id for r in s.all_jobs("lab")] == ["r-old", "r-sweep-0"]  # order (seq) kept
    s.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_array_tasks_are_rows_of_their_own(store):
    store.add_many([rec(500, run_id=f"sw-{i}", task=i) for i in range(3)])
    assert [r.slurm_id for r in store.array_tasks("ilc", 500)] == ["500_0", "500_1", "500_2"]
    assert store.find("500_1").run_id == "sw-1"
    assert store.find("sw-2").slurm_id == "500_2"
    with pytest.raises(UsageError, match="job array of 3 tasks; name one task") as e:
        store.find("500")
    assert "500_0" in str(e.value.hint)
    store.update_final("ilc", 500, "failed", "FAILED", "1:0", utc_now(), task=1)
    assert [r.status for r in store.array_tasks("ilc", 500)] == ["submitted", "failed", "submitted"]
    with pytest.raises(UsageError, match="job 500_1 on cluster 'ilc' is already in the store"):
        store.add(rec(500, run_id="again", task=1))
    with pytest.raises(UsageError, match="job 500_7 on cluster 'ilc' is not in the store"):
        store.update_final("ilc", 500, "failed", "FAILED", "1:0", utc_now(), task=7)


def test_add_many_is_all_or_nothing(store):
    store.add(rec(600, run_id="x-1", task=1))
    with pytest.raises(UsageError, match="600_1"):
        store.add_many([rec(600, run_id=f"x-{i}", task=i) for i in range(3)])
    assert [r.run_id for r in store.all_jobs()] == ["x-1"]
    store.delete("ilc", 600)
    assert store.all_jobs() == []


def test_update_final_many_records_every_run_in_one_go(store):
    store.add_many([rec(700, run_id=f"s-{i}", task=i) for i in range(3)])
    store.update_final_many(
        "ilc", [(700, 0, "completed", "COMPLETED", "0:0"), (700, 2, "failed", "FAILED", "1:0")], "2026-01-01T00:00:00Z"
    )
    assert [(r.status, r.exit_code) for r in store.array_tasks("ilc", 700)] == [
        ("completed", "0:0"),
        ("submitted", None),
        ("failed", "1:0"),
    ]
    with pytest.raises(UsageError, match="not a final status"):
        store.update_final_many("ilc", [(700, 1, "running", None, None)], "2026-01-01T00:00:00Z")
    assert store.get("ilc", 700, 1).status == "submitted"


# The jobs table at schema version 4, as that roach wrote it; versions 2 and 3 lacked its last columns.
_V4 = (Path(__file__).parent / "data" / "store" / "schema_v4.sql").read_text()


def test_a_version_2_store_gets_the_via_config_column(tmp_path):
    _SCHEMA = _V4
    path = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(path)
    v2 = (
        _SCHEMA.replace("    via          TEXT,", "    via          TEXT").split("    via_config")[0]
        + ");"
        + _SCHEMA.split(");", 1)[1]
    )
    conn.executescript(v2 + "PRAGMA user_version=2;")
    conn.execute(
        'INSERT INTO jobs (cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir, run_dir,'
        " submitted_at, resources, status, via) VALUES ('dsi', 5, 'r5', 'n', 'p.m:f', 'c', 'r', '/l', '/b',"
        " '/r', '2026-01-01T00:00:00Z', '{}', 'submitted', 'other')"
    )
    conn.commit()
    conn.close()
    s = Store(path)
    old = s.get("dsi", 5)
    assert (old.via, old.via_config) == ("other", None)
    s.add(rec(6, cluster="dsi", via="other", via_config="/home/u/.ssh/cfg"))
    assert s.get("dsi", 6).via_config == "/home/u/.ssh/cfg"
    s.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_version_3_stores_ended_jobs_have_their_job_json_behind(tmp_path):
    """An older roach recorded ends in the store only: after the upgrade they say their job.json may lack
    the end (so `roach ls`/`status` write it), and a new end records when job.json got it."""
    from roach.records.job_record import FinalRow

    _SCHEMA = _V4
    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(path)
    v3 = (
        _SCHEMA.replace("    via_config   TEXT,", "    via_config   TEXT").split("    job_json_at")[0]
        + ");"
        + _SCHEMA.split(");", 1)[1]
    )
    conn.executescript(v3 + "PRAGMA user_version=3;")
    for job, status, state in ((5, "completed", "'COMPLETED'"), (6, "submitted", "NULL")):
        conn.execute(
            'INSERT INTO jobs (cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir,'
            " run_dir, submitted_at, resources, status, slurm_state) VALUES ('dsi', ?, 'r', 'n', 'p.m:f', 'c',"
            f" 'r', '/l', '/b', '/r', '2026-01-01T00:00:00Z', '{{}}', ?, {state})",
            (job, status),
        )
    conn.commit()
    conn.close()
    s = Store(path)
    assert [(r.job_id, r.job_json_at, r.job_json_behind) for r in s.all_jobs()] == [(5, None, True), (6, None, False)]
    assert (
        s.record_ends(
            [FinalRow("dsi", 6, None, "failed", "FAILED", "1:0", "2026-01-02T00:00:00Z", "2026-01-02T00:00:01Z")]
        )
        == 1
    )
    assert (s.get("dsi", 6).job_json_at, s.get("dsi", 6).job_json_behind) == ("2026-01-02T00:00:01Z", False)
    s.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_sweeps_runs_are_found_by_its_id_and_nothing_else(store):
    store.add_many([rec(800, run_id=f"sw_a-{i}", task=i) for i in range(11)])
    store.add(rec(801, run_id="swXa-0", task=0))  # "_" is not a wildcard
    store.add(rec(802, run_id="sw_a-3"))  # run 3 resubmitted later as a plain job: the sweep's is its task
    store.add(rec(803, run_id="sw_a-extra-1", task=1))
    assert [r.run_id for r in store.sweep_runs("sw_a")] == [f"sw_a-{i}" for i in range(11)]
    assert store.sweep_runs("sw") == []


def test_submission_counts_per_run(store):
    store.add_many([rec(900 + i, run_id=f"r{i % 3}") for i in range(7)])
    assert store.submission_counts([f"r{i}" for i in range(3)] + ["nope"] + [f"x{i}" for i in range(600)]) == {
        "r0": 3,
        "r1": 2,
        "r2": 2,
    }


def test_jobs_for_runs_keeps_the_runs_order_and_each_runs_submissions_oldest_first(store):
    store.add_many([rec(2000 + i, run_id=f"s-{i}") for i in range(1200)] + [rec(5000, run_id="s-7")])
    asked = [f"s-{i}" for i in reversed(range(1200))] + ["nope"]
    got = store.jobs_for_runs(asked)
    assert [r.run_id for r in got if r.run_id != "s-7"] == [a for a in asked[:-1] if a != "s-7"]
    assert [r.job_id for r in got if r.run_id == "s-7"] == [2007, 5000]
    assert len(got) == 1201 and got == [r for a in asked for r in store.jobs_for_run(a)]


def _v4_row(conn, job_id, run_id, *, target="p.m:f", holder=None, task=None, status="submitted"):
    conn.execute(
        'INSERT INTO jobs (cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir, run_dir,'
        " submitted_at, resources, status, holder, task) VALUES ('lab', ?, ?, 'n', ?, 'c', 'r', '/l/x.out', '/b',"
        " '/r', '2026-01-01T00:00:00Z', '{}', ?, ?, ?)",
        (job_id, run_id, target, status, holder, task),
    )


def test_a_version_4_store_gets_kinds_and_attempt_numbers_in_place_of_packed_ids(tmp_path):
    """Version 4 kept an attempt as job id (n << 32) | holder and told kinds apart by a row's shape: after the
    upgrade each row says its kind, an attempt's job id is its holder's and its number is a column."""
    from roach.model.ids import JobKey, RecordKind

    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_V4 + "PRAGMA user_version=4;")
    _v4_row(conn, 41, "plain")
    _v4_row(conn, 90, "hold-1", target="roach:hold", holder=90)
    _v4_row(conn, (1 << 32) | 90, "r-in", holder=90, status="completed")
    _v4_row(conn, (2 << 32) | 90, "r-in", holder=90)
    _v4_row(conn, 4_000_000_000, "hold-big", target="roach:hold", holder=4_000_000_000)  # a 32-bit id near the top
    _v4_row(conn, (3 << 32) | 4_000_000_000, "r-big", holder=4_000_000_000)
    _v4_row(conn, 500, "sw-0", task=0)
    _v4_row(conn, 500, "sw-1", task=1)
    conn.commit()
    conn.close()
    s = Store(path)
    got = [(r.run_id, r.kind, str(r.key)) for r in s.all_jobs()]
    assert got == [
        ("plain", RecordKind.JOB, "41"),
        ("hold-1", RecordKind.HOLDER, "90"),
        ("r-in", RecordKind.ATTEMPT, "90/1"),
        ("r-in", RecordKind.ATTEMPT, "90/2"),
        ("hold-big", RecordKind.HOLDER, "4000000000"),
        ("r-big", RecordKind.ATTEMPT, "4000000000/3"),
        ("sw-0", RecordKind.TASK, "500_0"),
        ("sw-1", RecordKind.TASK, "500_1"),
    ]
    assert s.find("90").run_id == "hold-1"  # the holder, not one of its attempts
    assert s.find("90/1").status == "completed" and s.get_key("lab", JobKey(90, attempt=2)).status == "submitted"
    assert [r.attempt for r in s.attempts("lab", 90)] == [1, 2]
    s.update_final("lab", 90, "failed", "FAILED", "1:0", utc_now())  # the holder's end is the holder's alone
    assert [r.status for r in s.all_jobs()][1:4] == ["failed", "completed", "submitted"]
    s.delete("lab", 90, attempt=2)  # rolling back one attempt leaves the holder and the other attempt
    assert [str(r.key) for r in s.all_jobs() if r.job_id == 90] == ["90", "90/1"]
    s.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_keys_name_jobs_tasks_and_attempts():
    from roach.model.ids import JobKey, RecordKind

    assert [JobKey.parse(t) for t in ("123", " 123_4 ", "123/2", "run-1", "123_", "1/2/3")] == [
        JobKey(123),
        JobKey(123, task=4),
        JobKey(123, attempt=2),
        None,
        None,
        None,
    ]
    assert [str(k) for k in (JobKey(5), JobKey(5, task=0), JobKey(5, attempt=1))] == ["5", "5_0", "5/1"]
    assert (JobKey(5).kind, JobKey(5, task=0).kind, JobKey(5, attempt=1).kind) == (
        None,
        RecordKind.TASK,
        RecordKind.ATTEMPT,
    )
    with pytest.raises(UsageError, match="not both"):
        JobKey(5, task=0, attempt=1)
    with pytest.raises(UsageError, match="expected one of: job, task, holder, attempt"):
        RecordKind.parse("array")


def test_an_attempts_end_is_recorded_on_the_attempt_alone(store):
    """An attempt shares its holder's job id: its end must not land on the holder or a sibling attempt."""
    from roach.model.ids import RecordKind
    from roach.records.job_end import End, record_ends

    store.add(rec(90, run_id="hold-1", holder=90, kind=RecordKind.HOLDER))
    attempts = [rec(90, run_id="r-in", holder=90, attempt=n, kind=RecordKind.ATTEMPT) for n in (1, 2)]
    store.add_many(attempts)
    (done,) = record_ends(store, None, [End(attempts[1], "completed", "COMPLETED", "0:0")], written=True)
    assert str(done.key) == "90/2" and done.status == "completed"
    assert [(str(r.key), r.status) for r in store.all_jobs()] == [
        ("90", "submitted"),
        ("90/1", "submitted"),
        ("90/2", "completed"),
    ]


def test_a_records_status_is_typed_and_reads_as_its_text(store):
    from roach.model.status import FINAL_STATUSES, Status

    store.add(rec(100))
    store.update_final("ilc", 100, "timeout", "TIMEOUT", "0:15", utc_now())
    got = store.get("ilc", 100)
    assert got.status is Status.TIMEOUT and got.status == "timeout" and got.status.is_final
    assert store.get("ilc", 100).status in FINAL_STATUSES and not Status.RUNNING.is_final
    with pytest.raises(UsageError, match="'pending' is not a final status; expected one of: completed, failed"):
        Status.final("pending")


_V5 = (Path(__file__).parent / "data" / "store" / "schema_v5.sql").read_text()


def _v5_store(tmp_path: Path) -> Path:
    """A version 5 store (as roach wrote it before error lines) with one job ended FAILED."""
    path = tmp_path / "v5.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_V5 + "PRAGMA user_version=5;")
    conn.execute(
        'INSERT INTO jobs (cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir, run_dir,'
        " submitted_at, resources, status, slurm_state, exit_code) VALUES ('lab', 7, 'r7', 'n', 'p.m:f', 'c', 'r',"
        " '/l', '/b', '/r', '2026-01-01T00:00:00Z', '{}', 'failed', 'FAILED', '128:0')"
    )
    conn.commit()
    conn.close()
    return path


def test_a_version_5_stores_failed_job_has_no_error_line(tmp_path):
    s = Store(_v5_store(tmp_path))
    assert s.get("lab", 7).error_line is None
    s.close()


def test_a_version_5_store_is_upgraded_to_the_current_version(tmp_path):
    path = _v5_store(tmp_path)
    Store(path).get("lab", 7)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_an_end_recorded_with_an_error_line_keeps_it(store):
    from roach.records.job_record import FinalRow

    store.add(rec(71, cluster="dsi"))
    line = "fatal: detected dubious ownership in repository at '/srv/r.git'"
    store.record_ends(
        [FinalRow("dsi", 71, None, "failed", "FAILED", "128:0", "2026-01-02T00:00:00Z", None, None, line)]
    )
    assert store.get("dsi", 71).error_line == line


def test_an_end_recorded_again_without_an_error_line_keeps_the_first(store):
    """A repair (job.json written later) reads a log that may be gone: it does not erase the line."""
    from roach.records.job_record import FinalRow

    store.add(rec(72, cluster="dsi"))
    line = "ValueError: bad lr"
    store.record_ends([FinalRow("dsi", 72, None, "failed", "FAILED", "1:0", "2026-01-02T00:00:00Z", None, None, line)])
    store.record_ends([FinalRow("dsi", 72, None, "failed", "FAILED", "1:0", "2026-01-02T00:00:00Z", "x", None, None)])
    assert store.get("dsi", 72).error_line == line
