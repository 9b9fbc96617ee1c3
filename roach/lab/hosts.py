"""The lab's nodes and login host as hosts of their own: network, host-name and mount namespaces on a bridge.

In the ``hosts`` layout each compute node's slurmd runs in a network namespace ``roach<port base>-<node>`` with
its own address on the lab's bridge (``rl<port base>``), its own host name (a UTS namespace) and its own /tmp
(a mount namespace), so a rank on n2 reaches rank 0 at n1's address, ``hostname`` tells the nodes apart and
a file in n1's /tmp is not on n2. The login host (``login``: an sshd and the Slurm commands, no slurmd) and the
controller host (``ctl``: slurmctld, slurmdbd, MariaDB) are hosts of the same kind. The machine itself is on the
bridge at its first address, where its Slurm commands come from and its default route leads.
Each lab takes its own /24 from its port base, so the suite's parallel labs never share an address.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from roach.errors import LabError

SUBNETS = ipaddress.ip_network("10.213.0.0/16")  # the labs' /24s are carved out of it, one per port base
LOGIN = "login"  # the login host: sshd and the Slurm commands, no slurmd
CONTROLLER = "ctl"  # the controller host: slurmctld, slurmdbd and MariaDB
BACKUP_CONTROLLER = "ctld2"  # the backup controller's host (`roach lab up --backup-controller`): a second slurmctld
_HOST_NUMBER = {CONTROLLER: 2, BACKUP_CONTROLLER: 3, LOGIN: 10}  # and node nK at 10 + K
_LOCK = Path("/run/lock/roach-lab-fabric.lock")  # one lab at a time makes or removes namespaces on a machine


@dataclass(frozen=True)
class Fabric:
    """The bridge, addresses and namespaces of one lab in the ``hosts`` layout."""

    port_base: int
    nodes: tuple[str, ...]
    backup: bool = False  # a backup controller's host besides the controller's

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host with a namespace of its own: the compute nodes, the login host, the controller and its
        backup's host where there is one."""
        return (*self.nodes, LOGIN, CONTROLLER, *((BACKUP_CONTROLLER,) if self.backup else ()))

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        third = (self.port_base // 10) % 256
        return ipaddress.IPv4Network(f"{SUBNETS.network_address + third * 256}/24")

    @property
    def bridge(self) -> str:
        return f"rl{self.port_base}"  # an interface name has at most 15 characters

    @property
    def machine_addr(self) -> str:
        """The bridge's address: this machine's on the lab's network, the hosts' default route."""
        return str(self.subnet.network_address + 1)

    @property
    def controller_addr(self) -> str:
        return self.node_addr(CONTROLLER)

    def node_addr(self, node: str) -> str:
        number = _HOST_NUMBER[node] if node in _HOST_NUMBER else 10 + int(node.removeprefix("n"))
        return str(self.subnet.network_address + number)

    def netns(self, node: str) -> str:
        return f"roach{self.port_base}-{node}"

    def veth(self, node: str) -> str:
        return f"rl{self.port_base}{node}"

    def hosts_file(self, machine: str) -> str:
        """The /etc/hosts each host sees: the lab's hosts and ``machine`` (this machine's name) by name, as a site's
        DNS gives them (gloo resolves its own host name to find the address it tells the other ranks; slurmctld
        resolves a client's host name)."""
        lines = [
            "127.0.0.1 localhost",
            "::1 localhost ip6-localhost ip6-loopback",
            f"{self.machine_addr} {machine}",
        ]
        lines += [f"{self.node_addr(n)} {n}" for n in self.hosts]
        # and as a dual-stack socket sees an IPv4 peer: c10d's store names each rank that connects by its
        # ::ffff:a.b.c.d address, which the files lookup matches to no IPv4 line (a warning per rank)
        lines += [
            f"::ffff:{self.machine_addr} {machine}",
            *(f"::ffff:{self.node_addr(n)} {n}" for n in self.hosts),
        ]
        return "\n".join(lines) + "\n"

    @staticmethod
    def resolv_conf() -> str:
        """The resolv.conf each node sees: no name server it can reach, so a name or address missing from its hosts
        file fails at once (the machine's server is outside the namespace, where each lookup waited 10 s; c10d's
        store looks up every rank that connects to it)."""
        return (
            "# the lab's nodes: names come from /etc/hosts only\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
        )

    def run_on(
        self,
        node: str,
        etc: Path,
        tmp: Path,
        argv: tuple[str, ...],
        home: tuple[Path, str] | None = None,
        munge: tuple[Path, Path] | None = None,
        booted_at: float | None = None,
    ) -> tuple[str, ...]:
        """``argv`` as run on ``node``: in its network namespace, and in a host-name and mount namespace of its own
        with ``etc``'s hosts and resolv.conf as /etc's and ``tmp`` as its node-local /tmp (every other mount is
        the machine's, shared as NFS is, and mounts made on the machine later still reach it: propagation slave).
        ``home`` (node-local, user's): the node's own directory over the user's home, its ``scratch`` the
        machine's ``<home>/scratch``, the one store every node shares. ``munge`` (the host's directory, the lab's
        socket directory): the host's own munged socket where the lab's is, as each host of a site runs its own.

        ``booted_at`` (epoch seconds): the host was rebooted then, as its uptime says (a time namespace whose boot clock
        starts at that moment: slurmd tells slurmctld its boot time from it).

        nsenter, not ``ip netns exec``, which mounts a /sys of its own, without the cgroup file system slurmd reads."""
        script = (
            'hostname "$0" && mount --bind "$1/hosts" /etc/hosts && mount --bind "$1/resolv.conf" /etc/resolv.conf'
            ' && mount --bind "$2" /tmp'
            ' && { [ -z "$3" ] || { mount --bind "$4/scratch" "$3/scratch" && mount --rbind "$3" "$4"; }; }'
            ' && { [ -z "$5" ] || mount --bind "$5" "$6"; }'
            ' && shift 6 && exec "$@"'
        )
        homes = (str(home[0]), home[1]) if home else ("", "")
        mungeds = (str(munge[0]), str(munge[1])) if munge else ("", "")
        netns = f"--net=/run/netns/{self.netns(node)}"
        unshare = ("unshare", "--uts", "--mount", "--propagation", "slave", *_boot_clock(booted_at), "--")
        return ("nsenter", netns, "--", *unshare, "sh", "-c", script, node, str(etc), str(tmp), *homes, *mungeds, *argv)

    # -- making and removing -----------------------------------------------------------------------------
    def is_up(self) -> bool:
        return _link_exists(self.bridge) and all(self._host_is_up(n) for n in self.hosts)

    def up(self) -> None:
        """Make the bridge, its address and each node's namespace; refuse a range the machine already routes."""
        with fabric_lock():
            self._up()

    def _up(self) -> None:
        if self.is_up():
            return
        self.check_range_free()
        if not _link_exists(self.bridge):
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.machine_addr}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        for node in self.hosts:
            if not self._host_is_up(node):
                self._add_host(node)

    def _host_is_up(self, node: str) -> bool:
        return self.netns(node) in _namespaces() and _link_exists(self.veth(node))

    def _add_host(self, node: str) -> None:
        """``node``'s namespace, veth pair and address, made again where a killed or failed ``up`` left a part."""
        ns, inside = self.netns(node), ("-n", self.netns(node))
        if ns in _namespaces():
            _ip("netns", "del", ns)
        _ip("netns", "add", ns)
        try:
            _ip("link", "add", self.veth(node), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", self.veth(node), "master", self.bridge, "up")
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "addr", "add", f"{self.node_addr(node)}/{self.subnet.prefixlen}", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "route", "add", "default", "via", self.machine_addr)
        except BaseException:
            with contextlib.suppress(LabError):
                _ip("netns", "del", ns)  # and with it the veth pair
            raise

    def down(self) -> list[str]:
        """Remove every namespace, link and address this fabric made; returns what was removed."""
        with fabric_lock():
            return self._down()

    def _down(self) -> list[str]:
        removed = []
        for node in self.hosts:
            if self.netns(node) in _namespaces():
                _ip("netns", "del", self.netns(node))  # takes its end of the veth pair, and so the other end
                removed.append(self.netns(node))
            if _link_exists(self.veth(node)):
                _ip("link", "del", self.veth(node), gone_ok=True)  # the namespace's end may be going with it
        if _link_exists(self.bridge):
            _ip("link", "del", self.bridge)  # and its address and route
            removed.append(self.bridge)
        return removed

    def check_range_free(self) -> None:
        for route in _routes():
            dst = route.get("dst", "")
            if dst == "default" or route.get("dev") == self.bridge:
                continue
            try:
                theirs = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
            except ValueError:
                continue
            if theirs.overlaps(self.subnet):
                raise LabError(
                    f"the lab's address range {self.subnet} is already routed on this machine "
                    f"({dst} dev {route.get('dev', '?')})",
                    hint="start the lab on another port base (`roach lab up --port-base N`), which picks another range",
                )


