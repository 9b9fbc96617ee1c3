"""`roach lab load`: a real trace's jobs played on the lab as other users, in the background, until stopped; its
status from one squeue; stop cancels the load's jobs and nobody else's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from roach.cli.app import cli
from roach.lab import accounting
from roach.lab import lab as lablib
from roach.lab.config import LabConfig, LabLayout
from roach.lab.load import LoadSpec, ensure_unix_user, load_dir, played_ids, users
from roach.lab.load import playing as load_playing
from roach.lab.load import start as start_load
from tests.conftest import wait_until
from tests.support.labs import private_lab, private_port_base
from tests.support.schemas import validate_output

TRACE = Path(__file__).parent / "data" / "traces" / "helios-head40.csv"


def _roach(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _status(lab: LabConfig) -> dict:
    res = _roach("lab", "load", "status", "--state-dir", str(lab.state), "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.lab
def test_a_bad_trace_line_is_refused_with_its_number_and_nothing_is_played(lab, tmp_path):
    bad = tmp_path / "bad.csv"
    lines = TRACE.read_text().splitlines()
    lines[7] += ",extra"
    bad.write_text("\n".join(lines) + "\n")
    res = _roach("lab", "load", "start", "--state-dir", str(lab.state), "--trace", str(bad))
    assert res.exit_code == 2, res.output
    assert "bad.csv line 8" in res.output


@pytest.fixture
def playing(lab: LabConfig, user_slurm, jobs):
    """The Helios excerpt played at 100x as two users, and a job of the lab's own user beside it."""
    mine = user_slurm.sbatch(["--time=5", "--output=/dev/null", "--gres=gpu:1"], "#!/bin/bash\nsleep 120\n")
    jobs.append(mine)
    args = ["--trace", str(TRACE), "--speed", "100", "--load", "4", "--users", "2", "--seed", "1"]
    res = _roach("lab", "load", "start", "--state-dir", str(lab.state), *args)
    assert res.exit_code == 0, res.output
    try:
        wait_until("three jobs played", lambda: len(played_ids(load_dir(lab))) >= 3, 60)
        yield mine
    finally:
        _roach("lab", "load", "stop", "--state-dir", str(lab.state))


@pytest.mark.lab
def test_the_loads_status_is_its_schemas_record(lab, playing):
    validate_output("lab load status", _status(lab))


@pytest.mark.lab
def test_the_load_plays_as_its_own_users(lab, playing, user_slurm):
    ids = played_ids(load_dir(lab))
    users = {q.user for q in user_slurm.squeue(job_ids=ids)} | {r.user for r in user_slurm.sacct(ids)}
    assert users <= {"roachload1", "roachload2"}


@pytest.mark.lab
def test_stop_cancels_the_loads_jobs(lab, playing, user_slurm):
    ids = played_ids(load_dir(lab))
    _roach("lab", "load", "stop", "--state-dir", str(lab.state))
    wait_until(
        "the load's jobs to leave", lambda: not [q for q in user_slurm.squeue(job_ids=ids) if q.state.is_active], 30
    )


@pytest.mark.lab
def test_stop_leaves_other_users_jobs(lab, playing, user_slurm):
    _roach("lab", "load", "stop", "--state-dir", str(lab.state))
    assert [q.state.is_active for q in user_slurm.squeue(job_ids=[playing])] == [True]


@pytest.mark.lab
@pytest.mark.slow
def test_lab_down_ends_the_load_playing_on_it(lab):  # through the lab fixture: the lab marker holds for private labs
    """A load player outliving its lab went on calling sbatch against daemons that were gone."""
    with private_lab("roach-load-down-", port_base=private_port_base(15), layout=LabLayout.HOSTS.value, nodes=1) as cfg:
        start_load(cfg, LoadSpec(str(TRACE), "", 0.0, 1.0, 1.0, 1, 1))  # at 1x: playing for hours
        lablib.down(str(cfg.state), log=lambda *_: None)
        assert not load_playing(cfg)


@pytest.mark.lab
@pytest.mark.slow
def test_lab_down_ends_every_users_jobs(lab):  # through the lab fixture: the lab marker holds for private labs
    """Only root's and the lab user's jobs were cancelled: a load user's job went on running after `down`, and the
    lab's next start found it COMPLETING for good."""
    marker = "sleep 2997"  # the job's process, found by its command line
    with private_lab("roach-load-down-", port_base=private_port_base(15), layout=LabLayout.HOSTS.value, nodes=1) as cfg:
        user = users(1)[0]
        ensure_unix_user(user)
        accounting.ensure_user(cfg, user)
        env = {**os.environ, **cfg.env()}
        argv = ["runuser", "-u", user, "--", "sbatch", "--output=/dev/null", "--chdir=/tmp", f"--wrap={marker}"]
        subprocess.run(argv, env=env, check=True, capture_output=True)
        wait_until("the job's process", lambda: subprocess.run(["pgrep", "-f", marker]).returncode == 0, 60)
        lablib.down(str(cfg.state), log=lambda *_: None)
        assert subprocess.run(["pgrep", "-f", marker]).returncode == 1
