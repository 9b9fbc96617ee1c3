"""``roach wait`` reading the one poller (roach.workspace.follow): the job's states from the queue a poller round
kept in the store, on squeue's recorded output of every release, and its end from the store's row."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from roach.records.job_record import FinalRow
from roach.records.store import Store
from roach.records.watch_log import Round
from roach.records.workspace_job import WorkspaceJob, store_record
from roach.scheduler import parse as P
from roach.scheduler.queue_json import dumps
from roach.workspace.events import WaitEvent
from roach.workspace.follow import NotFollowed, follow, queue_states

DATA = Path(__file__).parent / "data"
VERSIONS = ("22.05", "24.11", "26.05")


def _queue(version: str) -> str:
    return dumps(P.parse_squeue((DATA / version / "squeue_mixed.txt").read_text()))


@pytest.mark.parametrize("version", VERSIONS)
def test_an_array_with_a_task_limit_reads_as_the_loop_prints_it(version):
    queue = P.parse_squeue((DATA / version / "squeue_mixed.txt").read_text())
    array = next(q for q in queue if q.ref.task is not None)
    tasks = [q for q in queue if q.ref.job == array.ref.job]
    running = sum(q.state.is_running for q in tasks)
    pending = sum(q.state.is_pending for q in tasks)  # squeue --array lists each task
    assert running and pending  # the recording has both, or this test shows nothing
    want = ",".join(f"{k}={n}" for k, n in sorted({"PENDING": pending, "RUNNING": running}.items()))
    assert queue_states(_queue(version), str(array.ref.job)) == want


def test_a_job_not_in_the_queue_has_no_states():
    assert queue_states(_queue("22.05"), "424242") == ""
    assert queue_states(None, "12") == ""


class _Waiter:
    """A waiter whose poller is (``polls``) or is not there."""

    def __init__(self, polls: bool = True):
        self.polls = polls

    def watched(self) -> bool:
        return self.polls


def _store(tmp_path: Path, job_id: str, array: str | None = None) -> Store:
    store = Store(tmp_path / "store.sqlite")
    rec = WorkspaceJob(job_id=job_id, cluster="lab", script="a.sbatch", array=array)
    store.add(
        store_record(
            rec,
            name="a",
            log="/r/a.out",
            bundle=f"/r/{job_id}",
            remote_root="/r",
            workspace="/w",
            requests={},
            via=None,
        )
    )
    return store


def _round(store: Store, queue: str, at: float) -> None:
    store.watch_save("lab", {}, {}, round=Round(at=at, pid=1, events=[], queue=queue))


def test_states_show_once_per_change_and_the_recorded_end_is_gone(tmp_path):
    store = _store(tmp_path, "12")
    seen: list[WaitEvent] = []
    script = iter(
        [
            lambda: _round(store, _queue("22.05"), time.time()),
            lambda: _round(store, _queue("22.05"), time.time() + 1),  # the same states: said once
            lambda: store.record_ends([_final("12")]),
        ]
    )

    def sleep(_s: float) -> None:
        next(script)()

    last = follow(store, "lab", "12", _Waiter(), seen.append, sleep=sleep)
    assert [e.kind for e in seen] == ["state", "gone"]
    assert seen[0].text == "PENDING=2,RUNNING=2" and last == seen[0]
    assert seen[1].at_utc == "2026-12-01T12:00:00Z"  # the end's time, as the poller recorded it


def test_each_outage_the_poller_reports_after_the_wait_began_is_passed_on_with_the_last_state(tmp_path):
    store = _store(tmp_path, "12")
    old = {"kind": "outage", "message": "from before the wait"}
    store.watch_save("lab", {}, {}, round=Round(at=time.time() - 60, pid=1, events=[old], queue=None))
    said = {"kind": "outage", "message": "the cluster unreachable: ssh: connect to host login: Connection refused"}
    outages: list[tuple[str | None, str]] = []
    script = iter(
        [
            lambda: _round(store, _queue("22.05"), time.time()),
            lambda: store.watch_save("lab", {}, {}, round=Round(at=time.time() + 1, pid=1, events=[said])),
            lambda: store.record_ends([_final("12")]),
        ]
    )
    follow(
        store,
        "lab",
        "12",
        _Waiter(),
        lambda e: None,
        on_outage=lambda last, message: outages.append((last.text if last else None, message)),
        sleep=lambda _s: next(script)(),
    )
    assert outages == [("PENDING=2,RUNNING=2", said["message"])]


def test_no_poller_or_no_row_is_not_followed(tmp_path):
    store = _store(tmp_path, "12")
    with pytest.raises(NotFollowed):
        follow(store, "lab", "12", _Waiter(polls=False), lambda e: None, sleep=lambda s: None)
    with pytest.raises(NotFollowed):
        follow(store, "lab", "13", _Waiter(), lambda e: None, sleep=lambda s: None)


def _final(job_id: str) -> FinalRow:
    return FinalRow("lab", int(job_id), None, "completed", "COMPLETED", "0:0", "2026-12-01T12:00:00Z", None, None)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("PENDING=2,REQUEUE_HOLD=1", "pending"),
        ("REQUEUED_CRON=1", "pending"),  # scrontab's requeue: waiting to start again
        ("RECONFIG_FAIL=1", "pending"),  # node setup failed: Slurm requeues the job
        ("PENDING=2,RUNNING=2", "running"),
        ("COMPLETING=1", "running"),
    ],
)
def test_a_state_line_is_pending_exactly_where_each_state_is_pending(text: str, status: str) -> None:
    assert WaitEvent("state", "now", text).status == status
    assert WaitEvent("note", "now", text).status is None
