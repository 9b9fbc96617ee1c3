"""What every submission checks and resolves before anything reaches the cluster: its arguments and env, the run id, the resources (presets, the cluster's defaults), the run root, and the repo at a pushed commit (:func:`prepare`)."""

from __future__ import annotations

import json
import posixpath
import re
import secrets as _secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.paths import check_cluster_path
from roach.fleet.route import submitted_record
from roach.fleet.userconfig import configured, default_cluster_name, fill_resources, get_cluster
from roach.launch.options import Options
from roach.launch.pipeline import Spend
from roach.launch.pyenv import python_env_of
from roach.launch.remote_access import is_local_url, remote_access
from roach.launch.repo import RepoInfo, inspect_repo
from roach.launch.script import ArrayPart, ScriptInputs, render
from roach.launch.shipping import runtime_dir
from roach.launch.target import check_calls, checked_target, parse_target
from roach.model.python_env import EnvChoice
from roach.model.resources import Resources
from roach.model.run_spec import RepoRef, RunSpec
from roach.records.grants import GrantBook
from roach.records.job_record import JobRecord, utc_now
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


RESERVED_ENV = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONPATH",
    "NODE_RANK",
}


def check_args(args: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise UsageError("args must be a dict with string keys (the function's keyword arguments)")
    try:  # all at once (a sweep checks a grid of them); where that fails, key by key says which
        json.dumps(args, allow_nan=False)
        return dict(args)
    except (TypeError, ValueError):
        pass
    for key, value in args.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"argument {key}={value!r} is not JSON-serialisable ({exc})",
                hint="pass plain values (numbers, strings, lists, dicts) and build objects inside the function",
            ) from None
    return dict(args)


def check_grid(grid: Sequence[Any]) -> list[dict[str, Any]]:
    """:func:`check_args` of each of a sweep's grid entries: all their values in one json.dumps, and where anything
    fails, entry by entry, which says what (the first entry, the first key at fault)."""
    try:
        if all(isinstance(g, Mapping) and all(isinstance(k, str) for k in g) for g in grid):
            out = [dict(g) for g in grid]
            json.dumps(out, allow_nan=False)
            return out
    except (TypeError, ValueError):
        pass
    return [check_args(g) for g in grid]


