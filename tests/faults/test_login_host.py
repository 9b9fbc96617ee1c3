"""Scenario 23: the login host gone while `roach watch --ssh-alias`, `roach wait` and `Job.wait()` follow jobs over
SSH: its sshd stopped with every session, or its link on the lab's bridge cut.

The three share one store, so the watch takes the rounds and the two waits read them. Each says the outage once
(the watch an `outage` line, `roach wait` one note, `Job.wait` nothing), none calls a job lost or ended while the
host is gone, the watch's rounds back off (twice the interval per failed round) and its ssh transport refuses to
connect for its back-off after a failed attempt, so the whole outage costs a handful of connection attempts
(counted on the login host: the resets its kernel sent for the stopped sshd's port; or, with the link cut, the
connections this machine tried to open). With the link cut the shared connection's keepalives go unanswered and
ssh ends it within a minute, which fails the round's `squeue`: the outage is said while the host is still gone.
Once the host is back each picks up by itself and says the jobs completed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER, NODES
from roach.lab.hosts import LOGIN, Fabric
from roach.launch.job import Job
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm.clusters.lab import GPU1
from roach.workspace.backend import sbatch_script, sync
from roach.workspace.base import Workspace
from roach.workspace.file import WORKSPACE_FILE
from tests.conftest import slack, wait_until
from tests.faults.ledger import assert_left_no_process, check_ledger
from tests.sshd import SSHServer, lab_over_ssh, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.labs import SHARED_TMP
from tests.support.pane import roach_argv, roach_env

OUTAGE_S = float(os.environ.get("ROACH_FAULTS_LOGIN_OUTAGE_S", "120"))
# The watch's rounds after the first that failed come 3, 9, 21, 45, 93 and 189 s after it (twice the interval per
# failed round); the transport tries no connection for 180 s after a failed one: the round at 189 s is the first to
# reach the host again, whatever the outage's length under that.
INTERVAL_S = 1.5
MAX_ATTEMPTS = 5  # connection attempts the whole outage may cost the three followers together
STEP_S = 0.5

CASES = [
    pytest.param("sshd", id="sshd-stopped"),
    pytest.param("link", id="link-cut", marks=pytest.mark.slow),
]


class Attempts:
    """Counts the connection attempts made to the login host's sshd while it is gone."""

    def __init__(self, lab, server: SSHServer, how: str):
        self.ns = Fabric(lab.port_base, NODES).netns(LOGIN)
        self.dst = f"{server.host}:{server.port}"
        self.how = how
        self.tried: set[str] = set()
        self.count = 0  # once stopped
        self._done = threading.Event()
        self._resets = 0

    def _login_resets(self) -> int:
        """The TCP resets the login host's kernel has sent: one per connection tried to a port nobody listens on."""
        text = subprocess.run(["ip", "netns", "exec", self.ns, "cat", "/proc/net/snmp"], capture_output=True, text=True)
        head, values = [ln.split() for ln in text.stdout.splitlines() if ln.startswith("Tcp:")]
        return int(values[head.index("OutRsts")])

    def _poll_syn_sent(self) -> None:
        """The sockets of this machine still opening a connection to the host (ARP gets no answer for ~3 s)."""
        while not self._done.is_set():
            out = subprocess.run(["ss", "-Htn", "state", "syn-sent"], capture_output=True, text=True).stdout
            self.tried |= {f[-2] for f in (ln.split() for ln in out.splitlines()) if f and f[-1] == self.dst}
            time.sleep(0.2)

    def start(self) -> None:
        if self.how == "sshd":
            self._resets = self._login_resets()
        else:
            threading.Thread(target=self._poll_syn_sent, daemon=True).start()

    def stop(self) -> None:
        self._done.set()
        self.count = self._login_resets() - self._resets if self.how == "sshd" else len(self.tried)


def _cut(lab, server: SSHServer, how: str, seconds: float, attempts: Attempts, said: Path) -> list[str]:
    """The login host gone for ``seconds``: its sshd and every session killed, or its link on the bridge down.

    Returns the watch's events (from ``said``) as they stood just before the host came back."""
    veth = Fabric(lab.port_base, NODES).veth(LOGIN)
    attempts.start()  # a killed session's last packet may count too: an upper bound
    if how == "sshd":
        server.stop()
    else:
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        time.sleep(seconds)
        return [e["event"] for e in _events(said)]
    finally:
        attempts.stop()
        if how == "sshd":
            server.start()
        else:
            subprocess.run(["ip", "link", "set", veth, "up"], check=True)


def _workspace(base: Path, server: SSHServer, run_s: float) -> Workspace:
    """A workspace whose remote root (the lab user's) is reached through the test server's alias."""
    remote = Path(tempfile.mkdtemp(prefix="roach-ws-", dir=SHARED_TMP))
    shutil.chown(remote, LAB_USER, LAB_USER)
    local = base / "ws"
    (local / WORKSPACE_FILE).parent.mkdir(parents=True)
    spec = {"remote_root": str(remote), "rsync_remote_root": f"{server.alias}:{remote}/"}
    (local / WORKSPACE_FILE).write_text(json.dumps(spec))
    (local / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --account=lab\n#SBATCH --partition=gpu\n#SBATCH --time=00:10:00\n"
        f"#SBATCH --mem=100M\n#SBATCH --cpus-per-task=1\nsleep {int(run_s)}\n"
    )
    return Workspace.load(local)


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1]


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in _lines(path) if line.strip()]


