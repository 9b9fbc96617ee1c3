"""A lab on another Slurm release: Debian's packages of that release in a root of its own.

``roach lab up --slurm 24.11`` debootstraps Debian trixie (Slurm 24.11) into ``<state>/root`` once (``--slurm 26.05``:
sid), installs the lab's packages and a copy of roach's Python there, and starts the lab inside it (chroot, this
machine's network, its own ports): the daemons *and* the client commands are that release's. ``roach lab shell
--slurm 24.11`` runs a shell (or one command) inside, with ``SLURM_CONF`` set and roach on ``PATH``, from this same
source tree (bound in read-only). The lab inside is a plain lab (``roach lab up`` run in the root) at
``/var/lib/roach/lab`` there. ``roach lab down --slurm 24.11`` stops it and unmounts the root's binds; the root stays
for the next start.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError, UsageError
from roach.lab.config import LabConfig
from roach.lab.daemons import Daemon
from roach.lab.debian_root import DebianRoot, host_ca, install_script, missing_packages, mounted, run_step
from roach.lab.saved import default_state_dir

# What the lab needs in the root: the Makefile's DEBS for a lab (no ssh, no patchelf) and a shell's basics.
ROOT_DEBS = (
    "slurm-wlm",
    "slurmdbd",
    "slurmrestd",  # `roach lab up --rest`
    "slurm-wlm-jwt-plugin",  # JWT tokens (auth/jwt), which slurmrestd's clients use; not pulled in by slurm-wlm in sid
    "munge",
    "mariadb-server",
    "mariadb-client",
    "rsync",
    "git",
    "python3-venv",
    "ca-certificates",
    "procps",
    "iproute2",  # the hosts layout's bridge and namespaces
    "openssh-server",  # its login host
    "openssh-client",
)
INSIDE_STATE = "/var/lib/roach/lab"  # the lab's state directory, as seen inside the root
INSIDE_VENV = "/opt/roach-venv"  # roach's own venv inside the root (click, rich; roach from the bound source)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmRelease(Enum):
    """The Slurm releases a lab can run: this machine's, or Debian's of another distribution in a root."""

    SYSTEM = "system"
    V24_11 = "24.11"
    V26_05 = "26.05"

    @property
    def codename(self) -> str:
        return {"24.11": "trixie", "26.05": "sid"}[self.value]

    @property
    def default_port_base(self) -> int:
        """Away from the system lab's 16817-16821 and from each other."""
        return {"24.11": 17017, "26.05": 17117}[self.value]

    @classmethod
    def parse(cls, text: str) -> SlurmRelease:
        try:
            return cls(text)
        except ValueError:
            raise UsageError(
                f"no lab for Slurm {text!r}", hint=f"use one of: {', '.join(r.value for r in cls)}"
            ) from None


