"""`roach lab ...`: start, stop and describe the lab cluster (the library is :mod:`roach.lab`)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from roach import lab as lablib
from roach.cli import demo as demo_module
from roach.cli.common import state_dir_option
from roach.cli.jsonout import stamp
from roach.cli.lab_load import load as load_group
from roach.errors import LabError, RoachError
from roach.lab import overview as labstatus
from roach.lab.config import MAX_GPUS_PER_NODE, MAX_NODES
from roach.lab.reboot import reboot as reboot_node
from roach.lab.release_root import ReleaseLab, SlurmRelease

slurm_option = click.option(
    "--slurm",
    "slurm",
    type=click.Choice([r.value for r in SlurmRelease]),
    default=SlurmRelease.SYSTEM.value,
    show_default=True,
    help="The Slurm release: this machine's, or Debian's 24.11 (trixie) / 26.05 (sid) in a root of its own "
    "(debootstrapped into the state directory once, then reused).",
)
root_option = click.option(
    "--root",
    type=click.Path(file_okay=False),
    default=None,
    help="With --slurm 24.11/26.05: an existing Debian root of that release to use. [default: STATE_DIR/root]",
)


def _release_lab(slurm: str, state_dir: str | None, root: str | None, port_base: int | None = None) -> ReleaseLab:
    return ReleaseLab.resolve(SlurmRelease.parse(slurm), state_dir, root, port_base)


def _default(name: str) -> str:
    """A lab setting's default, read from :class:`roach.lab.LabConfig` so help never disagrees with it."""
    value = {f.name: f.default for f in fields(lablib.LabConfig)}[name]
    return f"[default: {('on' if value else 'off') if isinstance(value, bool) else value}]"


@click.group()
def lab() -> None:
    """The lab cluster: a real Slurm on this machine (two nodes, fake GPUs, QOS tiers) for demos and tests."""


