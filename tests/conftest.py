"""Shared fixtures: the real lab cluster, Slurm clients as root and as the lab's unprivileged user."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from roach.lab.config import LAB_USER, LabConfig
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.transport import LocalTransport

T = TypeVar("T")

# Every cluster lookup reads the user's clusters.toml: the tests must not see the developer's own file.
# A test that needs one sets $ROACH_CLUSTERS_TOML itself (monkeypatch), over this missing file.
os.environ["ROACH_CLUSTERS_TOML"] = os.path.join(tempfile.mkdtemp(prefix="roach-tests-"), "no-clusters.toml")


def wait_until(what: str, check: Callable[[], T], timeout: float = 60.0, every: float = 0.5) -> T:
    """Poll ``check`` until it returns something truthy; fail the test naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def lab() -> LabConfig:
    """The lab cluster, started if it is down (idempotent; needs root)."""
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    from roach.lab import up

    return up(log=lambda *_: None)


@pytest.fixture(scope="session")
def slurm(lab: LabConfig) -> SlurmClient:
    """A Slurm client acting as root on the lab."""
    return SlurmClient(LocalTransport(env=lab.env()))


@pytest.fixture(scope="session")
def user_slurm(lab: LabConfig) -> SlurmClient:
    """A Slurm client acting as the lab's unprivileged user (root hides permission bugs)."""
    return SlurmClient(LocalTransport(env=lab.env(), user=LAB_USER))


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory that the lab user's jobs can write to (mode 0777), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="roach-test-", dir="/tmp"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def private_store(prefix: str) -> Iterator[Path]:
    """For a module fixture: $ROACH_STORE at a store of its own while the module's tests run, never the user's."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROACH_STORE", str(d / "store.sqlite"))
        yield d / "store.sqlite"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def jobs(user_slurm: SlurmClient) -> Iterator[list[int]]:
    """Job ids a test submits as the lab user; whatever is left of them is cancelled afterwards."""
    ids: list[int] = []
    yield ids
    if ids:
        user_slurm.scancel(ids)
        wait_until("the test's jobs to leave the queue",
                   lambda: not [r for r in user_slurm.squeue(job_ids=ids) if r.state.is_active], timeout=60)


GIT = ["git", "-c", "safe.directory=*", "-c", "user.name=roach-test", "-c", "user.email=test@roach", "-c", "init.defaultBranch=main"]


class GitRepo:
    """A working clone with a bare ``file://`` remote that the lab user's git may clone from."""

    def __init__(self, base: Path):
        self.base = base
        self.remote = base / "remote.git"
        self.work = base / "work"
        subprocess.run([*GIT, "init", "-q", "--bare", str(self.remote)], check=True)
        subprocess.run([*GIT, "clone", "-q", f"file://{self.remote}", str(self.work)], check=True,
                       capture_output=True)

    def git(self, *args: str) -> str:
        return subprocess.run([*GIT, "-C", str(self.work), *args], check=True, capture_output=True, text=True).stdout

    def write(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            p = self.work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)

    def commit(self, files: dict[str, str], message: str = "change", push: bool = True) -> str:
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        if push:
            # The remote may belong to the lab user already (a second push): let receive-pack accept it.
            self.git("push", "-q", "--receive-pack=git -c safe.directory=* receive-pack", "-u", "origin", "HEAD:main")
            # The lab user's git refuses a repository another user owns ("dubious ownership").
            subprocess.run(["chown", "-R", LAB_USER, str(self.remote)], check=True)
            subprocess.run(["chmod", "-R", "a+rX", str(self.base)], check=True)
        return self.git("rev-parse", "HEAD").strip()


@pytest.fixture
def git_repo(shared_tmp: Path) -> GitRepo:
    return GitRepo(shared_tmp)
