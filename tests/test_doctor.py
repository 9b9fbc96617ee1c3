"""`roach doctor` against a real sshd on 127.0.0.1 and the lab: passes there, and names each missing piece."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.remote import DOCTOR_FAILED
from roach.cli.remote import doctor as doctor_cmd
from roach.errors import UsageError
from roach.lab.hosts import LOGIN
from roach.model.resources import Resources
from roach.slurm.clusters.lab import LAB
from roach.workspace.doctor import check_workspace, doctor
from roach.workspace.file import WORKSPACE_FILE
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.labs import node_path

ORDER = ["ssh", "rsync-local", "rsync-remote", "rsync-copy", "slurm-commands", "partitions", "accounts"]


def _workspace(base: Path, data) -> Path:
    f = base / WORKSPACE_FILE
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(data if isinstance(data, str) else json.dumps(data))
    return base


def _by_name(checks):
    return {c.name: c for c in checks}


# -- the workspace file (pure) ---------------------------------------------------------------------------------
def test_workspace_file_present_missing_or_incomplete(tmp_path):
    missing = check_workspace(tmp_path)
    assert not missing.ok
    assert missing.detail == f"{tmp_path / WORKSPACE_FILE} is missing: the workspace does not name its remote root"
    assert "never chooses" in missing.hint and "remote_root" in missing.hint

    _workspace(tmp_path, {"remote_root": "/scratch/me/ws"})
    lacks = check_workspace(tmp_path)
    assert not lacks.ok and lacks.detail.endswith("lacks rsync_remote_root (a non-empty string each)")

    _workspace(tmp_path, {"remote_root": "", "rsync_remote_root": 3})
    assert "lacks remote_root and rsync_remote_root" in check_workspace(tmp_path).detail

    _workspace(tmp_path, "{not json")
    assert "cannot be read as JSON" in check_workspace(tmp_path).detail
    _workspace(tmp_path, "[1, 2]")
    assert "not a JSON object" in check_workspace(tmp_path).detail

    _workspace(tmp_path, {"remote_root": "/scratch/me/ws", "rsync_remote_root": "hpc:/scratch/me/ws"})
    ok = check_workspace(tmp_path)
    assert ok.ok and "remote_root=/scratch/me/ws" in ok.detail


# -- the whole list --------------------------------------------------------------------------------------------
@pytest.mark.lab
def test_doctor_passes_over_the_ssh_alias(cluster, tmp_path, sshd: SSHServer, shared_tmp: Path, lab):
    root = shared_tmp / "ws"
    root.mkdir()
    ws = _workspace(tmp_path, {"remote_root": str(root), "rsync_remote_root": f"{sshd.alias}:{root}"})
    checks = doctor(cluster, workspace=ws)
    assert [c.name for c in checks] == [*ORDER, "workspace"]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    by = _by_name(checks)
    assert "without a prompt (BatchMode) as roachlab" in by["ssh"].detail
    assert "removed" in by["rsync-copy"].detail
    assert not list(node_path(lab, LOGIN, "/tmp").glob("roach-doctor.*"))  # the login host's temp dir is gone


@pytest.mark.lab
def test_doctor_on_a_local_cluster_says_local(lab):
    checks = doctor(LAB)
    by = _by_name(checks)
    assert [c.name for c in checks] == ["ssh", "rsync", "slurm-commands", "partitions", "accounts"]
    assert all(c.ok for c in checks), checks
    assert by["ssh"].detail.startswith("local:") and by["rsync"].detail.startswith("local:")


@pytest.mark.lab
def test_unknown_alias_stops_at_ssh_with_its_exact_error(cluster, sshd: SSHServer):
    checks = doctor(cluster.with_(ssh_alias="roach-missing-alias"))
    assert [c.name for c in checks] == ["ssh"]
    assert not checks[0].ok
    assert "Could not resolve hostname roach-missing-alias" in checks[0].detail
    assert str(sshd.config_path) in checks[0].hint


@pytest.mark.lab
def test_a_key_the_host_refuses_stops_at_ssh_and_never_prompts(cluster, sshd: SSHServer):
    checks = doctor(cluster.with_(ssh_alias=sshd.nokey_alias))
    assert [c.name for c in checks] == ["ssh"]
    assert "Permission denied" in checks[0].detail and "BatchMode" in checks[0].hint


@pytest.mark.lab
def test_rsync_missing_on_the_cluster_is_named(cluster):
    checks = doctor(cluster, remote_rsync="/nonexistent/rsync")
    by = _by_name(checks)
    assert not by["rsync-remote"].ok
    assert by["rsync-remote"].detail.startswith("rsync (/nonexistent/rsync) is not found on roach-test-alias")
    assert "rsync-copy" not in by  # not tried without rsync there
    assert by["slurm-commands"].ok and by["partitions"].ok  # the rest is still checked


@pytest.mark.lab
def test_rsync_missing_here_is_named(cluster):
    by = _by_name(doctor(cluster, local_rsync="roach-no-such-rsync"))
    assert not by["rsync-local"].ok and "not installed on this machine" in by["rsync-local"].detail
    assert by["rsync-remote"].ok and "rsync-copy" not in by


@pytest.mark.lab
def test_slurm_commands_missing_after_remote_setup_are_listed(cluster, shared_tmp: Path):
    bin_ = shared_tmp / "bin"  # a PATH with the basics and rsync, but no Slurm
    bin_.mkdir()
    for tool in ("sh", "id", "cat", "rm", "mktemp", "rsync", "true"):
        os.symlink(shutil.which(tool), bin_ / tool)
    os.chmod(shared_tmp, 0o755)
    checks = doctor(cluster.with_(remote_setup=(f"PATH={bin_}",)))
    by = _by_name(checks)
    assert by["ssh"].ok and by["rsync-copy"].ok
    bad = by["slurm-commands"]
    assert not bad.ok
    assert bad.detail == f"not found on roach-test-alias: sbatch squeue sacct scancel (after remote_setup: PATH={bin_})"
    assert "remote_setup" in bad.hint and "module load slurm" in bad.hint
    assert "partitions" not in by  # no Slurm to ask


@pytest.mark.lab
def test_presets_naming_a_missing_account_or_partition_are_named(cluster):
    presets = {
        **cluster.presets,
        "GOOD": Resources(account="lab", partition="gpu"),
        "BAD_ACCOUNT": Resources(account="nosuch"),
        "BAD_PART": Resources(partition="nopart"),
    }
    by = _by_name(doctor(cluster.with_(presets=presets)))
    assert not by["partitions"].ok
    assert by["partitions"].detail == "preset BAD_PART names partition 'nopart', which does not exist"
    assert "gpu" in by["partitions"].hint
    assert not by["accounts"].ok
    assert by["accounts"].detail == (
        "preset BAD_ACCOUNT names account 'nosuch', which user roachlab has no association with"
    )
    assert "accounts of roachlab: lab" in by["accounts"].hint
    good = _by_name(doctor(cluster.with_(presets={"GOOD": presets["GOOD"]})))
    assert good["partitions"].ok and good["accounts"].ok and "lab" in good["accounts"].detail


@pytest.mark.lab
def test_a_remote_root_missing_on_the_cluster_or_reached_elsewhere_fails_the_workspace_check(
    cluster, tmp_path, sshd: SSHServer
):
    _workspace(
        tmp_path,
        {
            "remote_root": "$HOME/neurico_workspaces/never-made",
            "rsync_remote_root": f"{sshd.alias}:~/neurico_workspaces/never-made/",
        },
    )
    by = _by_name(doctor(cluster, workspace=tmp_path))
    assert not by["workspace"].ok
    assert by["workspace"].detail.startswith(
        "the remote root /home/roachlab/neurico_workspaces/never-made "
        "(remote_root $HOME/neurico_workspaces/never-made in "
    )
    assert "runtime creates the remote workspace" in by["workspace"].hint
    _workspace(tmp_path, {"remote_root": "/tmp", "rsync_remote_root": "elsewhere:/tmp/"})
    by = _by_name(doctor(cluster, workspace=tmp_path))
    assert not by["workspace"].ok and "does not go through 'roach-test-alias'" in by["workspace"].detail


@pytest.mark.lab
def test_missing_workspace_file_is_the_blocker(cluster, tmp_path):
    by = _by_name(doctor(cluster, workspace=tmp_path))
    assert not by["workspace"].ok and "is missing" in by["workspace"].detail
    assert all(c.ok for n, c in by.items() if n != "workspace")


# -- the command -----------------------------------------------------------------------------------------------
@pytest.mark.lab
def test_cli_passes_with_the_alias_and_fails_with_exit_7(lab, sshd: SSHServer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no git working tree here: no repo-remote check
    base = ["--cluster", "lab", "--ssh-alias", sshd.alias, "--ssh-config", str(sshd.config_path)]
    res = CliRunner().invoke(doctor_cmd, [*base, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] and data["cluster"] == "lab" and [c["name"] for c in data["checks"]] == ORDER

    res = CliRunner().invoke(doctor_cmd, [*base, "--workspace", str(tmp_path)])
    assert res.exit_code == DOCTOR_FAILED == 7
    assert f"{tmp_path / WORKSPACE_FILE} is missing" in res.output
    assert "1 of 8 checks failed for cluster lab" in res.output

    res = CliRunner().invoke(
        doctor_cmd, ["--cluster", "lab", "--ssh-alias", "roach-missing-alias", "--ssh-config", str(sshd.config_path)]
    )
    assert res.exit_code == 7 and "Could not resolve hostname roach-missing-alias" in res.output


def test_cli_refuses_an_ssh_config_without_an_alias():
    res = CliRunner().invoke(doctor_cmd, ["--cluster", "lab", "--ssh-config", "/x"])
    assert isinstance(res.exception, UsageError) and "--ssh-alias" in res.exception.hint
