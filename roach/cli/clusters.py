"""`roach clusters [show NAME | discover NAME]` and `roach plan`: the named clusters and the resource plan (the
library: :mod:`roach.fleet.userconfig`, ``discover``, ``plan``). Registered in :data:`roach.cli.app.COMMANDS`.
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
from roach.launch.pyenv import python_env_here
from roach.model.python_env import EnvChoice
from roach.ops.plan import Plan, plan


def wide_console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 100_000
    return console


def named_cluster(name: str | None, run_as: str | None = None) -> Cluster:
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
        "python_env",
    }
    for f in fields(c):
        if f.name not in skip:
            v = getattr(c, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
    out["host_check"] = getattr(c.host_check, "__doc__", None) if c.host_check else None
    out["python_env"] = c.python_env.value if c.python_env else None
    out["site_python_env"] = c.site_python_env().value
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
    console = wide_console()
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
        "python_env",
        "site_python_env",
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
    wide_console().print(table)


@clusters.command("show")
@click.argument("name")
@json_option
def show(name: str, as_json: bool) -> None:
    """Print everything roach knows about cluster NAME (module, clusters.toml, page)."""
    d = describe(named_cluster(name))
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

    d = discover(named_cluster(name, run_as))  # reached as clusters.toml says (its ssh alias, setup lines)
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
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs in all (with --runs: each run's).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes to spread them over.")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Plan a sweep of this many runs (of --gpus each): how many start now on each tier, within its cap.",
)
@click.option("--time", "wall", default="01:00:00", show_default=True, help="Wall clock (Slurm's [D-]HH:MM:SS).")
@click.option(
    "--write",
    "write",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the chosen Resources to FILE (Python, or JSON for *.json) for a submit script.",
)
@click.option(
    "--repo-root",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The git repository whose HEAD would run: plan says the Python environment its jobs would get, and why.",
)
@run_as_option
@json_option
def plan_cmd(
    cluster: str | None,
    gpus: int,
    nodes: int,
    runs: int,
    wall: str,
    write: str | None,
    repo_root: str,
    run_as: str | None,
    as_json: bool,
) -> None:
    """Work out where GPUS would finish soonest now: your claims per tier, caps, sbatch --test-only per tier.

    With --runs N: where a sweep of N such runs would start the most of them now (`roach sweep --tier auto`).
    """

    c = named_cluster(cluster, run_as)
    p = plan(c, gpus, nodes, wall, runs=runs)
    env = python_env_here(c, repo_root)
    written = p.write(write) if write and p.chosen else None
    if as_json:
        _echo_json(plan_json(p, written, env))
    else:
        wide_console().print(p.text(), soft_wrap=True, markup=False)
        if env is not None:
            click.echo(f"python: {env.line()}")
        if written:
            click.echo(f"wrote {written}")


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


def plan_json(p: Plan, written: Path | None, env: EnvChoice | None = None) -> dict[str, Any]:
    """``roach plan --json``: the placement and why, the file ``--write`` wrote, a job's Python environment there."""
    return stamp("plan", {**p.to_json(), "written": written and str(written), "python_env": env and env.to_json()})
