"""`roach skill`: the skill file for coding agents, generated from the command tree and the clusters.

The workflow's prose is the template ``skill.md`` shipped beside this module; every ``{{command NAME}}`` in it
becomes that command's usage, help and options read from the click tree, ``{{clusters}}`` the clusters roach
knows (after clusters.toml), ``{{events}}`` the watch's event kinds and ``{{exit_codes}}`` the exit codes' one
table (:mod:`roach.cli.exit_codes`).
Each cluster also gets a page of its own (`roach skill --install DIR`), from what `roach clusters show NAME`
says and the cluster's page in docs/clusters/ where roach runs from its source tree. Nothing here is written
by hand twice, so the skill cannot drift from the commands; :mod:`roach.cli.agent.skillcheck` proves it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import click

from roach import __version__
from roach._fs import atomic_write
from roach.cli import exit_codes
from roach.cli.app import cli
from roach.cli.clusters import describe
from roach.fleet.cluster import known_clusters, module_cluster
from roach.fleet.userconfig import configured, load
from roach.ops.events import EventKind

# docs/ of a source checkout (an installed wheel has none: the pages then say where they live)
DOCS = Path(__file__).resolve().parents[3] / "docs"
_DIRECTIVE = re.compile(r"\{\{(\w+)(?: ([\w-]+))?\}\}")


@dataclass(frozen=True)
class Skill:
    """The skill file and one page per cluster, by the path each has under the install directory."""

    text: str
    pages: dict[str, str]

    def install(self, root: Path) -> list[Path]:
        """Write ``root/roach/SKILL.md`` and ``root/roach/clusters/NAME.md``; returns the paths written."""
        written = []
        for rel, text in {"SKILL.md": self.text, **self.pages}.items():
            path = root / "roach" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
            written.append(path)
        return written


def _ctx(command: click.Command, name: str, parent: click.Context | None = None) -> click.Context:
    return click.Context(command, info_name=name, parent=parent)


def command_reference(name: str) -> str:
    """``roach NAME``'s usage, help and options (and its subcommands'), as markdown."""
    root = _ctx(cli, "roach")
    command = cli.get_command(root, name)
    if command is None:
        raise KeyError(f"roach has no command {name!r}")
    return _reference(command, _ctx(command, name, root), f"roach {name}")


def _reference(command: click.Command, ctx: click.Context, path: str) -> str:
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"### `{path} {usage}`", "", (command.help or "").strip().replace("\n    ", "\n"), ""]
    for p in command.get_params(ctx):
        if not isinstance(p, click.Option) or p.hidden or "--help" in p.opts:
            continue
        spelled = " / ".join(sorted(p.opts, key=len, reverse=True) + list(p.secondary_opts))
        metavar = "" if p.is_flag else f" {p.make_metavar(ctx)}"
        extra = " (required)" if p.required else ""
        if p.default not in (None, False, (), "") and not p.is_flag and p.show_default:
            extra += f" [default: {p.default}]"
        lines.append(f"- `{spelled}{metavar}`{extra}: {(p.help or '').strip()}")
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None:
                lines += ["", _reference(sub, _ctx(sub, sub_name, ctx), f"{path} {sub_name}").replace("### ", "#### ")]
    return "\n".join(lines).rstrip()


def _clusters(described: list[dict[str, Any]]) -> str:
    rows = ["| cluster | metered | tiers | presets | page |", "|---|---|---|---|---|"]
    for d in described:
        metered = f"**metered** ({d['budget'] or 'a budget'})" if d["metered"] else "no"
        tiers = ", ".join(t["name"] + (" (preemptible)" if t["preemptible"] else "") for t in d["tiers"]) or "-"
        rows.append(
            f"| {d['name']} | {metered} | {tiers} | {', '.join(d['presets']) or '-'} | clusters/{d['name']}.md |"
        )
    return "\n".join(rows)


def cluster_page(d: dict[str, Any]) -> str:
    """One cluster's page: what `roach clusters show NAME` says, then its docs/clusters page where there is one."""
    name = d["name"]
    metered = f"**metered** ({d['budget'] or 'it spends a budget'})" if d["metered"] else "not metered"
    lines = [
        f"# {name}: {d['description']}",
        "",
        "{generated}",
        "",
        f"- budget: {metered}",
        f"- reached: {d['reached']}",
        f"- the default cluster: {'yes' if d['config']['default_cluster'] else 'no'}",
    ]
    for key in ("max_gpus", "max_gpu_hours", "max_cost", "submit_hosts", "refused_hosts", "min_poll_s"):
        if d.get(key) not in (None, [], ""):
            lines.append(f"- {key}: {d[key]}")
    lines += ["", "## Presets (`--resources`)", ""]
    lines += [f"- `{k}`: `{' '.join(p['sbatch'])}`" for k, p in d["presets"].items()] or ["(none)"]
    lines += ["", "## Tiers, top down (`--to` of promote and move)", ""]
    for t in d["tiers"]:
        how = ", ".join(f"{k} {t[k]}" for k in ("partition", "qos", "constraint") if t[k]) or "any"
        cap = f"cap {t['gpu_cap']} GPUs per user" if t["gpu_cap"] is not None else "no per-user cap"
        lines.append(f"- `{t['name']}`: {how}; {cap}; {'preemptible' if t['preemptible'] else 'never preempted'}")
    if not d["tiers"]:
        lines.append(f"(none: `roach clusters discover {name}` reads them)")
    preset = next(iter(d["presets"]), "PRESET")
    lines += [
        "",
        "## On this cluster",
        "",
        f"- where N GPUs finish soonest: `roach plan --cluster {name} --gpus 1`",
        f"- submit: `roach submit pkg.mod:fn --cluster {name} --resources {preset} --json`"
        + (
            " (only within a grant the budget's owner made at a terminal: `roach grant --list --json` shows what "
            "each has left)"
            if d["metered"]
            else ""
        ),
        f"- watch: `roach watch --cluster {name} --json`",
    ]
    doc = DOCS / "clusters" / f"{name}.md"
    if doc.is_file():
        lines += ["", f"## The site page ({d['page']})", "", re.sub(r"^#", "###", doc.read_text(), flags=re.M).strip()]
    else:
        lines += ["", f"The site page is {d['page']} in roach's repository."]
    return "\n".join(lines) + "\n"


