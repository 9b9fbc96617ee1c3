"""The one maker of Debian roots (roach/lab/debian_root.py), which the release lab and the test matrix share.

Making a root from nothing is what CI's matrix run does (debootstrap of sid, minutes); here the steps that run in
seconds on this machine's real dpkg, mounts and an existing root where there is one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roach.errors import LabError
from roach.lab.debian_root import DebianRoot, install_script, missing_packages, mounted, run_step


def _bash(script: str) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_missing_packages_are_those_dpkg_does_not_have_installed_in_the_order_asked():
    assert missing_packages(["roach-no-such-package", "bash", "coreutils", "zz-roach-none"], _bash) == [
        "roach-no-such-package",
        "zz-roach-none",
    ]


def test_the_install_script_quotes_each_package_and_asks_nothing():
    script = install_script(["slurm-wlm", "a b"])
    assert "DEBIAN_FRONTEND=noninteractive" in script and "--no-install-recommends" in script
    assert script.endswith("install -y --no-install-recommends slurm-wlm 'a b'")


def test_a_failed_step_says_which_step_and_what_it_printed():
    with pytest.raises(LabError, match=r"mount /proc failed: .*ls /roach-no-such-dir: .*No such file"):
        run_step(["ls", "/roach-no-such-dir"], "mount /proc")


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_mounted_sees_a_bind_mount_of_the_same_filesystem_which_ismount_misses(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    assert mounted("/proc") and not mounted(str(dest))
    subprocess.run(["mount", "--bind", str(src), str(dest)], check=True)
    try:
        assert mounted(str(dest)) and not os.path.ismount(dest)
    finally:
        subprocess.run(["umount", str(dest)], check=True)
    assert not mounted(str(dest))


def _existing_root() -> tuple[Path, str] | None:
    for path, codename in (
        ("/var/tmp/roach-matrix/sid-root", "sid"),
        ("/var/tmp/roach-matrix/trixie-root", "trixie"),
    ):
        if Path(path, "usr/bin/apt-get").exists():
            return Path(path), codename
    return None


@pytest.mark.skipif(os.geteuid() != 0 or _existing_root() is None, reason="no Debian root here (make test-matrix)")
def test_an_existing_root_is_kept_as_it_is_and_its_python_found():
    path, codename = _existing_root() or (Path(), "")
    said: list[str] = []
    root = DebianRoot(path, codename)
    before = path.joinpath("usr/bin/apt-get").stat().st_mtime_ns
    root.bootstrap(said.append)
    assert said == [] and path.joinpath("usr/bin/apt-get").stat().st_mtime_ns == before  # no debootstrap again
    rc = path / "usr/sbin/policy-rc.d"
    assert rc.read_text() == "#!/bin/sh\nexit 101\n" and os.access(rc, os.X_OK)  # no daemon starts from apt
    want = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert root.python() is not None and root.python().endswith(f"/bin/{want}")  # type: ignore[union-attr]
    assert root.ensure_python(said.append) == root.python() and said == []
