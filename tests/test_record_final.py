"""A job's end is recorded once, store and job.json together, whichever place learns it first: `roach status`,
`ls`, `cancel`, `watch`, Job.state/wait, Sweep.states/wait, a holder's release, an attempt's exit read by
`status`. Each test takes tiny jobs that ended with nothing of roach's looking (their end is in sacct only,
each recorded in a store of its own), lets one path see the end, and reads the job.json on the cluster.
Also: a record an older roach left behind (job.json "submitted", the end in the store only) is repaired by
`ls` and `status`, and the one command that rewrites job.json files does so for the files of every writer."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.lab.config import LAB_USER
from roach.launch.hold.holder import InsideJob
from roach.launch.hold.start import hold
from roach.launch.job import Job
from roach.launch.submit import submit
from roach.launch.sweep import Sweep, sweep
from roach.records.bundle import FINAL_STATUSES, JobJson
from roach.records.job_end import End, record_ends
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.transport import LocalTransport
from roach.slurm.clusters.lab import CPU, LAB
from tests.conftest import slack, wait_until
from tests.support.gitrepo import GitRepo
from tests.support.labs import SHARED_TMP
from tests.support.watch import record

CLUSTER = LAB.with_(run_as=LAB_USER)
TINY = {"pkg/__init__.py": "", "pkg/tiny.py": "def hello(run, x=0):\n    run.log('hello %s', x)\n    return x\n"}
# one job per path that may see an end first; each in a store of its own, so no path sees another's end
PATHS = ("status", "ls", "cancel", "watch", "state", "wait", "repair_ls", "repair_status")


@pytest.fixture(scope="module")
def base():
    d = Path(tempfile.mkdtemp(prefix="roach-final-", dir=SHARED_TMP))
    os.chmod(d, 0o777)
    repo = GitRepo(d)
    repo.commit(TINY, "a tiny function")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _roots(base: Path) -> dict[str, str]:
    return {"log_root": str(base / "logs"), "clone_root": str(base / "clones")}


def _ended(client, ids: list[str]) -> bool:
    done = {str(a.ref) for a in client.sacct(ids) if a.step is None and a.state.is_terminal}
    return set(ids) <= done


@pytest.fixture(scope="module")
def ended(base, user_slurm) -> dict[str, Job]:
    """One tiny job per path, all queued at once, ended in sacct and recorded nowhere yet."""
    jobs = {
        p: submit(
            "pkg.tiny:hello",
            {"x": i},
            resources=CPU,
            cluster=CLUSTER,
            repo_root=base / "work",
            store=Store(base / f"{p}.sqlite"),
            name=f"final-{p}",
            **_roots(base),
        )
        for i, p in enumerate(PATHS)
    }
    wait_until(
        "the tiny jobs to end",
        lambda: _ended(user_slurm, [str(j.job_id) for j in jobs.values()]),
        timeout=slack(180),
        every=1,
    )
    return jobs


@pytest.fixture(scope="module")
def sweeps(base, user_slurm) -> dict[str, Sweep]:
    """Two tiny sweeps of two runs (one for Sweep.states, one for Sweep.wait), ended and recorded nowhere."""
    out = {
        p: sweep(
            "pkg.tiny:hello",
            [{"x": 1}, {"x": 2}],
            resources=CPU,
            cluster=CLUSTER,
            repo_root=base / "work",
            store=Store(base / f"sweep-{p}.sqlite"),
            name=f"final-sweep-{p}",
            **_roots(base),
        )
        for p in ("states", "wait")
    }
    wait_until(
        "the tiny sweeps to end",
        lambda: _ended(user_slurm, [j.slurm_id for s in out.values() for j in s]),
        timeout=slack(180),
        every=1,
    )
    return out


def roach(store: Path, *args: str):
    r = CliRunner().invoke(cli, [*args, "--run-as", LAB_USER], env={"ROACH_STORE": str(store)}, catch_exceptions=False)
    return r


def raw(rec: JobRecord) -> dict:
    return json.loads(Path(rec.bundle_dir, "job.json").read_text())


def assert_open(rec: JobRecord) -> None:
    """job.json as submit writes it: no end yet, and status already one of the schema's values."""
    d = raw(rec)
    assert (d["status"], d["live_state"], d["slurm_state"], d["exit_code"], d["recorded_at_utc"]) == (
        "unknown",
        "submitted",
        None,
        None,
        None,
    ), d