@lab.command()
@state_dir_option
@click.option(
    "--port-base", type=int, default=None, help=f"First of the six ports the lab binds. {_default('port_base')}"
)
@click.option(
    "--min-job-age", type=int, default=None, help=f"Seconds slurmctld keeps a finished job. {_default('min_job_age')}"
)
@click.option("--max-array-size", type=int, default=None, help=f"Slurm's MaxArraySize. {_default('max_array_size')}")
@click.option("--max-job-count", type=int, default=None, help=f"Slurm's MaxJobCount. {_default('max_job_count')}")
@click.option(
    "--preempt-send-user-signal/--no-preempt-send-user-signal",
    default=None,
    help=f"Send the job's --signal before preempting it. {_default('preempt_send_user_signal')}",
)
@click.option(
    "--preempt-signal-setting",
    type=click.Choice([s.value for s in lablib.PreemptSignalSetting]),
    default=None,
    help="Which slurm.conf setting says so: SlurmctldParameters=preempt_send_user_signal (every release) or "
    f"PreemptParameters=send_user_signal (23.02+). {_default('preempt_signal_setting')}",
)
@click.option(
    "--low-grace-time", type=int, default=None, help=f"Seconds a preempted low job gets. {_default('low_grace_time')}"
)
@click.option(
    "--high-gpu-cap", type=int, default=None, help=f"GPUs per user in the high QOS. {_default('high_gpu_cap')}"
)
@click.option(
    "--nodes",
    type=click.IntRange(1, MAX_NODES),
    default=None,
    help=f"Compute nodes n1..nN, each a host of its own (more than 2 need --hosts). {_default('nodes')}",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(1, MAX_GPUS_PER_NODE),
    default=None,
    help=f"Fake GPUs on each node. {_default('gpus_per_node')}",
)
@click.option(
    "--prolog",
    default=None,
    metavar="PATH",
    help='slurmd\'s Prolog script, run as root before each job on a node ("" for none). [default: none]',
)
@click.option(
    "--slurmd-timeout",
    type=int,
    default=None,
    help="Seconds slurmctld waits for a node's slurmd before it sets the node DOWN and requeues its jobs "
    f"(Slurm's default: 300). {_default('slurmd_timeout')}",
)
@click.option(
    "--node-tmp-mb",
    type=click.IntRange(0, 1 << 20),
    default=None,
    metavar="MIB",
    help="Each compute node's /tmp a tmpfs of MIB MiB, which a test can fill (hosts layout; 0: none; a live "
    f"setting). {_default('node_tmp_mb')}",
)
@click.option(
    "--cred-expire",
    type=int,
    default=None,
    help="Seconds a job credential lives; a requeued job waits that long (Slurm's default: 120). "
    f"{_default('cred_expire')}",
)
@click.option(
    "--memory-cgroup/--no-memory-cgroup",
    default=None,
    help="Enforce jobs' --mem through the cgroup v1 memory controller (task/cgroup), so a job over it ends "
    f"OUT_OF_MEMORY. {_default('memory_cgroup')}",
)
@click.option(
    "--hosts/--single-host",
    "hosts",
    default=None,
    help="Each node a host of its own (network and host-name namespaces, an address each on the lab's "
    "bridge), or n1 and n2 both this host at 127.0.0.1. A lab keeps the layout it was made with. [default: hosts]",
)
@click.option(
    "--node-homes/--shared-home",
    "node_homes",
    default=None,
    help="ILC's file systems: each compute node a home of its own for the lab's user, ~/scratch the store they "
    "share (with --hosts). [default: shared-home]",
)
@click.option(
    "--backup-controller/--no-backup-controller",
    "backup_controller",
    default=None,
    help="A second slurmctld on a host of its own (ctld2), slurm.conf's second SlurmctldHost, which takes over "
    "once the primary has not answered for SlurmctldTimeout (12 s in the lab); with --hosts. "
    f"{_default('backup_controller')}",
)
@click.option(
    "--rest/--no-rest",
    default=None,
    help="Serve Slurm's REST API: slurmrestd with JWT on the controller host, at the port base + 5. [default: no-rest]",
)
@click.option(
    "--job-package",
    "job_packages",
    multiple=True,
    help="A pip requirement to install into the venv the lab's jobs run in (repeatable), e.g. torch==2.13.0.",
)
@slurm_option
@root_option
def up(
    state_dir: str | None,
    job_packages: tuple[str, ...],
    slurm: str,
    root: str | None,
    hosts: bool | None,
    **options,
) -> None:
    """Start whatever part of the lab is not running (as root); a no-op when it is all up.

    Options not given keep the values the lab was last started with. With --slurm 24.11 or 26.05 the lab's
    daemons and client commands are that release's, in a Debian root of its own: `roach lab shell --slurm V`
    opens a shell there (only --port-base, --job-package, --hosts/--single-host, --rest, --nodes and --gpus-per-node
    apply to it).
    """
    if slurm != SlurmRelease.SYSTEM.value:
        lab_in_root = _release_lab(slurm, state_dir, root, options.get("port_base"))
        size = (options.get("nodes"), options.get("gpus_per_node"))
        lab_in_root.up(click.echo, job_packages, hosts, options.get("rest"), size)
        return
    if hosts is not None:
        options["layout"] = (lablib.LabLayout.HOSTS if hosts else lablib.LabLayout.SINGLE_HOST).value
    lablib.up(state_dir, log=click.echo, job_packages=job_packages, **options)


@lab.command()
@state_dir_option
@slurm_option
@root_option
def down(state_dir: str | None, slurm: str, root: str | None) -> None:
    """Cancel the lab's jobs and stop its daemons (as root); with --slurm, also unmount its root's binds (a
    --state-dir that holds a release lab names its release itself)."""
    saved = ReleaseLab.load(Path(state_dir).absolute()) if state_dir and slurm == SlurmRelease.SYSTEM.value else None
    if saved is not None:
        slurm = saved.release.value
    if slurm != SlurmRelease.SYSTEM.value:
        _release_lab(slurm, state_dir, root).down(click.echo)
        return
    lablib.down(state_dir, log=click.echo)


