"""The lab's slurmrestd (``roach lab up --rest``): Slurm's REST API with JWT on the controller host."""

from __future__ import annotations

import pwd
import urllib.parse

from roach.lab import conf_files, release
from roach.lab.config import LabConfig
from roach.lab.daemons import Daemon
from roach.lab.daemons import listening as listening_at
from roach.lab.packages import which

REST_USER = "nobody"  # slurmrestd refuses root and SlurmUser; it drops to this user once its socket is open


def daemon(cfg: LabConfig, env: tuple[tuple[str, str], ...]) -> Daemon:
    """slurmrestd at the lab's rest port, authenticating each request by its JWT (``SLURM_JWT=daemon``: it reaches
    slurmctld and slurmdbd with the request's token, not munge)."""
    listen = "0.0.0.0" if cfg.hosts else "127.0.0.1"  # the controller host's own network namespace, or this host
    who = pwd.getpwnam(REST_USER)  # by number: 26.05 resolves no name given to -u
    have = release.installed()
    group = ("-g", str(who.pw_gid)) if have is not None and have.slurmrestd_takes_group else ()
    argv = (
        which("slurmrestd") or "slurmrestd",
        "-f",
        str(cfg.slurm_conf),
        "-a",
        "rest_auth/jwt",
        "-u",
        str(who.pw_uid),
        *group,
        f"{listen}:{cfg.port('rest_port')}",
    )
    return Daemon(
        "slurmrestd",
        argv,
        cfg.run_dir / "slurmrestd.pid",
        cfg.log_dir / "slurmrestd.log",
        ports=(cfg.port("rest_port"),),
        forks=False,
        env=(*env, ("SLURM_JWT", "daemon")),
    )


def listening(cfg: LabConfig) -> bool:
    url = urllib.parse.urlsplit(conf_files.rest_url(cfg))
    return listening_at(url.hostname or "", url.port or 80)
