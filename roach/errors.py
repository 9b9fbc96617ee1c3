"""One error tree for roach.

Lower-level failures (a subprocess that could not start, a Slurm command that failed, an SSH connection
that dropped) are converted into these at the boundary where they happen, so callers and the CLI only
ever catch :class:`RoachError`. Every error says what happened and, in ``hint``, what to do.
"""

from __future__ import annotations

from collections.abc import Sequence


class RoachError(Exception):
    """Base of every error roach raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(RoachError):
    """The caller asked for something invalid (an unknown name, a contradictory value)."""

    exit_code = 2


class LabError(RoachError):
    """The lab cluster could not be started, stopped or described."""

    exit_code = 3


class TransportError(RoachError):
    """A command could not be run at all (binary missing, connection failed, timed out)."""

    exit_code = 4

    def __init__(self, message: str, argv: Sequence[str] = (), hint: str | None = None):
        super().__init__(message, hint)
        self.argv = tuple(argv)


class NoFilesError(TransportError):
    """A cluster reached through slurmrestd alone was asked to carry a file or run a command: nothing was sent."""


class SlurmError(RoachError):
    """A Slurm command ran and failed. Carries the command, its exit code and its stderr."""

    exit_code = 5

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, hint: str | None = None):
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        first = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
        super().__init__(f"{self.argv[0] if self.argv else 'slurm'} failed (exit {returncode}): {first}", hint)


class SlurmTransientError(SlurmError):
    """A Slurm command failed in a way that usually clears by itself (controller busy, socket timeout)."""


class MissingError(RoachError):
    """Something required is missing or cannot be read: a prerequisite, a directory the job needs."""

    exit_code = 7


class WaitTimeoutError(RoachError):
    """A wait ran out of time: the job, holder or sweep it waited for goes on (nothing was cancelled)."""

    exit_code = 10


class ParseError(RoachError):
    """Slurm printed something roach cannot read. Carries the offending text."""

    exit_code = 5
