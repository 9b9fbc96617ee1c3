"""The lab's slurmctld daemons: the primary on the controller host and, with ``--backup-controller``, the backup on a
host of its own, which takes over once the primary has not answered for SlurmctldTimeout.

The two share slurm.conf and its StateSaveLocation (the state directory, shared by every host as NFS is); each keeps
its pid file and log in its host's own /tmp, as a site's controllers keep them on their local disks.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from roach.lab.config import LabConfig
from roach.lab.daemons import Daemon, processes_in
from roach.lab.hosts import BACKUP_CONTROLLER

BACKUP_SLURMCTLD = f"slurmctld-{BACKUP_CONTROLLER}"  # the backup controller's daemon


def ctld_on(cfg: LabConfig, host: str, d: Daemon) -> Daemon:
    """slurmctld as it runs on ``host``: with a backup controller its pid and log are in that host's own /tmp
    (slurm.conf's paths); any other daemon as it is."""
    if d.name != "slurmctld" or not cfg.backup_controller:
        return d
    tmp = cfg.node_tmp(host)
    return replace(d, pidfile=tmp / "slurmctld.pid", logfile=tmp / "slurmctld.log")


def one_controller(cfg: LabConfig, ctld: Daemon) -> bool:
    """Whether the primary slurmctld's pid file names the one slurmctld of this lab (its helper slurmscriptd runs
    the same program and is no second controller). With a backup, each works in its host's own /tmp, no path of
    the state directory: its pid file is what names it."""
    if cfg.backup_controller:
        return ctld.alive()
    running = [p for p in processes_in(cfg.state, "slurmctld") if _comm(p) != "slurmscriptd"]
    return len(running) == 1 and ctld.pid() == running[0]


def backup_up(cfg: LabConfig) -> bool:
    """Whether `scontrol ping` finds the backup controller answering (in standby while the primary is up)."""
    r = subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, env={**os.environ, **cfg.env()}, timeout=30
    )
    return any(BACKUP_CONTROLLER in line and "UP" in line for line in r.stdout.splitlines())


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
