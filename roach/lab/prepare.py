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
from roach.lab.daemons import Daemon
from roach.lab.hosts import can_make_namespaces, fabric_lock
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
        for n in cfg.fabric.hosts:
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
        cfg.fabric.check_range_free()


def make_fabric(cfg: LabConfig) -> None:
    fabric = cfg.fabric
    fabric.up()
    atomic_write(cfg.etc / "hosts", fabric.hosts_file(cfg.host), mode=0o644)
    atomic_write(cfg.etc / "resolv.conf", fabric.resolv_conf(), mode=0o644)
    login.prepare(cfg)  # the alias outside the state directory: only once the fabric it names is there


def mount_node_tmps(cfg: LabConfig) -> None:
    """Each compute node's /tmp a tmpfs of ``cfg.node_tmp_mb`` MiB on this machine (resized where it is one), or
    none with 0. A node binds it as its /tmp when its daemons start (a mount made later does not reach it)."""
    if not cfg.hosts:
        return
    if not cfg.node_tmp_mb:
        unmount_node_tmps(cfg)
        return
    for n in cfg.node_names:
        tmp = cfg.node_tmp(n)
        tmp.mkdir(parents=True, exist_ok=True)
        size = f"size={cfg.node_tmp_mb}m"
        argv = ["mount", "-o", f"remount,{size}", str(tmp)] if os.path.ismount(tmp) else []
        argv = argv or ["mount", "-t", "tmpfs", "-o", f"{size},mode=1777", f"roach-{n}-tmp", str(tmp)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise LabError(f"could not make {n}'s /tmp a tmpfs of {cfg.node_tmp_mb} MiB: {r.stderr.strip()}")


def unmount_node_tmps(cfg: LabConfig) -> list[str]:
    """Unmount the compute nodes' tmpfs /tmp (each node then has the directory below it); what was unmounted."""
    gone = []
    for n in cfg.node_names:
        tmp = cfg.node_tmp(n)
        if (
            os.path.ismount(tmp)
            and subprocess.run(["umount", "-l", str(tmp)], capture_output=True, timeout=30).returncode == 0
        ):
            gone.append(f"{n}'s tmpfs /tmp")
    return gone


def rebind_node_tmps(cfg: LabConfig, ds: dict[str, Daemon], log) -> None:
    """Make each node's /tmp what ``cfg.node_tmp_mb`` asks (prepare.mount_node_tmps); a node binds it as its slurmd
    starts, so a running slurmd that sees another /tmp (``/proc/PID/root/tmp``: its mount namespace's) is stopped, to
    start again below with the new one."""
    mount_node_tmps(cfg)
    for n in cfg.node_names:
        d = ds[f"slurmd-{n}"]
        pid = d.pid() if d.alive() else None
        try:
            same = pid is None or os.stat(f"/proc/{pid}/root/tmp").st_dev == os.stat(cfg.node_tmp(n)).st_dev
        except OSError:
            same = True
        if not same and d.stop():
            log(
                f"restarting {d.name}: its /tmp is now {f'a tmpfs of {cfg.node_tmp_mb} MiB' if cfg.node_tmp_mb else 'none'}"
            )