@lab.command()
@state_dir_option
@click.argument("node")
def reboot(state_dir: str | None, node: str) -> None:
    """Reboot NODE of the hosts lab (as root): kill every process of it at once, empty its /tmp, and start its
    daemons again with a boot clock of 0, so Slurm ends (and requeues) the jobs it had there, as after a reboot."""
    reboot_node(state_dir, node, log=click.echo)


@lab.command(context_settings={"ignore_unknown_options": True})
@state_dir_option
@click.option(
    "--slurm",
    "slurm",
    type=click.Choice([r.value for r in SlurmRelease if r is not SlurmRelease.SYSTEM]),
    required=True,
    help="The release lab to enter (started with `roach lab up --slurm V`).",
)
@root_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def shell(ctx: click.Context, state_dir: str | None, slurm: str, root: str | None, command: tuple[str, ...]) -> None:
    """A shell (or COMMAND) in a release lab's root: that Slurm's commands, its lab's SLURM_CONF, and roach
    from this source tree. Exits with the shell's (or COMMAND's) exit code."""
    ctx.exit(_release_lab(slurm, state_dir, root).shell(command))


@lab.command()
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def status(ctx: click.Context, state_dir: str | None, as_json: bool) -> None:
    """Show the lab's daemons and nodes. Exits 0 if the lab is up, 3 if not."""
    st = labstatus.status(state_dir)
    if as_json:
        click.echo(json.dumps(lab_status_json(st), indent=2))
    else:
        _render_status(st)
    if not st.up:
        ctx.exit(LabError.exit_code)


def _render_status(st: labstatus.LabStatus) -> None:
    console = Console(highlight=False)
    ports = sorted(st.ports.values())
    headline = Text.assemble(
        ("lab is up" if st.up else "lab is NOT up", "bold green" if st.up else "bold red"),
        f"  {st.state_dir}  (ports {ports[0]}-{ports[-1]}; SLURM_CONF={st.slurm_conf})",
    )
    where = ", ".join(f"{name} {addr}" for name, addr in st.addresses.items())
    headline.append(f"\nlayout {st.layout}: {where}")
    console.print(headline, soft_wrap=True)
    daemons = Table("daemon", "pid", "running", "log")
    for d in st.daemons:
        daemons.add_row(
            d.name, str(d.pid) if d.pid else "-", Text("yes", "green") if d.running else Text("no", "red"), d.log
        )
    console.print(daemons)
    nodes = Table("node", "state", "gpus", "cpus")
    for name, state in sorted(st.nodes.items()):
        nodes.add_row(name, state, str(st.gpus_per_node), str(st.cpus_per_node))
    if st.nodes:
        console.print(nodes)
    else:
        console.print("no nodes known (slurmctld is not answering)")
    if not st.up:
        console.print(Text("start it with `roach lab up` (as root)", style="yellow"))


@lab.command()
@state_dir_option
def env(state_dir: str | None) -> None:
    """Print the shell lines that point Slurm's commands at the lab: eval "$(roach lab env)"."""
    for line in labstatus.env_lines(state_dir):
        click.echo(line)


@lab.command()
@state_dir_option
def demo(state_dir: str | None) -> None:
    """Run the demo on the lab: submit a job as the lab's user, watch it, show what it did."""
    if demo_module.main(state_dir):  # a nonzero return means the demo's job failed
        raise RoachError("the demo's job did not succeed", hint="read its output above")


def lab_status_json(st: labstatus.LabStatus) -> dict[str, Any]:
    """``roach lab status --json``: the lab's paths, ports, daemons (each with whether it runs) and nodes."""
    data = st.to_json()
    for row, d in zip(data["daemons"], st.daemons):
        row["running"] = d.running
    return stamp("lab.status", data)


lab.add_command(load_group, "load")
