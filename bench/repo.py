"""A git repo holding bench/jobfns.py as ``pkg/jobfns.py``, pushed to a bare remote the bench user's
jobs clone from: what roach submits from (roach runs a pushed commit, never a working tree)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.labenv import BENCH_DIR, Lab

GIT = [
    "git",
    "-c",
    "safe.directory=*",
    "-c",
    "user.name=roach-bench",
    "-c",
    "user.email=bench@roach",
    "-c",
    "init.defaultBranch=main",
]


def make_repo(lab: Lab, base: Path) -> Path:
    """``base/work`` (a clone of ``base/remote.git``) with the job functions committed and pushed."""
    remote, work = base / "remote.git", base / "work"
    subprocess.run([*GIT, "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run([*GIT, "clone", "-q", f"file://{remote}", str(work)], check=True, capture_output=True)
    (work / "pkg").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "jobfns.py").write_text((BENCH_DIR / "jobfns.py").read_text())
    for args in (
        ["add", "-A"],
        ["commit", "-q", "-m", "benchmark functions"],
        ["push", "-q", "-u", "origin", "HEAD:main"],
    ):
        subprocess.run([*GIT, "-C", str(work), *args], check=True, capture_output=True)
    # the bench user's git refuses a repository another user owns ("dubious ownership")
    subprocess.run(["chown", "-R", lab.user, str(remote)], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
    return work
