"""A real terminal for the CLI's full-screen commands: tmux (send-keys, capture-pane) runs a `roach` command in a
pane of its own, as a person would; shared by the tests of `roach top` and of its viewers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def roach_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "roach", *args]


def roach_env(store) -> dict[str, str]:
    return {**os.environ, "ROACH_STORE": str(store.path), "PYTHONPATH": str(ROOT)}


class Pane:
    """`roach top` in a tmux pane of its own tmux server (-L), the pane kept after the command exits."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], width: int = 80, height: int = 24):
        if shutil.which("tmux") is None:
            pytest.skip("tmux is not installed")
        self.server = ["tmux", "-L", f"roach-test-{os.getpid()}-{name}", "-f", "/dev/null"]
        self.target = f"{name}:0.0"
        pass_env = [f"{k}={env[k]}" for k in ("ROACH_STORE", "PYTHONPATH", "ROACH_LAB_DIR", "PATH") if k in env]
        shell = ["sh", "-c", '"$@"; echo "exit status $?"', "sh"]  # the pane says how the command exited
        self.tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), *shell, "env", *pass_env, *argv)
        self.tmux("set-option", "-t", name, "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        return subprocess.run([*self.server, *args], check=True, capture_output=True, text=True).stdout

    def lines(self) -> list[str]:
        return self.tmux("capture-pane", "-p", "-t", self.target).split("\n")

    def text(self) -> str:
        return "\n".join(self.lines())

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.target, *keys)

    def exited(self) -> str | None:
        """How the command exited ("exit status N"), None while it runs."""
        return next((ln for ln in self.lines() if ln.startswith("exit status ")), None)

    def wait(self, what: str, pred, timeout: float = 60.0) -> list[str]:
        seen: list[list[str]] = []

        def look():
            seen.append(self.lines())
            return pred(seen[-1])

        try:
            wait_until(what, look, timeout=timeout, every=0.5)
        except pytest.fail.Exception as err:
            pytest.fail(f"{err}\nthe pane:\n" + "\n".join(seen[-1] if seen else []))
        return seen[-1]

    def close(self) -> None:
        subprocess.run([*self.server, "kill-server"], capture_output=True)
