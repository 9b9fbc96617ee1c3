"""Which Python a submission's jobs run (:func:`python_env_of`): what the caller asked, clusters.toml, the commit's
lock file or the site file (:func:`roach.model.python_env.choose`), checked against what the cluster can make."""

from __future__ import annotations

from pathlib import Path

from roach.errors import RoachError, UsageError
from roach.fleet.cluster import Cluster
from roach.launch.gitrun import git
from roach.model.python_env import LOCKS, EnvChoice, PythonEnv, choose


def lock_files(root: Path, commit: str) -> frozenset[str]:
    """Which of the lock files that name an environment (``uv.lock``, ``pixi.lock``) the commit holds at its top."""
    out = git(root, "ls-tree", "--name-only", "-z", commit, "--", *LOCKS).stdout
    return frozenset(name for name in out.split("\0") if name in LOCKS)


def python_env_of(cluster: Cluster, asked: PythonEnv | str | None, root: Path, commit: str) -> EnvChoice:
    """The environment of a submission of ``commit`` (in the repository at ``root``) to ``cluster``; ``asked``:
    ``submit(python_env=...)``/``--python-env``. A venv the site has none of is refused with the valid choices."""
    wanted = None if asked is None else PythonEnv.parse(asked, "python_env")
    choice = choose(
        asked=wanted,
        configured=cluster.python_env,
        locks=lock_files(root, commit),
        site=cluster.site_python_env(),
        cluster=cluster.name,
        commit=commit,
    )
    if choice.env is PythonEnv.VENV and not cluster.site_has_venv():
        valid = ", ".join(e.value for e in PythonEnv if e is not PythonEnv.VENV)
        raise UsageError(
            f"python_env venv on {cluster.name}: its site file names no venv (ROACH_VENV) for jobs to run in "
            f"({choice.why})",
            hint=f"valid on {cluster.name}: {valid}",
        )
    return choice


def python_env_here(cluster: Cluster, repo_root: str | Path) -> EnvChoice | None:
    """The environment a job of ``repo_root``'s HEAD would get on ``cluster`` (what `roach plan` says beside the
    placement); None where ``repo_root`` is no git repository with a commit, or the choice is refused there."""
    try:
        head = git(Path(repo_root), "rev-parse", "--verify", "-q", "HEAD", ok=range(256))
        commit = head.stdout.strip()
        return python_env_of(cluster, None, Path(repo_root), commit) if head.returncode == 0 and commit else None
    except (RoachError, OSError):
        return None
