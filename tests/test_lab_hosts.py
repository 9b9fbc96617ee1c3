"""The lab in the ``hosts`` layout (`roach lab up --hosts`): n1 and n2 each a host of its own, on a private lab.

What the single-host lab cannot show: a rank on n2 reaches rank 0 at n1's address, not at its own loopback;
``hostname`` tells the nodes apart; `roach lab down` leaves no namespace, link or address behind; a range the
machine already routes is refused before anything starts."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roach.errors import LabError, UsageError
from roach.lab import lab as lablib
from roach.lab import login
from roach.lab.config import LAB_USER, NODES, LabConfig, LabLayout
from roach.lab.hosts import LOGIN, Fabric, can_make_namespaces, fabric_lock, gone
from roach.lab.overview import env_lines
from roach.lab.overview import status as lab_status
from roach.lab.python import NODE_VENV
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB, NODES2_GPU2
from tests.conftest import slack
from tests.support.labs import MAIN_JOB_VENV, SHARED_TMP, node_path, private_port_base
from tests.support.packages import PKG

PORT_BASE = private_port_base(4)
FABRIC = Fabric(PORT_BASE, NODES)


def _netns() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()) & {
        FABRIC.netns(n) for n in FABRIC.hosts
    }


def _links() -> set[str]:
    names = {FABRIC.bridge, *(FABRIC.veth(n) for n in FABRIC.hosts)}
    return {n for n in names if Path("/sys/class/net", n).exists()}


@pytest.fixture(scope="module")
def hosts_lab(lab):  # through the lab fixture: the lab marker holds for private labs too
    state = Path(tempfile.mkdtemp(prefix="roach-hosts-lab-", dir=SHARED_TMP))
    os.chmod(state, 0o755)
    if MAIN_JOB_VENV.exists():
        (state / "pyenv").symlink_to(MAIN_JOB_VENV)  # torch, installed once in the main lab's job venv
    try:
        yield lablib.up(
            str(state), log=lambda *_: None, port_base=PORT_BASE, layout=LabLayout.HOSTS.value, node_homes=True
        )
    finally:
        lablib.down(str(state), log=lambda *_: None)
        subprocess.run(["rm", "-rf", str(state)])


@pytest.mark.lab
def test_each_node_is_a_host_with_its_own_name_and_address(hosts_lab: LabConfig):
    st = lab_status(hosts_lab.state_dir)
    assert st.up and st.layout == "hosts"
    assert st.addresses == {
        "controller": FABRIC.controller_addr,
        "n1": FABRIC.node_addr("n1"),
        "n2": FABRIC.node_addr("n2"),
        "login": FABRIC.node_addr("login"),
    }
    env = {**os.environ, **hosts_lab.env()}
    nodes = subprocess.run(["sinfo", "-N", "-h", "-o", "%N %o %n"], capture_output=True, text=True, env=env).stdout
    assert sorted(nodes.split("\n")[:2]) == [f"n1 {FABRIC.node_addr('n1')} n1", f"n2 {FABRIC.node_addr('n2')} n2"]
    assert _netns() == {FABRIC.netns(n) for n in FABRIC.hosts}


@pytest.mark.lab
def test_each_host_runs_its_own_munged_with_the_one_key(hosts_lab: LabConfig):
    env = {**os.environ, **hosts_lab.env()}
    sock = f"--socket={hosts_lab.munge_socket}"
    made = subprocess.run(
        ["runuser", "-u", LAB_USER, "--", "srun", "-w", "n1", "-N1", "munge", "-n", sock],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    # the controller's munged decodes what n1's made: one key; its origin is n1's address, not the machine's
    read = subprocess.run(["unmunge", sock], input=made.stdout, capture_output=True, text=True, timeout=30)
    assert read.returncode == 0, read.stderr
    assert "Success" in read.stdout
    (origin,) = [ln for ln in read.stdout.splitlines() if ln.startswith("ENCODE_HOST:")]
    assert FABRIC.node_addr("n1") in origin, read.stdout
    assert {f"munged-{h}" for h in FABRIC.hosts} <= {
        d.name for d in lab_status(hosts_lab.state_dir).daemons if d.running
    }


def _allreduce(git_repo, tmp_path: Path, name: str, log_root: str, clone_root: str):
    """pkg.dist:allreduce on 2 nodes x 2 ranks as the lab user, run to its end, which must be COMPLETED."""
    job = submit(
        "pkg.dist:allreduce",
        cluster=LAB.with_(run_as=LAB_USER),
        repo_root=git_repo.work,
        store=Store(tmp_path / "s.db"),
        resources=NODES2_GPU2,
        name=name,
        log_root=log_root,
        clone_root=clone_root,
    )
    rec = job.wait(timeout=slack(180))
    assert rec.state is JobState.COMPLETED, job.log()
    return job


@pytest.mark.lab
def test_a_rank_on_n2_meets_rank_0_at_n1s_address(hosts_lab: LabConfig, git_repo, shared_tmp, tmp_path, monkeypatch):
    monkeypatch.setenv("ROACH_LAB_DIR", hosts_lab.state_dir)
    git_repo.commit(PKG, "all_reduce")
    job = _allreduce(git_repo, tmp_path, "hosts", str(shared_tmp / "logs"), str(shared_tmp / "clones"))
    ranks = [json.loads((shared_tmp / "runs" / job.run_id / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["sum"] for r in ranks] == [10.0] * 4  # a gloo all_reduce across the two hosts
    assert [r["hostname"] for r in ranks] == ["n1", "n1", "n2", "n2"]
    assert {r["master_addr"] for r in ranks} == {FABRIC.node_addr("n1")}
    log = job.log()
    assert f"roach: rendezvous at {FABRIC.node_addr('n1')}:" in log
    assert f"roach rank 0: starting pkg.dist:allreduce in run {job.run_id} on n1 (world size 4," in log
    assert f"roach rank 2: on n2: 2 of the 4 ranks, rank 0 at {FABRIC.node_addr('n1')}:" in log
    assert "cannot be retrieved" not in log  # c10d names each peer: the hosts file knows their ::ffff: form


@pytest.mark.lab
def test_with_node_local_homes_each_node_clones_a_commit_once(hosts_lab: LabConfig, git_repo, tmp_path, monkeypatch):
    """ILC's layout: ``~`` is each node's own, with its own Python; ``~/scratch`` is the store they share."""
    monkeypatch.setenv("ROACH_LAB_DIR", hosts_lab.state_dir)
    commit = git_repo.commit(PKG, "node homes")
    home = Path(pwd.getpwnam(LAB_USER).pw_dir)
    expt = home / "scratch" / f"roach-node-homes-{os.getpid()}"

    def run(name: str):
        return _allreduce(git_repo, tmp_path, name, f"~/scratch/{expt.name}/logs", "~/roach_clones")

    try:
        first = run("homes-1")
        for n in NODES:
            assert f"roach: {n}: cloned {commit}" in first.log()
            (clone,) = (hosts_lab.node_home(n) / "roach_clones").glob(f"*-{commit}")
            assert (clone / ".roach-clone-complete").exists()
        assert not list((home / "roach_clones").glob(f"*-{commit}"))  # none in the machine's (the login) home
        ranks = [json.loads((expt / "runs" / first.run_id / f"rank{r}.json").read_text()) for r in range(4)]
        assert [r["hostname"] for r in ranks] == ["n1", "n1", "n2", "n2"]  # and the results in the shared store
        # the rank's Python is its node's: one path, in each node's own home
        venvs = [hosts_lab.node_home(r["hostname"]) / NODE_VENV for r in ranks]
        assert {r["python"] for r in ranks} == {str(home / NODE_VENV)}
        assert [r["python_inode"] for r in ranks] == [v.stat().st_ino for v in venvs]
        assert venvs[0].stat().st_ino != venvs[2].stat().st_ino
        second = run("homes-2")
        assert "cloned" not in second.log()  # each node's clone is there: none is made again
    finally:
        subprocess.run(["rm", "-rf", str(expt)])


def _ssh(alias: str, *command: str) -> subprocess.CompletedProcess:
    """``ssh ALIAS COMMAND`` as a user of this machine types it: the machine's ssh configuration, nothing else."""
    return subprocess.run(["ssh", "-o", "BatchMode=yes", alias, *command], capture_output=True, text=True, timeout=60)


