"""``make test-matrix``: the suite on each Slurm roach claims, then a table (version, passed, failed).

    python -m tests.matrix [--only system,24.11,26.05] [--slurm-facing] [--pytest-args '...'] [--root 24.11=/var/tmp/trixie-root]

``--slurm-facing`` runs only the tests that talk to Slurm (the lab, submit, resume, hold, watch, sweep,
workspace, the parsers, slurmrestd): what CI runs on 26.05 after the whole suite on the system Slurm.

As root. ``system`` is this machine's Slurm; 24.11 and 26.05 are Debian trixie and sid in debootstrap roots
(made once under ``--roots``, default /var/tmp/roach-matrix, and reused; ``--root V=DIR`` names an existing
one). Each version runs ``make test`` on a clone of this repository's HEAD with a lab of its own
(``ROACH_LAB_DIR`` under the state folder; inside a root, /var/lib/roach/matrix-lab; made afresh each run) in a network
namespace of its own, so the default ports clash with nothing, the lead's lab on this machine included.
A root gets Debian's Slurm and MariaDB (the Makefile's DEBS) and a copy of the Python this runs on in
/opt/roach-python (an existing /opt/python3.X is used as is), so the jobs' Python is the host lab's. Wheel folders (/opt/wheels, /opt/pypi, /opt/pypi-more)
are bound in read-only; pip inside the namespace gets this machine's ``PIP_*`` variables, else those folders.
Afterwards each lab is stopped, the binds unmounted and the namespaces deleted; the roots stay.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.b7_faults import Outcome, read_junit
from roach.lab.debian_root import DebianRoot, host_ca, install_script, missing_packages, mounted
from roach.lab.python import TOOLS

REPO = Path(__file__).resolve().parent.parent
CODENAMES = {"24.11": "trixie", "26.05": "sid"}
WHEEL_DIRS = ("/opt/wheels", "/opt/pypi", "/opt/pypi-more")
TOOL_WHEELS = "/root/roach-tool-wheels"  # in a root: the wheels of the lab's tools, which no local folder may hold
EXTRA_DEBS = ("make", "git", "ca-certificates", "procps", "iproute2")
HOST_DEBS = ("debootstrap", "patchelf", "iproute2")  # what this machine needs to make and enter a root
# The Slurm-facing part of the suite: every test file that drives the lab, submits, or parses Slurm's output.
SLURM_FACING = (
    "tests/test_lab_cluster.py",
    "tests/test_lab_lifecycle.py",
    "tests/test_lab_hosts.py",
    "tests/test_crowd.py",
    "tests/test_submit.py",
    "tests/test_resume.py",
    "tests/test_hold.py",
    "tests/test_watch.py",
    "tests/test_watch_edges.py",
    "tests/test_sweep.py",
    "tests/test_workspace.py",
    "tests/test_neurico_workspace.py",
    "tests/test_record_final.py",
    "tests/test_every_rank_runs.py",
    "tests/test_master_port.py",
    "tests/test_pending.py",
    "tests/test_slurm_versions.py",
    "tests/test_slurmparse.py",
    "tests/test_slurmcli.py",
    "tests/test_states.py",
    "tests/test_rest_client.py",
    "tests/test_rest_lab.py",  # slurmrestd: the roots install it (the Makefile's DEBS)
)


def sh(argv: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", shlex.join(argv), flush=True)
    return subprocess.run(argv, check=True, **kw)


def debs() -> list[str]:
    m = re.search(r"^DEBS\s*:=\s*(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    if not m:
        raise SystemExit("the Makefile names no DEBS")
    return m[1].split()


def install_host_debs() -> None:
    """debootstrap, patchelf and ip on this machine: a fresh one (CI's) has none of them."""
    missing = missing_packages(
        list(HOST_DEBS), lambda script: subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout
    )
    if missing:
        sh(["bash", "-c", install_script(missing)])


def pip_env(netns: bool) -> list[str]:
    """pip's settings: this machine's PIP_* variables, and the local wheel folders (bound into each root at the
    same paths). In a namespace, which reaches no index, those folders are the index; on this machine's
    network they come after the package index (PyPI), as this machine's pip.conf has them."""
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    local = [f"file://{d}/simple" for d in ("/opt/pypi", "/opt/pypi-more") if Path(d, "simple").is_dir()]
    if netns and local:
        env.setdefault("PIP_INDEX_URL", local[0])
        local = local[1:]
    if local:
        env.setdefault("PIP_EXTRA_INDEX_URL", " ".join(local))
    if Path("/opt/wheels").is_dir():
        env.setdefault("PIP_FIND_LINKS", "/opt/wheels")
    if netns:  # the lab's tools (uv), fetched into the root on this machine's network (fresh_checkout)
        env["PIP_FIND_LINKS"] = " ".join(filter(None, (env.get("PIP_FIND_LINKS"), TOOL_WHEELS)))
    return [f"{k}={v}" for k, v in env.items()]


# The labs in a root: the hosts layout (each lab's bridge and hosts inside the version's network namespace).
LAB_ARGS = "--hosts"


@dataclass
class Target:
    version: str  # "system", "24.11", "26.05"
    root: Path | None  # None: this machine
    state: Path

    @property
    def ns(self) -> str:
        return f"roach-matrix-{self.version.replace('.', '')}"

    @property
    def r(self) -> str:
        return str(self.root) if self.root else ""

    def chroot(self, script: str, *, netns: bool = True, check: bool = True, **kw) -> subprocess.CompletedProcess:
        env = [
            "/usr/bin/env",
            "-i",
            "HOME=/root",
            "TERM=dumb",
            "LANG=C.UTF-8",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            *pip_env(netns),
        ]
        argv = (
            [*env, "/bin/bash", "-lc", script]
            if self.root is None
            else ["chroot", self.r, *env, "/bin/bash", "-lc", script]
        )
        if netns:
            argv = ["nsenter", f"--net=/run/netns/{self.ns}", *argv]
        print("+", self.version, script, flush=True)
        return subprocess.run(argv, check=check, **kw)

    # -- the root ------------------------------------------------------------------------------------
    def ensure_root(self) -> None:
        """debootstrap the release once; install Slurm's packages and copy this Python in where missing."""
        deb = self.debian
        deb.bootstrap(lambda line: print("+", self.version, line, flush=True))
        # every package, not only on a new root: the Makefile's list may have grown since the root was made
        missing = missing_packages(
            [*debs(), *EXTRA_DEBS],
            lambda script: self.chroot(script, netns=False, capture_output=True, text=True).stdout,
        )
        if missing:
            self.chroot(install_script(missing), netns=False)
        # this Python, where the lab's user may run it (not under /root): the jobs'
        deb.ensure_python(lambda line: print("+", self.version, line, flush=True))
        deb.copy_in([host_ca()])  # after apt, whose ca-certificates would write it over

    @property
    def debian(self) -> DebianRoot:
        assert self.root is not None
        return DebianRoot(self.root, CODENAMES[self.version])

    @property
    def venv_python(self) -> str:
        """The Python ``make`` gets inside the root (or here)."""
        return self.python or "/usr/bin/python3"

    @property
    def python(self) -> str | None:
        """The Python (a path inside the root) that the root's venvs and the lab's jobs use; None: none yet."""
        if self.root is None:
            return sys.base_prefix + "/bin/python3" if Path(sys.base_prefix) != Path("/usr") else "/usr/bin/python3"
        return self.debian.python()

    def mount(self) -> None:
        if self.root is not None:
            r = self.r
            self.debian.mount_system()
            for d in WHEEL_DIRS:
                if Path(d).is_dir() and not mounted(f"{r}{d}"):
                    Path(f"{r}{d}").mkdir(parents=True, exist_ok=True)
                    sh(["mount", "--bind", "-o", "ro", d, f"{r}{d}"])
        if not Path(f"/run/netns/{self.ns}").exists():
            sh(["ip", "netns", "add", self.ns])
            sh(["ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up"])
            # getaddrinfo(AI_ADDRCONFIG) wants an address besides 127.0.0.1
            sh(["ip", "netns", "exec", self.ns, "ip", "addr", "add", "127.0.1.1/32", "dev", "lo"])

    def umount(self) -> None:
        if self.root is not None:
            for d in (*WHEEL_DIRS, "/dev", "/sys", "/proc", ""):  # "": the root bound onto itself, last
                subprocess.run(["umount", "-R", "-l", f"{self.r}{d}"], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL, check=False)

    # -- the run -------------------------------------------------------------------------------------
    @property
    def checkout(self) -> str:
        """Where the clone lives, as seen from inside (the root) or on this machine."""
        return "/root/roach-matrix" if self.root is not None else str(self.state / "repo")

    @property
    def lab(self) -> str:
        return "/var/lib/roach/matrix-lab" if self.root is not None else str(self.state / "lab")

    def fresh_checkout(self) -> None:
        """A clone of this repository's HEAD with its venv, and no lab yet (the last run's was stopped; its
        job venv may be of another Python). The venv is made on this machine's network: the namespace's
        reaches no package index."""
        here = Path(self.r + self.checkout) if self.root is not None else Path(self.checkout)
        if here.exists():
            shutil.rmtree(here)
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
        sh(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(here)])
        sh(["git", "-C", str(here), "checkout", "-q", head])
        old = Path(self.r + self.lab) if self.root is not None else Path(self.lab)
        if old.exists():
            shutil.rmtree(old)
        self.chroot(f"cd {shlex.quote(self.checkout)} && make venv PYTHON={shlex.quote(self.venv_python)}", netns=False)
        if self.root is not None:
            tools = " ".join(shlex.quote(t) for t in TOOLS)
            pip = f"{shlex.quote(self.checkout)}/.venv/bin/pip"
            self.chroot(f"{pip} download -q --only-binary=:all: -d {TOOL_WHEELS} {tools}", netns=False)

    @property
    def junit(self) -> Path:
        """The junit file of the last run, as seen from this machine."""
        return Path(self.r + f"{self.checkout}/matrix.xml")

    def slurm_version(self) -> str:
        out = self.chroot("slurmctld -V", netns=False, capture_output=True, text=True).stdout
        return out.split()[-1] if out.strip() else self.version

    def shell(self) -> int:
        """An interactive shell in the root's namespace with its lab up (its own Slurm's commands)."""
        self.fresh_checkout()
        script = (
            f"cd {shlex.quote(self.checkout)} && export ROACH_LAB_DIR={shlex.quote(self.lab)} && "
            f'make lab PYTHON={shlex.quote(self.venv_python)} LAB_ARGS={LAB_ARGS} && eval "$(.venv/bin/roach lab env)" && '
            f"echo \"Slurm $(sinfo -V | cut -d' ' -f2) lab up; exit to stop it\" && bash -i; "
            f".venv/bin/roach lab down >/dev/null 2>&1"
        )
        return self.chroot(script, check=False).returncode

    def demo(self) -> int:
        """`make demo` (the README's first command) on a fresh clone in the root, its lab in the namespace; its
        exit code (the log: ``demo-V.log`` in the state folder)."""
        self.fresh_checkout()
        script = (
            f"cd {shlex.quote(self.checkout)} && export ROACH_LAB_DIR={shlex.quote(self.lab)} && "
            f"make demo PYTHON={shlex.quote(self.venv_python)} LAB_ARGS={LAB_ARGS}; rc=$?; .venv/bin/roach lab down >/dev/null 2>&1; exit $rc"
        )
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / f"demo-{self.version}.log", "w") as log:
            return self.chroot(script, check=False, stdout=log, stderr=subprocess.STDOUT).returncode

    def run(self, pytest_args: str) -> tuple[int, int, int]:
        self.fresh_checkout()
        lab = self.lab
        xml = f"{self.checkout}/matrix.xml"
        args = f"--junitxml={xml} {pytest_args}".strip()
        script = (
            f"cd {shlex.quote(self.checkout)} && export ROACH_LAB_DIR={shlex.quote(lab)} && "
            f"make test PYTHON={shlex.quote(self.venv_python)} LAB_ARGS={LAB_ARGS} PYTEST_ARGS={shlex.quote(args)}; rc=$?; "
            f".venv/bin/roach lab down >/dev/null 2>&1; "
            f'for d in "$ROACH_LAB_DIR"-test-*; do [ -d "$d" ] && .venv/bin/roach lab down --state-dir "$d" >/dev/null 2>&1; rm -rf "$d"; done; '
            f"exit $rc"
        )
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / f"test-{self.version}.log", "w") as log:
            self.chroot(script, check=False, stdout=log, stderr=subprocess.STDOUT)
        o = outcome(self.junit)
        return o.passed, len(o.failed), o.skipped


