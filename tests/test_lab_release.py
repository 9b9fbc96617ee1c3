"""`roach lab up --slurm 24.11/26.05`: a lab whose daemons and client commands are another Slurm release.

Making a Debian root takes minutes and a mirror, so the lab test uses roots that exist already: the matrix's
(``make test-matrix`` makes /var/tmp/roach-matrix/{trixie,sid}-root; CI runs this file after it) or those named by
``ROACH_RELEASE_ROOTS`` (``24.11=/dir,26.05=/dir``). Where none exists it is skipped, saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab.debian_root import mounted
from roach.lab.release_root import INSIDE_STATE, ReleaseLab, SlurmRelease
from tests.conftest import wait_until
from tests.support.labs import private_port_base

# a port base per release: xdist may run both at once where both roots exist
PORT_BASE = {"24.11": private_port_base(3), "26.05": private_port_base(13)}
MATRIX = {"24.11": "/var/tmp/roach-matrix/trixie-root", "26.05": "/var/tmp/roach-matrix/sid-root"}


def _roots() -> dict[str, str]:
    named = dict(kv.split("=", 1) for kv in os.environ.get("ROACH_RELEASE_ROOTS", "").split(",") if "=" in kv)
    found = {v: d for v, d in {**MATRIX, **named}.items() if Path(d, "usr/bin/apt-get").exists()}
    return found


def _roach(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "roach", *args], capture_output=True, text=True, timeout=900)
    assert not check or r.returncode == 0, (args, r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return r


def _lab_processes_in(root: str) -> list[str]:
    """Every live process of the lab in ``root`` (its daemons and jobs run chrooted there): by its working
    directory or ``SLURM_CONF`` under the lab's state directory there (another user of the root, a matrix run,
    has its own lab elsewhere)."""
    state = f"{root}{INSIDE_STATE}"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/root") != root:
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
            env = Path(f"/proc/{pid}/environ").read_bytes()
            if cwd == state or cwd.startswith(state + "/") or f"SLURM_CONF={INSIDE_STATE}/".encode() in env:
                found.append(f"{pid}: {Path(f'/proc/{pid}/comm').read_text().strip()}")
        except OSError:
            continue
    return found


def test_a_release_is_one_of_the_known_ones_and_a_state_dir_keeps_its_release(tmp_path):
    with pytest.raises(UsageError) as err:
        SlurmRelease.parse("23.02")
    assert "system, 24.11, 26.05" in (err.value.hint or "")
    with pytest.raises(UsageError, match="without --slurm"):
        ReleaseLab.resolve(SlurmRelease.SYSTEM, str(tmp_path), None, None)
    made = ReleaseLab.resolve(SlurmRelease.V24_11, str(tmp_path), None, None)
    assert (made.root, made.port_base) == (tmp_path / "root", SlurmRelease.V24_11.default_port_base)
    made.save()
    assert ReleaseLab.resolve(SlurmRelease.V24_11, str(tmp_path), None, None) == made
    with pytest.raises(UsageError, match="holds a lab on Slurm 24.11, not 26.05"):
        ReleaseLab.resolve(SlurmRelease.V26_05, str(tmp_path), None, None)


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_release_lab_runs_the_demo_on_that_release_and_goes_down_clean(version, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    root = _roots().get(version)
    if root is None:
        pytest.skip(f"no Debian root for Slurm {version} here (make test-matrix makes one; or ROACH_RELEASE_ROOTS)")
    state = str(tmp_path / "state")
    common = ["--slurm", version, "--state-dir", state, "--root", root]
    made_before = [d for d in ("/proc", "/sys", "/dev") if mounted(root + d)]  # another user of the root's
    try:
        up = _roach("lab", "up", *common, "--port-base", str(PORT_BASE[version]))
        assert f"{version}." in up.stdout and "lab is up" in up.stdout, up.stdout
        # The client commands are that release's, and so is the controller they reach.
        assert _roach("lab", "shell", *common, "--", "sinfo", "-V").stdout.split()[-1].startswith(version)
        ctld = _roach("lab", "shell", *common, "--", "scontrol", "show", "config").stdout
        assert re.search(rf"^SLURM_VERSION\s*=\s*{re.escape(version)}\.", ctld, re.M), ctld[-3000:]
        assert re.search(rf"^SlurmctldPort\s*=\s*{PORT_BASE[version]}$", ctld, re.M), ctld[-3000:]
        demo = _roach("lab", "shell", *common, "--", "roach", "lab", "demo")
        assert "COMPLETED, exit code 0:0" in demo.stdout, demo.stdout[-3000:]
        # A second start is a no-op on the running lab.
        assert "lab is up" in _roach("lab", "up", *common, "--port-base", str(PORT_BASE[version])).stdout
    finally:
        down = _roach("lab", "down", *common, check=False)
    assert down.returncode == 0, down.stderr
    wait_until(f"the {version} lab's processes to end", lambda: not _lab_processes_in(root), timeout=60)
    # what the lab mounted is unmounted, and only that
    assert [d for d in ("/proc", "/sys", "/dev") if mounted(root + d)] == made_before
    assert not mounted(root + str(ReleaseLab.resolve(SlurmRelease(version), state, root, None).source))


def test_down_of_a_release_labs_state_dir_takes_its_release_from_it(tmp_path, monkeypatch):
    """`roach lab down --state-dir DIR` of a release lab said "no lab in DIR; nothing to stop" without --slurm."""
    from click.testing import CliRunner

    from roach.cli.app import cli

    ReleaseLab.resolve(SlurmRelease.V26_05, str(tmp_path), None, None).save()
    downed: list[SlurmRelease] = []
    monkeypatch.setattr(ReleaseLab, "down", lambda self, log: downed.append(self.release))
    CliRunner().invoke(cli, ["lab", "down", "--state-dir", str(tmp_path)])
    assert downed == [SlurmRelease.V26_05]


@pytest.fixture
def root_lab(tmp_path):
    """A root whose lab runs at port base 18417: its lab.json as `roach lab up` writes it inside the root, and its
    slurmctld.pid naming a live process of a program called slurmctld (a copy of sleep)."""
    root = tmp_path / "root"
    inner = root / INSIDE_STATE.lstrip("/")
    (inner / "run").mkdir(parents=True)
    (inner / "lab.json").write_text(f'{{"state_dir": "{INSIDE_STATE}", "port_base": 18417}}\n')
    program = tmp_path / "slurmctld"
    shutil.copy("/bin/sleep", program)
    ctld = subprocess.Popen([str(program), "60"])
    (inner / "run" / "slurmctld.pid").write_text(f"{ctld.pid}\n")
    yield root
    ctld.kill()
    ctld.wait()


def test_a_second_lab_in_a_root_that_runs_one_is_refused_and_nothing_is_made(tmp_path, root_lab):
    """A release lab's state inside its root is the root's one /var/lib/roach/lab: a second state dir on the same
    root took the running lab over (and its `lab down` stopped both)."""
    second = ReleaseLab(SlurmRelease.V26_05, tmp_path / "second", root_lab, 19417)
    with pytest.raises(UsageError, match="already runs a Slurm lab of port base 18417"):
        second.up(log=lambda *_: None)
    assert not (tmp_path / "second").exists()


def test_the_same_lab_started_again_is_not_another(tmp_path, root_lab):
    assert ReleaseLab(SlurmRelease.V26_05, tmp_path / "same", root_lab, 18417).other_lab_running() is None


def test_a_pid_file_whose_pid_another_program_took_is_no_lab(tmp_path, root_lab):
    """A crashed slurmctld leaves its pid file; the pid may be another process's by now (here: this test's)."""
    (root_lab / INSIDE_STATE.lstrip("/") / "run" / "slurmctld.pid").write_text(f"{os.getpid()}\n")
    assert ReleaseLab(SlurmRelease.V26_05, tmp_path / "second", root_lab, 19417).other_lab_running() is None
