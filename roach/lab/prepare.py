"""What `roach lab up` writes and makes before a daemon starts: the state directory, the lab's user, the fabric of
the hosts layout and its node-local homes, and MariaDB's data directory."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError
from roach.lab import conf_files, login
from roach.lab.config import LAB_USER, LabConfig
from roach.lab.hosts import Fabric, can_make_namespaces, fabric_lock
from roach.lab.packages import which


def home_binding(cfg: LabConfig, node: str) -> tuple[Path, str] | None:
    """The node's own home for the lab user, and that user's home it stands for (node-local homes only)."""
    return (cfg.node_home(node), _user_home()) if cfg.node_homes else None


def _user_home() -> str:
    try:
        return pwd.getpwnam(LAB_USER).pw_dir
    except KeyError:
        return f"/home/{LAB_USER}"  # `roach lab up` creates the user before any slurmd starts


def _make_node_homes(cfg: LabConfig) -> None:
    """Each node's home of the lab user, with a ``scratch`` to bind the shared store on, and that store."""
    user = pwd.getpwnam(LAB_USER)
    for d in (Path(user.pw_dir) / "scratch", *(cfg.node_home(n) / "scratch" for n in cfg.node_names)):
        if not d.exists():
            d.mkdir(parents=True)
            os.chown(d, user.pw_uid, user.pw_gid)
            os.chown(d.parent, user.pw_uid, user.pw_gid)


def write_state(cfg: LabConfig) -> None:
    for sub in (
        "etc",
        "log",
        "run",
        "ctld",
        "mysql",
        "tmp",
        *(f"spool/{n}" for n in cfg.node_names),
        *(f"dev/{n}" for n in cfg.node_names),
    ):
        (cfg.state / sub).mkdir(parents=True, exist_ok=True)
    # munged refuses group/world-writable directories; clients must reach its socket.
    for d in (cfg.state, cfg.etc, cfg.log_dir, cfg.run_dir, cfg.munge_socket.parent):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
    if cfg.hosts:
        for n in Fabric(cfg.port_base, cfg.node_names).hosts:
            cfg.node_tmp(n).mkdir(parents=True, exist_ok=True)
            os.chmod(cfg.node_tmp(n), 0o1777)  # as /tmp is: everyone's, each keeping their own files
            for d in (cfg.node_tmp(n).parent, cfg.munge_binding(n)[0]):  # the host's munged's, as the lab's
                d.mkdir(parents=True, exist_ok=True)
                os.chmod(d, 0o755)
    key = cfg.etc / "munge.key"
    if not key.exists():
        atomic_write(key, os.urandom(1024), mode=0o400)
    for n in cfg.node_names:
        for i in range(cfg.gpus_per_node):
            dev = cfg.state / "dev" / n / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # same device as /dev/null
    conf_files.render(cfg)
    _ensure_lab_user()
    if cfg.node_homes:
        _make_node_homes(cfg)


def _ensure_lab_user() -> None:
    try:
        pwd.getpwnam(LAB_USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", LAB_USER], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise LabError(
                f"could not create the lab's user {LAB_USER}: {r.stderr.strip()}",
                hint="create it by hand: useradd -m roachlab",
            ) from None


def init_mariadb(cfg: LabConfig) -> None:
    data = cfg.state / "mysql" / "data"
    if (data / "mysql").is_dir():
        return
    data.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [
            which("mariadb-install-db") or "mariadb-install-db",
            f"--defaults-file={cfg.my_cnf}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)  # a half-made datadir would be mistaken for a made one
        raise LabError(
            f"mariadb-install-db failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}",
            hint=f"read {cfg.log_dir / 'mariadbd.log'}",
        )


def check_namespaces(cfg: LabConfig) -> None:
    """What the hosts layout needs of this machine, checked before anything is written: sshd, namespaces and a
    free address range."""
    if which("sshd") is None:
        raise LabError(
            "the hosts layout's login host runs sshd, which is not installed",
            hint="install it as root: apt-get install -y openssh-server (or `roach lab up --single-host`)",
        )
    why = can_make_namespaces()
    if why is not None:
        raise LabError(
            f"the hosts layout needs network namespaces, and this machine refuses them: {why}",
            hint="run as root with CAP_NET_ADMIN, or start the lab on one host: `roach lab up --single-host`",
        )
    with fabric_lock():
        Fabric(cfg.port_base, cfg.node_names).check_range_free()


def make_fabric(cfg: LabConfig) -> None:
    fabric = Fabric(cfg.port_base, cfg.node_names)
    fabric.up()
    atomic_write(cfg.etc / "hosts", fabric.hosts_file(cfg.host), mode=0o644)
    atomic_write(cfg.etc / "resolv.conf", fabric.resolv_conf(), mode=0o644)
    login.prepare(cfg)  # the alias outside the state directory: only once the fabric it names is there
