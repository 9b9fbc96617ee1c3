"""`roach clusters [show NAME | discover NAME]`, `roach plan`, `roach clean`, `roach clones [prune]`: the named
clusters, the resource plan and cleaning up (the library: :mod:`roach.fleet.userconfig`, ``discover``,
``plan``, ``clean``). Registered in :data:`roach.cli.app.COMMANDS`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option
from roach.cli.jsonout import stamp
from roach.fleet.cluster import Cluster, known_clusters, module_cluster
from roach.fleet.discover import Discovery, discover
from roach.fleet.userconfig import config_path, configured, default_cluster_name, get_cluster, load, save_block
from roach.ops.clean import clean, clones
from roach.ops.plan import Plan, plan
from roach.records.store import Store


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 100_000
    return console


def _configured(name: str | None, run_as: str | None = None) -> Cluster:
    """The cluster named (else the default cluster) with clusters.toml applied, acting as ``run_as``."""

    c = get_cluster(name or default_cluster_name())
    return c.with_(run_as=run_as) if run_as else c


def page_path(name: str) -> str:
    return f"docs/clusters/{name}.md"


def _reached(c: Cluster) -> str:
    """How roach reaches the cluster, in words: its Slurm calls, and through slurmrestd, its files."""
    if c.rest_url:
        files = f"over ssh {c.ssh_alias}" if c.ssh_alias else "on a shared file system" if c.shared_fs else "refused"
        return f"slurmrestd at {c.rest_url}; files {files}"
    return f"ssh {c.ssh_alias}" if c.ssh_alias else "this machine (no ssh)"


def describe(c: Cluster) -> dict[str, Any]:
    """Everything roach knows about a cluster (after clusters.toml), as plain data."""

    cfg = load()
    out: dict[str, Any] = {
        "name": c.name,
        "description": c.description,
        "budget": c.budget,
        "metered": c.metered,
        "reached": _reached(c),
        "backend": c.backend,
        "page": page_path(c.name),
        "module": f"roach.slurm.clusters.{c.name}",
        "site_file": f"roach/slurm/clusters/{c.name}.sh",
        "config": {
            "path": str(config_path()),
            "configured": c.name in cfg.clusters,
            "default_cluster": (cfg.default or "ilc") == c.name,
        },
    }
    skip = {
        "name",
        "description",
        "budget",
        "metered",
        "ssh_alias",
        "backend",
        "presets",
        "tiers",
        "env_factory",
        "host_check",
    }
    for f in fields(c):
        if f.name not in skip:
            v = getattr(c, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
    out["host_check"] = getattr(c.host_check, "__doc__", None) if c.host_check else None
    out["presets"] = {
        k: {
            "resources": {a: b for a, b in r.to_json().items() if b not in (None, [], ())},
            "sbatch": r.sbatch_options(c.gpu_flag),
        }
        for k, r in c.presets.items()
    }
    out["tiers"] = [
        {
            "name": t.name,
            "partition": t.partition,
            "qos": t.qos,
            "constraint": t.constraint,
            "gpu_cap": t.gpu_cap,
            "preemptible": t.preemptible,
        }
        for t in c.tiers
    ]
    out["site_file_text"] = c.site_file()
    return out


def _print_cluster(d: dict[str, Any]) -> None:
    console = _console()
    console.print(Text(f"{d['name']}: {d['description']}", style="bold"), soft_wrap=True)
    metered = Text("metered", style="bold red") if d["metered"] else Text("not metered", style="green")
    console.print(Text.assemble("  budget: ", metered, f" ({d['budget'] or '?'})"), soft_wrap=True)
    for key in (
        "reached",
        "backend",
        "gpu_flag",
        "default_account",
        "default_partition",
        "partitions",
        "qos_names",
        "max_gpus",
        "max_gpu_hours",
        "gpu_hour_cost",
        "max_cost",
        "max_gpus_per_node",
        "submit_hosts",
        "refused_hosts",
        "refused_host_reason",
        "host_check",
        "node_scratch",
        "min_poll_s",
        "signal_lead_s",
        "checkpoint_signal",
        "ssh_config",
        "remote_setup",
        "page",
        "module",
        "site_file",
    ):
        v = d.get(key)
        console.print(f"  {key}: {'-' if v in (None, [], '') else v}", soft_wrap=True)
    cfg = d["config"]
    console.print(
        f"  clusters.toml: {cfg['path']} ({'configures it' if cfg['configured'] else 'says nothing of it'}"
        f"{'; the default cluster' if cfg['default_cluster'] else ''})",
        soft_wrap=True,
    )
    console.print("  presets:" + ("" if d["presets"] else " (none)"))
    for k, p in d["presets"].items():
        console.print(f"    {k}: {' '.join(p['sbatch'])}", soft_wrap=True)
    console.print("  tiers, top down:" + ("" if d["tiers"] else f" (none: `roach clusters discover {d['name']}`)"))
    for t in d["tiers"]:
        how = ", ".join(f"{k} {t[k]}" for k in ("partition", "qos", "constraint") if t[k]) or "any"
        cap = f"cap {t['gpu_cap']} GPUs per user" if t["gpu_cap"] is not None else "no per-user cap"
        console.print(f"    {t['name']}: {how}; {cap}{'; preemptible' if t['preemptible'] else ''}", soft_wrap=True)
    console.print("  site file:")
    for line in d["site_file_text"].rstrip().splitlines():
        console.print(f"    {line}", soft_wrap=True, markup=False)


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def clusters(ctx: click.Context, as_json: bool) -> None:
    """List the clusters roach knows (`show NAME` for one, `discover NAME` to read its tiers)."""
    if ctx.invoked_subcommand is not None:
        return

    rows = clusters_json()
    if as_json:
        _echo_json(rows)
        return
    table = Table(box=None, pad_edge=False)
    for header in ("cluster", "metered", "reached", "tiers", "description"):
        table.add_column(header, overflow="fold")
    for r in rows:
        name = r["name"] + (" (default)" if r["default"] else "")
        table.add_row(
            name,
            Text("metered", style="red") if r["metered"] else "no",
            r["reached"],
            " ".join(r["tiers"]) or "-",
            r["description"],
        )
    _console().print(table)


@clusters.command("show")
@click.argument("name")
@json_option
def show(name: str, as_json: bool) -> None:
    """Print everything roach knows about cluster NAME (module, clusters.toml, page)."""
    d = describe(_configured(name))
    if as_json:
        _echo_json(stamp("cluster", d))  # describe() is the builder: stamp("cluster", describe(c))
    else:
        _print_cluster(d)


@clusters.command("discover")
@click.argument("name")
@click.option("--save", is_flag=True, help="Append the proposal to clusters.toml (never over a section you wrote).")
@run_as_option
@json_option
def discover_cmd(name: str, save: bool, run_as: str | None, as_json: bool) -> None:
    """Read cluster NAME now (sinfo, scontrol, sacctmgr) and propose its tiers for clusters.toml."""

    d = discover(_configured(name, run_as))  # reached as clusters.toml says (its ssh alias, setup lines)
    saved = save_block(name, d.toml()) if save else None
    if as_json:
        _echo_json(discover_json(d, saved))
        return
    click.echo(d.toml(), nl=False)
    click.echo(
        f"\nsaved in {saved}"
        if saved
        else "\n(not saved: check it, then run again with --save, or copy it into clusters.toml)",
        err=True,
    )


@click.command("plan")
@click.option("--cluster", metavar="NAME", default=None, help="The cluster to plan on. [default: the default cluster]")
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs in all.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes to spread them over.")
@click.option("--time", "wall", default="01:00:00", show_default=True, help="Wall clock (Slurm's [D-]HH:MM:SS).")
@click.option(
    "--write",
    "write",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the chosen Resources to FILE (Python, or JSON for *.json) for a submit script.",
)
@run_as_option
@json_option
def plan_cmd(
    cluster: str | None, gpus: int, nodes: int, wall: str, write: str | None, run_as: str | None, as_json: bool
) -> None:
    """Work out where GPUS would finish soonest now: your claims per tier, caps, sbatch --test-only per tier."""

    p = plan(_configured(cluster, run_as), gpus, nodes, wall)
    written = p.write(write) if write and p.chosen else None
    if as_json:
        _echo_json(plan_json(p, written))
    else:
        _console().print(p.text(), soft_wrap=True, markup=False)
        if written:
            click.echo(f"wrote {written}")


@click.command("clean")
@click.argument("experiment")
@click.option("--cluster", metavar="NAME", default=None, help="Only its jobs on this cluster.")
@click.option("--dry-run", is_flag=True, help="Only list what would be cancelled and deleted.")
@run_as_option
@json_option
def clean_cmd(experiment: str, cluster: str | None, dry_run: bool, run_as: str | None, as_json: bool) -> None:
    """Cancel every job of EXPERIMENT and nothing else's; delete its logs and node-local scratch; keep every
    checkpoint (resume.pt)."""

    target = _configured(cluster, run_as) if cluster else None
    if target is None and run_as:
        raise click.UsageError("--run-as needs --cluster")
    with Store() as store:
        reports = clean(experiment, store=store, cluster=target, dry_run=dry_run)
    if as_json:
        _echo_json([stamp("clean", r.to_json()) for r in reports])  # one record per cluster
        return
    console = _console()
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
        found = clones(_configured(cluster, run_as), clone_root=clone_root, nodes=node, store=store, prune=prune)
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
    _console().print(table if found else f"no clones under {clone_root} on {', '.join(node) or 'those nodes'}")


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


def clusters_json() -> list[dict[str, Any]]:
    """``roach clusters --json``: one record per cluster roach knows, with clusters.toml applied."""
    cfg = load()
    rows: list[dict[str, Any]] = []
    for name in known_clusters():
        c = configured(module_cluster(name), cfg)  # the file read once for all of them
        rows.append(
            stamp(
                "clusters",
                {
                    "name": name,
                    "metered": c.metered,
                    "reached": f"ssh {c.ssh_alias}" if c.ssh_alias else "local",
                    "default": (cfg.default or "ilc") == name,
                    "configured": name in cfg.clusters,
                    "tiers": [t.name for t in c.tiers],
                    "description": c.description,
                },
            )
        )
    return rows


def discover_json(d: Discovery, saved: Path | None) -> dict[str, Any]:
    """``roach clusters discover --json``: what was read, the proposed block, and where ``--save`` put it."""
    return stamp("discover", {**d.to_json(), "saved": str(saved) if saved else None})


def plan_json(p: Plan, written: Path | None) -> dict[str, Any]:
    """``roach plan --json``: the placement and why, and the file ``--write`` wrote."""
    return stamp("plan", {**p.to_json(), "written": str(written) if written else None})
