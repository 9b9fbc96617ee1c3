"""`roach report NAME [--json] [--plot FILE.png]`: the GPU-hour ledger of a run, a sweep or an experiment
(the library: :func:`roach.ops.report.report`). Registered in :data:`roach.cli.app.COMMANDS`."""

from __future__ import annotations

from pathlib import Path

import click

from roach.cli.common import echo_json, json_option, run_as_option
from roach.cli.jsonout import stamp
from roach.cli.report_plot import check_plot, plot
from roach.ops.ledger import RunLedger
from roach.ops.report import Report, report, report_json
from roach.records.store import Store


@click.command("report")
@click.argument("name", metavar="EXPERIMENT|RUN|SWEEP")
@click.option(
    "--plot",
    "plot_to",
    metavar="FILE.png",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also draw each run's attempts on a timeline (queued, starting, training, recomputed), coloured by "
    "tier, with the totals beside it (needs the plot extra: pip install 'roach[plot]').",
)
@run_as_option
@json_option
def report_cmd(name: str, plot_to: Path | None, run_as: str | None, as_json: bool) -> None:
    """GPU-hours of every attempt of a run, a sweep or an experiment: allocated (sacct's AllocTRES gres/gpu x
    Elapsed), useful, recomputed after a preemption or crash, idle while starting; time queued per tier;
    preemptions, wall-clock stops and failures by type; each attempt's nodes. One sacct per cluster (two where
    some ran inside a holder)."""

    if plot_to is not None:
        check_plot(plot_to)  # before any Slurm call: a missing extra or directory is refused first
    with Store() as store:
        rep = report(name, store=store, run_as=run_as)
    if plot_to is not None:
        plot(rep, plot_to)
    if as_json:
        echo_json(stamp("report", report_json(rep)))
        return
    print_report(rep)
    if plot_to is not None:
        click.echo(f"wrote {plot_to}")


def _h(x: float) -> str:
    return f"{x:.3f}"


def _row(label: str, r: RunLedger | None, rep: Report) -> str:
    runs = [r] if r is not None else list(rep.runs)
    alloc = sum(x.allocated_gpu_h for x in runs)
    useful = sum(x.useful_gpu_h for x in runs)
    recomp = sum(x.recomputed_gpu_h for x in runs)
    idle = sum(x.idle_gpu_h for x in runs)
    pending: dict[str, float] = {}
    for x in runs:
        for tier, s in x.pending_s_by_tier.items():
            pending[tier] = pending.get(tier, 0.0) + s
    fails: dict[str, int] = {}
    for x in runs:
        for kind, n in x.failures.items():
            fails[kind] = fails.get(kind, 0) + n
    return (
        f"{label:<32} {sum(len(x.attempts) for x in runs):>3} {_h(alloc):>9} {_h(useful):>8} {_h(recomp):>8} "
        f"{_h(idle):>8} {sum(x.recomputed_steps for x in runs):>6} {sum(x.preemptions for x in runs):>4} "
        f"{sum(x.wall_clock_stops for x in runs):>4}  "
        f"{', '.join(f'{t} {s:.0f}s' for t, s in sorted(pending.items())) or '-'}"
        f"{'  failed: ' + ', '.join(f'{k} {n}' for k, n in sorted(fails.items())) if fails else ''}"
    )


def print_report(rep: Report) -> None:
    click.echo(f"{rep.scope.value} {rep.name}: {len(rep.runs)} run(s), GPU-hours")
    click.echo(
        f"{'run':<32} {'att':>3} {'allocated':>9} {'useful':>8} {'recomp':>8} {'idle':>8} {'rsteps':>6} "
        f"{'pre':>4} {'wall':>4}  pending by tier"
    )
    for r in rep.runs:
        click.echo(_row(r.run_id, r, rep))
        for a in r.attempts:
            steps = f"steps {a.start_step}-{a.end_step}" if a.start_step is not None else "no log"
            click.echo(
                f"  {a.job} #{a.restart} {a.tier} on {a.nodes or '-'}: {a.state.value}"
                f"{' (' + a.stop.value + ')' if a.stop.value != 'none' else ''}, {a.gpus} GPU, {steps}, "
                f"{f'requeued {a.requeue_s:.0f}s, ' if a.restart and a.requeue_s else ''}"
                f"queued {a.pending_s:.0f}s, ran {a.elapsed_s}s (starting {a.starting_s:.0f}s, "
                f"recomputed {a.recomputed_s:.0f}s)"
            )
        if r.error_line:
            click.echo(f"  error {r.error_line}")
    click.echo(_row("total", None, rep))
