"""Running ``git`` for the repository checks: one command (:func:`git`), or several at once (:func:`start`, then
:meth:`Started.finish` each), so that the checks a submit makes cost the slowest of them, not their sum.

Every call is an argument list run with ``-C <dir>``, English messages and no optional locks, without the
variables that would point git at another repository; ``git`` missing or failing to run becomes a
:class:`~roach.errors.TransportError`, an unexpected exit a :class:`~roach.errors.RoachError`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roach.errors import RoachError, TransportError

GIT_TIMEOUT = 60.0
# Variables that would point git at another repository than repo_root (set inside git hooks, say).
GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARS}
    env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0")  # English messages; never write the index
    return env


@dataclass
class Started:
    """A git command started by :func:`start`: its argv, and the process (or why it did not start)."""

    argv: list[str]
    raw: bool
    proc: subprocess.Popen | None
    error: OSError | None

    def finish(self, ok: Sequence[int] = (0,)) -> subprocess.CompletedProcess:
        """Wait for it; what :func:`git` returns or raises for the same command."""
        argv = self.argv
        if self.error is not None:
            if isinstance(self.error, FileNotFoundError):
                raise TransportError(
                    "git is not installed (or not on PATH)",
                    argv,
                    hint="install git (Debian: apt-get install git) or fix PATH",
                ) from self.error
            raise TransportError(f"could not run git: {self.error}", argv) from self.error
        assert self.proc is not None
        try:
            stdout, stderr = self.proc.communicate(timeout=GIT_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            self.proc.kill()
            self.proc.communicate()
            raise TransportError(
                f"git timed out after {GIT_TIMEOUT:.0f}s: {' '.join(argv)}",
                argv,
                hint="is the repository on a slow or hung file system?",
            ) from exc
        proc = subprocess.CompletedProcess(argv, self.proc.returncode, stdout, stderr)
        if proc.returncode not in ok:
            err = stderr if isinstance(stderr, str) else stderr.decode("utf-8", "replace")
            last = err.strip().splitlines()[-1] if err.strip() else "(no stderr)"
            raise RoachError(
                f"`{' '.join(argv)}` failed (exit {proc.returncode}): {last}",
                hint="run that command yourself to see what git says",
            )
        return proc


def start(cwd: Path, *args: str, raw: bool = False, env: dict[str, str] | None = None) -> Started:
    """Start ``git -C cwd args`` (its output read by :meth:`Started.finish`)."""
    argv = ["git", "-C", str(cwd), *args]
    text_kw: dict[str, Any] = {} if raw else {"text": True, "encoding": "utf-8", "errors": "replace"}
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else git_env(),
            **text_kw,
        )
    except OSError as exc:
        return Started(argv, raw, None, exc)
    return Started(argv, raw, proc, None)


def git(cwd: Path, *args: str, ok: Sequence[int] = (0,), raw: bool = False) -> subprocess.CompletedProcess:
    """Run ``git -C cwd args``; a failure to run becomes TransportError, an unexpected exit RoachError."""
    return start(cwd, *args, raw=raw).finish(ok)
