"""A job's end read only once slurmdbd holds it: after an outage, accounting lists the job before its end.

Recorded on the lab (Slurm 22.05.8) with the argv of ``SlurmClient.sacct`` (``-X``): job 1007 (``exit 3``) was
submitted and ended while slurmdbd was down. For 7 s after slurmdbd came back, sacct listed it ``FAILED 0:0`` with
End ``Unknown`` (``sacct_X_lab_22.05_dbd_catching_up.txt``), then ``FAILED 3:0`` ended after 4 s
(``sacct_X_lab_22.05_dbd_caught_up.txt``).
"""

from __future__ import annotations

from pathlib import Path

from roach.model.job_state import JobState
from roach.ops.events import EventKind
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from tests.support.watch import kinds, only, record, watcher

DATA = Path(__file__).parent / "data"
CATCHING_UP = (DATA / "sacct_X_lab_22.05_dbd_catching_up.txt").read_bytes().decode()
CAUGHT_UP = (DATA / "sacct_X_lab_22.05_dbd_caught_up.txt").read_bytes().decode()


def _client(sacct: str) -> SlurmClient:
    return SlurmClient(MockTransport({"sacct": sacct}), retries=0)


def test_an_ended_job_without_its_end_in_accounting_has_no_end_yet():
    assert _client(CATCHING_UP).ends(["1007"]) == []


def test_the_job_ends_as_it_ended_once_accounting_holds_its_end():
    (end,) = _client(CAUGHT_UP).ends(["1007"])
    assert (end.state, end.exit_code, end.elapsed_s) == (JobState.FAILED, 3, 4)


def test_the_watch_records_the_end_accounting_holds_not_the_start_it_got_first(fake, store, clock):
    store.add(record(1007))
    w = watcher(fake, store, clock)
    fake.acct = [CATCHING_UP]
    assert kinds(w.round()) == ["heartbeat"]
    clock.tick(10)
    fake.acct = [CAUGHT_UP]
    (fin,) = only(w.round(), EventKind.FINISHED)
    assert fin.data["exit_code"] == "3:0"
    assert store.get("lab", 1007).exit_code == "3:0"
