"""A named cluster: how to reach its Slurm, the site file its jobs source, and its policy.

Each cluster lives in ``roach.slurm.clusters.<name>`` (the ``CLUSTER`` object and its ``Resources``
presets) beside its site file ``<name>.sh``. Nothing here runs at import time: transports and clients
are made on demand.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from roach.errors import UsageError
from roach.model.python_env import PythonEnv
from roach.model.resources import GpuFlag, Resources
from roach.model.tiers import Tier
from roach.scheduler.client import SlurmClient
from roach.scheduler.site_cache import SiteCache
from roach.scheduler.ssh import SSHTransport
from roach.scheduler.transport import LocalTransport, Transport

if TYPE_CHECKING:
    from roach.scheduler.rest.client import RestClient


@dataclass(frozen=True)
class Cluster:
    """One Slurm cluster roach can submit to."""

    name: str
    presets: Mapping[str, Resources] = field(default_factory=dict)
    tiers: tuple[Tier, ...] = ()  # top down
    gpu_flag: GpuFlag = "gres"
    metered: bool = False
    signal_lead_s: int = 120  # the checkpoint signal this long before the wall clock (--signal=SIG@lead)
    checkpoint_signal: str = "USR1"  # another one where a library takes USR1 for itself
    max_timeout_requeues: int = 3  # wall-clock requeues per run (preemptions are not counted)
    min_poll_s: float = 60.0  # the shortest pause between two looks at the queue (politeness to the controller)
    rank_exit_wait_s: int = 60  # srun --wait: how long other ranks may outlive the first to exit
    env_factory: Callable[[], Mapping[str, str]] | None = None  # env for Slurm commands (the lab: SLURM_CONF)
    run_as: str | None = None  # local only: run commands as this user (root driving the lab's user)
    ssh_alias: str | None = None  # None: Slurm is on this machine; else `ssh <alias>` reaches its login host
    git_reachable: bool = True  # False: jobs cannot reach the git remote; submit sends the commit as a git bundle
    ssh_config: str | None = None  # an ssh config file to use instead of ~/.ssh/config
    remote_setup: tuple[str, ...] = ()  # shell lines run before each remote command (e.g. "module load slurm")
    description: str = ""
    # -- policy and site values. A module holds what is known of its site; values only the user has (accounts,
    # exact partitions and QOS, caps, host names) come from clusters.toml (roach.fleet.userconfig.configured).
    budget: str = ""  # what using it spends, in words (shown by `roach clusters show`)
    default_account: str | None = None  # Resources.account when a submission leaves it unset
    default_partition: str | None = None  # Resources.partition when a submission leaves it unset
    partitions: tuple[str, ...] = ()  # partitions known to exist (a request naming another is refused)
    qos_names: tuple[str, ...] = ()  # QOS known to exist, tiers' or not (another is refused); (): the tiers' only
    max_gpus: int | None = None  # the user's cap: most GPUs one submission may ask for
    max_gpu_hours: float | None = None  # the user's cap: most GPU-hours (GPUs x wall clock) per submission
    gpu_hour_cost: float | None = None  # what one GPU-hour costs where metered in money
    max_cost: float | None = None  # the user's cap in that money per submission
    max_gpus_per_node: int | None = None  # the largest node's GPUs, where known (discovery or config)
    submit_hosts: tuple[str, ...] = ()  # hostname patterns (fnmatch) roach may submit from; (): any host
    refused_hosts: tuple[str, ...] = ()  # hostname patterns roach never submits from (a login host)
    refused_host_reason: str = ""  # why those hosts are refused, said in the refusal
    host_check: Callable[[], str | None] | None = None  # the reason this host must not submit, or None
    node_scratch: tuple[str, ...] = ("/tmp",)  # node-local directories where a job keeps <run_id>* scratch
    backend: str = "roach"  # "roach" (submit: the function runs from a clone) or "remote-workspace"
    python_env: PythonEnv | None = None  # clusters.toml's choice for every job; None: the commit's, else the site's
    # -- Slurm's REST API (docs/rest.md): slurmrestd at rest_url takes every Slurm call; files go over ssh_alias,
    # or straight to a file system this machine shares with the cluster (shared_fs), or nowhere (refused)
    rest_url: str | None = None
    token_command: tuple[str, ...] = ()  # prints the JWT (scontrol token), run as the transport runs commands
    token_file: str | None = None  # holds the JWT; mode 600
    shared_fs: bool = False  # this machine sees the cluster's files at the same paths

    def transport(self, env: Mapping[str, str] | None = None) -> Transport:
        env = dict(env if env is not None else self.env_factory() if self.env_factory else {})
        if self.ssh_alias is not None:
            return SSHTransport(self.ssh_alias, config_file=self.ssh_config, env=env, setup=self.remote_setup)
        return LocalTransport(env=env, user=self.run_as)

    def client(self) -> SlurmClient:
        env = dict(self.env_factory()) if self.env_factory else {}
        if self.rest_url:
            return self.rest_client(env)
        # the cache is per way of reaching the cluster: two labs on one machine differ in SLURM_CONF
        where = " ".join(
            (self.name, self.ssh_alias or "", self.ssh_config or "", self.run_as or "", env.get("SLURM_CONF", ""))
        )
        return SlurmClient(self.transport(env), site_cache=SiteCache(where))

    def rest_client(self, env: Mapping[str, str] | None = None) -> RestClient:
        """The client through slurmrestd: the token made or read as configured, files over ssh, shared or refused.
        Its modules load here, so a cluster reached by its commands never pays for them."""
        from roach.scheduler.rest.client import NoFiles, RestClient
        from roach.scheduler.rest.request import RestApi
        from roach.scheduler.rest.token import TokenSource

        if not self.rest_url:
            raise UsageError(f"cluster {self.name} has no rest_url", hint="set rest_url in clusters.toml")
        commands = self.transport(env)
        token = TokenSource(None, self.token_command, Path(self.token_file).expanduser() if self.token_file else None)
        token.transport = commands
        files = commands if self.ssh_alias is not None or self.shared_fs else NoFiles(self.name)
        return RestClient(files, api=RestApi(self.rest_url, token))

    def site_file(self) -> str:
        """The text of ``roach/slurm/clusters/<name>.sh``, sourced by every job of this cluster."""
        # Beside the site modules, in the folder known_clusters() lists: importlib.resources would add ~10 ms to
        # every command's start (tempfile, shutil, zipfile), for a file that is always a plain file here.
        return Path(importlib.import_module(SITES).__path__[0], f"{self.name}.sh").read_text()

    def site_python_env(self) -> PythonEnv:
        """The environment the site file chooses (its ``ROACH_ENV=``), where neither the caller, clusters.toml
        nor the commit's lock file does."""
        m = _SITE_ENV.search(self.site_file())
        return PythonEnv.parse(m[1] if m else PythonEnv.SYSTEM.value, f"{self.name}.sh's ROACH_ENV")

    def site_has_venv(self) -> bool:
        """Whether the site file names a venv of its own (``ROACH_VENV=``), which ``venv`` runs."""
        return _SITE_VENV.search(self.site_file()) is not None

    def preset(self, name: str) -> Resources:
        """The preset ``name`` (its case exact), or a UsageError with the valid ones and the closest of them."""
        try:
            return self.presets[name]
        except KeyError:
            valid = sorted(self.presets)
            by_fold = {p.casefold(): p for p in valid}
            import difflib  # only for a name that is not known

            close = [by_fold[m] for m in difflib.get_close_matches(name.casefold(), list(by_fold), n=1, cutoff=0.6)]
            raise UsageError(
                f"cluster {self.name} has no preset {name!r}",
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + f"valid presets: {', '.join(valid) or '(none)'}",
            ) from None

    def with_(self, **changes) -> Cluster:
        return replace(self, **changes)


