"""A command run at a real pseudo-terminal, a person typing an answer to its question."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time


def at_terminal(
    args: list[str],
    env: dict[str, str],
    typed: str | None,
    timeout: float = 60,
    asks: bytes = b"Type the cluster's name",
) -> tuple[int, str]:
    """Run ``roach ARGS`` with a pseudo-terminal as its stdin, stdout and stderr; type ``typed`` and Enter once
    it shows ``asks``. Returns its exit status and what the terminal showed."""
    master, slave = os.openpty()
    p = subprocess.Popen([sys.executable, "-m", "roach", *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    shown, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the command closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
                if typed is not None and asks in shown:
                    os.write(master, typed.encode() + b"\r")
                    typed = None
            elif p.poll() is not None:
                break
        return p.wait(timeout=timeout), shown.decode(errors="replace").replace("\r\n", "\n")
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
