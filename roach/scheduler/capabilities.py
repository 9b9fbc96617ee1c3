"""What a cluster's Slurm can do and how it is set, read once per client and then cached.

Later features act on these: whether ``sacct`` is there to confirm a job's end, how long a finished job
stays in ``squeue`` (MinJobAge), whether preemption requeues and sends the job's ``--signal``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from roach.errors import ParseError, SlurmError
from roach.scheduler.fields import parse_duration
from roach.scheduler.transport import Result


@dataclass(frozen=True)
class RateLimit:
    """slurmctld's per-user RPC token bucket (``SlurmctldParameters=rl_enable``, Slurm 23.02+).

    Each RPC takes a token; ``refill_rate`` tokens come back every ``refill_period_s``, up to ``bucket_size``.
    """

    bucket_size: int = 30
    refill_rate: int = 2
    refill_period_s: int = 1

    def min_interval_s(self, rpcs: int) -> float:
        """The shortest interval between rounds of ``rpcs`` RPCs that the refill keeps up with."""
        return rpcs * self.refill_period_s / max(self.refill_rate, 1)


@dataclass(frozen=True)
class Capabilities:
    version: tuple[int, int, int]
    cluster_name: str
    accounting: bool  # sacct has records (AccountingStorageType is not none)
    min_job_age_s: int  # how long a finished job stays visible to squeue/scontrol
    preempt_type: str  # e.g. preempt/qos, preempt/partition_prio, preempt/none
    preempt_mode: str  # e.g. REQUEUE, CANCEL, OFF, SUSPEND,GANG
    preempt_send_user_signal: bool  # preemption sends the job's --signal before SIGTERM
    kill_wait_s: int
    max_array_size: int
    max_job_count: int
    json: bool  # squeue/sacct accept --json
    rate_limit: RateLimit | None = None  # slurmctld limits each user's RPC rate (rl_enable)
    only_job_state: bool = False  # squeue --only-job-state (23.11.5+): the light status round

    def min_round_interval_s(self, rpcs: int) -> float:
        """The shortest interval between polling rounds of ``rpcs`` controller RPCs the site allows."""
        return self.rate_limit.min_interval_s(rpcs) if self.rate_limit else 0.0

    @property
    def preemption_requeues(self) -> bool:
        return self.preempt_type != "preempt/none" and "REQUEUE" in self.preempt_mode.upper()

    def to_json(self) -> dict:
        return asdict(self)


def parse_version(text: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        raise ParseError(f"cannot read a Slurm version from {text!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def _seconds(text: str) -> int:
    """``60 sec`` / ``00:01:00`` / ``60`` as seconds."""
    t = text.strip().removesuffix("sec").strip()
    return int(t) if t.isdigit() else (parse_duration(t) or 0)


def _flags(value: str) -> set[str]:
    """The names in a comma-separated parameter list (``a,b=1`` -> a, b); ``(null)`` is none."""
    return {p.strip().split("=")[0] for p in value.split(",")} - {"", "(null)"}


def _settings(value: str) -> dict[str, str]:
    """The ``name=value`` items of a comma-separated parameter list."""
    return dict(p.strip().split("=", 1) for p in value.split(",") if "=" in p)


def _rate_limit(ctld_params: str) -> RateLimit | None:
    if "rl_enable" not in _flags(ctld_params):
        return None
    got, default = _settings(ctld_params), RateLimit()
    try:
        return RateLimit(
            bucket_size=int(got.get("rl_bucket_size", default.bucket_size)),
            refill_rate=int(got.get("rl_refill_rate", default.refill_rate)),
            refill_period_s=int(got.get("rl_refill_period", default.refill_period_s)),
        )
    except ValueError:
        raise ParseError(f"cannot read the RPC rate limit from SlurmctldParameters={ctld_params!r}") from None


def has_only_job_state(squeue_help: str) -> bool:
    """Whether ``squeue --help`` lists ``--only-job-state`` (Slurm 23.11.5+)."""
    return "--only-job-state" in squeue_help


def from_config(config: dict[str, str], json: bool, only_job_state: bool = False) -> Capabilities:
    """Capabilities from ``scontrol show config`` as parsed by :func:`parse_show_config`."""
    ctld = _flags(config.get("SlurmctldParameters", ""))
    preempt = _flags(config.get("PreemptParameters", ""))
    return Capabilities(
        version=parse_version(config["SLURM_VERSION"]),
        cluster_name=config.get("ClusterName", ""),
        accounting=config.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/none",
        min_job_age_s=_seconds(config.get("MinJobAge", "300")),
        preempt_type=config.get("PreemptType", "preempt/none"),
        preempt_mode=config.get("PreemptMode", "OFF"),
        # Slurm 23.02 moved the setting to PreemptParameters; the old name stays a hidden alias.
        preempt_send_user_signal="send_user_signal" in preempt or "preempt_send_user_signal" in ctld,
        kill_wait_s=_seconds(config.get("KillWait", "30")),
        max_array_size=int(config.get("MaxArraySize", "1001")),
        max_job_count=int(config.get("MaxJobCount", "10000")),
        json=json,
        rate_limit=_rate_limit(config.get("SlurmctldParameters", "")),
        only_job_state=only_job_state,
    )


class Probed(Protocol):
    """What :func:`probe` asks of a client (:class:`~roach.scheduler.client.SlurmClient` is one)."""

    def config(self) -> dict[str, str]: ...

    def run(self, argv: Sequence[str], *, retry: bool = ...) -> Result: ...


def probe(client: Probed) -> Capabilities:
    """Read the cluster's settings (one ``scontrol show config``); ask ``squeue --help`` about ``--json`` and
    ``--only-job-state``.

    ``--help`` costs no controller RPC, and Slurm builds without the JSON plugins do not list ``--json``.
    """
    config = client.config()
    try:
        helptext = client.run(["squeue", "--help"], retry=False).stdout
    except SlurmError:
        helptext = ""
    return from_config(config, "--json" in helptext, has_only_job_state(helptext))