@pytest.mark.lab
def test_the_login_host_is_reached_by_its_alias_and_runs_slurms_commands(lab: LabConfig):
    if not lab.hosts:
        pytest.skip("a single-host lab has no login host")
    alias = login.alias(lab)
    r = _ssh(alias, "hostname; id -un; sinfo -h -N -o %N; echo x > /tmp/on-login")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["login", LAB_USER, "n1", "n2"]
    try:  # the login host's /tmp is its own too
        assert node_path(lab, LOGIN, "/tmp/on-login").read_text() == "x\n"
        assert not Path("/tmp/on-login").exists() and not any(
            node_path(lab, n, "/tmp/on-login").exists() for n in NODES
        )
    finally:
        node_path(lab, LOGIN, "/tmp/on-login").unlink(missing_ok=True)
    assert f"ssh {alias}" in "\n".join(env_lines(lab.state_dir))


@pytest.mark.lab
def test_a_routed_range_is_refused_and_down_removes_every_namespace_and_link(hosts_lab: LabConfig):
    clash = Fabric(PORT_BASE + 2560, NODES)  # another port base, the same /24
    assert clash.subnet == FABRIC.subnet
    state = Path(tempfile.mkdtemp(prefix="roach-hosts-clash-", dir=SHARED_TMP))
    try:
        with pytest.raises(LabError, match=rf"{FABRIC.subnet} is already routed on this machine .*dev {FABRIC.bridge}"):
            lablib.up(str(state), log=lambda *_: None, port_base=PORT_BASE + 2560, layout=LabLayout.HOSTS.value)
        assert not [n for n in (clash.bridge, *(clash.netns(x) for x in NODES)) if Path("/sys/class/net", n).exists()]
        assert not list(state.iterdir())  # refused before anything is written, here or in /etc/ssh
        assert not Path(f"/etc/ssh/ssh_config.d/roach-lab-{PORT_BASE + 2560}.conf").exists()
    finally:
        lablib.down(str(state), log=lambda *_: None)
        subprocess.run(["rm", "-rf", str(state)])
    alias_file = Path(f"/etc/ssh/ssh_config.d/roach-lab-{PORT_BASE}.conf")
    assert alias_file.exists()
    lablib.down(hosts_lab.state_dir, log=lambda *_: None)
    assert _netns() == set() and _links() == set() and not alias_file.exists()
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    assert str(FABRIC.subnet.network_address) not in routes
    lablib.up(hosts_lab.state_dir, log=lambda *_: None)  # and back: the saved layout is the hosts one
    assert _netns() == {FABRIC.netns(n) for n in FABRIC.hosts} and alias_file.exists()


