"""`roach doctor`: check what working with a cluster needs (the library is :mod:`roach.workspace.doctor`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from roach.cli.common import run_as_option
from roach.cli.workspace_json import doctor_json
from roach.errors import UsageError
from roach.fleet.cluster import Cluster, with_ssh_override
from roach.fleet.userconfig import get_cluster
from roach.workspace.base import Workspace, resolve_cluster
from roach.workspace.doctor import Check
from roach.workspace.doctor import doctor as run_doctor
from roach.workspace.file import WORKSPACE_FILE

DOCTOR_FAILED = 7  # exit code: at least one prerequisite is missing (each is printed with what to do)


def _cluster(name: str, ssh_alias: str | None, ssh_config: str | None) -> Cluster:
    return with_ssh_override(get_cluster(name), ssh_alias, ssh_config)


def _names_remote(path: str) -> bool:
    """Whether ``path`` is inside a git working tree that names a remote (git missing: no)."""
    try:
        got = subprocess.run(["git", "-C", path, "ls-remote", "--get-url"], capture_output=True, text=True)
    except OSError:
        return False
    return got.returncode == 0 and bool(got.stdout.strip())


def _render(cluster: Cluster, checks: list[Check]) -> None:
    console = Console(highlight=False)
    for ch in checks:
        mark = Text("ok  ", style="bold green") if ch.ok else Text("FAIL", style="bold red")
        console.print(Text.assemble(mark, " ", (f"{ch.name:<15}", "bold"), " ", ch.detail), soft_wrap=True)
        if ch.hint and not ch.ok:
            console.print(Text(f"{'':<21}hint: {ch.hint}", style="yellow"), soft_wrap=True)
    failed = [ch for ch in checks if not ch.ok]
    if failed:
        console.print(
            Text(f"{len(failed)} of {len(checks)} checks failed for cluster {cluster.name}", style="bold red")
        )
    else:
        console.print(Text(f"cluster {cluster.name}: all {len(checks)} checks passed", style="bold green"))


@click.command()
@click.option(
    "--cluster",
    "name",
    default=None,
    metavar="NAME",
    help="The cluster to check (e.g. lab; default: the one the workspace file names).",
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False),
    default=None,
    help="A local workspace folder: also check that it names its remote root "
    "(.neurico/dsi_slurm_remote_workspace.json) and that the root exists on the cluster "
    "(default: here, when here has that file).",
)
@click.option(
    "--ssh-alias", metavar="ALIAS", default=None, help="Reach the cluster by `ssh ALIAS` instead of its own setting."
)
@click.option(
    "--ssh-config",
    metavar="FILE",
    default=None,
    help="The ssh config file that defines the alias (default: ~/.ssh/config).",
)
@click.option(
    "--remote-rsync",
    metavar="PATH",
    default="rsync",
    show_default=True,
    help="rsync's command on the cluster (passed as rsync --rsync-path).",
)
@click.option(
    "--repo-root",
    type=click.Path(file_okay=False),
    default=None,
    help="The git working tree whose remote the jobs clone: check that the user they run as can read it "
    "(default: here, when here is inside one that names a remote and no --workspace is given).",
)
@run_as_option
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
def doctor(
    ctx: click.Context,
    name: str | None,
    workspace: str | None,
    ssh_alias: str | None,
    ssh_config: str | None,
    remote_rsync: str,
    repo_root: str | None,
    run_as: str | None,
    as_json: bool,
) -> None:
    """Check a cluster's prerequisites, in order, and say each missing one plainly.

    For a cluster reached over SSH: the alias connects without a prompt, rsync works through it, Slurm's
    commands exist there; then the accounts and partitions the presets name, that the user the jobs run as
    (--run-as, or the cluster's) can read the repository's remote, and (with --workspace) the remote-workspace
    file. Exits 0 when every check passes, 7 when one fails.
    """
    if workspace is None and name is None and Path(WORKSPACE_FILE).exists():
        workspace = "."
    if name is None:
        if workspace is None:
            raise UsageError(
                "no cluster given",
                hint=f"pass --cluster NAME, or --workspace DIR of a workspace whose {WORKSPACE_FILE} names it",
            )

        cluster = with_ssh_override(resolve_cluster(Workspace.load(workspace), None), ssh_alias, ssh_config)
    else:
        cluster = _cluster(name, ssh_alias, ssh_config)
    if run_as:
        cluster = cluster.with_(run_as=run_as)
    if repo_root is None and workspace is None and _names_remote("."):  # a workspace is rsynced, not cloned
        repo_root = "."
    checks = run_doctor(cluster, workspace=workspace, remote_rsync=remote_rsync, repo_root=repo_root)
    ok = all(ch.ok for ch in checks)
    if as_json:
        click.echo(json.dumps(doctor_json(cluster.name, checks), indent=2))
    else:
        _render(cluster, checks)
    if not ok:
        ctx.exit(DOCTOR_FAILED)