def _start(base: Path, env: dict, server: SSHServer, ws: Workspace, job_id: str) -> dict[str, subprocess.Popen]:
    """`roach watch --ssh-alias` (the poller: it starts first) and `roach wait`, each printing into a file."""
    way = ["--ssh-alias", server.alias, "--ssh-config", str(server.config_path)]
    argvs = {
        "watch": roach_argv("watch", "--cluster", "lab", *way, "--interval", str(INTERVAL_S), "--json"),
        "wait": roach_argv("wait", job_id, "--workspace", str(ws.root), "--interval", "1", *way),
    }
    procs = {}
    for name, argv in argvs.items():
        with (base / f"{name}.out").open("w") as out, (base / f"{name}.err").open("w") as err:
            procs[name] = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        if name == "watch":
            wait_until("the watch's first round", lambda: (base / "watch.out").read_text(), timeout=60)
    return procs


def _running(base: Path, keys: list[str], procs: dict[str, subprocess.Popen]) -> bool:
    for name, p in procs.items():
        assert p.poll() is None, f"{name} exited {p.returncode}: {(base / f'{name}.err').read_text()[-3000:]}"
    started = {e["job_id"] for e in _events(base / "watch.out") if e["event"] == "started"}
    return set(keys) <= started and "RUNNING=1" in (base / "wait.out").read_text()


def _job_wait(run_id: str, store_path: Path):
    """``Job.wait()`` in a thread of its own, with a store of that thread's (a store stays in its thread)."""
    with Store(store_path) as store:
        return Job.from_ref(run_id, store=store).wait(timeout=slack(900))


@pytest.mark.lab
@pytest.mark.parametrize("how", CASES)
def test_the_login_host_gone_is_said_once_costs_a_few_attempts_and_each_picks_up(
    faults, lab, sshd: SSHServer, slurm, how
):
    if not lab.hosts:
        pytest.skip("a single-host lab has no login host")
    base = Path(tempfile.mkdtemp(prefix="roach-login-gone-", dir=SHARED_TMP))
    store = Store(base / "store.sqlite")  # the three followers' own: no other test's job in it
    c = lab_over_ssh(lab, sshd)
    run_s = OUTAGE_S + 20
    steps = int(run_s / STEP_S)
    job = faults.submit({"steps": steps, "step_s": STEP_S}, GPU1.replace(time="00:10:00"), cluster=c, store=store)
    ws = _workspace(base, sshd, run_s)
    sync(ws, c)
    sub = sbatch_script(ws, c, "job.sbatch", "followed while the login host is gone", store=store)
    env = {**roach_env(store), "PYTHONUNBUFFERED": "1", "COLUMNS": "400"}
    procs = _start(base, env, sshd, ws, sub.job_id)
    attempts = Attempts(lab, sshd, how)
    try:
        with ThreadPoolExecutor(1) as pool:
            waited = pool.submit(_job_wait, job.run_id, store.path)
            keys = [job.slurm_id, sub.job_id]
            wait_until("both jobs running", lambda: _running(base, keys, procs), timeout=120)
            said_while_gone = _cut(lab, sshd, how, OUTAGE_S, attempts, base / "watch.out")
            ended_meanwhile = waited.done()
            rec = waited.result()
        for p in procs.values():
            p.wait(timeout=slack(400))
    finally:
        for p in procs.values():
            p.kill()
        shutil.rmtree(ws.remote_root, ignore_errors=True)
    assert "outage" in said_while_gone, said_while_gone
    _check_followers(base, procs, keys, attempts.count, ended_meanwhile)
    assert rec.state is JobState.COMPLETED
    check_ledger(job.record.run_dir, steps, interruptions=0, max_redo=0, run_id=job.run_id)
    assert_left_no_process(slurm, job)


def _check_followers(
    base: Path, procs: dict[str, subprocess.Popen], keys: list[str], attempts: int, ended_meanwhile: bool
) -> None:
    """One outage line each, none ended or lost while the host was gone, few attempts, and every end said after."""
    events = _events(base / "watch.out")
    kinds = [e["event"] for e in events]
    (base / "attempts").write_text(f"{attempts}\n")  # for the record; asserted below
    assert kinds.count("outage") == 1, kinds
    assert kinds.count("recovered") == 1, kinds
    gone = kinds[kinds.index("outage") : kinds.index("recovered")]
    assert "finished" not in gone, kinds
    assert "lost" not in kinds, kinds
    assert not ended_meanwhile
    assert attempts <= MAX_ATTEMPTS
    assert procs["watch"].returncode == 0, (base / "watch.err").read_text()[-3000:]
    finished = [e for e in events if e["event"] == "finished"]
    assert sorted(e["job_id"] for e in finished) == sorted(keys), finished
    assert {e["state"] for e in finished} == {"COMPLETED"}
    said = (base / "wait.out").read_text()
    assert said.count("connection lost") == 1, said
    assert procs["wait"].returncode == 0, said + (base / "wait.err").read_text()[-3000:]
    assert " gone" in said, said
    assert said.index("connection lost") < said.index(" gone"), said