def check_env(job_env: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(job_env or {})
    for k, v in env.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            raise UsageError(f"job_env name {k!r} is not an environment variable name")
        if k in RESERVED_ENV or k.startswith(("SLURM_", "ROACH_")):
            raise UsageError(f"job_env may not set {k}: roach or Slurm sets it for each rank")
        if not isinstance(v, str):
            raise UsageError(f"job_env {k}={v!r} must be a string")
    return env


def new_run_id(name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "run"
    return f"{base}-{stamp}-{_secrets.token_hex(2)}"


def resolve_resources(resources: Resources | str, cluster: Cluster) -> Resources:
    if isinstance(resources, Resources):
        return resources
    if isinstance(resources, str):
        return cluster.preset(resources)
    raise UsageError(
        f"resources must be a Resources or a preset name, got {type(resources).__name__}",
        hint=f"presets of {cluster.name}: {', '.join(sorted(cluster.presets))}",
    )


def default_run_root(log_root: str) -> str:
    parent = posixpath.dirname(log_root.rstrip("/")) or "~"
    return posixpath.join(parent, "runs")


@dataclass
class Prepared:
    """What every submission (a job, a sweep, an attempt) has checked before it writes or queues anything: its
    options resolved (the cluster, resources, name, log root) and the repo at a pushed commit."""

    options: Options
    target: str
    cluster: Cluster
    resources: Resources
    env: dict[str, str]
    name: str
    repo: RepoInfo
    python_path: list[str]
    log_root: str
    abs_log_root: str
    store: Store
    client: SlurmClient
    fs: ClusterFS
    python_env: EnvChoice  # the environment its jobs run in, and why

    @property
    def bundle_root(self) -> str:
        return posixpath.join(self.abs_log_root, "bundles")

    def script(self, *, run_id: str, run_dir: str, repo_url: str | None = None, array: ArrayPart | None = None) -> str:
        """The batch script of one job (or one array of a sweep) of this submission."""
        inputs = ScriptInputs(
            cluster=self.cluster,
            resources=self.resources,
            name=self.name,
            run_id=run_id,
            log_root=self.abs_log_root,
            bundle_root=self.bundle_root,
            roach_path=runtime_dir(self.bundle_root),
            repo_url=repo_url or self.repo.url,
            repo_name=self.repo.name,
            commit=self.repo.commit,
            clone_root=self.options.clone_root,
            run_dir=run_dir,
            array=array,
            python_env=self.python_env.env,
        )
        return render(inputs)

    def record(
        self, *, job_id: int, run_id: str, run_dir: str, log_path: str, bundle_dir: str, **own: Any
    ) -> JobRecord:
        """The store record of one job of this submission; ``own`` adds a task's or an attempt's fields, or
        overrides (``submitted_at``, ``resources``, ``route``: one computed for many records, and the resources
        dict shared, which the store encodes once)."""
        fields: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "commit": self.repo.commit,
            "repo": self.repo.name,
            **own,
        }
        if "submitted_at" not in fields:
            fields["submitted_at"] = utc_now()
        if "resources" not in fields:
            fields["resources"] = self.resources.to_json()
        route = fields.pop("route", None)
        return submitted_record(
            self.cluster,
            route,
            job_id=job_id,
            run_id=run_id,
            run_dir=run_dir,
            log_path=log_path,
            bundle_dir=bundle_dir,
            **fields,
        )

    def run_spec(self, *, run_id: str, run_dir: str, args: dict[str, Any], **own: Any) -> RunSpec:
        """The spec the ranks of one job of this submission read: what was checked here, and the job's ``own``
        values (a sweep's grid, a holder attempt's number, a mirror's ``repo``...), which win."""
        o = self.options
        fields: dict[str, Any] = {
            "target": self.target,
            "args": args,
            "run_id": run_id,
            "name": self.name,
            "cluster": self.cluster.name,
            "run_dir": run_dir,
            "log_root": self.log_root,
            "clone_root": o.clone_root,
            "secrets_dir": o.secrets_dir,
            "job_env": dict(self.env),
            "python_path": self.python_path,
            "checkpoint_every": o.checkpoint_every,
            "checkpoint_signal": self.cluster.checkpoint_signal,
            "max_timeout_requeues": self.cluster.max_timeout_requeues,
            "repo": RepoRef(self.repo.url, self.repo.commit, self.repo.name),
        }
        return RunSpec(**{**fields, **own})


def check_ids(run_id: str | None, inside: int | None, wait_holder_s: float | None) -> None:
    """A run id of roach's form, and a holder's wait only with a holder (``inside``)."""
    if run_id is not None and not RUN_ID.match(run_id):
        raise UsageError(
            f"run id {run_id!r} is not valid",
            hint="letters, digits, . _ - (up to 128), starting with a letter or digit",
        )
    if wait_holder_s is not None and (
        inside is None
        or isinstance(wait_holder_s, bool)
        or not isinstance(wait_holder_s, (int, float))
        or not wait_holder_s >= 0
    ):
        raise UsageError(
            f"wait_holder_s={wait_holder_s!r} (--wait-holder) needs inside= (--inside) and a number of seconds >= 0",
            hint="name the holder to run in and how long to wait for it to run",
        )


def resolve_run(p: Prepared, run_id: str | None) -> tuple[str, str]:
    """The run's id and directory: a new run's, or an earlier run's (``run_id`` given), which must exist."""
    earlier = p.store.latest_for_run(run_id) if run_id is not None else None
    run_root = p.options.run_root
    run_root = run_root or (posixpath.dirname(earlier.run_dir) if earlier else default_run_root(p.log_root))
    check_cluster_path("run_root", run_root)
    if run_id is None:
        run_id = new_run_id(p.name)
        return run_id, posixpath.join(run_root, run_id)
    run_dir = posixpath.join(run_root, run_id)
    where = p.fs.expand(run_dir)
    if not p.fs.exists(where):
        raise UsageError(
            f"run {run_id} does not exist: no run directory at {run_dir}"
            + (f" ({where})" if where != run_dir else "")
            + f" on {p.cluster.name}"
            + ("" if earlier else " and no record of it in the store"),
            hint="pass the run id of an earlier run (see `roach ls`), or omit run_id to start a new run; a run made "
            "as another user is reached as that user (--run-as USER, Python: cluster.with_(run_as=USER))",
        )
    return run_id, run_dir


def prepare(
    target: str, o: Options, *, args: Mapping[str, Any] | None = None, grid: Sequence[Mapping[str, Any]] | None = None
) -> Prepared:
    """The checks that can refuse a submission, in order, before anything is written or queued. ``args`` (a job's)
    or ``grid`` (a sweep's, each entry a run's) are checked against the function's parameters at the commit."""
    # No cluster named: the configured default (ilc out of the box), never a metered one.
    cluster = configured(get_cluster(o.cluster if o.cluster is not None else default_cluster_name()))
    res = fill_resources(cluster, resolve_resources(o.resources, cluster))
    guardrails.check(cluster, res, allow_metered=o.allow_metered)
    experiment = o.experiment
    if experiment is not None and (not experiment or "/" in experiment or experiment.strip() != experiment):
        raise UsageError(f"experiment name {experiment!r} must be non-empty, without '/' or surrounding spaces")
    parse_target(target)
    env = check_env(o.job_env)
    name = o.name or target.rsplit(":", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9._+=@:-]{1,128}", name):
        raise UsageError(
            f"job name {name!r} has characters Slurm logs and file names do not take",
            hint="use letters, digits and . _ - + = @ :",
        )
    repo = inspect_repo(o.repo_root, o.commit)
    module, params = checked_target(repo, target)
    if params is not None and (args is not None or grid is not None):
        check_calls(repo, target, params, [args or {}] if grid is None else grid, grid=grid is not None)
    python_path = ["src"] if module.startswith("src/") else []
    python_env = python_env_of(cluster, o.python_env, repo.root, repo.commit)
    log_root = o.log_root or f"~/roach/{repo.name}/slurm-logs"
    for label, path in (("log_root", log_root), ("clone_root", o.clone_root), ("secrets_dir", o.secrets_dir)):
        check_cluster_path(label, path)
    store = o.store or Store()
    if cluster.metered:  # refused here already where no grant has room; the pipeline holds it when queuing
        spend = Spend.of(res, experiment, len(grid) if grid is not None else 1, what="this submission")
        GrantBook(store).check(cluster.name, experiment, spend.gpu_hours, spend.what)
    client = cluster.client()
    fs = ClusterFS(client.transport)
    if cluster.git_reachable and not cluster.rest_url and is_local_url(repo.url):
        remote_access(client.transport, repo.url, cluster.run_as).raise_if_not()  # the jobs' user clones it
    abs_log_root = fs.expand(log_root)
    if o.secrets_dir is not None:
        loose = fs.secrets_readable_by_others(fs.expand(o.secrets_dir))
        if loose:
            raise UsageError(f"secrets files readable by others: {', '.join(loose)}", hint="chmod 600 each of them")
    return Prepared(
        o, target, cluster, res, env, name, repo, python_path, log_root, abs_log_root, store, client, fs, python_env
    )


def read_grid(path: str | Path) -> list[dict[str, Any]]:
    """A grid file: a JSON list of objects (``.json``) or one JSON object per line (``.jsonl``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise UsageError(f"cannot read the grid file {p}: {e.strerror}", hint="pass a .json or .jsonl file") from None
    try:
        if p.suffix == ".jsonl":
            grid = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif p.suffix == ".json":
            grid = json.loads(text)
        else:
            raise UsageError(f"grid file {p} must end in .json (a list of objects) or .jsonl (an object per line)")
    except json.JSONDecodeError as e:
        raise UsageError(f"grid file {p} is not valid JSON: {e}") from None
    if not isinstance(grid, list):
        raise UsageError(f"grid file {p} must hold a JSON list of objects, not {type(grid).__name__}")
    return grid
