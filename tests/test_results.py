"""Job.result() and Sweep.results(): the function's return value back in Python, or an error with the job's
final state and the failing rank's traceback. The traceback parser on a recorded real log first, the
many-files read on a real local transport, then the real thing on the lab (and over a real sshd)."""

from __future__ import annotations

import os
import pickle
import subprocess
from functools import partial
from pathlib import Path

import pytest

from roach.errors import RoachError
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.results import (
    NotCompletedError,
    ResultMissingError,
    SweepNotCompletedError,
    failing_traceback,
    read_many,
)
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.transport import LocalTransport
from roach.slurm import sweep
from roach.slurm.clusters.lab import CPU, LAB, NODES2_GPU2
from tests.conftest import slack
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.submitting import submit_to_lab

DATA = Path(__file__).parent / "data"
RANK1_RAISED = (DATA / "log_lab_22.05_rank1_raised_2x2.txt").read_text()  # 2 nodes x 2 ranks, rank 1 raised

PKG = {
    "pkg/__init__.py": "",
    "pkg/res.py": """
import time


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)


def as_json(run, n):
    return {"n": n, "rank": run.rank, "squares": [i * i for i in range(n)]}


def as_set(n):
    return set(range(n))


def a_point(x, y):
    return Point(x, y)


def deep(n):
    if n == 0:
        raise ValueError("rank 1 exploded on purpose")
    return deep(n - 1)


def boom(run):
    if run.rank == 1:
        deep(2)
    time.sleep(300)  # killed by srun --kill-on-bad-exit once rank 1 failed


def tenfold(x):
    if x == 1:
        raise KeyError(f"no run {x}")
    return 10 * x
""",
}


# -- no lab needed ---------------------------------------------------------------------------------------------
def test_the_failing_ranks_traceback_is_read_from_a_real_labelled_log():
    rank, tb = failing_traceback(RANK1_RAISED)
    assert rank == 1
    assert tb[0] == "Traceback (most recent call last):" and tb[-1] == "ValueError: rank 1 exploded on purpose"
    assert not [ln for ln in tb if ln[:3] in ("0: ", "1: ", "2: ")]  # the rank labels are stripped
    assert 'raise ValueError("rank 1 exploded on purpose")' in "\n".join(tb)
    # the other ranks' TERM lines after it, and srun's own lines, are not the traceback
    assert not [ln for ln in tb if "caught_signal" in ln or "srun:" in ln]


def test_only_the_last_attempt_of_a_log_counts_and_a_log_without_a_traceback_has_none():
    later = (
        "roach: attempt 2 of run boom-x: job 1 on n[1-2] (restart count 1) at 2026-12-01T10:59:24Z\n"
        "0: 2026-12-01T10:59:25Z roach rank 0: caught_signal TERM at step 4\n"
        "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-01T10:59:26 ***\n"
    )
    assert failing_traceback(RANK1_RAISED + later) == (None, ())
    assert failing_traceback(later + RANK1_RAISED)[0] == 1
    assert failing_traceback("") == (None, ())
    # srun pads the label when there are 10 or more ranks: " 3: ..."
    padded = "\n".join(
        " 3: " + ln.split(": ", 1)[1] if ln.startswith("1: ") else ln for ln in RANK1_RAISED.splitlines()
    )
    rank, tb = failing_traceback(padded.replace("roach rank 1:", "roach rank 3:"))
    assert rank == 3 and tb[-1] == "ValueError: rank 1 exploded on purpose"


def test_read_many_reads_missing_binary_and_tailed_files_in_one_call(tmp_path):
    blob = pickle.dumps({1, 2, 3}) + bytes(range(256))
    (tmp_path / "a.pkl").write_bytes(blob)
    (tmp_path / "log").write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "odd name $x\t'q'").write_text("quoted\n")
    transport = MockTransport(inner=LocalTransport())  # records each command, runs it for real
    fs = ClusterFS(transport)
    got = read_many(fs, [str(tmp_path / n) for n in ("a.pkl", "none", "empty", "odd name $x\t'q'")])
    assert got == [blob, None, b"", b"quoted\n"] and len(transport.calls) == 1
    assert read_many(fs, [str(tmp_path / "log")], tail_lines=3) == [b"line 97\nline 98\nline 99\n"]
    with pytest.raises(RoachError, match="relative"):
        read_many(fs, ["relative/path"])


def test_errors_name_the_state_the_rank_the_exception_and_the_log():
    err = NotCompletedError(
        "job 7 (run r) on lab",
        run_id="r",
        state=JobState.FAILED,
        state_text="FAILED",
        log_path="/l/r_7.out",
        rank=1,
        traceback=("Traceback (most recent call last):", "ValueError: nope"),
    )
    text = str(err)
    assert (
        err.exit_code == 6 and "job 7 (run r) on lab did not complete: FAILED; rank 1 raised ValueError: nope" in text
    )
    assert "read its log: roach logs r (/l/r_7.out)" in text
    timeout = NotCompletedError(
        "job 8 (run s) on lab",
        run_id="s",
        state=JobState.TIMEOUT,
        state_text="TIMEOUT",
        log_path="/l/s_8.out",
        rank=None,
        traceback=(),
        log_tail=("slurmstepd: TIME LIMIT",),
    )
    assert "no rank raised. The log ends:\n    slurmstepd: TIME LIMIT" in str(timeout)
    both = SweepNotCompletedError("sw", 3, {2: timeout, 0: err})
    assert both.exit_code == 6 and "2 of the 3 runs of sweep sw did not complete: runs 0 (FAILED), 2 (TIMEOUT)" in str(
        both
    )


