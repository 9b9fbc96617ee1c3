"""The lab cluster's settings, and the files rendered from them.

Every path the lab uses lies under one state directory; every port is its own (a base port plus fixed
offsets), so the lab never touches a system Slurm, munge or MariaDB.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from roach._fs import atomic_write
from roach.errors import UsageError
from roach.lab.saved import etc_dir, read_saved, slurm_conf_path, slurm_env

if TYPE_CHECKING:
    from roach.lab.hosts import Fabric

CLUSTER_NAME = "lab"
NODES = ("n1", "n2")  # the default lab's nodes (`roach lab up --nodes N` makes n1..nN)
GPUS_PER_NODE = 4
MAX_NODES = 64  # hosts of its own each: what one machine's namespaces and slurmds hold, with room
MAX_GPUS_PER_NODE = 16
CPUS_PER_NODE = 8
LAB_USER = "roachlab"
# SlurmctldTimeout of a lab with a backup controller: short, as Slurm's own tests set it (Slurm's default is 120 s).
BACKUP_SLURMCTLD_TIMEOUT = 12
ACCOUNT = "lab"
PARTITION = "gpu"


class PreemptSignalSetting(str, Enum):
    """Where slurm.conf says "send the job's --signal before preempting it": both spellings work from 23.02."""

    SLURMCTLD = "SlurmctldParameters"  # preempt_send_user_signal: every release (from 23.02 a hidden alias)
    PREEMPT = "PreemptParameters"  # send_user_signal: 23.02 and later

    def line(self) -> str:
        if self is PreemptSignalSetting.PREEMPT:
            return "PreemptParameters=send_user_signal"
        return "SlurmctldParameters=preempt_send_user_signal"


class LabLayout(str, Enum):
    """Where the lab's daemons run: all on this host, or each compute node a host of its own (roach/lab/hosts.py)."""

    SINGLE_HOST = "single-host"  # n1 and n2 share this host's name, address (127.0.0.1) and namespaces
    HOSTS = "hosts"  # n1 and n2 each in a network and host-name namespace, at an address of its own


# Port offsets from the base port.
_PORTS = {"ctld_port": 0, "n1_port": 1, "n2_port": 2, "dbd_port": 3, "db_port": 4, "rest_port": 5}


