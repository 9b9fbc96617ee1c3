"""What a job asks Slurm for, as a frozen dataclass that becomes sbatch options.

One rank per GPU: tasks per node = GPUs per node (one task on a CPU-only node). Options roach manages
itself (job name, output, tasks) cannot be smuggled in through ``extra``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from dataclasses import replace as _replace
from typing import Any, Literal

from roach.errors import UsageError

GpuFlag = Literal["gres", "gpus-per-node"]

# sbatch options roach sets itself; in ``extra`` they would contradict the plan.
_MANAGED = {
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--error",
    "-e",
    "--nodes",
    "-N",
    "--ntasks",
    "-n",
    "--ntasks-per-node",
    "--gres",
    "--gpus",
    "-G",
    "--gpus-per-node",
    "--gpus-per-task",
    "--cpus-per-task",
    "-c",
    "--cpus-per-gpu",
    "--account",
    "-A",
    "--partition",
    "-p",
    "--qos",
    "-q",
    "--constraint",
    "-C",
    "--mem",
    "--time",
    "-t",
    "--reservation",
    "--hold",
    "-H",
    "--parsable",
    "--array",
    "-a",
    "--wrap",
    "--open-mode",
    "--signal",
    "--requeue",
    "--no-requeue",
    "--chdir",
    "-D",
}
_TIME = re.compile(r"^(?:\d+-\d{1,2}(?::\d{1,2}(?::\d{1,2})?)?|\d+(?::\d{1,2}(?::\d{1,2})?)?)$")
_MEM = re.compile(r"^\d+[KMGT]?$")


@dataclass(frozen=True)
class Resources:
    """A job's request. ``mem`` is per node (``"32G"``); ``time`` is Slurm's ``[D-]HH:MM:SS`` or minutes."""

    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_gpu: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str = "01:00:00"
    reservation: str | None = None
    gpu_type: str | None = None
    gres_extra: tuple[str, ...] = ()  # more GRES beside the GPUs, e.g. ("local:100G",) for node-local scratch
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("extra", "gres_extra"):
            v = getattr(self, name)
            if isinstance(v, (list, str)):
                object.__setattr__(self, name, (v,) if isinstance(v, str) else tuple(v))
        problems = []
        if not isinstance(self.nodes, int) or self.nodes < 1:
            problems.append(f"nodes={self.nodes!r} must be an integer >= 1")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 0:
            problems.append(f"gpus_per_node={self.gpus_per_node!r} must be an integer >= 0")
        for name in ("cpus_per_gpu", "cpus_per_task"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                problems.append(f"{name}={v!r} must be an integer >= 1 or None")
        if self.cpus_per_gpu is not None and self.gpus_per_node == 0:
            problems.append("cpus_per_gpu is set but gpus_per_node is 0: use cpus_per_task for a CPU-only job")
        if self.cpus_per_gpu is not None and self.cpus_per_task is not None:
            problems.append("cpus_per_gpu and cpus_per_task contradict each other (one rank per GPU): set one")
        if self.gpu_type is not None and self.gpus_per_node == 0:
            problems.append("gpu_type is set but gpus_per_node is 0")
        if self.mem is not None and not _MEM.match(str(self.mem)):
            problems.append(f"mem={self.mem!r} is not a size such as 32G, 500M or 64000")
        if not _TIME.match(str(self.time)):
            problems.append(f"time={self.time!r} is not a Slurm time such as 30, 04:00:00 or 1-12:00:00")
        for name in ("account", "partition", "qos", "constraint", "reservation", "gpu_type"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v or any(c.isspace() or c in "'\"$`;" for c in v)):
                problems.append(f"{name}={v!r} is not a valid Slurm name (empty, or has spaces or quotes)")
        for g in self.gres_extra:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*(:[A-Za-z0-9_.-]+)+", str(g)) or str(g).startswith("gpu"):
                problems.append(f"gres_extra {g!r} is not a GRES such as local:100G (GPUs go in gpus_per_node)")
        for opt in self.extra:
            key = str(opt).split("=", 1)[0]
            if not str(opt).startswith("-"):
                problems.append(f"extra option {opt!r} must start with '-' (e.g. '--exclusive')")
            elif key in _MANAGED:
                problems.append(
                    f"extra option {opt!r} contradicts a Resources field or an option roach sets; use the field instead"
                )
        if problems:
            raise UsageError(
                "invalid Resources: " + "; ".join(problems),
                hint=f"valid fields: {', '.join(f.name for f in fields(self))}",
            )

    @property
    def tasks_per_node(self) -> int:
        """Ranks per node: one per GPU, or one on a CPU-only node."""
        return max(self.gpus_per_node, 1)

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def replace(self, **changes: Any) -> Resources:
        """A copy with some fields changed; an unknown field is an error that lists the valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise UsageError(
                f"unknown Resources field(s): {', '.join(unknown)}", hint=f"valid fields: {', '.join(sorted(valid))}"
            )
        return _replace(self, **changes)

    with_ = replace

    def sbatch_options(self, gpu_flag: GpuFlag = "gres") -> list[str]:
        """The sbatch options for this request (no job name, output or hold: submit adds those)."""
        opts = [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}", f"--time={self.time}"]
        gres = list(self.gres_extra)
        if self.gpus_per_node:
            gpu = f"gpu:{self.gpu_type}:{self.gpus_per_node}" if self.gpu_type else f"gpu:{self.gpus_per_node}"
            if gpu_flag == "gres":
                gres.insert(0, gpu)
            else:
                opts.append(f"--gpus-per-node={gpu.removeprefix('gpu:')}")
        if gres:
            opts.append(f"--gres={','.join(gres)}")
        if self.cpus_per_gpu is not None:
            opts.append(f"--cpus-per-task={self.cpus_per_gpu}")
        elif self.cpus_per_task is not None:
            opts.append(f"--cpus-per-task={self.cpus_per_task}")
        if self.mem is not None:
            opts.append(f"--mem={self.mem}")
        for name in ("account", "partition", "qos", "constraint", "reservation"):
            v = getattr(self, name)
            if v is not None:
                opts.append(f"--{name}={v}")
        opts.extend(self.extra)
        return opts

    def to_json(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resources:
        """The resources a record keeps (:meth:`to_json`'s form: its lists are the tuples)."""
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**values)
