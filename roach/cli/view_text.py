"""How a job's view reads on a terminal: its state in words and colour (``ls``'s state column) and
``status``'s three lines. Plain ``click`` (:mod:`roach.cli.columns`), no rich."""

from __future__ import annotations

import click

from roach.cli.columns import Spans, styled
from roach.launch.job_view import JobView

_STYLE = {"completed": "green", "running": "cyan", "pending": "yellow"}


def state_text(v: JobView) -> Spans:
    """The state (and why it is pending), in its status's colour; a holder's time held, and IDLE if it is."""
    label = v.state or "?"
    if v.reason:
        label += f" ({v.reason})"
    colour = _STYLE.get(v.status, "red" if v.status != "submitted" else None)
    out: Spans = [(label, {"fg": colour} if colour else {})]
    if v.held_s is not None:
        out.append((f" held {v.held_s // 3600}h{v.held_s // 60 % 60:02d}m", {}))
    if v.idle:
        out.append((" IDLE: charged, no attempt runs", {"fg": "yellow", "bold": True}))
    return out


def print_view(v: JobView) -> None:
    """``roach status``'s lines (and ``submit``'s): the job, where and its state; its name, target and
    submission; its log."""
    where = f"{v.cluster} (via ssh {v.via})" if v.via else v.cluster
    exit_ = f"  exit {v.exit_code}" if v.exit_code else ""
    click.echo(f"job {v.slurm_id} (run {v.run_id}) on {where}: {styled(state_text(v))}{exit_}")
    click.echo(f"  name {v.name}  target {v.target}  submitted {v.submitted_at}")
    click.echo(f"  log {v.log}")
    if v.error_line:
        click.echo(f"  error {v.error_line}")
