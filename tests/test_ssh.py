"""The SSH transport against a real sshd on 127.0.0.1 (real ssh, no mocks), logging in as the lab's user."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from roach.errors import TransportError
from roach.lab.config import LAB_USER
from roach.scheduler.client import SlurmClient
from roach.scheduler.ssh import SSHBackingOff, SSHConnectError, SSHTransport, remote_command
from roach.scheduler.transport import Transport
from tests.sshd import SSHServer, serve, sshd  # noqa: F401  (fixtures)
from tests.support.labs import SHARED_TMP

HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch {d}/dollar)",
    "`touch {d}/backtick`",
    "a b  c",
    "line1\nline2",
    "; touch {d}/semi",
    "*",
    "~",
    "-n",
    "",
    "\\",
    "a;b|c&d",
    "$HOME",
    "'; touch {d}/quote; '",
    "\t",
    "ünï©ødé",
    "{d}/*",
]


@pytest.fixture(scope="module")
def sshd_server() -> Iterator[SSHServer]:
    """The transport's own tests need no lab: a server on 127.0.0.1."""
    yield from serve(None)


class FakeClock:
    """A monotonic clock the test moves; ``sleep`` records what was asked and advances it."""

    def __init__(self, now: float = 1000.0):
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fresh(sshd: SSHServer):
    """Transports made through this have no shared connection up when the test starts, and none after."""
    made: list[SSHTransport] = []

    def make(**kwargs) -> SSHTransport:
        t = sshd.transport(**kwargs)
        t.close()
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


# -- the remote command string (pure) --------------------------------------------------------------------------
def test_remote_command_quotes_each_argument_once_and_exports_env_after_setup():
    cmd = remote_command(["printf", "%s\n", "a b", "$(x)"], {"SLURM_CONF": "/etc/slurm conf"}, ["module load slurm"])
    assert cmd == (
        "module load slurm; export SLURM_CONF='/etc/slurm conf'; export SLURM_TIME_FORMAT=standard; "
        "printf '%s\n' 'a b' '$(x)'"
    )
    assert shlex.split(cmd.split("; ")[-1]) == ["printf", "%s\n", "a b", "$(x)"]


@pytest.mark.parametrize("bad", ["A B", "1X", "X=Y", "X;rm"])
def test_remote_command_refuses_env_names_that_are_not_names(bad):
    with pytest.raises(TransportError, match="invalid environment variable name"):
        remote_command(["true"], {bad: "v"})


def test_empty_command_and_bad_alias_are_refused():
    with pytest.raises(TransportError, match="empty command"):
        remote_command([], {})
    for alias in ("", "-oProxyCommand=x", "a b"):
        with pytest.raises(TransportError, match="invalid ssh alias"):
            SSHTransport(alias)


