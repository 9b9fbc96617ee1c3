"""live_views on recorded sacct output: a job that left the queue is never shown with a stale active state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from roach.cli.columns import plain
from roach.cli.view_text import state_text
from roach.launch.job_view import LEFT_QUEUE_UNACCOUNTED, live_views, reconcile
from roach.records.store import Store
from roach.scheduler.parse import parse_sacct
from roach.scheduler.transport import LocalTransport
from tests.support.watch import record

DATA = Path(__file__).parent / "data"


class Recorded:
    """A client whose queue is empty and whose accounting is one recorded ``sacct -X`` output."""

    def __init__(self, name: str):
        self.rows = parse_sacct((DATA / name).read_text())
        self.calls: list[str] = []
        self.transport = LocalTransport()  # the ends found are written into job.json files (none exist here)

    def squeue(self, **_):
        self.calls.append("squeue")
        return []

    def sacct(self, ids):
        self.calls.append("sacct")
        return [r for r in self.rows if str(r.job_id) in {str(i) for i in ids}]

    def ends(self, ids):
        return self.sacct(ids)  # these recordings hold allocations only: no step to fold


def test_gone_from_the_queue_while_accounting_says_running_is_no_state_with_the_reason(tmp_path):
    # sacct_X_lab_22.05_mixed.txt: 57 RUNNING, 63 PENDING, 60 FAILED
    with Store(tmp_path / "s.sqlite") as store:
        recs = [record(57), record(63), record(60)]
        store.add_many(recs)
        client = Recorded("sacct_X_lab_22.05_mixed.txt")
        views = live_views(client, recs, store, whole_queue=True)
        assert client.calls == ["squeue", "sacct"]
        lag = {v.job_id: v for v in views if v.job_id in (57, 63)}
        for v in lag.values():
            assert (v.state, v.status, v.reason) == (None, "submitted", LEFT_QUEUE_UNACCOUNTED)
            assert plain(state_text(v)) == f"? ({LEFT_QUEUE_UNACCOUNTED})"
        failed = next(v for v in views if v.job_id == 60)
        assert (failed.state, failed.status) == ("FAILED", "failed")
        # only the ended job's final state is recorded; the two others stay open for the next look
        assert [store.get("lab", j).status for j in (57, 63, 60)] == ["submitted", "submitted", "failed"]


def test_the_api_calls_a_job_gone_from_the_queue_but_not_accounted_completing(tmp_path):
    """Job.state() and Holder.info(): never sacct's stale RUNNING/PENDING for a job squeue no longer has."""
    from roach.launch.hold.holder import Holder
    from roach.launch.job import Job
    from roach.model.job_state import JobState
    from roach.slurm.clusters.lab import LAB

    client = Recorded("sacct_X_lab_22.05_mixed.txt")  # 57 RUNNING, 63 PENDING, 60 FAILED
    with Store(tmp_path / "s.sqlite") as store:
        store.add_many([record(j) for j in (57, 63, 60)])  # Job.state() records the end it finds (60's)
        for job_id, state in ((57, JobState.COMPLETING), (63, JobState.COMPLETING), (60, JobState.FAILED)):
            job = Job(LAB, record(job_id), store)
            job._client = client
            assert job.state() is state, job_id
            holder = Holder(LAB, job_id, None, None)
            holder._client = client
            assert holder.info().state is state, job_id
    assert not JobState.COMPLETING.is_terminal and JobState.COMPLETING.is_ending


def test_an_attempt_is_named_by_its_holder_and_number_not_roachs_packed_id():
    from roach.launch.job_view import JobView
    from roach.model.ids import RecordKind

    v = JobView.of(replace(record(412), holder=412, attempt=3, kind=RecordKind.ATTEMPT), "COMPLETED", "completed")
    assert (v.slurm_id, v.holder, v.attempt, v.job_id) == ("412/3", 412, 3, 412)
    assert JobView.of(record(412), "RUNNING", "submitted").slurm_id == "412"


def test_job_status_is_the_view_roach_status_shows(tmp_path):
    """Job.status() is reconcile's view, the one `roach status` renders: a job gone from the queue that
    accounting has not ended reads as such (not COMPLETING, Job.state()'s word), and an end it finds is recorded
    in the store and in the handle's record."""
    from roach.launch.job import Job
    from roach.slurm.clusters.lab import LAB

    client = Recorded("sacct_X_lab_22.05_mixed.txt")  # 57 RUNNING, 63 PENDING, 60 FAILED
    with Store(tmp_path / "api.sqlite") as api, Store(tmp_path / "cli.sqlite") as cli:
        for store in (api, cli):
            store.add_many([record(j) for j in (57, 63, 60)])
        for job_id in (57, 63, 60):
            job = Job(LAB, record(job_id), api)
            job._client = client
            (shown,) = reconcile(client, [record(job_id)], cli, whole_queue=False).views
            assert job.status() == shown, job_id
            assert job.record == api.get("lab", job_id) and job.record.status == shown.status, job_id
        assert [v.status for v in live_views(client, [record(j) for j in (57, 63, 60)], api, whole_queue=True)] == [
            "submitted",
            "submitted",
            "failed",
        ]
