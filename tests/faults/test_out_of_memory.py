"""Scenario 14's OUT_OF_MEMORY: a rank over its --mem, killed by Slurm's cgroup, told apart from a crash.

The main lab enforces no memory (task/none). This module starts a private lab with ``memory_cgroup`` (task/cgroup,
ConstrainRAMSpace on the cgroup v1 memory controller), so the kernel's OOM killer ends the rank as on a real
cluster and Slurm records OUT_OF_MEMORY. roach does not retry it (the same run would use the same memory): the job
ends once, its error names the state and says to ask for more memory, and `roach resume` with more memory
continues from the last checkpoint, every step once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from roach.lab import lab as lablib
from roach.lab.config import LAB_USER, LabConfig
from roach.model.job_state import JobState
from roach.records.results import NotCompletedError
from roach.records.store import Store
from roach.runtime.attempts import read_counts
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import LocalTransport
from roach.slurm import resume
from roach.slurm.clusters.lab import GPU1, LAB
from tests.conftest import slack
from tests.faults.ledger import assert_left_no_process, check_ledger
from tests.support.labs import SHARED_TMP, private_port_base

PORT_BASE = private_port_base(2)
MEMORY = Path("/sys/fs/cgroup/memory")
STEPS, HOG_AT, EVERY = 12, 6, 3


def _cgroup_v1_memory() -> str | None:
    """Why this host cannot run the memory lab, or None when it can (a writable v1 memory controller)."""
    if not (MEMORY / "memory.limit_in_bytes").exists():
        return f"no cgroup v1 memory controller at {MEMORY} (Slurm's cgroup/v2 needs systemd's delegation)"
    probe = MEMORY / f"roach-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"the memory controller at {MEMORY} is not writable here: {e}"
    return None


@pytest.fixture(scope="module")
def memory_lab(lab):
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    why = _cgroup_v1_memory()
    if why:
        pytest.skip(why)
    state = Path(tempfile.mkdtemp(prefix="roach-lab-oom-", dir=SHARED_TMP))
    os.chmod(state, 0o755)  # the lab user's commands read slurm.conf
    try:
        cfg = lablib.up(str(state), log=lambda *_: None, port_base=PORT_BASE, memory_cgroup=True)
        yield cfg
    finally:
        lablib.down(str(state), log=lambda *_: None)
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.lab
def test_a_rank_over_its_memory_ends_out_of_memory_once_and_resumes_with_more(
    faults, memory_lab: LabConfig, tmp_path: Path
):
    store = Store(tmp_path / "store.sqlite")  # the private lab's job ids repeat the main lab's
    slurm = SlurmClient(LocalTransport(env=memory_lab.env()))
    cluster = LAB.with_(run_as=LAB_USER, env_factory=memory_lab.env)
    small = GPU1.replace(mem="300M", time="00:05:00")
    job = faults.submit(
        {"steps": STEPS, "step_s": 0.2, "hog_at": HOG_AT, "hog_mb": 600},
        small,
        cluster=cluster,
        name="oom",
        checkpoint_every=EVERY,
        store=store,
    )
    rec = job.wait(timeout=slack(120))
    log = job.log()
    assert rec.state is JobState.OUT_OF_MEMORY, (rec, log[-3000:])
    # Not retried, by roach or Slurm: one allocation, and no retry budget spent on it.
    runs = [r for r in slurm.ends([job.job_id], duplicates=True) if r.step is None]
    assert [r.state for r in runs] == [JobState.OUT_OF_MEMORY], runs
    assert read_counts(Path(job.record.run_dir)) == {}
    stored = store.get("lab", job.job_id)
    assert stored.status == "failed" and stored.slurm_state.startswith("OUT_OF_MEMORY (step "), stored
    with pytest.raises(NotCompletedError) as err:
        job.result()
    assert err.value.state is JobState.OUT_OF_MEMORY
    assert "OUT_OF_MEMORY" in err.value.message and "more memory" in (err.value.hint or ""), err.value
    check_ledger(job.record.run_dir, STEPS, interruptions=0, max_redo=0, run_id=job.run_id, complete=False)
    assert_left_no_process(slurm, job)

    # With more memory, `roach resume` continues from the checkpoint before the hog: every step once.
    again = resume(
        job.run_id,
        resources=small.replace(mem="2G"),
        cluster=cluster,
        repo_root=faults.repo.work,
        store=store,
    )
    assert again.wait(timeout=slack(120)).state is JobState.COMPLETED, again.log()[-3000:]
    check_ledger(job.record.run_dir, STEPS, interruptions=1, max_redo=EVERY, run_id=job.run_id)
    assert again.result() == {"steps": STEPS, "rank": 0}
    assert_left_no_process(slurm, again)
