"""The lab's login host: an sshd at the login host's address, and the SSH alias that reaches it from here.

In the hosts layout `roach lab up` starts an sshd on the login host (port 22 of its own network namespace) that
lets the lab's user in by a key the lab makes, with ``SLURM_CONF`` set in each session, and names it for this
machine's ssh in /etc/ssh/ssh_config.d: ``ssh lab-login sinfo`` is the lab's ``sinfo`` run on its login host,
as a user reaches a cluster. A lab on another port base has the alias ``lab<port base>-login``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError
from roach.lab.config import LAB_USER, LabConfig
from roach.lab.daemons import Daemon
from roach.lab.hosts import LOGIN, Fabric

DEFAULT_PORT_BASE = 16817
SSH_PORT = 22  # the login host's own: its network namespace is its own
_CONFIG_D = Path("/etc/ssh/ssh_config.d")


def alias(cfg: LabConfig) -> str:
    """The SSH alias of the lab's login host."""
    return "lab-login" if cfg.port_base == DEFAULT_PORT_BASE else f"lab{cfg.port_base}-login"


def ssh_dir(cfg: LabConfig) -> Path:
    return cfg.state / "ssh"


def client_config(cfg: LabConfig) -> Path:
    """The ssh client configuration naming the login host (what /etc/ssh/ssh_config.d includes)."""
    return ssh_dir(cfg) / "config"


def _alias_file(cfg: LabConfig) -> Path:
    return _CONFIG_D / f"roach-lab-{cfg.port_base}.conf"


def address(cfg: LabConfig) -> str:
    return Fabric(cfg.port_base, ()).node_addr(LOGIN)


def prepare(cfg: LabConfig) -> None:
    """Keys (made once), the server's and the client's configuration, and the alias in ssh_config.d."""
    d = ssh_dir(cfg)
    d.mkdir(mode=0o755, exist_ok=True)
    for key in ("host_key", "id_ed25519"):
        if not (d / key).exists():
            _keygen(d / key)
    atomic_write(d / "authorized_keys", (d / "id_ed25519.pub").read_text(), mode=0o644)
    addr = address(cfg)
    host_key = (d / "host_key.pub").read_text().split()
    atomic_write(d / "known_hosts", f"{alias(cfg)} {host_key[0]} {host_key[1]}\n", mode=0o644)
    atomic_write(
        d / "sshd_config",
        sshd_config(
            ports=(SSH_PORT,),
            listen=addr,
            keys=d,
            pid_file="none",
            user=LAB_USER,
            extra=(f"SetEnv SLURM_CONF={cfg.slurm_conf}",),
        ),
        mode=0o644,
    )
    atomic_write(
        client_config(cfg),
        f"Host {alias(cfg)}\n"
        f"  HostName {addr}\n"
        f"  Port {SSH_PORT}\n"
        f"  User {LAB_USER}\n"
        f"  IdentityFile {d / 'id_ed25519'}\n"
        "  IdentitiesOnly yes\n"
        f"  HostKeyAlias {alias(cfg)}\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n",
        mode=0o644,
    )
    _CONFIG_D.mkdir(parents=True, exist_ok=True)
    atomic_write(
        _alias_file(cfg),
        f"# roach's lab in {cfg.state}: `roach lab down` removes this file\nInclude {client_config(cfg)}\n",
        mode=0o644,
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory


def sshd_config(
    *, ports: tuple[int, ...], listen: str, keys: Path, pid_file: str, user: str, extra: tuple[str, ...] = ()
) -> str:
    """An sshd that lets only ``user`` in, by the key in ``keys``/authorized_keys, with ``keys``/host_key."""
    lines = [
        *(f"Port {p}" for p in ports),
        f"ListenAddress {listen}",
        f"HostKey {keys / 'host_key'}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {keys / 'authorized_keys'}",
        f"AllowUsers {user}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM yes",  # the lab user's password is locked ("!"): without PAM sshd refuses it even by key
        "StrictModes no",
        "PermitRootLogin no",
        "X11Forwarding no",
        "PrintMotd no",
        "MaxStartups 100",
        *extra,
        "LogLevel VERBOSE",
    ]
    return "\n".join(lines) + "\n"


def remove_alias(cfg: LabConfig) -> bool:
    """Take the alias out of this machine's ssh configuration; True if it was there."""
    path = _alias_file(cfg)
    if not path.exists():
        return False
    path.unlink()
    return True


def daemon(cfg: LabConfig) -> Daemon:
    """The login host's sshd, in the foreground, run on the login host."""
    sshd = shutil.which("sshd", path="/usr/sbin:/sbin:/usr/bin") or "/usr/sbin/sshd"
    log = cfg.log_dir / "sshd-login.log"
    own = (sshd, "-D", "-f", str(ssh_dir(cfg) / "sshd_config"), "-E", str(log))
    argv = Fabric(cfg.port_base, ()).run_on(LOGIN, cfg.etc, cfg.node_tmp(LOGIN), own, munge=cfg.munge_binding(LOGIN))
    return Daemon("sshd-login", argv, cfg.run_dir / "sshd-login.pid", log, forks=False, program=sshd)


def listening(cfg: LabConfig) -> bool:
    try:
        with socket.create_connection((address(cfg), SSH_PORT), timeout=1):
            return True
    except OSError:
        return False


def _keygen(path: Path) -> None:
    r = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"roach-lab-{path.name}", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        raise LabError(f"ssh-keygen failed: {r.stderr.strip()}", hint="apt-get install openssh-client")
