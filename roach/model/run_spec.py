"""The spec a rank reads (``spec.json`` in the bundle): what to run, where, and how it checkpoints.

:meth:`RunSpec.to_json` is its one writer (submit, a sweep's arrays and an attempt inside a holder all call
it); :meth:`RunSpec.from_json` its one reader (the rank, and ``resume``, which resubmits a run as it was).
A sweep writes one spec per array, listing every task's arguments in ``grid``; :meth:`RunSpec.task` is one
task's run. Keys a spec written by an older roach lacks take their defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

VERSION = 1


class SpecError(Exception):
    """A spec (or what it names: the function, the secrets) a rank cannot run."""


DEFAULT_MAX_TIMEOUT_REQUEUES = 3


@dataclass(frozen=True)
class RepoRef:
    """The commit the run's nodes clone."""

    url: str
    commit: str
    name: str


@dataclass(frozen=True)
class SweepRef:
    """A sweep's array: task ``t`` is run ``<id>-<offset + t>`` in ``<run_root>/<that run id>``."""

    id: str
    offset: int
    run_root: str


@dataclass(frozen=True)
class RunSpec:
    target: str  # "package.module:function"
    args: dict[str, Any]
    run_id: str
    name: str
    cluster: str
    run_dir: str  # on the cluster; may start with ~
    log_root: str
    clone_root: str
    repo: RepoRef
    secrets_dir: str | None = None
    job_env: dict[str, str] = field(default_factory=dict)
    python_path: list[str] = field(default_factory=list)  # under the clone, first on sys.path (a src/ layout)
    checkpoint_every: int | None = None
    checkpoint_every_s: float | None = None
    checkpoint_signal: str = "USR1"
    max_timeout_requeues: int = DEFAULT_MAX_TIMEOUT_REQUEUES
    sweep: SweepRef | None = None
    grid: list[dict[str, Any]] | None = None  # a sweep's array: each task's args
    holder: int | None = None  # an attempt inside a holder: the holder's job id and the attempt's number
    attempt: int | None = None

    def to_json(self) -> str:
        """The one form a spec is written in (``spec.json``)."""
        d: dict[str, Any] = {"version": VERSION, "target": self.target}
        if self.sweep is not None:
            d["sweep"] = {"id": self.sweep.id, "offset": self.sweep.offset, "run_root": self.sweep.run_root}
            d["grid"] = self.grid or []
        d.update(
            args=self.args,
            run_id=self.run_id,
            name=self.name,
            cluster=self.cluster,
            run_dir=self.run_dir,
            log_root=self.log_root,
            clone_root=self.clone_root,
            secrets_dir=self.secrets_dir,
            job_env=self.job_env,
            python_path=self.python_path,
            checkpoint_every=self.checkpoint_every,
            checkpoint_signal=self.checkpoint_signal,
            max_timeout_requeues=self.max_timeout_requeues,
        )
        if self.checkpoint_every_s is not None:
            d["checkpoint_every_s"] = self.checkpoint_every_s
        if self.holder is not None:
            d.update(holder=self.holder, attempt=self.attempt)
        d["repo"] = {"url": self.repo.url, "commit": self.repo.commit, "name": self.repo.name}
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """A spec from its file; a missing required key or another version is a :class:`SpecError`."""
        try:
            d = json.loads(text)
        except ValueError as e:
            raise SpecError(f"spec.json is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise SpecError("spec.json is not a JSON object")
        if d.get("version", VERSION) != VERSION:
            raise SpecError(f"spec.json has version {d.get('version')!r}; this roach reads version {VERSION}")
        try:
            repo = d.get("repo") or {}
            sweep = d.get("sweep")
            return cls(
                target=d["target"],
                args=d.get("args") or {},
                run_id=d["run_id"],
                name=d.get("name", ""),
                cluster=d.get("cluster", ""),
                run_dir=d["run_dir"],
                log_root=d.get("log_root", ""),
                clone_root=d.get("clone_root", ""),
                repo=RepoRef(repo.get("url", ""), repo.get("commit", ""), repo.get("name", "")),
                secrets_dir=d.get("secrets_dir"),
                job_env={k: str(v) for k, v in (d.get("job_env") or {}).items()},
                python_path=list(d.get("python_path") or []),
                checkpoint_every=d.get("checkpoint_every"),
                checkpoint_every_s=d.get("checkpoint_every_s"),
                checkpoint_signal=d.get("checkpoint_signal") or "USR1",
                max_timeout_requeues=int(d.get("max_timeout_requeues", DEFAULT_MAX_TIMEOUT_REQUEUES)),
                sweep=SweepRef(sweep["id"], int(sweep["offset"]), sweep["run_root"]) if sweep else None,
                grid=d.get("grid"),
                holder=d.get("holder"),
                attempt=d.get("attempt"),
            )
        except (KeyError, TypeError) as e:
            raise SpecError(f"spec.json lacks or mistypes {e}") from None

    def task(self, task: int) -> RunSpec:
        """The spec of one run of a sweep (task ``task`` of its array); a plain run's spec as it is."""
        if self.sweep is None:
            return self
        grid = self.grid or []
        if not 0 <= task < len(grid):
            raise SpecError(f"array task {task} is outside this array's {len(grid)} runs")
        run_id = f"{self.sweep.id}-{self.sweep.offset + task}"  # as script.sweep_run_id and the batch script say
        return replace(
            self,
            run_id=run_id,
            run_dir=f"{self.sweep.run_root.rstrip('/')}/{run_id}",
            args=grid[task],
            sweep=None,
            grid=None,
        )
