"""slurmctld's own record of ended jobs (``squeue -t all``), read as sacct would list their allocations: what a
watch and a wait take as a job's end where accounting never gets it (tests/data/<release>/squeue_ended.txt,
recorded by ``tests/record_faults_output.py --only ended``; the jobs' sacct beside each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.errors import ParseError
from roach.scheduler.controller_ends import parse_ended, parse_exit_status

DATA = Path(__file__).parent / "data"
#: what sacct said of the same jobs (JobID, State, ExitCode), read on the lab right after the recording
SACCT_2205 = {
    "1004": ("COMPLETED", 0, 0),
    "1005": ("FAILED", 3, 0),
    "1006": ("FAILED", 0, 9),
    "1007_0": ("COMPLETED", 0, 0),
    "1007_1": ("FAILED", 1, 0),
}
SACCT_2605 = {  # 26.05.5 prints exit_code as sacct does: code:signal
    "11001": ("COMPLETED", 0, 0),
    "11002": ("FAILED", 3, 0),
    "11003": ("FAILED", 0, 9),
    "11004_0": ("COMPLETED", 0, 0),
    "11004_1": ("FAILED", 1, 0),
}


def _ended(release: str):
    return parse_ended((DATA / release / "squeue_ended.txt").read_bytes().decode())


@pytest.mark.parametrize(("release", "sacct"), [("22.05", SACCT_2205), ("26.05", SACCT_2605)])
def test_each_ended_job_reads_as_sacct_records_it(release, sacct):
    got = {str(r.ref): (r.state.value, r.exit_code, r.exit_signal) for r in _ended(release)}
    assert got == sacct


@pytest.mark.parametrize(("release", "running"), [("22.05", "1008"), ("26.05", "11005")])
def test_a_job_still_running_is_not_an_end(release, running):
    assert running not in {str(r.ref) for r in _ended(release)}


def test_an_ended_job_keeps_its_end_time_and_node():
    ok = next(r for r in _ended("22.05") if str(r.ref) == "1004")
    assert ok.end_time is not None
    assert ok.nodelist == "n1"
    assert ok.step is None


def test_an_array_task_keeps_its_own_job_id():
    task = next(r for r in _ended("22.05") if str(r.ref) == "1007_0")
    assert task.raw_id == "1009"


@pytest.mark.parametrize(("text", "pair"), [("768", (3, 0)), ("9", (0, 9)), ("0", (0, 0)), ("2:0", (2, 0))])
def test_an_exit_status_is_read_as_code_and_signal(text, pair):
    assert parse_exit_status(text) == pair


@pytest.mark.parametrize("text", ["", "N/A", "3:x"])
def test_an_exit_status_that_cannot_be_read_is_refused(text):
    with pytest.raises(ParseError, match="exit code"):
        parse_exit_status(text)