@pytest.mark.lab
def test_labs_started_at_once_each_make_their_fabric(lab):
    """The suite's workers start their labs together: each probe and each fabric is made while the others are."""
    fabrics = [Fabric(private_port_base(5 + i), NODES) for i in range(4)]

    def make(fabric: Fabric) -> str | None:
        why = can_make_namespaces()
        if why is None:
            fabric.up()
        return why

    try:
        with ThreadPoolExecutor(len(fabrics)) as pool:
            answers = list(pool.map(make, fabrics))
        assert answers == [None] * len(fabrics)
        assert all(f.is_up() for f in fabrics)
    finally:
        with ThreadPoolExecutor(len(fabrics)) as pool:
            list(pool.map(Fabric.down, fabrics))
    assert not any(Path("/sys/class/net", f.bridge).exists() for f in fabrics)


@pytest.mark.lab
def test_without_cap_net_admin_the_hosts_layout_is_refused_with_the_fix_and_leaves_nothing(lab, tmp_path):
    """As in a container without CAP_NET_ADMIN, where `ip netns add` still works and a bridge does not."""
    state = tmp_path / "lab"
    argv = ["roach", "lab", "up", "--state-dir", str(state), "--port-base", str(private_port_base(9)), "--hosts"]
    r = subprocess.run(
        ["setpriv", "--bounding-set=-net_admin", sys.executable, "-m", *argv], capture_output=True, text=True
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        "roach: error: the hosts layout needs network namespaces, and this machine refuses them: `ip link add` "
        "failed: RTNETLINK answers: Operation not permitted",
        "  hint: run as root with CAP_NET_ADMIN, or start the lab on one host: `roach lab up --single-host`",
    ]
    assert not state.exists()
    with fabric_lock():  # another worker's lab may be probing now
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "roach-probe" not in netns and not list(Path("/sys/class/net").glob("rlp*"))