@pytest.fixture
def short_tmp():
    """A temp directory with a short path (a control socket's path must stay under 104 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="rt-", dir=SHARED_TMP))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_control_dir_is_private_and_another_users_dir_is_refused(short_tmp):
    d = short_tmp / "cm"
    t = SSHTransport("x", control_dir=d)
    assert f"ControlPath={d}/%C" in t.ssh_options()
    assert (d.stat().st_mode & 0o777) == 0o700
    os.chmod(d, 0o755)
    t.ssh_options()
    assert (d.stat().st_mode & 0o777) == 0o700  # tightened again
    if os.geteuid() == 0:
        os.chown(d, 1001, 1001)
        with pytest.raises(TransportError, match="not a directory owned by you"):
            t.ssh_options()
    with pytest.raises(TransportError, match="too long"):
        SSHTransport("x", control_dir=short_tmp / ("y" * 80)).ssh_options()


# -- commands over a real sshd ----------------------------------------------------------------------------------
def test_is_a_transport_and_commands_run_as_the_remote_user(fresh):
    t = fresh()
    assert isinstance(t, Transport)
    res = t.run(["id", "-un"])
    assert res.ok and res.stdout == f"{LAB_USER}\n" and res.stderr == ""


def test_env_and_pinned_env_reach_the_remote_command(fresh):
    t = fresh(env={"SLURM_CONF": "/var/lib/roach/lab/etc/slurm.conf", "ODD": "a b'$(touch x)\"`"})
    out = t.run(["sh", "-c", 'printf "%s|%s|%s" "$SLURM_CONF" "$ODD" "$SLURM_TIME_FORMAT"']).stdout
    assert out == "/var/lib/roach/lab/etc/slurm.conf|a b'$(touch x)\"`|standard"


def test_setup_lines_run_before_the_command(fresh):
    t = fresh(setup=("ROACH_SETUP_MARK=set-up; export ROACH_SETUP_MARK", "cd /tmp"))
    assert t.run(["sh", "-c", 'printf "%s %s" "$ROACH_SETUP_MARK" "$PWD"']).stdout == "set-up /tmp"


def test_hostile_arguments_arrive_verbatim_and_nothing_executes(fresh, shared_tmp: Path):
    args = [a.replace("{d}", str(shared_tmp)) for a in HOSTILE]
    t = fresh()
    res = t.run(["printf", "%s\\0", *args])
    assert res.ok, res
    assert res.stdout.split("\0")[:-1] == args
    # the same through a program that receives them as "$@"
    res = t.run(["sh", "-c", 'for a do printf "[%s]" "$a"; done', "sh", *args])
    assert res.stdout == "".join(f"[{a}]" for a in args)
    assert list(shared_tmp.iterdir()) == []  # no $(...), backtick or ; ran


def test_stdin_text_and_bytes_round_trip(fresh):
    t = fresh()
    text = "first line\nsecond 'line' with $(x) and ünïcode\n\nlast"
    assert t.run(["cat"], input=text).stdout == text
    data = os.urandom(200_000) + b"\0\xff\n"
    res = t.run(["sha256sum"], input=data)
    assert res.ok and res.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    assert t.run(["wc", "-c"], input=b"").stdout.strip() == "0"


def test_remote_exit_codes_pass_through_as_results(fresh):
    t = fresh()
    assert t.run(["sh", "-c", "echo oops >&2; exit 3"]).returncode == 3
    res = t.run(["sh", "-c", "exit 255"])  # the command's own 255 (no ssh message): still a result
    assert res.returncode == 255
    assert t.run(["false"]).returncode == 1
    assert t.run(["/nonexistent/binary"]).returncode == 127


def test_twenty_calls_reuse_one_connection(fresh, sshd: SSHServer):
    t = fresh()
    before = sshd.accepted_connections()
    for i in range(20):
        assert t.run(["echo", str(i)]).stdout == f"{i}\n"
    assert sshd.accepted_connections() == before + 1
    assert t.master_running()
    # another transport for the same alias and config shares the socket: still no new login
    other = sshd.transport()
    assert other.run(["true"]).ok
    assert sshd.accepted_connections() == before + 1
    t.close()
    assert not t.master_running()


@pytest.mark.lab
def test_slurm_client_over_ssh_reads_the_lab(lab, fresh, user_slurm):
    client = SlurmClient(fresh(env=lab.env()))
    assert isinstance(client.squeue(), list)
    caps = client.capabilities()
    assert caps == user_slurm.capabilities()
    job = client.sbatch(["--hold", "--job-name=roach ssh 'test'", "--output=/dev/null"], "#!/bin/sh\ntrue\n")
    try:
        recs = client.squeue(job_ids=[job])
        assert [r.raw_id for r in recs] == [job] and recs[0].user == LAB_USER
    finally:
        client.scancel([job])


# -- failures become roach errors ------------------------------------------------------------------------------
def test_auth_failure_is_a_transport_error_with_a_batchmode_hint_and_no_backoff(sshd: SSHServer):
    clock = FakeClock()
    t = SSHTransport(
        sshd.nokey_alias, config_file=sshd.config_path, control_dir=sshd.control_dir, clock=clock, sleep=clock.sleep
    )
    for _ in range(2):  # not a reason to back off: the second call tries again
        with pytest.raises(TransportError) as exc:
            t.run(["true"])
        assert not isinstance(exc.value, SSHConnectError)
        assert "Permission denied" in exc.value.message
        assert "BatchMode" in exc.value.hint and "never prompts" in exc.value.hint
        clock.now += 5


def test_unknown_alias_is_a_connect_error_naming_the_config(sshd: SSHServer, short_tmp):
    t = SSHTransport("roach-no-such-alias", config_file=sshd.config_path, control_dir=short_tmp / "cm")
    with pytest.raises(SSHConnectError) as exc:
        t.run(["true"])
    assert "Could not resolve hostname roach-no-such-alias" in exc.value.message
    assert str(sshd.config_path) in exc.value.hint


def test_missing_ssh_binary_and_timeouts_are_transport_errors(fresh, short_tmp):
    with pytest.raises(TransportError, match="command not found: /nonexistent/ssh"):
        SSHTransport("x", ssh="/nonexistent/ssh", control_dir=short_tmp / "cm").run(["true"])
    t = fresh()
    with pytest.raises(TransportError, match="timed out after 1s"):
        t.run(["sleep", "5"], timeout=1)
    assert t.run(["true"]).ok  # the shared connection survives a killed client


def test_bad_ssh_config_is_a_transport_error(short_tmp):
    cfg = short_tmp / "bad_config"
    cfg.write_text("Host x\n  NoSuchOption yes\n")
    with pytest.raises(TransportError, match="ssh configuration error") as exc:
        SSHTransport("x", config_file=cfg, control_dir=short_tmp / "cm").run(["true"])
    assert not isinstance(exc.value, SSHConnectError)


# -- politeness ------------------------------------------------------------------------------------------------
def test_new_connections_are_spaced_by_min_interval_and_reuse_costs_nothing(fresh, sshd: SSHServer):
    clock = FakeClock()
    t = fresh(min_interval_s=5.0, clock=clock, sleep=clock.sleep)
    assert t.run(["true"]).ok  # first connection: no wait
    assert t.run(["true"]).ok and t.run(["true"]).ok  # reused: no wait
    assert clock.sleeps == []
    t.close()
    clock.now += 2
    assert t.run(["true"]).ok  # a new connection 2 s after the last attempt: waits the other 3 s
    assert clock.sleeps == [pytest.approx(3.0)]
    t.close()
    clock.now += 60
    assert t.run(["true"]).ok  # long enough ago: no wait
    assert clock.sleeps == [pytest.approx(3.0)]


def test_killed_sshd_backs_off_then_retries_exactly_once_and_recovers(fresh, sshd: SSHServer):
    clock = FakeClock()
    t = fresh(min_interval_s=1.0, backoff_s=180.0, clock=clock, sleep=clock.sleep)
    assert t.run(["true"]).ok
    sshd.stop()
    t.close()  # the master is gone with the server's sessions; make sure of it

    with pytest.raises(SSHConnectError) as exc:
        t.run(["squeue"])
    assert not isinstance(exc.value, SSHBackingOff)
    assert "Connection refused" in exc.value.message and "180s" in exc.value.hint
    assert exc.value.retry_at == pytest.approx(clock.now + 180)

    sshd.start()  # the host is back, but the backoff holds: no connection attempt at all
    before = sshd.accepted_connections()
    for _ in range(5):
        with pytest.raises(SSHBackingOff, match="not connecting for another"):
            t.run(["true"])
        clock.now += 30
    assert sshd.accepted_connections() == before
    assert not t.master_running()

    clock.now += 31  # 181 s after the failure: exactly one attempt goes out, and succeeds
    assert t.run(["id", "-un"]).stdout == f"{LAB_USER}\n"
    assert sshd.accepted_connections() == before + 1
    assert t.run(["true"]).ok and sshd.accepted_connections() == before + 1  # and is reused


def test_a_failed_retry_backs_off_again(fresh, sshd: SSHServer):
    clock = FakeClock()
    t = fresh(backoff_s=60.0, clock=clock, sleep=clock.sleep)
    sshd.stop()
    with pytest.raises(SSHConnectError) as first:
        t.run(["true"])
    assert not isinstance(first.value, SSHBackingOff)
    clock.now += 61
    with pytest.raises(SSHConnectError) as retry:  # the one retry: a real attempt, refused again
        t.run(["true"])
    assert not isinstance(retry.value, SSHBackingOff) and "Connection refused" in retry.value.message
    with pytest.raises(SSHBackingOff):  # and at once back to backing off
        t.run(["true"])
    sshd.start()
    clock.now += 61
    assert t.run(["true"]).ok


def test_killing_the_sessions_under_a_live_master_is_a_connect_error(fresh, sshd: SSHServer):
    """A login host that drops the shared connection mid-watch: the next call fails and backs off."""
    clock = FakeClock()
    t = fresh(clock=clock, sleep=clock.sleep)
    assert t.run(["true"]).ok
    sshd.stop()
    with pytest.raises(SSHConnectError):
        t.run(["true"])
    with pytest.raises(SSHBackingOff):
        t.run(["true"])


def test_rsync_args_ride_on_the_shared_connection(fresh, sshd: SSHServer, tmp_path):
    t = fresh()
    t.check()
    before = sshd.accepted_connections()
    src = tmp_path / "x y.txt"
    src.write_text("payload")
    remote = t.run(["mktemp", "-d"]).stdout.strip()
    try:
        subprocess.run(
            ["rsync", *t.rsync_args(), str(src), f"{sshd.alias}:{remote}/"], check=True, capture_output=True, text=True
        )
        assert t.run(["cat", f"{remote}/x y.txt"]).stdout == "payload"
    finally:
        t.run(["rm", "-rf", remote])
    assert sshd.accepted_connections() == before


# -- which alias a submission records (the store's via) ----------------------------------------------------------
def test_only_an_alias_other_than_the_clusters_own_is_recorded(tmp_path, monkeypatch):
    from roach.fleet.route import submitted_via
    from roach.fleet.userconfig import get_cluster
    from roach.slurm.clusters.lab import LAB

    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(tmp_path / "clusters.toml"))
    dsi = get_cluster("dsi")
    assert submitted_via(LAB) is None  # reached on this machine
    assert submitted_via(LAB.with_(ssh_alias="login-lab")) == "login-lab"
    assert submitted_via(dsi) is None  # its own alias
    assert submitted_via(dsi.with_(ssh_alias="other-login")) == "other-login"
    # clusters.toml's alias is the cluster's own too
    (tmp_path / "clusters.toml").write_text('[clusters.dsi]\nssh_alias = "my-dsi"\n')
    assert submitted_via(dsi.with_(ssh_alias="my-dsi")) is None
    assert submitted_via(dsi) == dsi.ssh_alias  # the module's alias, now overridden by the file
