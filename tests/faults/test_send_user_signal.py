"""Scenario 4: preemption with the site's send_user_signal setting, in each slurm.conf spelling the installed Slurm
reads: the preemptor's USR1 (the job's --signal) comes first; rank 0 sees PreemptTime and counts it as a
preemption, not a wall-clock stop, so a wall-clock budget of 1 survives two of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab import lab as lablib
from roach.lab import release
from roach.lab.config import PreemptSignalSetting
from roach.model.job_state import JobState
from roach.runtime.attempts import read_counts
from roach.slurm.clusters.lab import GPU1
from tests.conftest import slack, wait_until
from tests.faults.conftest import CLUSTER, preempt
from tests.faults.ledger import assert_left_no_process, attempts_by_rank, check_ledger, read_ledger

LOW_N1 = GPU1.replace(qos="low", time="00:10:00", extra=("--nodelist=n1",))


def _steps(job, n: int) -> int:
    try:
        atts = attempts_by_rank(read_ledger(job.record.run_dir)).get(0, [])
    except FileNotFoundError:
        return 0
    return len(atts[n - 1].steps) if len(atts) >= n else 0


@pytest.fixture(params=[s.value for s in PreemptSignalSetting])
def send_user_signal(request, lab):
    setting = request.param
    have = release.installed()
    if (
        setting == PreemptSignalSetting.PREEMPT.value
        and have is not None
        and not have.has_preempt_send_user_signal_in_preempt_parameters
    ):
        with pytest.raises(UsageError, match="no PreemptParameters=send_user_signal"):
            lablib.up(log=lambda *_: None, preempt_send_user_signal=True, preempt_signal_setting=setting)
        pytest.skip(f"Slurm {have} has only the SlurmctldParameters spelling (the other was refused, as it should)")
    lablib.up(log=lambda *_: None, preempt_send_user_signal=True, preempt_signal_setting=setting)
    yield setting
    lablib.up(
        log=lambda *_: None, preempt_send_user_signal=False, preempt_signal_setting=PreemptSignalSetting.SLURMCTLD.value
    )


@pytest.mark.slow
@pytest.mark.lab
def test_preemption_with_send_user_signal_is_a_preemption_not_a_wall_clock(faults, slurm, send_user_signal):
    job = faults.submit(
        {"steps": 60, "step_s": 0.1}, LOW_N1, cluster=CLUSTER.with_(max_timeout_requeues=1), name="send-user-signal"
    )
    for n in (1, 2):
        wait_until(
            f"attempt {n} to do 3 steps",
            lambda n=n: _steps(job, n) >= 3,
            timeout=120,
            explain=lambda: job.log()[-2000:],
        )
        preempt(slurm)
        wait_until(
            f"preemption {n}",
            lambda n=n: job.log().count("preempted at step") >= n,
            timeout=90,
            explain=lambda: job.log()[-2000:],
        )
    rec = job.wait(timeout=slack(180))
    log = job.log()
    assert rec.state is JobState.COMPLETED, log[-4000:]
    assert len(re.findall(r"preempted at step \d+ \(checkpointed, USR1\)", log)) == 2, log[-4000:]
    assert "wall clock at step" not in log and "caught_signal TERM" not in log, log[-4000:]
    assert "(preemption 2)" in log and read_counts(Path(job.record.run_dir)) == {"preempted": 2}
    check_ledger(job.record.run_dir, 60, interruptions=2, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)