@pytest.mark.lab
def test_up_makes_whole_a_host_that_a_killed_up_left_half_made(lab):
    """A namespace without its veth pair (an `up` killed or failed between the two) is made again, not taken as up."""
    fabric = Fabric(private_port_base(10), NODES)
    try:
        fabric.up()
        subprocess.run(["ip", "link", "del", fabric.veth("n1")], check=True)  # and its peer in n1's namespace
        assert fabric.netns("n1") in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not fabric.is_up()
        fabric.up()
        addrs = subprocess.run(
            ["ip", "-n", fabric.netns("n1"), "-o", "-4", "addr", "show", "eth0"], capture_output=True, text=True
        )
        assert fabric.node_addr("n1") in addrs.stdout, addrs.stderr
        assert fabric.is_up()
    finally:
        fabric.down()


def test_a_link_gone_is_told_by_either_of_ips_two_messages():
    """`ip link del` of a veth whose namespace is going: by name it is not found, or it is found and gone before
    the kernel deletes it (seen in a suite's teardown: the second message failed the lab's `down`)."""
    missing = subprocess.run(["ip", "link", "del", "roach-no-such-dev"], capture_output=True, text=True)
    assert missing.returncode != 0 and gone(missing.stderr), missing.stderr
    assert gone("RTNETLINK answers: No such device\n")  # the kernel's ENODEV, as that teardown printed it
    assert not gone("RTNETLINK answers: Operation not permitted\n")


# -- a lab of more nodes (`roach lab up --nodes N --gpus-per-node G`) -----------------------------------------
@pytest.fixture(scope="module")
def four_nodes(lab) -> LabConfig:
    """A private hosts lab of four nodes with two fake GPUs each; taken down afterwards."""
    state = Path(tempfile.mkdtemp(prefix="roach-lab4-", dir=SHARED_TMP))
    os.chmod(state, 0o755)
    cfg = lablib.up(
        str(state), log=lambda *_: None, port_base=private_port_base(12), layout=LabLayout.HOSTS.value, nodes=4,
        gpus_per_node=2,
    )  # fmt: skip
    try:
        yield cfg
    finally:
        lablib.down(str(state), log=lambda *_: None)
        subprocess.run(["rm", "-rf", str(state)])


def _as_user(cfg: LabConfig, *argv: str) -> str:
    r = subprocess.run(
        ["runuser", "-u", LAB_USER, "--", *argv], capture_output=True, text=True, env={**os.environ, **cfg.env()}
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.lab
def test_sinfo_lists_each_of_four_nodes_with_its_gpus(four_nodes: LabConfig):
    said = _as_user(four_nodes, "sinfo", "-N", "-h", "-o", "%N %G")
    assert sorted(said.split("\n")[:-1]) == ["n1 gpu:2", "n2 gpu:2", "n3 gpu:2", "n4 gpu:2"]


@pytest.mark.lab
def test_a_job_over_four_nodes_runs_one_task_on_each_host(four_nodes: LabConfig):
    said = _as_user(four_nodes, "srun", "-N", "4", "--gres=gpu:2", "-t", "1", "hostname")
    assert sorted(said.split()) == ["n1", "n2", "n3", "n4"]


@pytest.mark.lab
def test_the_third_node_has_its_own_address(four_nodes: LabConfig):
    fabric = Fabric(four_nodes.port_base, four_nodes.node_names)
    inside = ["ip", "netns", "exec", fabric.netns("n3"), "ip", "-4", "-o", "addr", "show", "dev", "eth0"]
    said = subprocess.run(inside, capture_output=True, text=True).stdout
    assert f" {fabric.subnet.network_address + 13}/24 " in said


def test_more_than_two_nodes_on_one_host_are_refused_with_the_fix():
    with pytest.raises(UsageError, match="3 nodes need the hosts layout"):
        LabConfig(state_dir="/nonexistent", nodes=3, layout=LabLayout.SINGLE_HOST.value)


def test_a_node_count_out_of_range_is_refused():
    with pytest.raises(UsageError, match="65 nodes is out of range"):
        LabConfig(state_dir="/nonexistent", nodes=65)


def test_the_cli_refuses_three_nodes_on_one_host_with_exit_2_and_writes_nothing(tmp_path):
    state = tmp_path / "lab"
    argv = ["roach", "lab", "up", "--state-dir", str(state), "--nodes", "3", "--single-host"]
    r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert not state.exists()
