"""`roach lab load ...`: other people's load on the lab, played from a real trace (the library is
:mod:`roach.lab.load`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from roach.cli.common import state_dir_option
from roach.cli.jsonout import stamp
from roach.lab.config import LabConfig
from roach.lab.load import LoadSpec, LoadStatus, start, status, stop
from roach.lab.trace import TraceFormat


@click.group()
def load() -> None:
    """Play a real cluster's jobs on the lab as other users: a busy cluster (docs/clusters/lab.md)."""


@load.command("start")
@state_dir_option
@click.option("--trace", "trace", required=True, type=click.Path(dir_okay=False, exists=True), help="The trace file.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in TraceFormat]),
    default=None,
    help="Its format. [default: from its name and first line]",
)
@click.option(
    "--offset",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Where in the trace to start, in its seconds.",
)
@click.option(
    "--speed",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="How many times faster than the trace's own time.",
)
@click.option(
    "--load",
    "share",
    type=click.FloatRange(min=0, max=4, min_open=True),
    default=0.9,
    show_default=True,
    help="The share of the lab's GPUs the played jobs keep busy on average.",
)
@click.option(
    "--users", type=click.IntRange(1, 64), default=4, show_default=True, help="Lab users that play the trace's users."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="The sampling's seed: the same seed plays the same jobs."
)
def start_cmd(
    state_dir: str | None, trace: str, fmt: str | None, offset: float, speed: float, share: float, users: int, seed: int
) -> None:
    """Start playing the trace in the background (as root) until it ends or `roach lab load stop`."""
    cfg = LabConfig.load(state_dir)
    plan = start(cfg, LoadSpec(trace, fmt or "", offset, speed, share, users, seed))
    span = plan[-1].at_s if plan else 0.0
    gpus = sum(p.gpus * p.run_s for p in plan) / max(span, 1.0)
    click.echo(
        f"playing {len(plan)} jobs of {trace} over {span:.0f} s as {users} users "
        f"(offered about {gpus:.1f} of the lab's {cfg.gpus} GPUs); `roach lab load status`"
    )


@load.command("status")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_cmd(state_dir: str | None, as_json: bool) -> None:
    """The load's jobs: played, running, pending, GPUs busy, and each user's share."""
    st = status(LabConfig.load(state_dir))
    if as_json:
        click.echo(json.dumps(load_status_json(st), indent=2))
        return
    click.echo(
        f"load {'playing' if st.playing else 'played'}: {st.played} of {st.planned} jobs submitted, "
        f"{st.running} running, {st.pending} pending; {st.gpus_busy} of {st.lab_gpus} GPUs busy"
    )
    for user, gpus in st.share.items():
        click.echo(f"  {user}: {gpus} GPUs")


@load.command("stop")
@state_dir_option
def stop_cmd(state_dir: str | None) -> None:
    """Stop the player and cancel the jobs it played, nobody else's."""
    n = stop(LabConfig.load(state_dir))
    click.echo(f"stopped; cancelled what is left of the load's {n} jobs")


def load_status_json(st: LoadStatus) -> dict[str, Any]:
    return stamp("lab.load", asdict(st))
