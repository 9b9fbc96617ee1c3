"""Which lab a test process uses: under pytest-xdist each worker has a lab of its own, else the main lab.

Worker ``gwN`` runs on the lab at port base ``P = $ROACH_TEST_PORT_BASE + N * WORKER_PORT_STEP``, in
``<main state dir's parent>/lab-test-P``: no worker's test can cancel, drain or reconfigure another's jobs, and
a second suite at once takes labs of its own with another ``$ROACH_TEST_PORT_BASE``.
The choice is made in ``$ROACH_LAB_DIR`` when the suite starts, so every process a test starts (the CLI, the MCP
server, a watch) finds the same lab. The workers' labs share the main lab's job venv (torch is installed once).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from roach.errors import LabError
from roach.lab import lab as lablib
from roach.lab.config import NODES, LabConfig, LabLayout
from roach.lab.hosts import Fabric
from roach.lab.python import link_job_venv
from roach.lab.saved import default_state_dir

# Below the ports a job's rendezvous picks first (20000 + job id % 20000), away from the main lab (16817), the
# releases' labs (17017, 17117) and bench 5's second lab (19317).
WORKER_PORT_BASE = int(os.environ.get("ROACH_TEST_PORT_BASE") or 15017)
WORKER_PORT_STEP = 10
MAX_WORKERS = 8


def worker_port_base(n: int) -> int:
    """The port base of worker ``gwN``'s lab."""
    return WORKER_PORT_BASE + n * WORKER_PORT_STEP


def suite_layout() -> str:
    """The layout of the suite's labs: ``$ROACH_TEST_LAYOUT``, else hosts (the matrix's roots run single-host)."""
    return os.environ.get("ROACH_TEST_LAYOUT") or LabLayout.HOSTS.value


def private_port_base(slot: int) -> int:
    """The port base of a test module's private lab (slot 0, 1, ...): past this suite's workers' labs, so a second
    suite at once (another $ROACH_TEST_PORT_BASE) moves its private labs too."""
    return worker_port_base(MAX_WORKERS + slot)


# The machine's shared scratch, as a site's NFS is: what a job on any node must see (repositories, roots, a private
# lab's state) goes here, never in /tmp, which each node of the hosts lab has of its own.
SHARED_TMP = Path(os.environ.get("ROACH_TEST_SHARED_TMP") or "/var/tmp")


def node_path(cfg: LabConfig, node: str, path: str | os.PathLike[str]) -> Path:
    """Where ``path`` as ``node`` sees it lies on this machine: in its own /tmp on the hosts lab."""
    p = Path(path)
    if cfg.hosts and p.is_relative_to("/tmp"):
        return cfg.node_tmp(node) / p.relative_to("/tmp")
    return p


def on_any_node(cfg: LabConfig, path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists as some node of the lab sees it."""
    return any(node_path(cfg, n, path).exists() for n in NODES)


# A test without the lab marker runs with $ROACH_LAB_DIR here, where no lab is: reaching the lab fails.
NO_LAB_DIR = "/nonexistent/roach-test-without-the-lab-marker"


@dataclass(frozen=True)
class LabChoice:
    """The lab this test process runs on: its state directory and port base (None: the saved or default one)."""

    state_dir: Path
    port_base: int | None
    shared_venv_from: Path | None  # the main lab, whose job venv a worker's lab links to
    layout: str | None = None  # a worker's lab: $ROACH_TEST_LAYOUT, else hosts; None: the lab's saved one


def worker_index(worker: str | None = None) -> int | None:
    """N of xdist's worker id ``gwN``; None outside xdist."""
    worker = worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    return int(worker[2:])


# The main lab's job venv (torch installed once), which the workers' labs and the tests' private labs link to.
MAIN_JOB_VENV = default_state_dir() / "pyenv"

_chosen: list[LabChoice] = []  # made once per process: conftest may be imported under two names


def choose_lab() -> LabChoice:
    """This process's lab, written to ``$ROACH_LAB_DIR`` so that everything it starts finds the same one."""
    if _chosen:
        return _chosen[0]
    main = default_state_dir()
    n = worker_index()
    if n is None:
        choice = LabChoice(main, None, None)
    else:
        port = worker_port_base(n)
        choice = LabChoice(main.parent / f"{main.name}-test-{port}", port, main, suite_layout())
        os.environ["ROACH_LAB_DIR"] = str(choice.state_dir)
    _chosen.append(choice)
    return choice


def share_job_venv(choice: LabChoice) -> None:
    """Link a worker lab's job venv to the main lab's, where the main lab has one and the worker's has none."""
    if choice.shared_venv_from is not None:
        link_job_venv(choice.state_dir, choice.shared_venv_from)


@contextmanager
def private_lab(prefix: str, **options) -> Iterator[LabConfig]:
    """A test's own lab, started with ``options`` (``lablib.up``'s) in a fresh state directory on the shared scratch,
    its jobs in the main lab's job venv; taken down and removed afterwards."""
    state = Path(tempfile.mkdtemp(prefix=prefix, dir=SHARED_TMP))
    os.chmod(state, 0o755)  # the lab user's commands read slurm.conf
    link_job_venv(state, MAIN_JOB_VENV.parent)
    try:
        yield lablib.up(str(state), log=lambda *_: None, **options)
    finally:
        lablib.down(str(state), log=lambda *_: None)
        shutil.rmtree(state, ignore_errors=True)


def settle_layout(choice: LabChoice) -> None:
    """Stop a worker's lab that runs in another layout than the suite asks for (a layout changes only when down)."""
    if choice.layout is None:
        return
    try:
        saved = LabConfig.load(choice.state_dir)
    except LabError:
        return
    if saved.layout != choice.layout:
        lablib.down(str(choice.state_dir), log=lambda *_: None)


_HOLD = """
import socket, sys
held = []
for port in map(int, sys.argv[1:]):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a past rendezvous left it in TIME_WAIT
    s.bind(("", port))
    s.listen()
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def ports_held(cfg: LabConfig, ports: list[int]) -> Iterator[None]:
    """``ports`` listened on where every node's jobs run: this host, or each node's own network namespace."""
    fabric = Fabric(cfg.port_base, NODES)
    enter = [["nsenter", f"--net=/run/netns/{fabric.netns(n)}", "--"] for n in NODES] if cfg.hosts else [[]]
    procs = []
    try:
        for prefix in enter:
            argv = [*prefix, sys.executable, "-c", _HOLD, *map(str, ports)]
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            out = procs[-1].stdout
            assert out is not None and out.readline().strip() == "ready", f"could not hold the ports ({prefix})"
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