_SITE_ENV = re.compile(r"^ROACH_ENV=([A-Za-z]+)\s*(?:#.*)?$", re.MULTILINE)
_SITE_VENV = re.compile(r"^\s*ROACH_VENV=", re.MULTILINE)

SITES = "roach.slurm.clusters"  # the site modules' package: its public path is the seeds' (roach.slurm.clusters.ilc)


def known_clusters() -> list[str]:
    return sorted(
        m.name for m in pkgutil.iter_modules(importlib.import_module(SITES).__path__) if not m.name.startswith("_")
    )


def module_cluster(name: str) -> Cluster:
    """The cluster exactly as its module ``roach.slurm.clusters.<name>`` declares it, before clusters.toml.

    Only :func:`roach.fleet.userconfig.configured` (which applies the file to it) and listings that read the
    file once for every cluster want this; everything else gets a cluster by name with :func:`get_cluster`.
    """
    if not isinstance(name, str) or name not in known_clusters():
        raise UsageError(f"unknown cluster {name!r}", hint=f"known clusters: {', '.join(known_clusters())}")
    return importlib.import_module(f"{SITES}.{name}").CLUSTER


def with_ssh_override(cluster: Cluster, ssh_alias: str | None, ssh_config: str | None) -> Cluster:
    """``cluster`` reached through another ssh alias and/or config file (the CLI's --ssh-alias/--ssh-config)."""
    if ssh_config is not None and ssh_alias is None and cluster.ssh_alias is None:
        raise UsageError(
            f"--ssh-config needs an ssh alias, and cluster {cluster.name} is reached locally",
            hint="add --ssh-alias ALIAS (a Host in that config file)",
        )
    if ssh_alias is not None or ssh_config is not None:
        return cluster.with_(ssh_alias=ssh_alias or cluster.ssh_alias, ssh_config=ssh_config or cluster.ssh_config)
    return cluster
