"""Scenario 11: a submit over SSH with slurmdbd down, and a submit, sweep or hold with the SSH connection
dropped while sbatch runs.

Either the submit succeeds once or it fails leaving nothing: never two jobs, counted in the queue and in
accounting (by the submission's job name, unique per test)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

import pytest

from roach.errors import RoachError
from roach.lab import lab as lablib
from roach.launch import lost
from roach.launch.hold.start import hold
from roach.launch.sweep import sweep
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm.clusters.lab import CPU, GPU1
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, TARGET
from tests.faults.ledger import assert_left_no_process, check_ledger
from tests.sshd import SSHServer, lab_over_ssh, sshd, sshd_server  # noqa: F401  (fixtures)


@pytest.fixture
def over_ssh(lab, sshd: SSHServer):
    return lab_over_ssh(lab, sshd)


def _jobs_named(slurm, name: str) -> tuple[list, list]:
    """(in the queue, started in accounting) of every user's jobs called ``name``."""
    queued = [q for q in slurm.squeue(all_users=True) if q.name == name and q.state.is_active]
    r = slurm.run(
        ["sacct", "-a", "-X", "-D", "-n", "-P", "-o", "JobID,JobName,State,Start", "-S", "now-1hours"], retry=False
    )
    rows = [line.split("|") for line in r.stdout.splitlines()]
    started = [row for row in rows if row[1:2] == [name] and row[3] not in ("Unknown", "None", "")]
    return queued, started


@pytest.mark.lab
def test_a_submit_over_ssh_with_slurmdbd_down_succeeds_once(faults, slurm, lab, over_ssh):
    env = {**os.environ, **lab.env()}
    dbd = {d.name: d for d in lablib.daemons(lab)}["slurmdbd"]
    name = f"dbd-down-{secrets.token_hex(3)}"
    dbd.stop()
    try:
        job = faults.submit({"steps": 5, "step_s": 0.1}, GPU1, cluster=over_ssh, name=name)
        wait_until("the job to run", lambda: job.log().count("finished; result in") == 1, timeout=120)
    finally:
        dbd.start(
            ready=lambda: (
                subprocess.run(["sacctmgr", "-n", "show", "cluster"], env=env, capture_output=True).returncode == 0
            )
        )
    # slurmctld sends what slurmdbd missed once it is back: the job is accounted once
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()[-3000:]
    wait_until("the job in accounting", lambda: len(_jobs_named(slurm, name)[1]) >= 1, timeout=60)
    queued, accounted = _jobs_named(slurm, name)
    assert not queued and len(accounted) == 1, (queued, accounted)
    check_ledger(job.record.run_dir, 5, interruptions=0, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)


GATED_SBATCH = """#!/bin/sh
# The login host's sbatch, gated: says it started, waits for the test's go, then is the real sbatch.
touch {gate}/started
while [ ! -e {gate}/go ]; do sleep 0.05; done
exec /usr/bin/sbatch "$@"
"""


def _start(how: str, faults, cluster, name: str, store: Store):
    """A submit, sweep or hold of one small job called ``name`` to ``cluster``."""
    if how == "hold":
        return hold(CPU, cluster=cluster, name=name, time="1", log_root=faults.roots["log_root"], store=store)
    if how == "sweep":
        grid = [{"steps": 3, "step_s": 0.1}]
        return sweep(
            TARGET,
            grid,
            resources=GPU1,
            cluster=cluster,
            name=name,
            repo_root=faults.repo.work,
            store=store,
            **faults.roots,
        )
    return faults.submit({"steps": 3, "step_s": 0.1}, GPU1, cluster=cluster, name=name, store=store)


@pytest.mark.lab
@pytest.mark.parametrize("how", ["submit", "sweep", "hold"])
def test_an_ssh_connection_dropped_during_sbatch_leaves_no_job(how, faults, slurm, lab, over_ssh, sshd: SSHServer):
    """Before the fix, the held job stayed queued for ever, without a record: roach never learnt its id.

    sbatch on the login host (gated, so the test can act before it talks to the controller) sends its request
    to a paused controller (SIGSTOP: an overloaded one) and waits for the answer; the connection drops then (sshd
    and its sessions killed, sshd started again); the controller goes on and queues the request it received."""
    gate = faults.base / f"gate-{os.getpid()}-{how}"
    (gate / "bin").mkdir(parents=True)
    (gate / "bin" / "sbatch").write_text(GATED_SBATCH.format(gate=gate))
    os.chmod(gate / "bin" / "sbatch", 0o755)
    os.chmod(gate, 0o777)
    cluster = over_ssh.with_(remote_setup=(f"export PATH={gate}/bin:$PATH",))
    ctld = {d.name: d for d in lablib.daemons(lab)}["slurmctld"]
    name = f"ssh-drop-{secrets.token_hex(3)}"
    outcome: list = []

    def submit() -> None:  # in a thread: a store of its own (a SQLite connection serves the thread that made it)
        try:
            outcome.append(_start(how, faults, cluster, name, Store(faults.store.path)))
        except RoachError as exc:
            outcome.append(exc)

    t = threading.Thread(target=submit)
    t.start()
    wait_until("sbatch to start on the login host", lambda: (gate / "started").exists(), timeout=60)
    pid = ctld.pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        (gate / "go").touch()
        wait_until(
            "sbatch to wait for the controller's answer",
            lambda: subprocess.run(["pgrep", "-x", "sbatch"], capture_output=True).returncode == 0,
            timeout=30,
        )
        time.sleep(0.5)  # its request sent
        sshd.stop()
        sshd.start()
    finally:
        os.kill(pid, signal.SIGCONT)
    t.join(timeout=slack(120))
    (result,) = outcome
    wait_until(
        "the controller to answer", lambda: slurm.run(["scontrol", "ping"], retry=False, ok_codes=(0, 1)).ok, timeout=30
    )
    queued, accounted = _jobs_named(slurm, name)
    try:
        if isinstance(result, RoachError):  # failed: nothing queued, nothing that ran, and it says so
            assert "connection" in str(result).lower() and "nothing is left" in str(result), result
            assert not queued and not accounted, (
                str(result),
                [(q.job_id, q.state.value, q.reason_text) for q in queued],
            )
            assert not [r for r in faults.store.recent(1000) if r.name == name]  # no record either
            assert not lost.pending(faults.store, "lab")  # settled: the next submit has nothing to cancel
        elif how == "hold":  # succeeded: that one holder
            assert {q.job_id for q in queued} == {str(result.job_id)} and len(accounted) <= 1
            assert result.release() is JobState.CANCELLED
        else:  # succeeded: that one job (a sweep's one run), run once
            if how == "sweep":
                assert [a.state for a in result.wait(timeout=slack(120)).values()] == [JobState.COMPLETED]
            else:
                assert result.wait(timeout=slack(120)).state is JobState.COMPLETED
            ids = {str(i) for i in result.array_ids} if how == "sweep" else {str(result.job_id)}
            assert {q.job_id.split("_")[0] for q in queued} <= ids and len(accounted) <= 1
    finally:
        if queued:
            slurm.scancel(sorted({q.job_id for q in queued}))


