"""A pushed git repository holding ``pkg.train`` that the lab's user may clone (the ``repo`` fixture), and
the CLI as the CLI tests call it: what test_cli_jobs and test_mcp share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.lab.config import LAB_USER
from tests.support.labs import SHARED_TMP

TRAIN_PY = """\
def train(run, lr, steps=3):
    run.log("lr=%s steps=%s", lr, steps)
    return lr * steps


def sleepy(seconds):
    import time
    time.sleep(seconds)


def boom():
    raise ValueError("boom")


def chatty(run, n):
    import time
    for i in range(n):
        run.log("tick %d", i)
        time.sleep(1)
"""


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@dataclass
class LabRepo:
    root: Path  # a 0777 directory under SHARED_TMP
    work: Path  # the clone roach submits from
    submitted: list[int] = field(default_factory=list)

    @property
    def common(self) -> list[str]:
        return [
            "--cluster",
            "lab",
            "--run-as",
            LAB_USER,
            "--repo-root",
            str(self.work),
            "--log-root",
            str(self.root / "logs"),
        ]

    def submit(self, target: str, *args: str, preset: str = "CPU"):
        r = invoke("submit", target, "--resources", preset, *self.common, *args, "--json")
        if r.stdout.strip().startswith("{"):
            self.submitted.append(json.loads(r.stdout)["job_id"])
        return r


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(cwd), *args], check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def repo(lab, user_slurm) -> LabRepo:
    """A pushed git repository holding pkg.train, whose bare remote the lab's user may clone."""
    root = Path(tempfile.mkdtemp(prefix="roach-cli-jobs-", dir=SHARED_TMP))
    os.chmod(root, 0o777)  # the lab user writes logs/ and runs/ beside each other here
    remote, work = root / "remote.git", root / "it's a repo"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    (work / "pkg").mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "train.py").write_text(TRAIN_PY)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "pkg.train")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-qu", "origin", "main")
    for d, _, _files in os.walk(root):
        os.chmod(d, 0o777 if Path(d) == root else 0o755)
    subprocess.run(["chown", "-R", LAB_USER, str(remote)], check=True)  # else the user's git calls it dubious
    lab_repo = LabRepo(root, work)
    yield lab_repo
    left = (
        [q.raw_id for q in user_slurm.squeue(job_ids=lab_repo.submitted) if q.state.is_active]
        if lab_repo.submitted
        else []
    )
    user_slurm.scancel(left)
    shutil.rmtree(root, ignore_errors=True)
