"""How roach runs a command where Slurm lives.

A transport has one method, ``run(argv) -> Result``. Commands are argument lists, never shell strings:
the local transport hands them to ``exec`` unchanged; the SSH transport (another module) is the only
place that quotes, once per argument. Failures to run a command at all become :class:`TransportError`
here; a command that ran and exited non-zero is a normal ``Result`` for the caller to judge.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from roach.errors import TransportError

# The caller's environment must not change what Slurm prints: SLURM_TIME_FORMAT=relative would make
# sacct print times without dates, which roach's parsers rightly refuse.
PINNED_ENV = {"SLURM_TIME_FORMAT": "standard"}


@dataclass(frozen=True)
class Result:
    """What a command did: its argv, exit status and captured output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@runtime_checkable
class Transport(Protocol):
    """Runs one command where the cluster's Slurm commands are."""

    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result: ...


@dataclass
class LocalTransport:
    """Runs commands on this machine, optionally as another user (``runuser``, needs root).

    ``env`` is added to this process's environment (the lab sets ``SLURM_CONF`` there).
    """

    env: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    default_timeout: float = 60.0
    cwd: str | None = None  # default: "/" when running as another user, who may not read ours

    def _argv(self, argv: Sequence[str]) -> list[str]:
        argv = [str(a) for a in argv]
        if not argv:
            raise TransportError("empty command", argv)
        if self.user is None:
            return argv
        # runuser keeps the caller's environment (no -l), which carries SLURM_CONF through.
        return ["runuser", "-u", self.user, "--", *argv]

    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result:
        full = self._argv(argv)
        # Bytes both ways, decoded leniently: a stray non-UTF-8 byte in a log must not crash a reader.
        data = input.encode() if isinstance(input, str) else input
        env = {**os.environ, **PINNED_ENV, **self.env}
        try:
            proc = subprocess.run(
                full,
                input=data,
                capture_output=True,
                env=env,
                timeout=timeout if timeout is not None else self.default_timeout,
                stdin=None if input is not None else subprocess.DEVNULL,
                cwd=self.cwd or ("/" if self.user else None),
            )
        except FileNotFoundError as exc:
            raise TransportError(
                f"command not found: {full[0]}",
                full,
                hint="install Slurm's client commands (Debian: apt-get install slurm-client) or fix PATH",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TransportError(
                f"command timed out after {exc.timeout:.0f}s: {' '.join(full)}",
                full,
                hint="the Slurm controller may be overloaded or down; try again later",
            ) from exc
        except OSError as exc:
            raise TransportError(f"could not run {full[0]}: {exc}", full) from exc
        return Result(
            tuple(full), proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        )
