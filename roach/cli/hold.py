"""`roach hold`, `steps`, `signal`, `release`: hold an allocation and run attempts inside it (the library
is :mod:`roach.launch.hold.start` and :mod:`roach.launch.hold.attempt_start`; the guide is docs/hold.md).

Attempts themselves start with ``roach submit ... --inside HOLDER``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, metered_option, run_as_option, ssh_config_option
from roach.cli.jsonout import stamp
from roach.cli.refs import cluster_option, ssh_alias_option
from roach.errors import UsageError
from roach.fleet.cluster import with_ssh_override
from roach.fleet.userconfig import get_cluster
from roach.launch.hold.attempts import AttemptPaths, attempt_records
from roach.launch.hold.holder import Holder, SignalReport
from roach.launch.hold.start import hold as hold_allocation
from roach.launch.hold.steps import HolderInfo, Step, StepKind
from roach.model.job_state import JobState
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.runtime.signals import parse_signal


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _hms(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    h, rest = divmod(int(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def _holder(ref: str, cluster: str | None, run_as: str | None, store: Store) -> Holder:
    """The recorded holder ``ref`` names; roach acts only on holders in its store."""
    if cluster is not None:
        get_cluster(cluster)  # an unknown name lists the known ones
    h = Holder.from_ref(ref, cluster=cluster, store=store)
    if run_as:
        h.cluster = h.cluster.with_(run_as=run_as)
    return h


def _info_line(h: Holder, info: HolderInfo, idle: bool | None) -> Text:
    style = "cyan" if info.state.is_running else "yellow" if info.state.is_pending else "red"
    parts: list[Any] = [f"holder {h.job_id} on {h.cluster.name}: ", Text(info.state.value, style=style)]
    if info.reason:
        parts.append(f" ({info.reason})")
    if info.state.is_running or info.state.is_terminal:
        parts.append(
            f" on {info.nodelist} ({info.nodes} node(s) x {info.gpus_per_node} GPU(s)), held "
            f"{_hms(info.held_s)} of {_hms(info.time_limit_s)}"
        )
    if idle:
        parts += ["  ", Text("IDLE: charged, no attempt runs", style="bold yellow")]
    return Text.assemble(*parts)


# -- commands -------------------------------------------------------------------------------------------
@click.command("hold")
@click.option("--cluster", required=True, metavar="NAME", help="The cluster to hold nodes on (e.g. lab).")
@click.option(
    "--resources",
    "preset",
    required=True,
    metavar="PRESET",
    help="A resources preset of the cluster: the nodes and GPUs the attempts will run on.",
)
@click.option("--time", default=None, metavar="TIME", help="Wall clock of the holder. [default: the preset's]")
@click.option("--name", default="hold", show_default=True, help="The holder's job name.")
@click.option(
    "--log-root",
    metavar="PATH",
    default="~/roach/holders",
    show_default=True,
    help="Cluster directory for the holder's log and bundle (absolute or ~/...).",
)
@click.option(
    "--lead",
    "lead_s",
    type=click.IntRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Stop the running attempt this long before the wall clock. [default: the cluster's signal lead]",
)
@metered_option
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Wait up to SECONDS for the holder to run, and print its nodes.",
)
@run_as_option
@ssh_alias_option
@ssh_config_option
@json_option
def hold(
    cluster: str,
    preset: str,
    time: str | None,
    name: str,
    log_root: str,
    lead_s: int | None,
    allow_metered: bool,
    wait_s: float | None,
    run_as: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    as_json: bool,
) -> None:
    """Queue a holder: a job that takes the nodes and sleeps, so that attempts start at once inside it.

    It is charged while it sleeps: `roach release` it once an attempt trains correctly, and submit the real
    run as a job of its own.
    """
    c = get_cluster(cluster)
    c = with_ssh_override(c.with_(run_as=run_as) if run_as else c, ssh_alias, ssh_config)
    with Store() as store:
        h = hold_allocation(
            preset,
            cluster=c,
            name=name,
            log_root=log_root,
            time=time,
            lead_s=lead_s,
            allow_metered=allow_metered,
            store=store,
        )
        info = h.wait_running(timeout=wait_s) if wait_s is not None else h.info()
    if as_json:
        _echo_json(hold_json(h, info))
        return
    out = _console()
    out.print(_info_line(h, info, None))
    out.print(
        f"  log {h.log_path}\n  attempts: roach submit TARGET --cluster {c.name} --resources {preset} "
        f"--inside {h.job_id}\n  end it:   roach release {h.job_id}"
    )


@click.command("steps")
@click.argument("ref", metavar="HOLDER")
@cluster_option
@run_as_option
@json_option
def steps(ref: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """List a holder's steps: which is an attempt's ranks' step (one task per GPU), which a node step (one
    task per node), and the run each belongs to."""
    with Store() as store:
        h = _holder(ref, cluster, run_as, store)
        info = h.info()
        listed: list[Step] = h.steps(info) if info.state.is_running else []
        runs = {AttemptPaths.of(r).attempt: r.run_id for r in attempt_records(store, h.cluster.name, h.job_id)}
    idle = info.state.is_running and not [s for s in listed if s.kind.is_attempt or s.kind is StepKind.OTHER]
    data = steps_json(h, info, idle, listed, runs)
    if as_json:
        _echo_json(data)
        return
    rows = data["steps"]
    out = _console()
    out.print(_info_line(h, info, idle))
    if not rows:
        return
    table = Table(box=None, pad_edge=False)
    for header in ("step", "name", "what", "tasks", "nodes", "time", "run id"):
        table.add_column(header, overflow="fold")
    for r, s in zip(rows, listed):
        style = "bold" if s.kind is StepKind.RANKS else ""
        table.add_row(
            s.id, s.name, Text(r["what"], style=style), str(s.tasks), s.nodelist, _hms(s.elapsed_s), r["run_id"] or ""
        )
    if not out.is_terminal:  # piped: whole values, one line per step, for grep and awk
        out.width = 100_000
    out.print(table)


@click.command("signal")
@click.argument("ref", metavar="HOLDER")
@click.option(
    "--step", default=None, metavar="N", help="The ranks' step to stop (N or HOLDER.N). [default: the one running]"
)
@click.option("--sig", default="USR1", show_default=True, help="The signal: USR1 (checkpoint and leave), TERM, ...")
@cluster_option
@run_as_option
@json_option
def signal(ref: str, step: str | None, sig: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """Stop an attempt cleanly: its ranks log caught_signal, checkpoint and exit at their next step.

    The signal goes by a step of roach's own on the same nodes to that attempt's ranks only. Submit the
    next attempt with the same --run-id to resume from the checkpoint.
    """
    try:
        parse_signal(sig)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--sig") from None
    with Store() as store:
        h = _holder(ref, cluster, run_as, store)
        report = h.signal(step, sig)
        runs = {AttemptPaths.of(r).attempt: r for r in attempt_records(store, h.cluster.name, h.job_id)}
    rec = runs.get(report.attempt)
    if as_json:
        _echo_json(signal_json(report, rec))
        return
    out = _console()
    for line in report.lines:
        out.print(line)
    if report.ranks == 0:
        raise UsageError(
            f"no rank of attempt {report.attempt} was found on the nodes of step {report.step}",
            hint=f"it may have just ended: `roach steps {h.job_id}`",
        )
    out.print(
        f"sent SIG{report.signal} to attempt {report.attempt} (step {report.step})"
        + (f", run {rec.run_id}; it checkpoints and exits at its next step\n  log {rec.log_path}" if rec else "")
    )


@click.command("release")
@click.argument("ref", metavar="HOLDER")
@cluster_option
@run_as_option
@json_option
def release(ref: str, cluster: str | None, run_as: str | None, as_json: bool) -> None:
    """End a holder. A running attempt gets SIGTERM and checkpoints at its next step if it can."""
    with Store() as store:
        h = _holder(ref, cluster, run_as, store)
        before = h.info()
        running = [s for s in h.steps(before) if s.kind is StepKind.RANKS] if before.state.is_running else []
        if before.state.is_active:
            state = h.release()
        else:
            state = before.state
    if as_json:
        _echo_json(release_json(h, before, state, running))
        return
    if not before.state.is_active:
        click.echo(f"holder {h.job_id} already ended ({before.state.value}); nothing to release")
        return
    click.echo(
        f"released holder {h.job_id} on {h.cluster.name} (it was {before.state.value}, held "
        f"{_hms(before.held_s)}): {state.value}"
        + (f"; stopped {', '.join(s.id for s in running)} (SIGTERM)" if running else "")
    )


def hold_json(h: Holder, info: HolderInfo) -> dict[str, Any]:
    """``roach hold --json``: the holder, where it logs, and what Slurm says of it."""
    return stamp(
        "hold",
        {"job_id": h.job_id, "cluster": h.cluster.name, "log": h.log_path, **asdict(info), "state": info.state.value},
    )


def steps_json(h: Holder, info: HolderInfo, idle: bool, listed: list[Step], runs: dict[int, str]) -> dict[str, Any]:
    """``roach steps --json``: the holder's state and its steps, each with what it is and its run id
    (``runs``: attempt number: run id)."""
    rows = [
        {
            **asdict(s),
            "id": s.id,
            "kind": s.kind.value,
            "what": s.describe(),
            "run_id": runs.get(s.attempt) if s.attempt is not None else None,
        }
        for s in listed
    ]
    return stamp(
        "steps",
        {
            "holder": h.job_id,
            "state": info.state.value,
            "idle": idle,
            "held_s": info.held_s,
            "time_limit_s": info.time_limit_s,
            "steps": rows,
        },
    )


def signal_json(report: SignalReport, rec: JobRecord | None) -> dict[str, Any]:
    """``roach signal --json``: what was sent to which ranks, and the attempt's run (``rec``) when known."""
    return stamp(
        "signal", {**asdict(report), "run_id": rec.run_id if rec else None, "log": rec.log_path if rec else None}
    )


def release_json(h: Holder, before: HolderInfo, state: JobState, running: list[Step]) -> dict[str, Any]:
    """``roach release --json``: the holder's state before and after, and the attempts' steps it stopped."""
    return stamp(
        "release",
        {
            "holder": h.job_id,
            "was": before.state.value,
            "state": state.value,
            "held_s": before.held_s,
            "stopped_steps": [s.id for s in running],
        },
    )