def failure_lines(log: Path, limit: int = 40) -> list[str]:
    """A pytest log's assertion lines (``E ...``) and its summary's FAILED/ERROR lines, the last ``limit``."""
    text = log.read_text(errors="replace") if log.exists() else ""
    keep = [line for line in text.splitlines() if line.startswith(("E ", "FAILED ", "ERROR "))]
    return [line[:300] for line in keep[-limit:]]


def outcome(xml: Path, only: str = ""):
    """A junit file's tests (those whose class name starts with ``only``), bench 7's way; none: nothing ran."""
    return read_junit(xml, only=only) if xml.exists() else Outcome(0, [], 0, 0.0)


def fault_outcome(xml: Path):
    """The fault suite's part of a junit file (bench 7's cell): tests under tests/faults, their time."""
    return outcome(xml, "tests.faults.")


def record_fault_rows(found: dict[str, object]) -> None:
    """bench 7's rows (bench/out/faults-rows.json) and section 7's table in bench/results.md, for the Slurm
    versions whose whole suite just ran (their fault suite included)."""
    from bench.b7_faults import ROWS, table

    rows = json.loads(ROWS.read_text()) if ROWS.exists() else {}
    results = REPO / "bench" / "results.md"
    text = results.read_text()
    old = re.search(r"^\| Slurm \| fault scenarios passed.*?(?=\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    if old:  # rows already in the committed table, kept where bench/out has none (a fresh clone)
        for line in old[0].splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 3 and cells[0] not in rows:
                rows[cells[0]] = {"cell": cells[1], "seconds": float(cells[2].split()[0]) * 60}
    for version, outcome in found.items():
        rows[version] = {"cell": outcome.cell, "seconds": round(outcome.seconds)}
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    ROWS.write_text(json.dumps(rows, indent=2) + "\n")
    if old:
        results.write_text(text[: old.start()] + table(rows) + text[old.end() :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="system,24.11,26.05", help="comma-separated: system, 24.11, 26.05")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments for every version")
    ap.add_argument(
        "--shell", action="store_true", help="no tests: a shell inside the one --only version's root, its lab up"
    )
    ap.add_argument("--demo", action="store_true", help="no tests: `make demo` in each --only version's root")
    ap.add_argument(
        "--slurm-facing", action="store_true", help="only the Slurm-facing test files (what CI runs on 26.05)"
    )
    ap.add_argument("--roots", default="/var/tmp/roach-matrix", help="where roots and logs are kept")
    ap.add_argument("--root", action="append", default=[], metavar="V=DIR", help="use an existing root for V")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("test-matrix needs root (debootstrap, chroot, mounts, network namespaces)")
    given = dict(x.split("=", 1) for x in args.root)
    pytest_args = " ".join([*(SLURM_FACING if args.slurm_facing else ()), args.pytest_args]).strip()
    install_host_debs()
    base = Path(args.roots)
    targets = []
    for v in args.only.split(","):
        if v != "system" and v not in CODENAMES:
            raise SystemExit(f"unknown version {v!r}: expected system, {', '.join(CODENAMES)}")
        root = None if v == "system" else Path(given.get(v, base / f"{CODENAMES[v]}-root"))
        targets.append(Target(v, root, base / f"state-{v}"))
    if args.shell:
        if len(targets) != 1:
            raise SystemExit("--shell takes one version: --only 24.11 or --only 26.05")
        t = targets[0]
        try:
            if t.root is not None:
                t.ensure_root()
            t.mount()
            return t.shell()
        finally:
            t.umount()
    if args.demo:
        codes = {}
        for t in targets:
            try:
                if t.root is not None:
                    t.ensure_root()
                t.mount()
                codes[t.version] = t.demo()
            finally:
                t.umount()
        for v, rc in codes.items():
            print(f"{v:<10} make demo exit {rc}   {base / f'state-{v}' / f'demo-{v}.log'}")
        return 0 if all(rc == 0 for rc in codes.values()) else 1
    rows, faults = [], {}
    for t in targets:
        try:
            t0 = time.monotonic()
            if t.root is not None:
                t.ensure_root()
            t.mount()
            t1 = time.monotonic()
            counts = t.run(pytest_args)
            rows.append((t.version, *counts, t1 - t0, time.monotonic() - t1))
            outcome = fault_outcome(t.junit)
            if not args.slurm_facing and not args.pytest_args and outcome.passed + len(outcome.failed):
                faults[t.slurm_version()] = outcome  # the whole suite ran: its fault suite is bench 7's row
        finally:
            t.umount()
    if faults:
        record_fault_rows(faults)
    print(f"\n{'version':<10}{'passed':>8}{'failed':>8}{'skipped':>9}{'root s':>8}{'tests s':>9}   log")
    for (v, passed, failed, skipped, root_s, test_s), t in zip(rows, targets):
        print(f"{v:<10}{passed:>8}{failed:>8}{skipped:>9}{root_s:>8.0f}{test_s:>9.0f}   {t.state / f'test-{v}.log'}")
    for (v, _, failed, *_), t in zip(rows, targets):
        if failed:  # CI shows only the output's tail: which tests failed, and why, go last
            print(f"\n{v}: what failed (from {t.state / f'test-{v}.log'})")
            print("\n".join(failure_lines(t.state / f"test-{v}.log")))
    return 0 if rows and all(r[2] == 0 and r[1] > 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
