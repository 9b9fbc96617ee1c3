"""A real OpenSSH server for tests: throwaway keys, a private client config with an alias.

On the hosts lab it runs on the lab's login host (its address, its host name and /tmp), as a site's login node
is: the remote flows reach Slurm from there, never beside the daemons. Elsewhere (the single-host lab, and the
transport's own tests in test_ssh.py, which need no lab) it listens on 127.0.0.1.

Import the fixtures into a test module (``from tests.sshd import sshd, sshd_server``, and ``cluster`` for the lab
reached through the server). The server runs as root (it must, to log in as another user) and lets only the
lab's unprivileged user in, by public key. ``stop()`` kills the server *and* every session process it started,
as a login host that goes away would; ``accepted_connections()`` counts the logins in its log, which is how
tests prove a connection was reused.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roach.fleet.cluster import Cluster
from roach.lab.config import LAB_USER, NODES, LabConfig
from roach.lab.hosts import LOGIN, Fabric
from roach.lab.login import sshd_config
from roach.slurm.clusters.lab import LAB
from tests.support.labs import SHARED_TMP

SSHD = "/usr/sbin/sshd"
ALIAS = "roach-test-alias"
NOKEY_ALIAS = "roach-test-nokey"  # same server, a key it does not accept
DSI_ALIAS = "login.ds"  # same server and key, under the name NeuriCo's workspace file gives the DSI login host


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # on the login host too: nothing there but the lab's sshd, on 22


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc, children before the parent is gone)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class SSHServer:
    """One sshd on a free port, its keys, its log and a client config naming it ``ALIAS``: on ``lab``'s login host
    where that lab has one, else on 127.0.0.1."""

    def __init__(self, base: Path, user: str = LAB_USER, lab: LabConfig | None = None):
        self.base = base
        self.user = user
        self.lab = lab if lab is not None and lab.hosts else None
        self.host = Fabric(lab.port_base, NODES).node_addr(LOGIN) if self.lab else "127.0.0.1"
        self.port = _free_port()
        self.nokey_port = _free_port()
        self.log = base / "sshd.log"
        self.config_path = base / "ssh_config"
        self.alias = ALIAS
        self.nokey_alias = NOKEY_ALIAS
        self.dsi_alias = DSI_ALIAS
        self.control_dir = base / "cm"  # short: a socket path must stay under ~104 bytes
        self._proc: subprocess.Popen | None = None
        self._write_files()

    def _write_files(self) -> None:
        b = self.base
        os.chmod(b, 0o755)  # the user's sshd child reads authorized_keys as that user
        for key in ("host_key", "user_key", "other_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"roach-test-{key}", "-f", str(b / key)],
                check=True,
            )
        shutil.copy(b / "user_key.pub", b / "authorized_keys")
        os.chmod(b / "authorized_keys", 0o644)
        config = sshd_config(
            ports=(self.port, self.nokey_port), listen=self.host, keys=b, pid_file=str(b / "sshd.pid"), user=self.user
        )
        (b / "sshd_config").write_text(config)
        common = (
            f"  HostName {self.host}\n  User {self.user}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {b / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
        )
        # The third alias reaches the server on its second port: ControlPath's %C hashes host, port and user, so
        # the same port would ride on the first alias's shared connection and never present its own key.
        self.config_path.write_text(
            f"Host {self.alias}\n  Port {self.port}\n{common}  IdentityFile {b / 'user_key'}\n\n"
            f"Host {self.dsi_alias}\n  Port {self.port}\n{common}  IdentityFile {b / 'user_key'}\n\n"
            f"Host {self.nokey_alias}\n  Port {self.nokey_port}\n{common}  IdentityFile {b / 'other_key'}\n"
        )
        self.control_dir.mkdir(mode=0o700)

    # -- lifecycle --------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        if self.running:
            return
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        argv: tuple[str, ...] = (SSHD, "-D", "-f", str(self.base / "sshd_config"), "-E", str(self.log))
        if self.lab:
            argv = Fabric(self.lab.port_base, NODES).run_on(
                LOGIN, self.lab.etc, self.lab.node_tmp(LOGIN), argv, munge=self.lab.munge_binding(LOGIN)
            )
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"sshd exited {self._proc.returncode}: {err}\n{self._log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on port {self.port} within {timeout:.0f}s\n{self._log_text()}")

    def stop(self) -> None:
        """Kill sshd and every session it serves (the shared client connections drop with them)."""
        if self._proc is None:
            return
        pids = _descendants(self._proc.pid)
        for pid in [self._proc.pid, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait(timeout=10)
        if self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and _alive(p) for p in pids):
            time.sleep(0.05)

    # -- observing ---------------------------------------------------------------------------------------
    def _log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def accepted_connections(self) -> int:
        """How many logins sshd has accepted so far (across restarts: its log is appended to)."""
        return self._log_text().count("Accepted publickey")

    def transport(self, **kwargs):
        """An :class:`~roach.scheduler.ssh.SSHTransport` to this server, with a control directory of its own."""
        from roach.scheduler.ssh import SSHTransport

        kwargs.setdefault("control_dir", self.control_dir)
        return SSHTransport(self.alias, config_file=self.config_path, **kwargs)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for its (re-)parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def serve(lab: LabConfig | None) -> Iterator[SSHServer]:
    """A running server (root only) on ``lab``'s login host, or on 127.0.0.1 with None; removed with its keys."""
    if os.geteuid() != 0:
        pytest.skip("a real sshd that logs in as the lab user needs root")
    if not Path(SSHD).exists():
        pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server)")
    base = Path(tempfile.mkdtemp(prefix="roach-sshd-", dir=SHARED_TMP))
    server = SSHServer(base, lab=lab)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd_server(lab: LabConfig) -> Iterator[SSHServer]:
    """The server for a whole test module, on the lab's login host."""
    yield from serve(lab)


@pytest.fixture
def sshd(sshd_server: SSHServer) -> SSHServer:
    """The module's server, running (a test that stopped it may leave it stopped; this restarts it)."""
    sshd_server.start()
    return sshd_server


def lab_over_ssh(lab: LabConfig, server: SSHServer) -> Cluster:
    """The lab cluster reached over SSH through ``server``'s alias, its Slurm commands run with the lab's env."""
    env = lab.env()
    return LAB.with_(ssh_alias=server.alias, ssh_config=str(server.config_path), env_factory=lambda: env)


@pytest.fixture
def cluster(lab: LabConfig, sshd: SSHServer) -> Cluster:
    """The lab, reached over SSH through the test server's alias."""
    return lab_over_ssh(lab, sshd)
