"""`roach clean` and `roach clones [prune]`: cleaning up an experiment's jobs and files, and the clones on the nodes
(the library: :mod:`roach.ops.clean`). Registered in :data:`roach.cli.app.COMMANDS`.
"""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from roach.cli.clusters import named_cluster, wide_console
from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option
from roach.cli.jsonout import stamp
from roach.ops.clean import clean, clones
from roach.records.store import Store


@click.command("clean")
@click.argument("experiment")
@click.option("--cluster", metavar="NAME", default=None, help="Only its jobs on this cluster.")
@click.option("--dry-run", is_flag=True, help="Only list what would be cancelled and deleted.")
@run_as_option
@json_option
def clean_cmd(experiment: str, cluster: str | None, dry_run: bool, run_as: str | None, as_json: bool) -> None:
    """Cancel every job of EXPERIMENT and nothing else's; delete its logs and node-local scratch; keep every
    checkpoint (resume.pt)."""

    target = named_cluster(cluster, run_as) if cluster else None
    with Store() as store:
        reports = clean(experiment, store=store, cluster=target, dry_run=dry_run, run_as=run_as)
    if as_json:
        _echo_json([stamp("clean", r.to_json()) for r in reports])  # one record per cluster
        return
    console = wide_console()
    for r in reports:
        verb = "would" if r.dry_run else "did"
        console.print(Text(f"{r.experiment} on {r.cluster}: {len(r.jobs)} recorded job(s)", style="bold"))
        console.print(f"  cancel ({verb}): {', '.join(r.cancelled) or 'nothing queued'}", soft_wrap=True)
        console.print(f"  delete logs ({verb}): {len(r.logs)}", soft_wrap=True)
        for p in r.logs:
            console.print(f"    {p}", soft_wrap=True, markup=False)
        console.print(f"  node-local scratch ({verb}) on {', '.join(r.nodes) or 'no node'}:", soft_wrap=True)
        for p in r.scratch:
            console.print(f"    {p}", soft_wrap=True, markup=False)
        console.print(f"  checkpoints kept: {len(r.checkpoints_kept)}", soft_wrap=True)
        for p in r.checkpoints_kept:
            console.print(f"    {p}", soft_wrap=True, markup=False)
        for f in r.failed:
            console.print(Text(f"  failed: {f}", style="red"), soft_wrap=True)
    if any(r.failed for r in reports):
        raise SystemExit(1)


def _clones(
    cluster: str | None, clone_root: str, node: tuple[str, ...], run_as: str | None, as_json: bool, prune: bool
) -> None:
    with Store() as store:
        found = clones(named_cluster(cluster, run_as), clone_root=clone_root, nodes=node, store=store, prune=prune)
    if as_json:
        _echo_json([stamp("clone", c.to_json()) for c in found])
        return
    table = Table(box=None, pad_edge=False)
    for header in ("node", "clone", "size", "used", "state" if not prune else "action"):
        table.add_column(header, overflow="fold")
    for c in found:
        used = "yes" + (f" (job {', '.join(map(str, c.used_by))})" if c.used_by else "") if c.used else "no"
        state = c.action if prune else ("complete" if c.complete else "half-made")
        table.add_row(c.node, c.name, f"{c.size_kib / 1024:.1f} MiB", used, state)
    wide_console().print(table if found else f"no clones under {clone_root} on {', '.join(node) or 'those nodes'}")


_clone_options = [
    click.option("--cluster", metavar="NAME", default=None, help="The cluster. [default: the default cluster]"),
    click.option(
        "--clone-root", default="~/roach_clones", show_default=True, help="Where the clones are on each node."
    ),
    click.option(
        "--node",
        multiple=True,
        metavar="NAME",
        help="A node to look at (repeatable). [default: the nodes the store's jobs ran on]",
    ),
    run_as_option,
    json_option,
]


def _with_clone_options(f):
    for opt in reversed(_clone_options):
        f = opt(f)
    return f


@click.group("clones", invoke_without_command=True)
@_with_clone_options
@click.pass_context
def clones_cmd(
    ctx: click.Context, cluster: str | None, clone_root: str, node: tuple[str, ...], run_as: str | None, as_json: bool
) -> None:
    """List the clones on each node: size, and whether a job uses them (`prune` removes unused ones)."""
    if ctx.invoked_subcommand is None:
        _clones(cluster, clone_root, node, run_as, as_json, prune=False)


@clones_cmd.command("prune")
@_with_clone_options
def prune_cmd(cluster: str | None, clone_root: str, node: tuple[str, ...], run_as: str | None, as_json: bool) -> None:
    """Remove the clones no running job uses and no queued job of yours is at (made writable first)."""
    _clones(cluster, clone_root, node, run_as, as_json, prune=True)
