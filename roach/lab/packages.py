"""What the lab needs from this machine: root, and Debian's Slurm, munge and MariaDB packages (the Makefile's DEBS installs them)."""

from __future__ import annotations

import os
import shutil

from roach.errors import LabError

# binary -> Debian package that ships it
REQUIRED = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmdbd": "slurmdbd",
    "sbatch": "slurm-client",
    "sacctmgr": "slurm-client",
    "munged": "munge",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
    "runuser": "util-linux",
}


APT_LINE = "apt-get install -y slurm-wlm slurmdbd munge mariadb-server python3-venv"


def which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin")


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab cluster needs root: it starts slurmctld, slurmd and MariaDB and creates its user",
            hint="run `sudo roach lab up` (or as root); `roach lab env` and `status` work as any user",
        )


def require_packages(required: dict[str, str] = REQUIRED) -> None:
    """Raise naming the Debian packages of ``required`` (binary -> package) whose binary is missing."""
    missing = sorted({pkg for exe, pkg in required.items() if which(exe) is None})
    if missing:
        raise LabError(
            f"missing Debian packages for the lab: {', '.join(missing)}",
            hint=f"install them as root: {APT_LINE if required is REQUIRED else 'apt-get install -y ' + ' '.join(missing)}",
        )
