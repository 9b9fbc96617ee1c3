"""The `roach` command, run as a user runs it (the console script, in a subprocess), on the real lab."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import roach
from roach import errors
from roach.cli.app import cli
from roach.lab.config import LabConfig

REPO = Path(__file__).resolve().parent.parent
DAEMONS = {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-n1", "slurmd-n2"}


def daemons_of(lab: LabConfig) -> set[str]:
    """The lab's daemons: on the hosts layout each host runs its own munged, the login host an sshd too, and this
    machine the nodes' HTTPS proxy."""
    hosts = {"munged-n1", "munged-n2", "munged-login", "munged-ctl", "sshd-login", "proxy"}
    return DAEMONS | (hosts if lab.hosts else set())


USABLE = {"idle", "mix", "alloc", "comp"}


def _roach_argv() -> list[str]:
    script = shutil.which("roach", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-c", "from roach.cli import main; main()"]


def roach_cmd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_roach_argv(), *args], capture_output=True, text=True, timeout=timeout)


def _pids(state_dir: str) -> dict[str, int | None]:
    r = roach_cmd("lab", "status", "--state-dir", state_dir, "--json")
    return {d["name"]: d["pid"] for d in json.loads(r.stdout)["daemons"]}


# -- no lab needed ----------------------------------------------------------------------------------


def test_version():
    r = roach_cmd("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"roach {roach.__version__}"


@pytest.mark.parametrize(
    "args",
    [
        ["lab", "status", "--no-such-option"],
        ["lab", "no-such-command"],
        ["lab", "up", "--port-base", "not-a-number"],
    ],
)
def test_usage_errors_exit_2(args):
    r = roach_cmd(*args)
    assert r.returncode == errors.UsageError.exit_code == 2, (r.stdout, r.stderr)
    assert "Usage:" in r.stderr


@pytest.mark.parametrize("command", ["status", "env"])
def test_missing_lab_exits_3_and_says_how_to_start_it(command):
    r = roach_cmd("lab", command, "--state-dir", "/nonexistent")
    assert r.returncode == errors.LabError.exit_code == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "roach: error: no lab in /nonexistent" in r.stderr
    assert "roach lab up" in r.stderr  # the hint


@pytest.mark.parametrize(
    "error",
    [
        errors.RoachError("boom"),
        errors.UsageError("bad choice", hint="pick another"),
        errors.LabError("lab broke"),
        errors.TransportError("no route", argv=["ssh", "x"]),
        errors.SlurmError(["sbatch"], 1, "sbatch: error: nope"),
        errors.ParseError("cannot read 'x'"),
        errors.WaitTimeoutError("job 5 did not end within 10s"),
    ],
)
def test_every_roach_error_becomes_a_red_line_and_its_exit_code(monkeypatch, error):
    def fail(state_dir=None):
        raise error

    monkeypatch.setattr("roach.lab.overview.status", fail)
    result = CliRunner().invoke(cli, ["lab", "status"])
    assert result.exit_code == error.exit_code
    assert f"roach: error: {error.message}" in result.output
    if error.hint:
        assert f"hint: {error.hint}" in result.output


def test_up_help_shows_the_library_defaults():
    r = roach_cmd("lab", "up", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    defaults = LabConfig(state_dir="/x")
    assert f"[default: {defaults.port_base}]" in text
    assert f"[default: {defaults.high_gpu_cap}]" in text


def _commands(group: click.Group, prefix: str) -> list[str]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        out.append(f"{prefix} {name}")
        if isinstance(cmd, click.Group):
            out += _commands(cmd, f"{prefix} {name}")
    return out


def test_docs_list_every_command_and_exit_code():
    doc = (REPO / "docs" / "cli.md").read_text()
    for command in _commands(cli, "roach"):
        assert f"`{command}" in doc, f"docs/cli.md does not mention `{command}`"
    documented = {int(c) for c in re.findall(r"^\| (\d+) \|", doc, flags=re.M)}
    codes = {
        cls.exit_code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.RoachError)
    }
    assert codes | {0} <= documented


# -- on the lab -------------------------------------------------------------------------------------


@pytest.mark.lab
def test_status_json_reports_up_with_both_nodes_and_every_daemon(lab):
    r = roach_cmd("lab", "status", "--state-dir", str(lab.state), "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["up"] is True
    assert {d["name"] for d in st["daemons"]} == daemons_of(lab)
    assert all(d["running"] and d["pid"] for d in st["daemons"]), st["daemons"]
    assert set(st["nodes"]) == {"n1", "n2"}
    assert all(state.rstrip("*~#!%$@^-") in USABLE for state in st["nodes"].values()), st["nodes"]
    assert st["slurm_conf"] == str(lab.slurm_conf)


@pytest.mark.lab
def test_status_table_names_every_daemon_and_node(lab):
    r = roach_cmd("lab", "status", "--state-dir", str(lab.state))
    assert r.returncode == 0, r.stderr
    assert "lab is up" in r.stdout
    for name in [*daemons_of(lab), "n1", "n2"]:
        assert name in r.stdout


@pytest.mark.lab
def test_env_evals_to_the_lab_slurm_conf(lab):
    script = f'eval "$({" ".join(_roach_argv())} lab env --state-dir {lab.state})" && printf %s "$SLURM_CONF"'
    r = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == str(lab.slurm_conf)
    assert Path(r.stdout).is_file()


def test_env_quotes_a_hostile_state_dir(tmp_path):
    state = tmp_path / "it's a $(touch pwned) `dir`\nnext"
    LabConfig(state_dir=str(state)).save()
    argv = " ".join(_roach_argv())
    r = subprocess.run(
        ["bash", "-c", f'eval "$({argv} lab env --state-dir "$1")" && printf %s "$SLURM_CONF"', "_", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == str(state / "etc" / "slurm.conf")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.lab
def test_up_on_a_running_lab_is_a_no_op(lab):
    before = _pids(str(lab.state))
    assert all(before.values()), before
    r = roach_cmd("lab", "up", "--state-dir", str(lab.state), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "lab is up" in r.stdout
    assert _pids(str(lab.state)) == before


def test_python_dash_m_roach_is_the_roach_command():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "roach", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "roach" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "roach", "no-such-command"], capture_output=True, text=True)
    assert bad.returncode == 2
