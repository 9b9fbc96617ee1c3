"""The SQLite store of runs and jobs: round trips, lookups, errors, and two processes' views of one file."""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from roach.errors import RoachError, UsageError
from roach.slurm.store import SCHEMA_VERSION, JobRecord, Store, default_store_path, utc_now


def rec(job_id: int = 100, run_id: str = "r-abc", cluster: str = "ilc", **kw) -> JobRecord:
    base = JobRecord(
        cluster=cluster, job_id=job_id, run_id=run_id, name="train", target="pkg.mod:main", commit="deadbeef",
        repo="/home/u/repo", log_path=f"/scratch/logs/{run_id}_{job_id}.out",
        bundle_dir=f"/scratch/logs/bundles/{job_id}", run_dir=f"/scratch/runs/{run_id}",
        submitted_at="2026-01-02T03:04:05Z", resources={"gpus": 4, "partition": "gpu", "nested": {"a": [1, 2]}},
        status="submitted", slurm_state=None, exit_code=None, recorded_at=None,
    )
    return replace(base, **kw)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store.sqlite")
    yield s
    s.close()


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
    with pytest.raises(UsageError, match=r"job 100 on cluster 'ilc' is already in the store \(run r-abc"):
        store.add(rec(run_id="r-other"))
    store.add(rec(cluster="marlowe"))  # same job id on another cluster is fine
    assert len(store.recent()) == 2


def test_update_final(store):
    store.add(rec())
    store.update_final("ilc", 100, "cancelled", "CANCELLED by 1001", "0:15", "2026-01-02T04:00:00Z")
    got = store.get("ilc", 100)
    assert (got.status, got.slurm_state, got.exit_code, got.recorded_at) == (
        "cancelled", "CANCELLED by 1001", "0:15", "2026-01-02T04:00:00Z")
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
    with pytest.raises(RoachError, match="schema version 2; this roach reads up to 1"):
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
    import roach.slurm.store as store_mod

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