@dataclass(frozen=True)
class LabConfig:
    """What `roach lab up` was asked for; saved as ``lab.json`` in the state directory."""

    state_dir: str
    port_base: int = 16817
    host: str = ""
    min_job_age: int = 60
    max_array_size: int = 10001
    max_job_count: int = 20000
    preempt_send_user_signal: bool = False
    preempt_signal_setting: str = PreemptSignalSetting.SLURMCTLD.value
    low_grace_time: int = 20
    high_gpu_cap: int = 4
    prolog: str = ""  # slurmd's Prolog script ("" none); the fault suite sets a failing one
    # Seconds slurmctld waits for a node's slurmd to answer before it sets the node DOWN (and requeues its jobs):
    # Slurm's default 300; the fault suite sets a short one for a node cut off, and restores it.
    slurmd_timeout: int = 300
    # Enforce jobs' memory through the cgroup v1 memory controller (task/cgroup, ConstrainRAMSpace), so a job over
    # its --mem ends OUT_OF_MEMORY as on a real cluster. Off by default: it needs a mounted, writable controller.
    memory_cgroup: bool = False
    # Seconds a job credential lives (AuthInfo cred_expire). A requeued job is eligible only after it: Slurm's
    # default 120 s is what sites run; the lab's 10 s keeps tests short. Benchmark 5 measures both.
    cred_expire: int = 10
    layout: str = LabLayout.HOSTS.value  # a saved lab keeps its own; --single-host where namespaces are refused
    # ILC's file systems: each compute node has a home of its own, and the lab user's ~/scratch is the one shared
    # store (the machine's ~/scratch, bound into each node's home). Hosts layout only.
    node_homes: bool = False
    # slurmrestd on the controller host at the rest port, its clients authenticated by JWT (``scontrol token``).
    rest: bool = False
    nodes: int = len(NODES)  # compute nodes n1..nN; more than two need the hosts layout (one port each otherwise)
    gpus_per_node: int = GPUS_PER_NODE  # fake GPUs of each node
    # A second slurmctld on a host of its own (ctld2), slurm.conf's second SlurmctldHost: it takes over once the
    # primary has not answered for BACKUP_SLURMCTLD_TIMEOUT seconds. Hosts layout only.
    backup_controller: bool = False
    # Each compute node's /tmp a tmpfs of this many MiB (0: the state directory's disk), so a test can fill one
    # node's /tmp. Hosts layout only; a live setting (the nodes' mount namespaces are slaves of this machine's).
    node_tmp_mb: int = 0

    def __post_init__(self) -> None:
        if not self.host:
            # gethostname(2) is uname(2)'s nodename; os.uname spares every command loading socket (the lab's
            # site module reads this configuration)
            object.__setattr__(self, "host", os.uname().nodename.split(".")[0])
        if not 1024 <= self.port_base <= 65535 - len(_PORTS):
            raise UsageError(f"port base {self.port_base} is out of range", hint="pick one in 1024-65530")
        known = [s.value for s in PreemptSignalSetting]
        if self.preempt_signal_setting not in known:
            raise UsageError(
                f"unknown preemption signal setting {self.preempt_signal_setting!r}",
                hint=f"use one of: {', '.join(known)}",
            )
        if not 1 <= self.cred_expire <= 86400:
            raise UsageError(
                f"cred_expire {self.cred_expire} is out of range", hint="give seconds, 1-86400 (Slurm's default: 120)"
            )
        layouts = [layout.value for layout in LabLayout]
        if self.layout not in layouts:
            raise UsageError(f"unknown lab layout {self.layout!r}", hint=f"use one of: {', '.join(layouts)}")
        if self.node_homes and self.layout != LabLayout.HOSTS.value:
            raise UsageError(
                "node-local homes need the hosts layout", hint="use --hosts with --node-homes, or drop --node-homes"
            )
        if self.backup_controller and self.layout != LabLayout.HOSTS.value:
            raise UsageError(
                "a backup controller needs the hosts layout (a host of its own)",
                hint="use --hosts with --backup-controller, or drop --backup-controller",
            )
        self._check_size()
        if not 10 <= self.slurmd_timeout <= 65533:
            raise UsageError(
                f"slurmd timeout {self.slurmd_timeout} is out of range",
                hint="give seconds, 10-65533 (Slurm's default: 300)",
            )
        if not 0 <= self.node_tmp_mb <= 1 << 20:
            raise UsageError(f"node /tmp size {self.node_tmp_mb} MiB is out of range", hint="give 0 (none) to 1048576")
        if self.node_tmp_mb and self.layout != LabLayout.HOSTS.value:
            raise UsageError("a node's own /tmp needs the hosts layout", hint="use --hosts, or drop --node-tmp-mb")
        if self.prolog and not os.path.isabs(self.prolog):
            raise UsageError(f"the Prolog {self.prolog!r} is not an absolute path", hint="give its full path")

    def _check_size(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"{self.nodes} nodes is out of range", hint=f"give 1-{MAX_NODES} nodes")
        if self.nodes > len(NODES) and self.layout != LabLayout.HOSTS.value:
            raise UsageError(
                f"{self.nodes} nodes need the hosts layout: on one host each slurmd needs a port of its own",
                hint=f"use --hosts with --nodes {self.nodes}, or at most {len(NODES)} nodes with --single-host",
            )
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise UsageError(f"{self.gpus_per_node} GPUs per node is out of range", hint=f"give 1-{MAX_GPUS_PER_NODE}")

    @property
    def node_names(self) -> tuple[str, ...]:
        """The compute nodes: n1, n2, ... nN."""
        return tuple(f"n{i}" for i in range(1, self.nodes + 1))

    @property
    def gpus(self) -> int:
        """The lab's fake GPUs in all."""
        return self.nodes * self.gpus_per_node

    @property
    def fabric(self) -> Fabric:
        """The hosts layout's bridge, addresses and namespaces of this lab. Its module loads here: the lab's site
        module reads this configuration on every command that reaches the lab, and needs no namespaces."""
        from roach.lab.hosts import Fabric

        return Fabric(self.port_base, self.node_names, self.backup_controller)

    def node_port(self, node: str) -> int:
        """``node``'s slurmd port: n1's and n2's their own (on a single host they share an address); a further
        node, a host with an address of its own, listens on n1's."""
        key = f"{node}_port"
        return self.port(key if key in _PORTS else "n1_port")

    @property
    def first_job_id(self) -> int:
        """The id of the lab's first job: 1,000 apart for port bases 10 apart (20 ranges), so labs side by side
        give their jobs' ranks rendezvous ports that start apart."""
        return 1 + (self.port_base // 10) % 20 * 1000

    # -- paths ---------------------------------------------------------------------------------------
    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    @property
    def etc(self) -> Path:
        return etc_dir(self.state)

    @property
    def slurm_conf(self) -> Path:
        return slurm_conf_path(self.state)

    @property
    def jwt_key(self) -> Path:
        """The key slurmctld and slurmdbd sign and check JWT tokens with (root's, mode 0600)."""
        return self.etc / "jwt.key"

    @property
    def my_cnf(self) -> Path:
        return self.etc / "my.cnf"

    @property
    def munge_socket(self) -> Path:
        return self.state / "munge" / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self.state / "log"

    @property
    def run_dir(self) -> Path:
        return self.state / "run"

    def node_tmp(self, node: str) -> Path:
        """Where ``node``'s /tmp lies on this machine in the hosts layout (its own, as a site's nodes have)."""
        return self.state / "nodes" / node / "tmp"

    def node_booted(self, node: str) -> Path:
        """The file holding when ``node`` was last rebooted (`roach lab reboot`), epoch seconds; none until then."""
        return self.state / "nodes" / node / "booted"

    def munge_binding(self, host: str) -> tuple[Path, Path]:
        """``host``'s own munge directory and the lab's socket directory it is bound over on that host."""
        return self.state / "nodes" / host / "munge", self.munge_socket.parent

    def node_home(self, node: str) -> Path:
        """Where ``node``'s home of the lab user lies on this machine, with node-local homes."""
        return self.state / "nodes" / node / "home"

    @property
    def hosts(self) -> bool:
        return self.layout == LabLayout.HOSTS.value

    def port(self, name: str) -> int:
        return self.port_base + _PORTS[name]

    @property
    def ports(self) -> dict[str, int]:
        return {name: self.port(name) for name in _PORTS}

    def env(self) -> dict[str, str]:
        """Environment a shell or a transport needs to use this lab's Slurm."""
        return slurm_env(self.state)

    # -- persistence ---------------------------------------------------------------------------------
    @property
    def saved_path(self) -> Path:
        return self.state / "lab.json"

    def save(self) -> None:
        atomic_write(self.saved_path, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, state_dir: str | os.PathLike[str] | None = None) -> LabConfig:
        """The configuration a previous `roach lab up` saved in ``state_dir``."""
        raw = read_saved(state_dir)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})