def assert_final(store: Store, rec: JobRecord, status: str = "completed") -> dict:
    """The job.json on the cluster says the end, the same the store has, and the store knows it does."""
    d = raw(rec)
    assert d["status"] == status and d["status"] in FINAL_STATUSES and d["live_state"] == "ended", d
    assert all(isinstance(d[k], str) for k in ("slurm_state", "exit_code", "recorded_at_utc")), d
    assert JobJson.from_json(json.dumps(d)).is_final if "run_id" in d else True
    now = store.get_key(rec.cluster, rec.key)
    assert (now.status, now.slurm_state, now.exit_code, now.recorded_at) == (
        d["status"],
        d["slurm_state"],
        d["exit_code"],
        d["recorded_at_utc"],
    )
    assert now.job_json_at is not None and not now.job_json_behind
    return d


def _store(job: Job) -> Store:
    assert job.store is not None
    return job.store


# -- each path that may see an end first -------------------------------------------------------------------
@pytest.mark.lab
def test_roach_status_then_watch_once(ended):
    """The issue's steps: status sees the end first; job.json is final, and a watch round after it keeps it so."""
    job = ended["status"]
    assert_open(job.record)
    r = roach(_store(job).path, "status", str(job.job_id))
    assert r.exit_code == 0 and "COMPLETED" in r.output, r.output
    d = assert_final(_store(job), job.record)
    assert d["slurm_state"] == "COMPLETED" and d["exit_code"] == "0:0"
    w = roach(_store(job).path, "watch", "--once", "--cluster", "lab")
    assert w.exit_code == 0, w.output
    assert raw(job.record) == d


@pytest.mark.lab
def test_roach_ls(ended):
    job = ended["ls"]
    assert_open(job.record)
    r = roach(_store(job).path, "ls", "--cluster", "lab")
    assert r.exit_code == 0 and "COMPLETED" in r.output, r.output
    assert_final(_store(job), job.record)


@pytest.mark.lab
def test_roach_cancel_of_a_job_that_already_ended(ended):
    job = ended["cancel"]
    assert_open(job.record)
    r = roach(_store(job).path, "cancel", job.run_id)
    assert r.exit_code == 0 and "already ended" in r.output, r.output
    assert_final(_store(job), job.record)


@pytest.mark.lab
def test_roach_watch(ended):
    job = ended["watch"]
    assert_open(job.record)
    r = roach(_store(job).path, "watch", "--once", "--cluster", "lab")
    assert r.exit_code == 0, r.output
    assert_final(_store(job), job.record)


@pytest.mark.lab
def test_job_state(ended):
    job = Job.from_ref(ended["state"].job_id, store=_store(ended["state"]), cluster=CLUSTER)
    assert_open(job.record)
    assert job.state().value == "COMPLETED"
    assert_final(_store(job), job.record)
    assert job.record.is_final  # the handle's own record follows


@pytest.mark.lab
def test_job_wait(ended):
    job = Job.from_ref(ended["wait"].job_id, store=_store(ended["wait"]), cluster=CLUSTER)
    assert_open(job.record)
    job.wait(timeout=slack(30))
    assert_final(_store(job), job.record)


@pytest.mark.lab
def test_sweep_states_and_wait(sweeps):
    for how, sw in sweeps.items():
        for j in sw:
            assert_open(j.record)
        if how == "states":
            assert {s.value for s in sw.states().values()} == {"COMPLETED"}
        else:
            sw.wait(timeout=slack(30))
        for j in sw:
            assert_final(sw.store, j.record)