@dataclass(frozen=True)
class ReleaseLab:
    """A lab in a root of its own: ``state`` holds ``release.json`` and (unless ``root`` names another) the root."""

    release: SlurmRelease
    state: Path
    root: Path
    port_base: int

    # -- made and found -------------------------------------------------------------------------------
    @classmethod
    def resolve(
        cls, release: SlurmRelease, state_dir: str | None, root: str | None, port_base: int | None
    ) -> ReleaseLab:
        """What was asked, over what the last start saved in ``state_dir`` (default: ``lab-<release>`` beside the
        system lab's state directory)."""
        if release is SlurmRelease.SYSTEM:
            raise UsageError("the system Slurm's lab runs on this machine", hint="run `roach lab up` without --slurm")
        state = Path(state_dir).absolute() if state_dir else default_state_dir().parent / f"lab-{release.value}"
        saved = cls.load(state)
        if saved is not None and saved.release is not release:
            raise UsageError(
                f"{state} holds a lab on Slurm {saved.release.value}, not {release.value}",
                hint="name another --state-dir, or use the --slurm it was made with",
            )
        return cls(
            release,
            state,
            Path(root).absolute() if root else (saved.root if saved else state / "root"),
            port_base or (saved.port_base if saved else release.default_port_base),
        )

    @classmethod
    def load(cls, state: Path) -> ReleaseLab | None:
        try:
            raw = json.loads((state / "release.json").read_text())
        except FileNotFoundError:
            return None
        return cls(SlurmRelease(raw["release"]), state, Path(raw["root"]), int(raw["port_base"]))

    def save(self) -> None:
        raw = {**asdict(self), "release": self.release.value, "state": str(self.state), "root": str(self.root)}
        atomic_write(self.state / "release.json", json.dumps(raw, indent=2) + "\n")

    @property
    def lab_dir(self) -> Path:
        """The inner lab's state directory, as seen from this machine."""
        return self.root / INSIDE_STATE.lstrip("/")

    @property
    def source(self) -> Path:
        """The directory holding the ``roach`` package roach runs from, bound into the root at the same path."""
        return Path(__file__).resolve().parent.parent.parent

    # -- the root -------------------------------------------------------------------------------------
    def ensure_root(self, log: Callable[[str], None]) -> None:
        """debootstrap the release once; install the lab's packages, roach's Python and its venv where missing."""
        deb = DebianRoot(self.root, self.release.codename)
        deb.bootstrap(log)
        self.mount()  # before anything runs inside: the copied Python finds its libpython through /proc ($ORIGIN)
        missing = missing_packages(ROOT_DEBS, lambda script: self.inside(script, capture=True))
        if missing:
            log(f"installing {' '.join(missing)} in the root")
            self.inside(install_script(missing))
        # This machine's pip settings and CA bundle, for pip in the root.
        deb.copy_in((host_ca(), Path("/etc/pip.conf"), Path.home() / ".config/pip/pip.conf"))
        python = deb.ensure_python(log)
        if not os.path.lexists(self.root / INSIDE_VENV.lstrip("/") / "bin/python"):  # a link into the root
            log("making roach's venv in the root")
            self.inside(
                f"{python} -m venv {INSIDE_VENV} && {INSIDE_VENV}/bin/pip install -q "
                f"{shlex.quote('click>=8.1')} {shlex.quote('rich>=13')}"
            )

        entry = self.root / INSIDE_VENV.lstrip("/") / "bin/roach"  # the command, from the bound source (PYTHONPATH)
        atomic_write(entry, f"#!{INSIDE_VENV}/bin/python\nfrom roach.cli import main\n\nmain()\n", mode=0o755)

    @property
    def mounts_file(self) -> Path:
        """The mount points this lab made (and so may unmount): another user of the root (`make test-matrix`)
        may have mounted /proc, /sys and /dev there first, and still need them."""
        return self.state / "mounts.json"

    def made_mounts(self) -> list[str]:
        try:
            return list(json.loads(self.mounts_file.read_text()))
        except (OSError, ValueError):
            return []

    def mount(self) -> None:
        """The root's system mounts (:meth:`DebianRoot.mount_system`) and the source tree (read-only) inside it,
        where not mounted yet; each one made is recorded in :attr:`mounts_file`."""
        r, made = str(self.root), self.made_mounts()

        def record(point: str) -> None:
            made.append(point)
            self.state.mkdir(parents=True, exist_ok=True)
            atomic_write(self.mounts_file, json.dumps(made) + "\n")

        DebianRoot(self.root, self.release.codename).mount_system(record)
        src = r + str(self.source)
        if not mounted(src):
            Path(src).mkdir(parents=True, exist_ok=True)
            run_step(["mount", "--bind", str(self.source), src], "bind the source")
            record(src)
            run_step(["mount", "-o", "remount,bind,ro", src], "bind the source read-only")

    def umount(self) -> None:
        """Unmount what :meth:`mount` made (the last made first), nothing else."""
        for point in reversed(self.made_mounts()):
            for _ in range(8):  # a mount point may hold several (stacked) mounts
                if not mounted(point):
                    break
                subprocess.run(["umount", "-R", "-l", point], stderr=subprocess.DEVNULL, check=False)
        self.mounts_file.unlink(missing_ok=True)

    def env(self) -> list[str]:
        """The environment of a command in the root: roach from the bound source, the inner lab's Slurm."""
        pip = [f"{k}={v}" for k, v in os.environ.items() if k.startswith("PIP_")]
        return [
            "HOME=/root",
            f"TERM={os.environ.get('TERM', 'dumb')}",
            "LANG=C.UTF-8",
            f"PATH={INSIDE_VENV}/bin:{PATH}",
            f"PYTHONPATH={self.source}",
            f"ROACH_LAB_DIR={INSIDE_STATE}",
            f"SLURM_CONF={INSIDE_STATE}/etc/slurm.conf",
            *pip,
        ]

    def inside(self, script: str, *, capture: bool = False, check: bool = True) -> str:
        """Run ``script`` with bash in the root; its stdout when ``capture``."""
        argv = ["chroot", str(self.root), "/usr/bin/env", "-i", *self.env(), "/bin/bash", "-c", script]
        r = subprocess.run(argv, text=True, capture_output=capture, check=False)
        if check and r.returncode != 0:
            tail = (r.stderr or "")[-2000:] if capture else ""
            raise LabError(
                f"in the Slurm {self.release.value} root, `{script[:200]}` failed ({r.returncode}){tail}",
                hint=f"run `roach lab shell --slurm {self.release.value}` to look inside",
            )
        return r.stdout if capture else ""

    # -- the lab --------------------------------------------------------------------------------------
    def up(
        self,
        log: Callable[[str], None],
        job_packages: tuple[str, ...] = (),
        hosts: bool | None = None,
        rest: bool | None = None,
        size: tuple[int | None, int | None] = (None, None),
    ) -> None:
        """Make the root where missing, mount it, and start the lab inside (a no-op where it runs); ``hosts``,
        ``rest`` and ``size`` (nodes, GPUs per node) as ``roach lab up --hosts/--single-host``, ``--rest/--no-rest``,
        ``--nodes`` and ``--gpus-per-node`` (None: the inner lab's saved setting)."""
        other = self.other_lab_running()
        if other is not None:  # its state is the root's one: a second lab would take it over, and down both
            raise UsageError(
                f"the root {self.root} already runs a Slurm lab of port base {other}, and a root holds one lab",
                hint="take that lab down first (roach lab down --state-dir ITS_STATE_DIR), or give this one "
                "another --root",
            )
        self.state.mkdir(parents=True, exist_ok=True)
        self.ensure_root(log)
        self.save()
        args = ["--port-base", str(self.port_base)]
        if hosts is not None:
            args.append("--hosts" if hosts else "--single-host")
        if rest is not None:
            args.append("--rest" if rest else "--no-rest")
        for flag, value in zip(("--nodes", "--gpus-per-node"), size):
            args += [flag, str(value)] if value is not None else []
        args += [a for p in job_packages for a in ("--job-package", p)]
        self.inside(f"{INSIDE_VENV}/bin/python -m roach lab up {shlex.join(args)}")
        version = self.inside("sinfo -V", capture=True).strip()
        log(f"{version} lab is up in {self.root}; run: roach lab shell --slurm {self.release.value}")

    def other_lab_running(self) -> int | None:
        """The port base of a lab running in this root for another state directory (its slurmctld alive, by its pid
        file, a pid no other program has taken since, at another port base), or None."""
        try:
            port = LabConfig.load(self.lab_dir).port_base
        except LabError:
            return None
        ctld = Daemon(
            "slurmctld", ("slurmctld",), self.lab_dir / "run" / "slurmctld.pid", self.lab_dir / "log" / "slurmctld.log"
        )
        return port if port != self.port_base and ctld.alive() else None

    def down(self, log: Callable[[str], None]) -> None:
        if os.path.lexists(self.root / INSIDE_VENV.lstrip("/") / "bin/python") and self.lab_dir.exists():
            self.mount()
            self.inside(f"{INSIDE_VENV}/bin/python -m roach lab down")
        self.umount()
        log(f"the Slurm {self.release.value} lab is down; its root stays in {self.root}")

    def shell(self, command: tuple[str, ...] = ()) -> int:
        """A shell in the root (or ``command``), with the lab's Slurm and roach; returns its exit code."""
        self.mount()
        argv = ["chroot", str(self.root), "/usr/bin/env", "-i", *self.env()]
        argv += list(command) if command else ["/bin/bash", "-i"]
        return subprocess.run(argv, check=False).returncode
