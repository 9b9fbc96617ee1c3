"""The lab's site module points Slurm's commands at the lab from its saved ``lab.json`` alone (roach.lab.saved)."""

from __future__ import annotations

import json

import pytest

from roach.errors import LabError
from roach.fleet.userconfig import get_cluster
from roach.lab.config import LabConfig
from roach.lab.saved import saved_slurm_env


def test_the_lab_clusters_env_is_the_one_its_saved_settings_give(tmp_path, monkeypatch):
    cfg = LabConfig(state_dir=str(tmp_path / "state"), port_base=16517, nodes=4)
    (tmp_path / "state").mkdir()
    cfg.save()
    monkeypatch.setenv("ROACH_LAB_DIR", str(tmp_path / "state"))
    assert get_cluster("lab").env_factory() == LabConfig.load().env()


def test_the_env_names_the_state_dir_lab_json_saves_not_the_dir_it_was_found_in(tmp_path):
    """A release root's lab saves the state directory its daemons use; lab.json may be read through another path."""
    (tmp_path / "lab.json").write_text(json.dumps({"state_dir": "/var/lib/roach/lab-26.05"}))
    assert saved_slurm_env(tmp_path) == {"SLURM_CONF": "/var/lib/roach/lab-26.05/etc/slurm.conf"}


def test_no_lab_json_is_a_lab_error_naming_the_directory(tmp_path):
    with pytest.raises(LabError, match=f"no lab in {tmp_path} \\(no lab.json\\)"):
        saved_slurm_env(tmp_path)


def test_a_lab_json_naming_no_state_dir_is_a_lab_error(tmp_path):
    (tmp_path / "lab.json").write_text(json.dumps({"port_base": 16817}))
    with pytest.raises(LabError, match="lab.json names no state_dir"):
        saved_slurm_env(tmp_path)