@pytest.mark.lab
def test_holder_release_and_an_attempt_seen_by_status(base):
    """An attempt's end, read by `roach status` from what its driver wrote; then release ends the holder."""
    store = Store(base / "holder.sqlite")
    h = hold(CPU, cluster=CLUSTER, name="final", time="5", log_root=str(base / "holders"), store=store)
    try:
        h.wait_running(timeout=slack(60))
        att = h.submit(
            "pkg.tiny:hello",
            {"x": 7},
            repo_root=base / "work",
            clone_root=str(base / "clones"),
            log_root=str(base / "logs"),
            name="final-attempt",
        )
        assert isinstance(att, InsideJob)
        assert_open(att.record)
        wait_until("the attempt's driver to write its exit", lambda: Path(att.paths.exit).exists(), timeout=slack(90))
        r = roach(store.path, "status", att.run_id)
        assert r.exit_code == 0 and "COMPLETED" in r.output, (r.output, att.log())
        assert_final(store, att.record)
        holder = store.get("lab", h.job_id)
        assert_open(holder)
    finally:
        state = h.release()
    assert state.value == "CANCELLED"
    assert_final(store, store.get("lab", h.job_id), "cancelled")


# -- a record an older roach left behind -----------------------------------------------------------------------
@pytest.mark.lab
@pytest.mark.parametrize("command", ["ls", "status"])
def test_a_job_json_left_at_submitted_by_an_older_roach_is_repaired(ended, command):
    """The older roach's `status` recorded the end in the store only and left job.json as submit wrote it then:
    status "submitted", no live_state. `roach ls` / `status` write the store's end into it."""
    job = ended[f"repair_{command}"]
    store = _store(job)
    (a,) = [a for a in job.client.sacct([str(job.job_id)]) if a.step is None]
    end = End.of_acct(job.record, a)
    store.update_final(
        job.cluster.name, job.job_id, end.status, end.slurm_state, end.exit_code, "2026-01-01T00:00:00Z"
    )  # the store half only, as the older roach did
    old = {k: v for k, v in raw(job.record).items() if k != "live_state"}
    old["status"] = "submitted"
    Path(job.record.bundle_dir, "job.json").write_text(json.dumps(old, indent=2) + "\n")
    assert store.get("lab", job.job_id).job_json_behind
    args = ("ls", "--cluster", "lab") if command == "ls" else ("status", job.run_id)
    r = roach(store.path, *args)
    assert r.exit_code == 0 and "COMPLETED" in r.output, r.output
    d = assert_final(store, job.record)
    assert d["recorded_at_utc"] == "2026-01-01T00:00:00Z"  # the store's moment of the end, not the repair's
    assert list(d).index("live_state") == list(d).index("recorded_at_utc") + 1  # where this roach writes it
    assert JobJson.from_json(Path(job.record.bundle_dir, "job.json").read_text()).is_final


# -- the one command, on the files every writer makes ---------------------------------------------------------
@pytest.mark.lab
def test_record_ends_rewrites_a_workspace_job_json_too_in_one_command(tmp_path):
    """The remote workspace's job.json (the seeds' schema, array tasks nested) gets the end the same way."""
    bundle = tmp_path / "dsi-slurm-artifacts" / "9"
    bundle.mkdir(parents=True)
    (bundle / "job.json").write_text(
        WorkspaceJob(job_id="9", script="run.sh", array="0-1", tasks={"0": {"status": "x"}}).to_json()
    )
    other = tmp_path / "bundles" / "10"
    other.mkdir(parents=True)
    with Store(tmp_path / "s.sqlite") as store:
        recs = [
            replace(record(9), bundle_dir=str(bundle)),
            replace(record(10), bundle_dir=str(other)),
        ]  # 10: no job.json
        store.add_many(recs)
        t = MockTransport(inner=LocalTransport())
        got = record_ends(
            store, t, [End(recs[0], "failed", "FAILED", "1:0"), End(recs[1], "completed", "COMPLETED", "0:0")]
        )
        assert len(t.calls) == 1
        ws = WorkspaceJob.from_json((bundle / "job.json").read_text())
        assert (ws.status, ws.slurm_state, ws.exit_code, ws.live_state, ws.is_final) == (
            "failed",
            "FAILED",
            "1:0",
            "ended",
            True,
        )
        assert ws.tasks == {"0": {"status": "x"}} and ws.array == "0-1"  # nested keys untouched
        assert [r.job_json_at is not None for r in got] == [True, True]  # a missing file is not retried
        assert not (other / "job.json").exists()
