"""Start, check and stop the lab's daemons by their pid files, never by process name."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.errors import LabError


@dataclass(frozen=True)
class Daemon:
    """One process the lab starts: how to start it, where its pid and log are, the ports it binds."""

    name: str
    argv: tuple[str, ...]
    pidfile: Path
    logfile: Path
    ports: tuple[int, ...] = ()
    forks: bool = True  # daemonizes itself and writes its own pid file
    env: tuple[tuple[str, str], ...] = ()
    program: str = ""  # the program the pid file names, where argv starts it through another (nsenter)

    @property
    def exe(self) -> str:
        return os.path.basename(self.program or self.argv[0])

    def pid(self) -> int | None:
        """The pid in the pid file if that process is alive and is this daemon's program."""
        try:
            pid = int(self.pidfile.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        return pid if _is_program(pid, self.exe) else None

    def alive(self) -> bool:
        return self.pid() is not None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.logfile.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"(no log at {self.logfile})"
        return "\n".join(text[-lines:]) or f"(empty log {self.logfile})"

    def start(self, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        """Start the daemon unless it is alive, then wait until ``ready()``; raise with its log if it dies."""
        if self.alive():
            return
        for port in self.ports:
            check_port_free(port, self.name)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **dict(self.env)}
        with open(self.logfile, "ab") as log:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        if not self.forks:
            self.pidfile.write_text(f"{proc.pid}\n")
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            rc = proc.poll()
            if rc is not None and (rc != 0 or not self.forks):
                raise self._died(f"exited with status {rc} while starting")
            alive = self.alive()
            if alive and ready():
                return
            if rc == 0 and not alive and time.monotonic() > started + 10:
                raise self._died("forked, but its pid file names no live process")
            time.sleep(0.2)
        raise self._died(f"was not ready after {timeout:.0f}s")

    def _died(self, what: str) -> LabError:
        return LabError(
            f"{self.name} {what}; last lines of {self.logfile}:\n{self.log_tail()}",
            hint=f"read {self.logfile}; `roach lab down` then `roach lab up` retries from a clean start",
        )

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM the daemon named by its pid file, SIGKILL after ``timeout``; True if it was running."""
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _is_program(pid, self.exe):
            time.sleep(0.1)
        if _is_program(pid, self.exe):
            _signal(pid, signal.SIGKILL)
            while _is_program(pid, self.exe):
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _is_program(pid: int, exe: str) -> bool:
    """Is ``pid`` alive (not a zombie) and running ``exe``? Guards against a recycled pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        target = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    # Debian installs slurmctld as slurmctld-wlm behind an alternatives link.
    return target == exe or target.startswith(exe + "-") or target.removesuffix(" (deleted)") == exe


def processes_in(state: Path, exe: str) -> list[int]:
    """Live processes running ``exe`` whose working directory lies in ``state``.

    The lab's daemons and the job steps they start work in its log directory; a job step's environment or
    command line cannot tell (slurmstepd 24.11+ writes its process title over both). A process under another
    root directory (a chroot's lab at the same path) is not this lab's. In a chroot, a process in a host's mount
    namespace shows its working directory with the root's own path in front.
    """
    root = os.stat("/")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            theirs = os.stat(f"/proc/{pid}/root")
        except OSError:
            continue
        if (theirs.st_dev, theirs.st_ino) != (root.st_dev, root.st_ino):
            continue
        if f"{state}/" in f"{cwd}/" and _is_program(int(pid), exe):
            found.append(int(pid))
    return found


def check_port_free(port: int, who: str) -> None:
    """Raise a LabError naming the port and its user if something already listens on ``port``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise LabError(
            f"port {port} (for {who}) is already taken{_port_owner(port)}",
            hint="stop what holds it, or start the lab on other ports: `roach lab up --port-base N`",
        ) from None
    finally:
        s.close()


def _port_owner(port: int) -> str:
    try:
        out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" by {out.split('users:', 1)[1].strip()}" if "users:" in out else ""


def wait_for(what: str, check: Callable[[], bool], timeout: float, logs: Sequence[Daemon] = ()) -> None:
    """Poll ``check`` until true; on timeout raise naming ``what`` and showing the daemons' logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tails = "".join(f"\n--- {d.logfile}\n{d.log_tail()}" for d in logs)
    raise LabError(f"timed out after {timeout:.0f}s waiting for {what}{tails}", hint="read the logs above")


def listening(address: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts a TCP connection at ``address``:``port`` now."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False