# -- on the lab ----------------------------------------------------------------------------------------------
CLUSTER = LAB.with_(run_as=LAB_USER)
_submit = partial(submit_to_lab, resources=CPU)


@pytest.mark.lab
def test_result_returns_the_json_value_and_the_pickled_one_unpickled_only_on_request(repo, store, roots, monkeypatch):
    jobs = [
        _submit(repo, store, roots, "pkg.res:as_json", {"n": 4}),
        _submit(repo, store, roots, "pkg.res:as_set", {"n": 5}),
        _submit(repo, store, roots, "pkg.res:a_point", {"x": 1, "y": 2}),
    ]
    as_json, as_set = (j.result(timeout=slack(120)) for j in jobs[:2])
    assert as_json == {"n": 4, "rank": 0, "squares": [0, 1, 4, 9]}
    assert as_set == {0, 1, 2, 3, 4}
    assert Path(jobs[1].record.run_dir, "result.pkl").exists()
    # the class of the value is the job's own: not importable here, a clear error; importable, the value
    with pytest.raises(RoachError, match=r"result\.pkl cannot be unpickled here: ModuleNotFoundError"):
        jobs[2].result(timeout=slack(120))
    monkeypatch.syspath_prepend(str(repo.work))
    point = jobs[2].result()
    assert type(point).__name__ == "Point" and (point.x, point.y) == (1, 2)
    assert store.get("lab", jobs[0].job_id).status == "completed"  # result() waited, and recorded the end

    # a completed run whose result file is gone: an error naming the run directory, never None
    subprocess.run(["rm", "-f", "--", os.path.join(jobs[0].record.run_dir, "result.json")], check=True)
    with pytest.raises(ResultMissingError, match=r"holds no result\.json or result\.pkl") as err:
        jobs[0].result()
    assert err.value.exit_code == 7 and jobs[0].record.run_dir in str(err.value)


@pytest.mark.lab
def test_result_of_a_failed_job_raises_with_its_state_and_the_failing_ranks_traceback(repo, store, roots):
    job = _submit(repo, store, roots, "pkg.res:boom", resources=NODES2_GPU2)
    try:
        with pytest.raises(NotCompletedError) as caught:
            job.result(timeout=slack(180))
    finally:
        if not store.get("lab", job.job_id).is_final:
            job.cancel()
    err = caught.value
    assert err.state is JobState.FAILED and err.exit_code == 6 and err.rank == 1, str(err)
    assert err.traceback[-1] == "ValueError: rank 1 exploded on purpose"
    assert err.traceback[0] == "Traceback (most recent call last):" and "in deep" in "\n".join(err.traceback)
    assert err.log_path == job.record.log_path and job.record.log_path in str(err)
    assert f"roach logs {job.run_id}" in str(err) and "rank 1 raised ValueError: rank 1 exploded on purpose" in str(err)


@pytest.mark.lab
def test_sweep_results_come_in_grid_order_and_a_failed_run_carries_its_error(repo, store, roots):
    sw = sweep(
        "pkg.res:tenfold",
        [{"x": x} for x in (3, 1, 0, 2)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        **roots,
    )
    with pytest.raises(SweepNotCompletedError) as caught:
        sw.results(timeout=slack(240), poll_s=2)
    err = caught.value
    assert list(err.failures) == [1] and err.exit_code == 6
    one = err.failures[1]
    assert one.state is JobState.FAILED and one.rank == 0 and one.run_id == sw[1].run_id
    assert one.traceback[-1] == "KeyError: 'no run 1'" and one.log_path == sw[1].record.log_path
    got = sw.results(return_errors=True)
    assert got[0] == 30 and got[2] == 0 and got[3] == 20 and isinstance(got[1], NotCompletedError)


@pytest.mark.lab
def test_result_reads_through_the_ssh_transport_with_the_clusters_home(repo, store, roots, cluster, sshd: SSHServer):
    run_root = f"~/roach-results-test-{os.getpid()}"  # the lab user's home: ~ as the cluster expands it
    job = _submit(repo, store, roots, "pkg.res:as_set", {"n": 3}, resources="CPU", cluster=cluster, run_root=run_root)
    try:
        before = sshd.accepted_connections()
        assert job.result(timeout=slack(120)) == {0, 1, 2}
        assert sshd.accepted_connections() <= before + 1
        home = Path(os.path.expanduser(f"~{LAB_USER}"))
        assert (home / run_root[2:] / job.run_id / "result.pkl").exists()
    finally:
        subprocess.run(["rm", "-rf", "--", os.path.expanduser(f"~{LAB_USER}/{run_root[2:]}")], check=False)
