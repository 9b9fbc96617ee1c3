"""What ``roach lab status`` says: each daemon, up or not, and the lab's settings; and the shell lines that point Slurm's commands at the lab."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from roach.lab import login
from roach.lab.conf_files import addresses, rest_url
from roach.lab.config import CPUS_PER_NODE, GPUS_PER_NODE, LAB_USER, LabConfig
from roach.lab.lab import daemons


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int | None
    log: str

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class LabStatus:
    state_dir: str
    slurm_conf: str
    ports: dict[str, int]
    daemons: list[DaemonStatus]
    nodes: dict[str, str]
    gpus_per_node: int = GPUS_PER_NODE
    cpus_per_node: int = CPUS_PER_NODE
    layout: str = "single-host"
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return all(d.running for d in self.daemons)

    def to_json(self) -> dict:
        return {**asdict(self), "up": self.up}


def status(state_dir: str | None = None) -> LabStatus:
    """What is running, by pid file, and how slurmctld sees the nodes."""
    cfg = LabConfig.load(Path(state_dir).absolute() if state_dir else None)
    ds = [DaemonStatus(d.name, d.pid(), str(d.logfile)) for d in daemons(cfg)]
    nodes: dict[str, str] = {}
    if any(d.name == "slurmctld" and d.running for d in ds):
        try:
            r = subprocess.run(
                ["sinfo", "-N", "-h", "-o", "%N %t"],
                capture_output=True,
                text=True,
                env={**os.environ, **cfg.env()},
                timeout=30,
            )
            nodes = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return LabStatus(
        str(cfg.state),
        str(cfg.slurm_conf),
        cfg.ports,
        ds,
        nodes,
        gpus_per_node=cfg.gpus_per_node,
        layout=cfg.layout,
        addresses=addresses(cfg),
    )


def env_lines(state_dir: str | None = None) -> list[str]:
    """The ``export`` lines a shell needs to use the lab's Slurm (for ``eval "$(roach lab env)"``)."""
    cfg = LabConfig.load(Path(state_dir).absolute() if state_dir else None)
    lines = [f"export {k}={shlex.quote(v)}" for k, v in cfg.env().items()]
    if cfg.hosts:  # a comment to the shell that evaluates these lines
        lines.append(f"# the login host: ssh {login.alias(cfg)} (as {LAB_USER})")  # no path: it may hold a newline
    if cfg.rest:
        lines.append(f"# Slurm's REST API: {rest_url(cfg)} (a token: runuser -u {LAB_USER} -- scontrol token)")
    return lines