def generate() -> Skill:
    """The skill file and the cluster pages, from the command tree and the clusters as they are now."""
    cfg = load()
    described = [describe(configured(module_cluster(n), cfg)) for n in known_clusters()]
    stamp = f"Generated by `roach skill` (roach {__version__}) from its commands' help and its clusters; do not edit."

    def fill(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "command" and arg:
            return command_reference(arg)
        made = {
            "generated": stamp,
            "clusters": _clusters(described),
            "events": ", ".join(f"`{k.value}`" for k in EventKind),
            "exit_codes": exit_codes.skill_list(),
        }
        if kind not in made:
            raise KeyError(f"the skill template has an unknown directive {m.group(0)}")
        return made[kind]

    template = files("roach.cli.agent").joinpath("skill.md").read_text()
    pages = {f"clusters/{d['name']}.md": cluster_page(d).replace("{generated}", stamp) for d in described}
    return Skill(_DIRECTIVE.sub(fill, template), pages)


@click.command("skill")
@click.option(
    "--install",
    "install_dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    default=None,
    help="Write DIR/roach/SKILL.md and DIR/roach/clusters/NAME.md (one per cluster) instead of printing.",
)
def skill(install_dir: str | None) -> None:
    """Print the skill file for coding agents: submitting, watching, rebalancing, preemption and cleanup in
    roach's commands, generated from their help and the clusters (docs/agents.md)."""
    s = generate()
    if install_dir is None:
        click.echo(s.text, nl=False)
        return
    for path in s.install(Path(install_dir)):
        click.echo(f"wrote {path}")
