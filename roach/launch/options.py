"""What a submission is asked, shared by ``submit``, ``sweep``, ``resume`` and their front-ends: one type, checked once
(:func:`roach.launch.prepare.prepare`).

:class:`Options` is the value; :class:`SubmitFields` the same fields as the keywords those functions take
(``**fields: Unpack[SubmitFields]``, PEP 692), so a type checker sees a misspelled option or a wrong type at the
call. A test keeps the two equal, name for name and type for type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

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
    def of(cls, given: Options | None, fields: SubmitFields) -> Options:
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


class SubmitFields(TypedDict, total=False):
    """:class:`Options`' fields as keywords, each optional: ``submit(target, args, resources=..., cluster=...)``.
    Where no ``options`` is given, ``resources`` is required (checked when the call runs)."""

    resources: Resources | str
    cluster: Cluster | str | None
    name: str | None
    job_env: Mapping[str, str] | None
    repo_root: str | Path
    commit: str | None
    log_root: str | None
    clone_root: str
    secrets_dir: str | None
    run_root: str | None
    description: str
    checkpoint_every: int | None
    experiment: str | None
    allow_metered: bool
    python_env: PythonEnv | str | None
    store: Store | None
