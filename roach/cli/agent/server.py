"""`roach mcp`: roach's commands as the tools of an MCP server on stdio, for coding agents (docs/agents.md).

The ``mcp`` package is an optional extra (``pip install 'roach[mcp]'``): it is imported only when the server
starts, so `roach -h` and every other command work without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from roach import __version__
from roach.cli.agent.invoke import CommandFailed
from roach.cli.agent.skill import generate
from roach.cli.agent.tools import AgentTools
from roach.cli.app import cli
from roach.cli.common import run_as_option
from roach.errors import MissingError


@dataclass(frozen=True)
class Hints:
    """MCP's tool annotations, set from what the tool's command does: a client asks its person before a tool
    that is not read-only, and warns harder where it is destructive (it cancels, moves, deletes or spends)."""

    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = True  # it reaches a cluster (Slurm, its files), not only roach's own store

    def annotations(self) -> Any:
        """As the mcp package's ``ToolAnnotations``."""
        from mcp.types import ToolAnnotations

        return ToolAnnotations(
            read_only_hint=self.read_only,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=self.open_world,
        )


_READS = Hints(read_only=True, idempotent=True)
_SPENDS = Hints(read_only=False, destructive=True)  # queues jobs: GPU-hours spent cannot be given back

# Each tool: the `roach` command it runs (its help is the tool's description), what the tool adds to it, and
# its hints.
TOOLS: dict[str, tuple[str, str, Hints]] = {
    "submit": (
        "submit",
        "Result: `roach submit --json` (with `dry_run`: `roach submit --dry-run --json`). `args` are the function's "
        "keyword arguments; `tier` is a tier of the cluster, or auto (`roach plan`'s choice). A metered cluster "
        "takes the submission only within a grant its budget's owner made at a terminal (`roach grant`); no tool "
        "makes, changes or revokes one.",
        _SPENDS,
    ),
    "sweep": (
        "sweep",
        "Result: `roach sweep --json` (with `dry_run`: `roach sweep --dry-run --json`). `grid` is the list of the "
        "runs' keyword arguments; `tier` is a tier of the cluster, or auto (`roach plan`'s choice). A metered "
        "cluster takes it only within a grant (`roach grant`, the budget owner's).",
        _SPENDS,
    ),
    "status": ("status", "Result: `roach status --json`. `ref` is a run id or a Slurm job id.", _READS),
    "ls": ("ls", "Result: `roach ls --json`.", _READS),
    "logs": ("logs", "The last `lines` lines of the log: {ref, lines, log, note}.", _READS),
    "cancel": (
        "cancel",
        "Result: `roach cancel --json`. Only jobs in roach's store (ones you submitted).",
        Hints(read_only=False, destructive=True, idempotent=True),
    ),
    "why": ("why", "Result: `roach why --json`.", _READS),
    "plan": ("plan", "Result: `roach plan --json`. `runs`: plan a sweep of that many runs of `gpus` each.", _READS),
    "move": ("move", "Result: `roach move --json`. `to` is the tier's name.", _SPENDS),
    "clean": (
        "clean",
        "Result: `roach clean --json`. `dry_run` is true unless you set it false.",
        Hints(read_only=False, destructive=True, idempotent=True),
    ),
    "report": ("report", "Result: `roach report --json`. `name` is a run id, a sweep id or an experiment.", _READS),
    "watch_events": (
        "watch",
        "Runs `roach watch --once --json --since CURSOR` (a round first where no other watch, top or agent "
        "polls) and returns {events, cursor, dropped, stale_cursor, watch_exit_code}: the watch log's events "
        "after `cursor` (each with its `seq`), oldest first. Pass the returned `cursor` next time to get only "
        "what is new; 0 asks for all it keeps. A cursor the log never gave comes back with stale_cursor true "
        "and every event the log keeps; `dropped` counts those after `cursor` no longer kept.",
        Hints(read_only=True),  # each call may bring new events
    ),
}


# The tools that change nothing: what `roach mcp --read-only` serves.
READ_ONLY = frozenset(name for name, (_, _, hints) in TOOLS.items() if hints.read_only)


class ExtraMissing(MissingError):
    """An optional extra roach needs for this is not installed."""


def command_help(name: str) -> str:
    """The first paragraph of `roach NAME -h`: the one place a command's help is written."""
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, name)
    assert command is not None, name
    return (command.help or "").strip().split("\n\n")[0].replace("\n", " ")


def _refusing(fn: Callable[..., str]) -> Callable[..., str]:
    """The tool's function, its refusals an MCP tool error whose text is the message and the hint."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except CommandFailed as e:
            raise ToolError(e.text) from None

    return call


def _refused(fn: Callable[..., str], name: str) -> Callable[..., str]:
    """A tool a read-only server lists but refuses, saying how to start a server that allows it."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str:
        raise ToolError(
            f"this server is read-only (`roach mcp --read-only`): it serves {', '.join(sorted(READ_ONLY))}, "
            f"not {name}. To let an agent {name}, start the server without --read-only: `roach mcp`."
        )

    return call


def build_server(tools: AgentTools, *, read_only: bool = False) -> Any:
    """The MCP server whose tools are ``tools``' methods; ``read_only``: only those that change nothing run."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise ExtraMissing(
            "`roach mcp` needs the mcp package, which is not installed",
            hint="pip install 'roach[mcp]' (or: pip install mcp)",
        ) from None
    server = MCPServer(
        name="roach",
        version=__version__,
        log_level="WARNING",  # refusals are the agent's to read, not the server's stderr
        instructions="roach runs Python functions as resumable Slurm jobs. `roach skill` prints the workflow.",
    )
    for tool, (command, extra, hints) in TOOLS.items():
        fn = getattr(tools, tool)
        server.add_tool(
            _refused(fn, tool) if read_only and tool not in READ_ONLY else _refusing(fn),
            name=tool,
            description=f"{command_help(command)}\n\n{extra}",
            annotations=hints.annotations(),
            structured_output=False,
        )

    @server.resource("roach://skill", name="skill", mime_type="text/markdown", description=SKILL_RESOURCE)
    def skill() -> str:
        return generate().text

    return server


SKILL_RESOURCE = "The workflow of submitting, watching, rebalancing, preemption and cleanup: `roach skill`'s text."


@click.command("mcp")
@run_as_option
@click.option(
    "--read-only",
    is_flag=True,
    help="Serve only the tools that change nothing (status, ls, logs, why, plan, watch_events); the others "
    "refuse and say so.",
)
def mcp(run_as: str | None, read_only: bool) -> None:
    """Serve roach's commands as MCP tools on stdin/stdout, for a coding agent.

    Tools: submit, sweep, status, ls, logs, cancel, why, plan, move, clean, report, watch_events. Each runs the command
    of that name with --json and refuses what it refuses; the resource roach://skill is `roach skill`'s text.
    See docs/agents.md.
    """
    build_server(AgentTools(run_as=run_as), read_only=read_only).run("stdio")
