"""Scenario 24: the primary slurmctld killed (SIGKILL), and the backup controller taking over.

A private lab with a backup controller (`roach lab up --backup-controller`: a second slurmctld on the host ctld2,
slurm.conf's second SlurmctldHost, SlurmctldTimeout 12 s) loses its primary while a sweep is being submitted,
and again while the watch follows a run. Slurm's commands try the primary, then the backup, and wait for it to
take over; every command of roach's reaches it. Afterwards no job is queued twice, every job in the queue or in
accounting has a record in roach's store and every record a job, and the runs finish with their ledgers whole.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from roach.errors import UsageError, WaitTimeoutError
from roach.lab import lab as lablib
from roach.lab.conf_files import render
from roach.lab.config import LAB_USER, LabConfig, LabLayout
from roach.model.job_state import JobState
from roach.ops.events import EventKind
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import LocalTransport
from roach.slurm import sweep
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.faults.conftest import TARGET
from tests.faults.ledger import assert_left_no_process, check_ledger, steps_done
from tests.support.labs import MAIN_JOB_VENV, SHARED_TMP, private_port_base

PORT_BASE = private_port_base(21)
STEPS = 30
WATCH_STEPS = 60  # 18 s


@pytest.fixture  # a lab each: a primary started again takes control back, failing launches meanwhile
def failover_lab(lab):  # through the lab fixture: the lab marker holds for private labs too
    state = Path(tempfile.mkdtemp(prefix="roach-lab-failover-", dir=SHARED_TMP))
    os.chmod(state, 0o755)  # the lab user's commands read slurm.conf
    if MAIN_JOB_VENV.exists():
        (state / "pyenv").symlink_to(MAIN_JOB_VENV)  # torch, installed once in the main lab's job venv
    try:
        yield lablib.up(str(state), log=lambda *_: None, port_base=PORT_BASE, backup_controller=True)
    finally:
        lablib.down(str(state), log=lambda *_: None)
        shutil.rmtree(state, ignore_errors=True)


def _acct_rows(slurm: SlurmClient, job_id: int) -> str:
    """What accounting holds of a job, every allocation with its End: what a failed wait on it shows."""
    argv = ["sacct", "-X", "-D", "-n", "-P", "-j", str(job_id), "-o", "JobID,JobIDRaw,State,Submit,Start,End,DBIndex"]
    return slurm.run(argv, ok_codes=(0, 1)).stdout


def _controller_lines(cfg: LabConfig) -> list[str]:
    render(cfg)
    return [
        ln for ln in cfg.slurm_conf.read_text().splitlines() if ln.startswith(("SlurmctldHost", "SlurmctldTimeout"))
    ]


def test_the_backup_is_the_second_slurmctld_host(tmp_path):
    lines = _controller_lines(LabConfig(state_dir=str(tmp_path), port_base=PORT_BASE, backup_controller=True))
    assert [ln.split("(")[0] for ln in lines[:2]] == ["SlurmctldHost=ctl", "SlurmctldHost=ctld2"]


def test_the_backup_sets_a_short_slurmctld_timeout(tmp_path):
    lines = _controller_lines(LabConfig(state_dir=str(tmp_path), port_base=PORT_BASE, backup_controller=True))
    assert "SlurmctldTimeout=12" in lines


def test_without_a_backup_one_slurmctld_host(tmp_path):
    lines = _controller_lines(LabConfig(state_dir=str(tmp_path), port_base=PORT_BASE))
    assert [ln.split("(")[0] for ln in lines] == ["SlurmctldHost=ctl"]


def test_a_backup_controller_needs_the_hosts_layout():
    with pytest.raises(UsageError, match="a backup controller needs the hosts layout"):
        LabConfig(state_dir="/nonexistent", backup_controller=True, layout=LabLayout.SINGLE_HOST.value)


def _kill_primary(cfg: LabConfig) -> None:
    """SIGKILL the primary slurmctld; its host stays, so clients are refused there at once."""
    pid = {d.name: d for d in lablib.daemons(cfg)}["slurmctld"].pid()
    assert pid is not None, "the primary slurmctld is not running"
    os.kill(pid, signal.SIGKILL)


def _named(slurm: SlurmClient, name: str) -> tuple[list[str], list[str]]:
    """The job ids called ``name`` in the queue (array tasks one each), and every job of that name Slurm ran: the
    allocations accounting holds that started, and those slurmctld holds (``squeue -t all``, ended ones for
    MinJobAge). 26.05's backup never sends its accounting: its jobs are only in slurmctld, and sacct keeps the
    submission the backup never had PENDING, with no Start, though no controller holds that job."""
    queued = [str(q.ref.job) for q in slurm.squeue(user=LAB_USER) if q.name == name]
    r = slurm.run(["sacct", "-X", "-D", "-n", "-P", "-a", "-o", "JobID,JobName,Start", "-S", "now-1hours"])
    rows = [row.split("|") for row in r.stdout.splitlines()]
    ran = [f[0] for f in rows if f[1:2] == [name] and f[2] != "Unknown"]  # an allocation twice: it ran twice
    held = slurm.run(["squeue", "-h", "-t", "all", "--array", "-n", name, "-O", "JobArrayID"]).stdout.split()
    return queued, ran + sorted(set(held) - set(ran))


class _KillingStore(Store):
    """A store that kills the primary slurmctld as a submission records its jobs: after its held sbatch has
    answered, before its release."""

    def __init__(self, path: Path, cfg: LabConfig):
        super().__init__(path)
        self.cfg = cfg
        self.killed = False

    def add_many(self, records) -> None:
        if not self.killed:
            self.killed = True
            _kill_primary(self.cfg)
        super().add_many(records)


@pytest.mark.lab
def test_primary_killed_mid_sweep_submit_the_backup_takes_every_command(faults, failover_lab, tmp_path):
    cfg = failover_lab
    store = _KillingStore(tmp_path / "store.sqlite", cfg)  # the private lab's job ids repeat the main lab's
    slurm = SlurmClient(LocalTransport(env=cfg.env()))
    cluster = LAB.with_(run_as=LAB_USER, env_factory=cfg.env)
    name = "failover-sweep"
    grid = [{"steps": STEPS, "step_s": 0.2}, {"steps": STEPS, "step_s": 0.2}]
    jobs = sweep(
        TARGET, grid, resources=GPU1.replace(time="00:05:00"), cluster=cluster, repo_root=faults.repo.work,
        store=store, name=name, **faults.roots,
    ).jobs  # fmt: skip
    assert store.killed
    for job in jobs:
        try:
            rec = job.wait(timeout=slack(180))
        except WaitTimeoutError as e:
            raise AssertionError(f"{e.message}; accounting:\n{_acct_rows(slurm, job.job_id)}") from e
        assert rec.state is JobState.COMPLETED, job.log()[-2000:]
    queued, accounted = _named(slurm, name)
    recorded = sorted(str(r.job_id) for r in store.recent(100) if r.name == name)
    assert len(accounted) == len(jobs), f"accounting: {accounted}"
    assert len(set(accounted)) == len(accounted), f"accounting: {accounted}"
    assert {a.split("_")[0] for a in accounted} == set(recorded), f"accounting {accounted}, records {recorded}"
    assert queued == [], f"still queued: {queued}"
    for job in jobs:
        check_ledger(job.record.run_dir, STEPS, interruptions=0, max_redo=0, run_id=job.run_id)
        assert_left_no_process(slurm, job)


@pytest.mark.lab
def test_primary_killed_mid_watch_the_rounds_go_on_at_the_backup(faults, failover_lab, tmp_path):
    cfg = failover_lab
    store = Store(tmp_path / "store.sqlite")
    slurm = SlurmClient(LocalTransport(env=cfg.env()))
    cluster = LAB.with_(run_as=LAB_USER, env_factory=cfg.env)
    resources = GPU1.replace(time="00:05:00")
    job = faults.submit({"steps": WATCH_STEPS, "step_s": 0.3}, resources, cluster=cluster, store=store)
    key = str(job.job_id)
    w = Watcher(cluster, SlurmClient(cluster.transport()), store, job_ids=(key,), interval_s=1.0, heartbeat_s=1e9)
    wait_until("the run to start", lambda: [e for e in w.round() if e.kind is EventKind.STARTED], timeout=120)
    # steps for 6 s: the primary has saved the running job (one it started a second or two before it died, the
    # backup does not know, and kills as an orphan)
    wait_until("20 steps", lambda: steps_done(job) >= 20, timeout=60, explain=lambda: job.log()[-2000:])
    _kill_primary(cfg)
    events: list = []
    deadline = time.monotonic() + slack(180)
    while not [e for e in events if e.kind is EventKind.FINISHED]:
        assert time.monotonic() < deadline, ([e.line() for e in events], _acct_rows(slurm, job.job_id))
        events += w.round()
        time.sleep(1.0)
    lines = [e.line() for e in events]
    (fin,) = [e for e in events if e.kind is EventKind.FINISHED]
    assert fin.data["state"] == "COMPLETED", lines
    assert len([e for e in events if e.kind is EventKind.OUTAGE]) <= 1, lines
    assert not [e for e in events if e.kind is EventKind.STARTED], lines  # never seen to start again
    check_ledger(job.record.run_dir, WATCH_STEPS, interruptions=0, max_redo=0, run_id=job.run_id)
    rows = slurm.run(["sacct", "-X", "-D", "-n", "-P", "-j", key, "-o", "JobID,State,Submit,Start,End,Reason"])
    assert len([r for r in slurm.sacct([job.job_id], duplicates=True) if r.step is None]) == 1, rows.stdout
    assert_left_no_process(slurm, job)