@pytest.mark.lab
def test_a_lost_submission_left_for_later_is_cancelled_by_the_next_look(faults, slurm, user_slurm, lab):
    """Where the cluster could not be asked at once, the loss is remembered; the next look (the next submit does
    one) cancels the held job logging where that submission's would, and no job of the store."""
    store = Store(faults.base / f"lost-{secrets.token_hex(3)}.sqlite")
    prefix = f"{faults.base}/logs/lost-{secrets.token_hex(3)}_"
    held = user_slurm.sbatch(["--hold", f"--output={prefix}%j.out", "--time=1"], "#!/bin/bash\ntrue\n")
    other = user_slurm.sbatch(
        ["--hold", f"--output={faults.base}/logs/other_%j.out", "--time=1"], "#!/bin/bash\ntrue\n"
    )
    try:
        lost.remember(store, "lab", prefix)
        assert lost.settle(store, "lab", user_slurm) == [held]
        assert not lost.pending(store, "lab")
        assert [q.state.value for q in user_slurm.squeue(job_ids=[other])] == ["PENDING"]  # not its job: untouched
    finally:
        user_slurm.scancel([held, other])


# One submission in a process of its own, killed (SIGKILL) the moment its held sbatch has answered: the job is
# queued held and nothing of roach runs after it, as when a user's ^\ or an agent's kill lands there.
_KILLED = r"""
import json, os, signal, sys
from roach.scheduler.client import SlurmClient

real = SlurmClient.sbatch

def sbatch(self, *args, **kwargs):
    print(real(self, *args, **kwargs), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

SlurmClient.sbatch = sbatch
how, spec = sys.argv[1], json.loads(sys.argv[2])
from roach.launch.hold.start import hold
from roach.launch.sweep import sweep
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import CPU, LAB

where = dict(cluster=LAB.with_(run_as="roachlab"), store=Store(spec["store"]), log_root=spec["log_root"])
code = dict(repo_root=spec["repo"], clone_root=spec["clone_root"], resources=CPU, **where)
if how == "hold":
    hold(CPU, name="killed", **where)
elif how == "sweep":
    sweep("pkg.faults:train", [{"steps": 1}, {"steps": 2}], name="killed", **code)
else:
    submit("pkg.faults:train", args={"steps": 1}, name="killed", **code)
"""


@pytest.mark.lab
@pytest.mark.parametrize("how", ["hold", "sweep", "submit"])
def test_a_submission_killed_after_its_sbatch_leaves_no_job_past_the_next_one(how, faults, user_slurm, lab):
    """Killed between its held sbatch and its record, a hold, sweep or submit leaves a held job no record names;
    the next submission to the cluster (here a hold) cancels it, and nothing else."""
    store = Store(faults.base / f"killed-{how}-{secrets.token_hex(3)}.sqlite")
    spec = {"store": str(store.path), "repo": str(faults.repo.work), **faults.roots}
    r = subprocess.run([sys.executable, "-c", _KILLED, how, json.dumps(spec)], capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    orphan = int(r.stdout.split()[-1])
    later = None
    try:
        queued = [q for q in user_slurm.squeue(job_ids=[orphan]) if q.ref.job == orphan]  # a sweep's: its tasks
        assert queued and all(q.state.is_pending and q.reason_text == "JobHeldUser" for q in queued), queued
        assert store.get("lab", orphan) is None
        later = hold(CPU, cluster=CLUSTER, name="after", log_root=faults.roots["log_root"], store=store)
        assert not [q for q in user_slurm.squeue(job_ids=[orphan]) if q.ref.job == orphan and q.state.is_active]
        assert [q.state.is_active for q in user_slurm.squeue(job_ids=[later.job_id])] == [True]
        assert not lost.pending(store, "lab")
    finally:
        user_slurm.scancel([orphan, *([later.job_id] if later else [])])
