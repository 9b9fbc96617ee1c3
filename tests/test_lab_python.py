"""The jobs' Python on a machine whose system Python is another version (Debian 13: 3.13) than roach's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.lab.python import runnable_copy


@pytest.mark.lab
def test_a_copy_of_roachs_python_runs_as_the_lab_user_and_makes_a_venv(shared_tmp: Path, lab):
    base = shared_tmp / "state"  # under /tmp, open to the lab's user as the lab's state folder is
    base.mkdir()
    base.chmod(0o755)
    if shutil.which("patchelf") is None:
        pytest.skip("no patchelf here (make deps installs it): the lab falls back to the system's Python")
    exe = runnable_copy(base / "python")
    assert exe is not None, "the copy does not run as the lab's user"
    assert Path(exe).name == f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = base / "venv"
    subprocess.run([exe, "-m", "venv", str(venv)], check=True)
    out = subprocess.run(
        [
            "runuser",
            "-u",
            LAB_USER,
            "--",
            str(venv / "bin" / "python"),
            "-c",
            "import sys, ssl, sqlite3, ctypes, venv; print(*sys.version_info[:3])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(x) for x in sys.version_info[:3]]
    assert not (
        base / "python" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    ).exists() or not any((base / "python").rglob("site-packages/*"))
    again = runnable_copy(base / "python")  # made once, then reused
    assert again == exe
