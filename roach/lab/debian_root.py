"""A Debian root of another release, made once by debootstrap: the one maker that the release lab
(:mod:`roach.lab.release_root`, ``roach lab up --slurm V``) and the test matrix (``tests/matrix.py``) share.

Each step is idempotent (a root is made once and reused): debootstrap where the root has no apt yet, no daemon
started by a package's install, the packages that are missing, this Python copied in, and /proc, /sys and /dev
mounted where they are not. Each user runs its commands inside the root its own way (the lab's environment, the
matrix's network namespace); what it passes here is a function from a script to its output.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError
from roach.lab.python import copy_python

MIRROR = "http://deb.debian.org/debian"
APT = ("apt-get", "-o", "Acquire::Check-Valid-Until=false")  # sid's Release file may read as expired
PYTHON_DIR = "/opt/roach-python"  # this Python's copy inside a root, where the lab's user may run it


@dataclass(frozen=True)
class DebianRoot:
    """Debian ``codename`` (trixie, sid) in the folder ``path``."""

    path: Path
    codename: str

    def inner(self, path: str) -> Path:
        """An absolute path inside the root, as seen from this machine."""
        return self.path / path.lstrip("/")

    def bootstrap(self, log: Callable[[str], None]) -> None:
        """debootstrap the release where the root has no apt yet (minutes, from Debian's mirror); then no
        package's install starts its daemons there (the lab starts its own), apt resolves names as here, and
        this machine's host name resolves as on any Debian install (:meth:`name_this_host`)."""
        if not self.inner("/usr/bin/apt-get").exists():
            if shutil.which("debootstrap") is None:
                raise LabError("debootstrap is not installed", hint="apt-get install -y debootstrap patchelf")
            log(f"making a Debian {self.codename} root in {self.path} (once; minutes)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            run_step(["debootstrap", "--variant=minbase", self.codename, str(self.path), MIRROR], "debootstrap")
        rc = self.inner("/usr/sbin/policy-rc.d")
        if not rc.exists():
            rc.write_text("#!/bin/sh\nexit 101\n")
            rc.chmod(0o755)
        shutil.copy("/etc/resolv.conf", self.inner("/etc/resolv.conf"))
        self.name_this_host()

    def name_this_host(self) -> None:
        """Add ``127.0.1.1 <host name>`` to the root's /etc/hosts where it does not name this host, as Debian's
        installer writes and debootstrap does not: slurmctld 24.11+ looks up an srun by its host's name, and in a
        namespace with no name server the lookup waits out each retry (scancel then times out)."""
        name = socket.gethostname()
        hosts = self.inner("/etc/hosts")
        text = hosts.read_text() if hosts.exists() else ""
        named = (ln.split("#", 1)[0].split()[1:] for ln in text.splitlines())
        if not any(name in names for names in named):
            atomic_write(hosts, text + ("" if text.endswith("\n") or not text else "\n") + f"127.0.1.1\t{name}\n")

    def copy_in(self, files: Iterable[Path]) -> None:
        """This machine's ``files`` (those that exist) to the same paths in the root: after apt, whose
        ca-certificates would write a CA bundle over."""
        for f in files:
            if f.is_file():
                dest = self.inner(str(f))
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, dest)

    def python(self) -> str | None:
        """This Python's minor version inside the root (a path there): the copy, or an /opt/python3.X already
        there; None: neither yet."""
        want = f"python{sys.version_info.major}.{sys.version_info.minor}"
        for cand in (f"{PYTHON_DIR}/bin/{want}", f"/opt/{want}/bin/{want}"):
            if self.inner(cand).exists():
                return cand
        return None

    def ensure_python(self, log: Callable[[str], None]) -> str:
        """:meth:`python`, copying this Python in where it is missing (so the lab's jobs run the host lab's)."""
        found = self.python()
        if found is not None:
            return found
        log("copying roach's Python into the root")
        if copy_python(self.inner(PYTHON_DIR)) is None:
            raise LabError(
                "cannot copy this Python into the root: patchelf is missing", hint="apt-get install -y patchelf"
            )
        return f"{PYTHON_DIR}/bin/python{sys.version_info.major}.{sys.version_info.minor}"

    def mount_system(self, made: Callable[[str], None] = lambda point: None) -> None:
        """The root onto itself (the hosts lab's ``unshare --propagation`` needs / to be a mount point), then /proc,
        /sys and /dev inside it, each where nothing is mounted yet; ``made`` hears each mount point this mounted
        (a user that shares the root unmounts only its own)."""
        r = str(self.path)
        if not mounted(r):
            run_step(["mount", "--rbind", r, r], "bind the root onto itself")
            made(r)
        if not mounted(f"{r}/proc"):
            run_step(["mount", "-t", "proc", "proc", f"{r}/proc"], "mount /proc")
            made(f"{r}/proc")
        for d in ("/sys", "/dev"):
            if not mounted(r + d):
                run_step(["mount", "--rbind", d, r + d], f"mount {d}")
                made(r + d)
                run_step(["mount", "--make-rslave", r + d], f"mount {d}")


def host_ca() -> Path:
    """This machine's CA bundle, which may hold its proxy's CA (pip's ``PIP_CERT`` names this same path)."""
    return Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))


def missing_packages(wanted: Sequence[str], shell: Callable[[str], str]) -> list[str]:
    """Of ``wanted``, the Debian packages not installed where ``shell`` (a script -> its stdout) runs."""
    status = shell("dpkg-query -W -f='${Package} ${Status}\\n' " + shlex.join(wanted) + " 2>/dev/null; true")
    have = {ln.split()[0] for ln in status.splitlines() if ln.endswith("install ok installed")}
    return [d for d in wanted if d not in have]


def install_script(packages: Sequence[str]) -> str:
    """The shell script that installs ``packages`` with apt, non-interactively and without recommends."""
    apt = shlex.join(APT)
    return f"{apt} update && DEBIAN_FRONTEND=noninteractive {apt} install -y --no-install-recommends " + shlex.join(
        packages
    )


def mounted(path: str) -> bool:
    """Whether something is mounted at ``path`` (a bind mount of the same filesystem too, which
    :func:`os.path.ismount` misses: its device is its parent's)."""
    want = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4].encode().decode("unicode_escape") == want for line in f)


def run_step(argv: list[str], what: str) -> None:
    """Run one step of making or mounting a root; a failure is a LabError that says which step and why."""
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise LabError(
            f"{what} failed: {shlex.join(argv)}: {r.stderr.strip()[-1500:]}", hint="run it by hand to see why"
        )
