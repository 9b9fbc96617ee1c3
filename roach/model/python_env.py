"""How a job's Python is made (:class:`PythonEnv`) and which one a submission uses, and why (:func:`choose`).

The project says first: a commit with ``uv.lock`` runs under ``uv sync --frozen``, one with ``pixi.lock`` under
``pixi install --frozen``, else the site file's ``ROACH_ENV``. What the caller asks (``submit(python_env=...)``,
``--python-env``) overrides everything, then a cluster's ``python_env`` in clusters.toml. Pure data: the lock
files of the commit are read by the launch layer and handed in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from roach.errors import UsageError


class PythonEnv(enum.StrEnum):
    """The interpreter the ranks run: the project's uv or pixi environment, built in the clone; the site's venv;
    or the node's ``python3``."""

    UV = "uv"
    PIXI = "pixi"
    VENV = "venv"
    SYSTEM = "system"

    @classmethod
    def parse(cls, value: object, where: str = "python_env") -> PythonEnv:
        """``value`` as a PythonEnv; anything else is refused with the valid choices."""
        if isinstance(value, PythonEnv):
            return value
        for env in cls:
            if value == env.value:
                return env
        raise UsageError(
            f"{where} {value!r} is not a Python environment roach can make",
            hint=f"valid: {', '.join(e.value for e in cls)}",
        )

    @property
    def built(self) -> bool:
        """Whether it is built in the clone from the project's lock (uv, pixi), not found on the node."""
        return self in (PythonEnv.UV, PythonEnv.PIXI)

    @property
    def command(self) -> str:
        """What builds it in the clone ("" where nothing is built)."""
        return {PythonEnv.UV: "uv sync --frozen", PythonEnv.PIXI: "pixi install --frozen"}.get(self, "")


class EnvSource(enum.StrEnum):
    """Who chose the environment, strongest first."""

    ASKED = "asked"  # submit(python_env=...) or --python-env
    CLUSTERS_TOML = "clusters.toml"  # the cluster's python_env there
    LOCK = "lock"  # the commit's uv.lock or pixi.lock
    SITE = "site"  # the site file's ROACH_ENV


# The lock files that name a project's environment, in the order one is taken when a commit has both.
LOCKS: dict[str, PythonEnv] = {"pixi.lock": PythonEnv.PIXI, "uv.lock": PythonEnv.UV}


@dataclass(frozen=True)
class EnvChoice:
    """The environment a submission's jobs run in, who chose it, and why in words."""

    env: PythonEnv
    source: EnvSource
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"env": self.env.value, "source": self.source.value, "why": self.why}

    def line(self) -> str:
        """One line, as `roach submit --dry-run` prints it."""
        return f"{self.env.value} ({self.why})"


def choose(
    *,
    asked: PythonEnv | None,
    configured: PythonEnv | None,
    locks: Iterable[str],
    site: PythonEnv,
    cluster: str,
    commit: str,
) -> EnvChoice:
    """The environment of a submission: ``asked`` over ``configured`` (clusters.toml) over the commit's lock
    files (``locks``: which of :data:`LOCKS` it holds) over the ``site`` file's."""
    short = commit[:12]
    if asked is not None:
        return EnvChoice(asked, EnvSource.ASKED, f"asked for with python_env={asked.value} (--python-env)")
    if configured is not None:
        return EnvChoice(
            configured, EnvSource.CLUSTERS_TOML, f"clusters.toml sets python_env = {configured.value!r} for {cluster}"
        )
    held = [name for name in LOCKS if name in set(locks)]
    if held:
        env = LOCKS[held[0]]
        why = f"commit {short} has {held[0]}: `{env.command}` in the clone"
        if len(held) > 1:
            why += f" ({' and '.join(held)} both there: {held[0]} is taken; --python-env chooses)"
        return EnvChoice(env, EnvSource.LOCK, why)
    return EnvChoice(
        site, EnvSource.SITE, f"commit {short} has no uv.lock or pixi.lock: {cluster}'s site file says {site.value}"
    )
