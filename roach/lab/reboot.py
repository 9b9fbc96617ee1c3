"""`roach lab reboot NODE`: a compute node of the hosts lab rebooted, as Slurm sees a reboot.

Every process of the node (its network namespace: munged, slurmd, every slurmstepd and job process) is killed at
once, with no chance to say anything, its /tmp is emptied, and its daemons start again with a boot clock that
reads 0 now (a time namespace), so slurmd tells slurmctld the node has just booted: Slurm then ends the jobs it
had there (NODE_FAIL) and requeues those that may be requeued, as after a site's reboot.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import UsageError
from roach.lab import lab as lablib
from roach.lab.config import LabConfig
from roach.lab.hosts import Fabric
from roach.lab.packages import require_root


def reboot(state_dir: str | None, node: str, log=print) -> LabConfig:
    """Reboot ``node`` of the running lab in ``state_dir``; returns the lab's configuration."""
    require_root()
    cfg = lablib.resolve_config(state_dir)
    if not cfg.hosts:
        raise UsageError(
            "a node of the single-host lab is this machine: it cannot be rebooted alone",
            hint="start a lab with --hosts (`roach lab down`, then `roach lab up --hosts`)",
        )
    if node not in cfg.node_names:
        raise UsageError(f"the lab has no node {node!r}", hint=f"its nodes: {', '.join(cfg.node_names)}")
    killed = _kill_all(Fabric(cfg.port_base, cfg.node_names).netns(node))
    _empty(cfg.node_tmp(node))
    atomic_write(cfg.node_booted(node), f"{time.time():.3f}\n")
    log(f"{node}: killed {killed} processes, emptied its /tmp; starting its daemons with a boot clock of 0")
    return lablib.up(str(cfg.state), log=log)


def _kill_all(netns: str) -> int:
    """SIGKILL every process in network namespace ``netns``; how many there were."""
    r = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30)
    pids = [int(p) for p in r.stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def _empty(tmp: Path) -> None:
    for entry in tmp.iterdir() if tmp.exists() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
