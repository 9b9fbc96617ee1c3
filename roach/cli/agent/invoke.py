"""Running one `roach` command in this process, exactly as the command line runs it, and keeping what it printed.

This is how the agent interface calls roach: a tool is the command itself (its parsing, its checks, the library
functions it calls, the JSON its ``--json`` prints), never a second copy of it, so a tool refuses what the
command refuses (a metered cluster without a grant, a dirty or unpushed tree, a job that is not yours)
and says it in the same words. A :class:`~roach.errors.RoachError` or a usage error becomes a
:class:`CommandFailed` whose text is the message and the hint.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import click

from roach.cli.app import cli
from roach.errors import RoachError

# sys.stdout is one per process: commands run one at a time so each keeps only its own output.
_ONE_AT_A_TIME = threading.Lock()


@dataclass(frozen=True)
class Ran:
    """What a command printed, and the code `roach` would have exited with."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """Its ``--json`` output, read back."""
        try:
            return json.loads(self.stdout)
        except ValueError as e:
            raise CommandFailed(
                f"`roach {' '.join(self.argv)}` printed what is not JSON ({e}): {self.stdout[-300:]!r}", 1
            ) from None


class CommandFailed(Exception):
    """A command refused or failed: ``text`` is what `roach` prints on stderr (message, then hint)."""

    def __init__(self, text: str, exit_code: int):
        super().__init__(text)
        self.text = text
        self.exit_code = exit_code


def error_text(err: RoachError) -> str:
    """The message and the hint, as the command line prints them (without the colours)."""
    return f"{err.message}\nhint: {err.hint}" if err.hint else err.message


def run_command(argv: Sequence[str]) -> Ran:
    """Run ``roach ARGV`` here and return what it printed; raise :class:`CommandFailed` where it would have
    printed an error (a RoachError, a usage error, or a non-zero exit with nothing else to say)."""
    name, *rest = argv
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    if command is None:
        raise CommandFailed(f"no such roach command: {name}", 2)
    out, err = io.StringIO(), io.StringIO()
    with _ONE_AT_A_TIME, redirect_stdout(out), redirect_stderr(err):
        try:
            code = command.main(list(rest), prog_name=f"roach {name}", standalone_mode=False)
        except RoachError as e:
            raise CommandFailed(error_text(e), e.exit_code) from None
        except click.ClickException as e:  # usage errors: a bad value, a missing option
            raise CommandFailed(e.format_message(), e.exit_code) from None
        except click.Abort:
            raise CommandFailed(f"roach {name} was interrupted", 1) from None
        except SystemExit as e:  # `roach watch` and `roach clean` exit with their status themselves
            code = e.code
    return Ran(tuple(argv), code if isinstance(code, int) else 0, out.getvalue(), err.getvalue())
