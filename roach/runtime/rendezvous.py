"""The rendezvous port of a one-node job, picked by rank 0 when it starts rather than by the batch script.

Every rank of a one-node allocation runs on the node the batch script runs on, so rank 0 can look for a free
port itself, with ``bind()`` (what torch's store will do), in the Python it has already started. The batch
script then starts the ranks at once: reading the kernel's TCP tables cost it a ``/proc/net/tcp`` walk (6-15 ms
on a 2-core node, more where the table is sized for a large memory) before ``srun``. The batch script says so
with ``ROACH_PORT_BY_RANK0=1``; a job of several nodes has its port from the batch script, as before.

Rank 0 writes the port to ``<run dir>/.roach/port.<attempt>``; the other ranks wait for that file. One file per
attempt (:func:`~roach.runtime.attempts.attempt_key`), so a requeued attempt never reads an old one.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from roach.errors import RoachError
from roach.runtime.attempts import state_dir

PORTS = range(20000, 40000)
WAIT_S = 600.0  # how long the other ranks wait for rank 0's port (rank 0 may start slowly on a busy node)


class RendezvousError(RoachError):
    """No port to meet on: none free, or rank 0 never said which."""


def by_rank0(env: Mapping[str, str]) -> bool:
    """Whether this attempt's port is rank 0's to pick (the batch script of a one-node job says so)."""
    return env.get("ROACH_PORT_BY_RANK0") == "1"


def first_port(job_id: int) -> int:
    """Where the search starts: spread by job id, so that jobs sharing a node rarely try the same ports."""
    return PORTS.start + job_id % len(PORTS)


def _bindable(port: int) -> bool:
    # A dual-stack IPv6 socket on the wildcard address conflicts with any socket holding the port, in either
    # family, as torch's store (which listens on [::] where it can) would. Where IPv6 is off (no such socket, or
    # a bind refused for any reason but the port being held), an IPv4 socket says it alone.
    if socket.has_ipv6:
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                s.bind(("::", port))
            return True
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", port))
    except OSError:
        return False
    return True


def free_port(first: int) -> int:
    """The first port from ``first`` upwards (wrapping within 20000-39999) that nothing on this node holds."""
    n = len(PORTS)
    for i in range(n):
        port = PORTS.start + (first - PORTS.start + i) % n
        if _bindable(port):
            return port
    raise RendezvousError(f"no free TCP port in 20000-39999 on {socket.gethostname()}: end what holds them")


def port_file(run_dir: Path, attempt: str) -> Path:
    return state_dir(run_dir) / f"port.{attempt}"


def _announce(path: Path, port: int) -> None:
    # temp file and rename, so a waiting rank never reads half a number; no fsync: the file is read on this
    # node within milliseconds and means nothing after this attempt
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def _await(path: Path, wait_s: float) -> int:
    deadline, pause = time.monotonic() + wait_s, 0.001
    while True:
        try:
            return int(path.read_text())
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                raise RendezvousError(
                    f"rank 0 did not say its rendezvous port within {wait_s:.0f} s (no {path}): "
                    "see rank 0's lines in the job's log"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def rank0_port(
    rank: int, world_size: int, job_id: int, run_dir: Path, attempt: str, node: str, wait_s: float = WAIT_S
) -> int:
    """This attempt's MASTER_PORT: rank 0 finds it and says it (in the log and, for the other ranks, in
    :func:`port_file`); every other rank reads it there."""
    path = port_file(run_dir, attempt)
    if rank != 0:
        return _await(path, wait_s)
    port = free_port(first_port(job_id))
    if world_size > 1:  # a lone rank has no one to tell
        _announce(path, port)
    print(f"roach: rendezvous at 127.0.0.1:{port} (a port free on {node} when this attempt started)", flush=True)
    return port
