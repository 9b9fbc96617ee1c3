"""`roach lab up/down` on a second, private lab: idempotent, clean errors, nothing left running."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.errors import LabError, UsageError
from roach.lab import lab as lablib
from roach.lab import packages as lab_packages
from roach.lab import release
from roach.lab.conf_files import render
from roach.lab.config import LAB_USER, NODES, LabConfig, LabLayout
from roach.lab.daemons import Daemon
from roach.lab.hosts import CONTROLLER, Fabric
from roach.lab.overview import status as lab_status
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import LocalTransport
from tests.conftest import wait_until
from tests.support.labs import MAX_WORKERS, SHARED_TMP, private_port_base, suite_layout, worker_port_base

PORT_BASE = private_port_base(0)


def _lab_processes(state: Path) -> list[str]:
    """Every live process that belongs to the lab in ``state``: by command line, SLURM_CONF or working directory.

    The working directory finds the job steps: slurmstepd 24.11+ writes its process title over its command line
    and environment, but works, like the lab's daemons, in the lab's log directory.
    """
    marker = str(state)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
            cwd = os.readlink(f"/proc/{pid}/cwd")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        # in a release root, a node's mount namespace shows the cwd with the root's own path in front
        if marker in cmd or f"SLURM_CONF={marker}/" in env or f"{marker}/" in f"{cwd}/":
            found.append(f"{pid}: {comm}: {cmd}")
    return found


@pytest.fixture(scope="module")
def private_lab(lab):  # through the lab fixture: the lab marker holds for private labs too
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    # Not under pytest's 0700 tmp: the lab user's commands must read slurm.conf.
    state = Path(tempfile.mkdtemp(prefix="roach-lab2-", dir=SHARED_TMP))
    os.chmod(state, 0o755)
    yield state
    lablib.down(str(state), log=lambda *_: None)
    shutil.rmtree(state, ignore_errors=True)


@pytest.mark.lab
def test_port_taken_is_refused_before_anything_starts(private_lab):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", PORT_BASE + 3))  # slurmdbd's port
    s.listen()
    try:
        with pytest.raises(LabError) as err:
            lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=LabLayout.SINGLE_HOST.value)
    finally:
        s.close()
    assert f"port {PORT_BASE + 3} (for slurmdbd) is already taken" in str(err.value)
    assert "--port-base" in str(err.value)
    assert _lab_processes(private_lab) == []


@pytest.mark.lab
def test_the_hosts_layout_takes_no_port_of_the_machine(private_lab):
    if suite_layout() != LabLayout.HOSTS.value:
        pytest.skip("the single-host layout's daemons bind the machine's ports")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", PORT_BASE + 3))  # slurmdbd's port, on the machine: the controller host's is its own
    s.listen()
    try:
        cfg = lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=suite_layout())
    finally:
        s.close()
    ctl = Path(f"/run/netns/{Fabric(PORT_BASE, NODES).netns(CONTROLLER)}").stat().st_ino
    for d in lablib.daemons(cfg):
        if d.name in {"mariadbd", "slurmdbd", "slurmctld"}:
            assert os.stat(f"/proc/{d.pid()}/ns/net").st_ino == ctl, d.name
    shown = _show_config(cfg)
    assert shown["SlurmctldHost[0]"] == f"ctl({Fabric(PORT_BASE, NODES).node_addr(CONTROLLER)})"


@pytest.mark.lab
def test_up_twice_is_a_noop_and_down_leaves_nothing_running(private_lab, tmp_path):
    cfg = lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=suite_layout())
    pids = {d.name: d.pid() for d in lablib.daemons(cfg)}
    assert all(pids.values()), pids
    said = []
    lablib.up(str(private_lab), log=said.append, port_base=PORT_BASE, layout=suite_layout())
    assert said == [f"lab is up ({private_lab})"]
    assert {d.name: d.pid() for d in lablib.daemons(cfg)} == pids

    # A job left running when the lab goes down must not outlive it either.
    client = SlurmClient(LocalTransport(env=cfg.env(), user=LAB_USER))
    job = client.sbatch(["--output=/dev/null"], "#!/bin/bash\nsleep 600\n")
    wait_until(
        "the private lab's job to run",
        lambda: [r for r in client.squeue(job_ids=[job]) if r.state.is_running],
        timeout=60,
    )
    # squeue may say RUNNING a moment before the node has forked the batch step's slurmstepd
    wait_until(
        "the job's slurmstepd to start",
        lambda: any("slurmstepd" in p for p in _lab_processes(private_lab)),
        timeout=30,
    )

    stopped = lablib.down(str(private_lab), log=lambda *_: None)
    hosts = {"munged-n1", "munged-n2", "munged-login", "munged-ctl", "sshd-login", "proxy"} if cfg.hosts else set()
    assert set(stopped) == {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-n1", "slurmd-n2", *hosts}
    assert _lab_processes(private_lab) == []
    assert lablib.down(str(private_lab), log=lambda *_: None) == []
    st = lab_status(str(private_lab))
    assert not st.up and not any(d.running for d in st.daemons)


@pytest.mark.lab
def test_up_with_other_settings_while_running_is_refused(private_lab):
    lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=suite_layout())
    with pytest.raises(LabError, match="running with other settings: max_job_count 20000 -> 500"):
        lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=suite_layout(), max_job_count=500)
    assert LabConfig.load(private_lab).max_job_count == 20000


@pytest.mark.lab
def test_live_settings_change_a_running_lab(private_lab):
    cfg = lablib.up(str(private_lab), log=lambda *_: None, port_base=PORT_BASE, layout=suite_layout())
    # slurmctld and slurmd may hand over to a new process on `scontrol reconfigure` (Slurm 23.11+): munged,
    # MariaDB and slurmdbd keep their pids, and the lab's one slurmctld is the one its pid file names.
    kept = {"munged", "munged-n1", "munged-n2", "munged-login", "munged-ctl", "mariadbd", "slurmdbd"}
    pids = {d.name: d.pid() for d in lablib.daemons(cfg) if d.name in kept}
    client = SlurmClient(LocalTransport(env=cfg.env()))
    assert client.capabilities().preempt_send_user_signal is False
    said = []
    lablib.up(str(private_lab), log=said.append, preempt_send_user_signal=True, min_job_age=30)
    assert said == [f"lab is up ({private_lab}); reconfigured live: min_job_age 30, preempt_send_user_signal True"]
    caps = client.capabilities(refresh=True)
    assert caps.preempt_send_user_signal is True and caps.min_job_age_s == 30
    assert {d.name: d.pid() for d in lablib.daemons(cfg) if d.name in kept} == pids  # none restarted
    st = lab_status(str(private_lab))
    assert st.up and all(st.nodes[n].rstrip("*") in {"idle", "mix"} for n in ("n1", "n2")), st
    assert LabConfig.load(private_lab).preempt_send_user_signal is True


def _show_config(cfg: LabConfig) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True, env={**os.environ, **cfg.env()}
    ).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in out.splitlines()) if v}


@pytest.mark.lab
def test_either_preempt_signal_spelling_reaches_slurmctld(private_lab):
    cfg = lablib.up(
        str(private_lab),
        log=lambda *_: None,
        port_base=PORT_BASE,
        layout=suite_layout(),
        preempt_send_user_signal=True,
        preempt_signal_setting="SlurmctldParameters",
    )
    assert "preempt_send_user_signal" in _show_config(cfg).get("SlurmctldParameters", "")
    have = release.installed()
    if have is not None and have.has_preempt_send_user_signal_in_preempt_parameters:
        cfg = lablib.up(str(private_lab), log=lambda *_: None, preempt_signal_setting="PreemptParameters")
        shown = _show_config(cfg)
        assert "send_user_signal" in shown.get("PreemptParameters", "")
        assert "preempt_send_user_signal" not in shown.get("SlurmctldParameters", "")
        assert "PreemptParameters=send_user_signal" in cfg.slurm_conf.read_text()
    else:  # a Slurm before 23.02 has only the old spelling: refused before anything is written
        before = cfg.slurm_conf.read_text()
        with pytest.raises(UsageError) as err:
            lablib.up(str(private_lab), log=lambda *_: None, preempt_signal_setting="PreemptParameters")
        assert "has no PreemptParameters=send_user_signal" in str(err.value)
        assert "--preempt-signal-setting SlurmctldParameters" in str(err.value)
        assert cfg.slurm_conf.read_text() == before
        assert LabConfig.load(private_lab).preempt_signal_setting == "SlurmctldParameters"
    lablib.up(
        str(private_lab),
        log=lambda *_: None,
        preempt_send_user_signal=False,
        preempt_signal_setting="SlurmctldParameters",
    )
    assert "preempt_send_user_signal" not in _show_config(cfg).get("SlurmctldParameters", "")


def test_an_unknown_preempt_signal_setting_is_refused():
    with pytest.raises(UsageError, match="unknown preemption signal setting 'Slurmctld'"):
        LabConfig(state_dir="/nonexistent", preempt_signal_setting="Slurmctld")


def test_the_credential_lifetime_and_memory_enforcement_reach_slurm_conf(tmp_path):
    default = LabConfig(state_dir=str(tmp_path / "a"))
    render(default)
    conf = (default.etc / "slurm.conf").read_text()
    assert "cred_expire=10\n" in conf and "TaskPlugin=task/none" in conf
    site = LabConfig(state_dir=str(tmp_path / "b"), cred_expire=120, memory_cgroup=True)
    render(site)
    conf = (site.etc / "slurm.conf").read_text()
    assert "cred_expire=120\n" in conf and "TaskPlugin=task/cgroup" in conf and "proctrack/cgroup" in conf
    assert "ConstrainRAMSpace=yes" in (site.etc / "cgroup.conf").read_text()
    with pytest.raises(UsageError, match="cred_expire 0 is out of range"):
        LabConfig(state_dir=str(tmp_path / "c"), cred_expire=0)


def test_the_slurmd_timeout_reaches_slurm_conf(tmp_path):
    cfg = LabConfig(state_dir=str(tmp_path / "a"), slurmd_timeout=20)
    render(cfg)
    assert "\nSlurmdTimeout=20\n" in (cfg.etc / "slurm.conf").read_text()


def test_a_slurmd_timeout_out_of_range_is_refused(tmp_path):
    with pytest.raises(UsageError, match="slurmd timeout 5 is out of range"):
        LabConfig(state_dir=str(tmp_path), slurmd_timeout=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="`roach lab reboot` needs root")
def test_rebooting_a_node_the_lab_lacks_is_refused_with_its_nodes(tmp_path):
    LabConfig(state_dir=str(tmp_path), nodes=2).save()
    res = CliRunner().invoke(cli, ["lab", "reboot", "n9", "--state-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "the lab has no node 'n9'" in res.output
    assert "its nodes: n1, n2" in res.output


@pytest.mark.skipif(os.geteuid() != 0, reason="`roach lab reboot` needs root")
def test_rebooting_a_node_of_the_single_host_lab_is_refused(tmp_path):
    LabConfig(state_dir=str(tmp_path), layout="single-host").save()
    res = CliRunner().invoke(cli, ["lab", "reboot", "n1", "--state-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert "cannot be rebooted alone" in res.output


def test_the_suites_labs_number_their_jobs_in_ranges_of_their_own(tmp_path):
    """Two labs' jobs of one id would start their ranks' rendezvous at one port (20000 + id % 20000)."""
    bases = [worker_port_base(n) for n in range(MAX_WORKERS)] + [private_port_base(s) for s in range(9)]
    firsts = [LabConfig(state_dir=str(tmp_path), port_base=b).first_job_id for b in bases]
    offsets = sorted(f % 20000 for f in firsts)
    assert all(b - a >= 1000 for a, b in zip(offsets, offsets[1:]))
    cfg = LabConfig(state_dir=str(tmp_path / "a"), port_base=bases[3])
    render(cfg)
    assert f"\nFirstJobId={cfg.first_job_id}\n" in (cfg.etc / "slurm.conf").read_text()


def test_not_root_is_refused_with_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(lablib.os, "geteuid", lambda: 1000)
    with pytest.raises(LabError) as err:
        lablib.up(str(tmp_path / "lab"), log=lambda *_: None)
    assert "needs root" in str(err.value) and "sudo roach lab up" in str(err.value)
    assert not (tmp_path / "lab").exists()


def test_missing_package_names_the_apt_get_line(monkeypatch):
    monkeypatch.setitem(lab_packages.REQUIRED, "slurmctld-that-is-not-installed", "slurmctld")
    with pytest.raises(LabError) as err:
        lab_packages.require_packages()
    assert "missing Debian packages for the lab: slurmctld" in str(err.value)
    assert "apt-get install -y slurm-wlm slurmdbd munge mariadb-server python3-venv" in str(err.value)


def test_a_daemon_that_dies_at_start_shows_its_log(tmp_path):
    log = tmp_path / "x.log"
    d = Daemon("x", ("/bin/sh", "-c", "echo 'fatal: bad config line 3'; exit 7"), tmp_path / "x.pid", log, forks=False)
    with pytest.raises(LabError) as err:
        d.start(ready=lambda: True, timeout=10)
    assert "x exited with status 7 while starting" in str(err.value)
    assert "fatal: bad config line 3" in str(err.value) and str(log) in str(err.value)


def test_release_is_read_from_what_each_debian_slurm_prints():
    # `slurmctld -V` on Debian 12 and 13, and an upstream release candidate's form.
    assert release.Release.parse("slurm-wlm 22.05.8\n") == release.Release(22, 5, 8)
    assert release.Release.parse("slurm 24.11.5\n") == release.Release(24, 11, 5)
    assert release.Release.parse("slurm 26.05.0-0rc1") == release.Release(26, 5, 0)
    assert release.Release.parse("slurmctld: command not found") is None
    assert not release.Release(22, 5, 8).has_preempt_send_user_signal_in_preempt_parameters
    assert release.Release(24, 11, 5).has_preempt_send_user_signal_in_preempt_parameters
    assert str(release.Release(24, 11, 5)) == "24.11.5" and str(release.Release(22, 5, 8)) == "22.05.8"