def gone(stderr: str) -> bool:
    """Whether ``ip``'s error says the device is not there: not found by name ("Cannot find device"), or gone
    between that lookup and the kernel's delete ("RTNETLINK answers: No such device", as its namespace goes)."""
    return "Cannot find device" in stderr or "No such device" in stderr


def _ip(*args: str, gone_ok: bool = False) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 and not (gone_ok and gone(r.stderr)):
        raise LabError(
            f"`ip {' '.join(args)}` failed: {r.stderr.strip()}",
            hint="the hosts layout needs root with CAP_NET_ADMIN; `roach lab up --single-host` runs without it",
        )


def _namespaces() -> set[str]:
    try:
        return {p.name for p in Path("/run/netns").iterdir()}
    except FileNotFoundError:
        return set()


def _link_exists(name: str) -> bool:
    """Asked of the kernel, not read from /sys/class/net: a /sys mounted in another network namespace (a chroot's)
    lists that namespace's links."""
    r = subprocess.run(["ip", "-o", "link", "show", "dev", name], capture_output=True, timeout=30)
    return r.returncode == 0


def _routes() -> list[dict[str, str]]:
    r = subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=30)
    try:
        return json.loads(r.stdout) if r.returncode == 0 else []
    except ValueError:
        return []


@contextlib.contextmanager
def fabric_lock() -> Iterator[None]:
    """Held while a lab makes or removes its namespaces: the first ``ip netns add`` on a machine mounts
    /run/netns, and two labs starting at once must not both try."""
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def can_make_namespaces() -> str | None:
    """None where this process may make what a fabric is made of (a namespace needs CAP_SYS_ADMIN, a bridge
    CAP_NET_ADMIN), else why not (one line)."""
    pid = os.getpid()  # names of its own: labs started at once each probe
    steps = [
        (["ip", "netns", "add", f"roach-probe-{pid}"], ["ip", "netns", "del", f"roach-probe-{pid}"]),
        (["ip", "link", "add", f"rlp{pid}", "type", "bridge"], ["ip", "link", "del", f"rlp{pid}"]),
    ]
    try:
        with fabric_lock():
            for make, remove in steps:
                r = subprocess.run(make, capture_output=True, text=True, timeout=30)
                if r.returncode != 0:
                    return f"`{' '.join(make[:3])}` failed: {r.stderr.strip() or r.returncode}"
                subprocess.run(remove, capture_output=True, timeout=30)
    except OSError as e:
        return f"cannot take {_LOCK}: {e.strerror}"
    return None


def _boot_clock(booted_at: float | None) -> tuple[str, ...]:
    """unshare's options for a boot clock that reads 0 at ``booted_at`` (none where the host was never rebooted)."""
    if booted_at is None:
        return ()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    since = max(time.time() - booted_at, 0.0)
    return ("--time", "--boottime", str(-int(max(uptime - since, 0.0))))
