"""A git working clone with a bare ``file://`` remote that the lab user's jobs may clone, and the git command
line the tests run git with."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from roach.lab.config import LAB_USER
from tests.support.labs import SHARED_TMP

GIT = [
    "git",
    "-c",
    "safe.directory=*",
    "-c",
    "user.name=roach-test",
    "-c",
    "user.email=test@roach",
    "-c",
    "init.defaultBranch=main",
]


class GitRepo:
    """A working clone with a bare ``file://`` remote that the lab user's git may clone from."""

    def __init__(self, base: Path):
        self.base = base
        self.remote = base / "remote.git"
        self.work = base / "work"
        subprocess.run([*GIT, "init", "-q", "--bare", str(self.remote)], check=True)
        subprocess.run([*GIT, "clone", "-q", f"file://{self.remote}", str(self.work)], check=True, capture_output=True)

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


def repo_in_tmp(prefix: str, files: dict[str, str]) -> GitRepo:
    """A repository in a new 0777 directory under SHARED_TMP (the lab user's jobs write beside it) with ``files``
    committed and pushed; the caller removes ``repo.base`` or leaves it for a post-mortem (it is small)."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=SHARED_TMP))
    os.chmod(base, 0o777)
    repo = GitRepo(base)
    repo.commit(files, "the test package")
    return repo
