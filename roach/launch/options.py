"""What a submission is asked, shared by ``submit``, ``sweep``, ``resume`` and their front-ends: one type, checked once
(:func:`roach.launch.prepare.prepare`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roach.errors import UsageError
from roach.fleet.cluster import Cluster
from roach.model.python_env import PythonEnv
from roach.model.resources import Resources
from roach.records.store import Store

CLONE_ROOT = "~/roach_clones"


@dataclass(frozen=True, kw_only=True)
class Options:
    """Where a submission runs, on what, and where its files go. Paths may start with ``~``: the cluster user's
    home, expanded on the cluster."""

    resources: Resources | str  # a Resources, or a preset name of the cluster
    cluster: Cluster | str | None = None  # None: clusters.toml's default, else ilc (never a metered one)
    name: str | None = None  # the job's name; None: the function's
    job_env: Mapping[str, str] | None = None  # environment variables for the ranks
    repo_root: str | Path = "."  # the git repository whose pushed commit runs
    commit: str | None = None  # that pushed commit instead of HEAD
    log_root: str | None = None  # None: ~/roach/<repo>/slurm-logs
    clone_root: str = CLONE_ROOT
    secrets_dir: str | None = None
    run_root: str | None = None  # where run directories go; None: runs/ beside the log root
    description: str = ""  # free text kept in job.json
    checkpoint_every: int | None = None
    experiment: str | None = None
    allow_metered: bool = False  # a metered cluster needs this
    python_env: PythonEnv | str | None = None  # uv, pixi, venv or system; None: clusters.toml, the lock, the site
    store: Store | None = field(default=None, compare=False)

    @classmethod
    def of(cls, given: Options | None, fields: Mapping[str, Any]) -> Options:
        """``given`` with ``fields`` over it, or the options ``fields`` name; an unknown name is refused with the
        valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise UsageError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                hint=f"valid: {', '.join(sorted(names))}",
            )
        if given is not None:
            return dataclasses.replace(given, **fields)
        if "resources" not in fields:
            raise UsageError("resources= is required", hint="a Resources, or a preset name of the cluster")
        return cls(**fields)
