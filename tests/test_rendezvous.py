"""A one-node job's rendezvous port, picked by rank 0 (roach/runtime/rendezvous.py), with real sockets."""

from __future__ import annotations

import errno
import socket
import threading

import pytest

from roach.runtime import rendezvous
from roach.runtime.rendezvous import RendezvousError, free_port, port_file, rank0_port


def _listen(port: int, family: int = socket.AF_INET) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::1" if family == socket.AF_INET6 else "", port))
    s.listen()
    return s


def _free_from(first: int) -> int:
    """A port at or after ``first`` that is free now, with the next one free too (the tests hold it)."""
    for port in range(first, 39990):
        if rendezvous._bindable(port) and rendezvous._bindable(port + 1):
            return port
    raise AssertionError("no two free ports")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_held_port_is_skipped_in_either_family():
    port = _free_from(31000)
    with _listen(port):
        assert free_port(port) == port + 1
    if _ipv6_loopback():
        with _listen(port, socket.AF_INET6):  # only on ::1: a dual-stack store on [::] could not bind it
            assert free_port(port) == port + 1
    assert free_port(port) == port


class _RefusedIPv6:
    """An IPv6 socket whose bind fails as on a node with IPv6 turned off by sysctl."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def setsockopt(self, *args):
        pass

    def bind(self, address):
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")


@pytest.mark.parametrize("how", ["no AF_INET6", "IPv6 bind refused"])
def test_without_ipv6_an_ipv4_socket_says_it_alone(monkeypatch, how):
    """A node with IPv6 off (no AF_INET6 at all, or a bind refused for another reason than a held port) still
    finds a port: were the refusal read as "held", every port would look taken and no one-node job would start."""
    port = _free_from(32000)
    real = socket.socket

    def without_ipv6(family=socket.AF_INET, *args, **kw):
        if family != socket.AF_INET6:
            return real(family, *args, **kw)
        if how == "no AF_INET6":
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return _RefusedIPv6()

    monkeypatch.setattr(socket, "socket", without_ipv6)
    assert free_port(port) == port
    with _listen(port):
        assert free_port(port) == port + 1


def test_the_search_wraps_within_the_range():
    assert rendezvous.first_port(19999) == 39999 and rendezvous.first_port(20000) == 20000
    if not rendezvous._bindable(39999):
        pytest.skip("port 39999 is held on this machine")
    with _listen(39999):
        assert free_port(39999) == free_port(20000) < 39999  # past 39999 it goes on from 20000, not to 40000


def test_rank0_tells_the_other_ranks_its_port(tmp_path, capsys):
    got: dict[int, int] = {}
    waiting = [
        threading.Thread(target=lambda r=r: got.__setitem__(r, rank0_port(r, 3, 4737, tmp_path, "4737.0.0", "n1")))
        for r in (1, 2)
    ]
    for t in waiting:
        t.start()
    got[0] = rank0_port(0, 3, 4737, tmp_path, "4737.0.0", "n1")
    for t in waiting:
        t.join(10)
    assert got[0] == got[1] == got[2] and 20000 <= got[0] < 40000
    assert port_file(tmp_path, "4737.0.0").read_text() == f"{got[0]}\n"
    assert f"roach: rendezvous at 127.0.0.1:{got[0]} (a port free on n1 when" in capsys.readouterr().out
    assert not list(tmp_path.glob(".roach/.*.tmp"))


def test_a_lone_rank_writes_no_file_and_another_attempt_reads_no_old_one(tmp_path):
    rank0_port(0, 1, 9, tmp_path, "9.0.0", "n1")
    assert not (tmp_path / ".roach").exists()
    rank0_port(0, 2, 9, tmp_path, "9.0.0", "n1")
    with pytest.raises(RendezvousError, match=r"rank 0 did not say its rendezvous port within 0 s .*port\.9\.1\.0"):
        rank0_port(1, 2, 9, tmp_path, "9.1.0", "n1", wait_s=0.05)  # the requeued attempt: its own file, not 9.0.0's


RANK1_TRAIN = """
import os
from pathlib import Path

# Rank 0 says its port while this rank imports: written here, at the import, as a rank 0 that started later would.
_state = Path(os.environ["ROACH_TEST_RUN_DIR"]) / ".roach"
_state.mkdir(parents=True, exist_ok=True)
(_state / "port.9.0.0").write_text("31234\\n")
SEEN_AT_IMPORT = os.environ.get("MASTER_PORT")


def train():
    seen = {"at_import": SEEN_AT_IMPORT, "at_call": os.environ.get("MASTER_PORT")}
    (Path(os.environ["ROACH_TEST_RUN_DIR"]) / "seen.txt").write_text(repr(seen))
"""


def test_a_one_node_rank_other_than_0_reads_the_port_after_its_own_imports(tmp_path):
    """A rank other than 0 makes its imports (torch's seconds) before it looks for rank 0's port, so a rank 0 that
    starts later costs it nothing; one that waited for the port first would wait here for ever (the port is said
    only while the function's module imports)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "f.py").write_text(RANK1_TRAIN)
    run_dir = tmp_path / "run"
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {"version": 1, "target": "pkg.f:train", "args": {}, "run_id": "r1", "run_dir": str(run_dir)}
            | {"python_path": ["."], "checkpoint_signal": "USR1"}
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(
        ROACH_CLONE_DIR=str(tmp_path),
        PYTHONPATH=str(repo),
        ROACH_TEST_RUN_DIR=str(run_dir),
        ROACH_PORT_BY_RANK0="1",
        MASTER_ADDR="127.0.0.1",
        SLURM_JOB_ID="9",
        SLURM_PROCID="1",
        SLURM_LOCALID="1",
        SLURM_NTASKS="2",
        SLURM_NTASKS_PER_NODE="2",
    )
    p = subprocess.run(
        [sys.executable, "-m", "roach.slurm.run", str(spec)], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert (run_dir / "seen.txt").read_text() == repr({"at_import": None, "at_call": "31234"})
