"""Benchmark 3, SSH cost: one status round over SSH, roach's multiplexed connection vs a fresh ``ssh``
per call running the same commands.

A real sshd on 127.0.0.1 (tests/sshd.py's ``SSHServer``) logs in as the bench user, who has N held jobs
queued and a few jobs that already ended. A round is the two calls of roach's status round (what
``roach ls`` makes, ``roach.cli.jobs.live_views``): ``squeue`` of the user's jobs and one ``sacct`` for
the listed jobs that left the queue, through ``SlurmClient`` on each transport (and, as the floor, on
the login host itself, no ssh at all):

* roach: ``SSHTransport`` (ControlMaster=auto, ControlPersist): the first round opens the shared
  connection, later rounds ride on it.
* fresh: the same remote command lines through ``ssh -o ControlMaster=no -o ControlPath=none``, one new
  connection (handshake, key exchange, authentication, session) per call.

Counted: wall time per round and the connections sshd accepted ("Accepted publickey" in its log).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.labenv import Jobs, Lab, submit_held
from bench.report import Section
from bench.stats import Row, comparison_table
from roach.scheduler.client import SlurmClient
from roach.scheduler.ssh import remote_command
from roach.scheduler.transport import Result

METHODS = ("roach", "fresh ssh per call", "local (no ssh)")


class FreshSSH:
    """A transport that opens a new ssh connection for every call (no ControlMaster), same command lines."""

    def __init__(self, alias: str, config_file: Path, env: dict[str, str]):
        self.alias, self.config_file, self.env = alias, str(config_file), env

    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result:
        full = [
            "ssh",
            "-F",
            self.config_file,
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=no",
            "-o",
            "ControlPath=none",
            "-o",
            "LogLevel=ERROR",
            "-T",
            "-x",
            "-a",
            self.alias,
            remote_command(argv, self.env),
        ]
        p = subprocess.run(
            full,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout or 120,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        return Result(tuple(full), p.returncode, p.stdout, p.stderr)


def status_round(client: SlurmClient, ended: list[str]) -> None:
    client.squeue()
    client.sacct(ended)


def run(lab: Lab, jobs: Jobs, n: int, reps: int, log=print) -> Section:
    from tests.sshd import SSHServer  # the test suite's real sshd fixture, reused

    base = Path(tempfile.mkdtemp(prefix="roach-bench-ssh-", dir="/tmp"))
    server = SSHServer(base, user=lab.user)
    held = submit_held(lab, n)
    jobs.add(held)
    gone = submit_held(lab, 2, name="bench-ended")
    jobs.add(gone)
    jobs.cancel(gone)  # ended (CANCELLED): the round asks sacct about them
    try:
        server.start()
        mux = server.transport(env=lab.env)
        fresh = FreshSSH(server.alias, server.config_path, lab.env)
        clients = {
            "roach": SlurmClient(mux),
            "fresh ssh per call": SlurmClient(fresh),
            "local (no ssh)": lab.user_client(),
        }
        wall = {m: [] for m in METHODS}
        conns = {m: [] for m in METHODS}
        first = {}
        mux.close()
        for rep in range(reps + 1):  # round 0: roach opens its shared connection (shown apart)
            for m in METHODS:
                c0 = server.accepted_connections()
                t0 = time.perf_counter()
                status_round(clients[m], gone)
                dt = time.perf_counter() - t0
                dc = _settle(server, c0)
                if rep == 0:
                    first[m] = (dt, dc)
                else:
                    wall[m].append(dt)
                    conns[m].append(dc)
        mux.close()
        log(
            f"bench 3: warm round roach {sorted(wall['roach'])[len(wall['roach']) // 2]:.3f}s, "
            f"fresh {sorted(wall['fresh ssh per call'])[len(wall['roach']) // 2]:.3f}s, "
            f"local {sorted(wall['local (no ssh)'])[len(wall['roach']) // 2]:.3f}s"
        )
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        jobs.cancel(held)
    rows = [Row("wall time of a round", wall, "s"), Row("new ssh connections per round", conns)]
    firsts = "; ".join(f"{m}: {dt:.3f} s, {dc} connection{'s' if dc != 1 else ''}" for m, (dt, dc) in first.items())
    body = [
        f"A status round (`squeue` of the user's {n} held jobs + one `sacct` for 2 ended ones) over SSH to "
        f"127.0.0.1, after the first round. The first round: {firsts}. Over a real network each new "
        "connection also pays the round trips of its handshake, so the gap grows with latency. The same round run "
        "on the login host itself (no ssh) is the floor: most of it is `sacct` asking slurmdbd.",
        "",
        comparison_table(rows, METHODS),
    ]
    return Section(3, "SSH cost: a status round over SSH", "\n".join(body), {"jobs": n, "reps": reps})


def _settle(server, before: int, wait_s: float = 0.5) -> int:
    """Connections accepted since ``before`` (sshd logs the login a moment after it happens)."""
    deadline = time.monotonic() + wait_s
    n = server.accepted_connections() - before
    while time.monotonic() < deadline:
        time.sleep(0.05)
        n = server.accepted_connections() - before
    return n
