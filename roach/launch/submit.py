"""``submit``: run a function of a pushed commit as a Slurm job, one rank per GPU.

Order matters: every check that can refuse runs before anything is written or queued; then the job starts
the one way every batch job does (:mod:`roach.launch.pipeline`): queued held, recorded, its bundle written,
released, or all of it undone.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack, overload

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.route import as_recorded
from roach.fleet.userconfig import get_cluster
from roach.launch import pipeline
from roach.launch.gitpush import push_commit
from roach.launch.hold.holder import InsideJob, submit_attempt
from roach.launch.job import Job
from roach.launch.options import Options, SubmitFields
from roach.launch.pipeline import Destination, Written
from roach.launch.prepare import Prepared, check_args, check_ids, prepare, resolve_run
from roach.launch.shipping import node_script
from roach.model.resources import Resources
from roach.model.run_spec import RepoRef, RunSpec
from roach.records.bundle import BundlePaths, JobJson
from roach.records.store import Store
from roach.scheduler.clusterfs import ClusterFS


@overload
def submit(
    target: str,
    args: Mapping[str, Any] | None = None,
    options: Options | None = None,
    *,
    run_id: str | None = None,
    inside: None = None,
    **fields: Unpack[SubmitFields],
) -> Job: ...


@overload
def submit(
    target: str,
    args: Mapping[str, Any] | None = None,
    options: Options | None = None,
    *,
    run_id: str | None = None,
    inside: int,
    force: bool = False,
    wait_holder_s: float | None = None,
    **fields: Unpack[SubmitFields],
) -> InsideJob: ...


def submit(
    target: str,
    args: Mapping[str, Any] | None = None,
    options: Options | None = None,
    *,
    run_id: str | None = None,
    inside: int | None = None,
    force: bool = False,
    wait_holder_s: float | None = None,
    **fields: Unpack[SubmitFields],
) -> Job | InsideJob:
    """Submit ``pkg.module:function`` of the repo's pushed HEAD as a Slurm job; returns its :class:`Job`.

    ``fields`` are :class:`~roach.launch.options.Options`' (``resources`` is required), over ``options`` where
    given. ``run_id`` continues that run in its run directory. ``inside=<holder job id>`` starts it now as steps
    of that running holder instead, and returns its :class:`~roach.launch.hold.holder.InsideJob` (docs/hold.md);
    ``force`` then starts it even beside another attempt's running ranks, and ``wait_holder_s`` waits up to that
    long for a holder still pending to run (without it, a pending holder is refused).
    """
    if inside is not None:  # steps of a running holder, started now
        return submit_attempt(
            target, args, options, inside=inside, run_id=run_id, force=force, wait_holder_s=wait_holder_s, **fields
        )
    check_ids(run_id, inside, wait_holder_s)
    args = check_args(args or {})
    p = prepare(target, Options.of(options, fields), args=args)
    run_id, run_dir = resolve_run(p, run_id)
    return _start_batch(p, args, run_id, run_dir)


def _start_batch(p: Prepared, args: dict[str, Any], run_id: str, run_dir: str) -> Job:
    """Queue the prepared submission as a batch job, the one way every batch job starts (:mod:`roach.launch.pipeline`)."""
    cluster, repo = p.cluster, p.repo
    guardrails.check_live(cluster, p.resources, p.client)
    # A cluster whose nodes cannot reach the git remote clones from a mirror on its shared storage that
    # submit fills from here (a git bundle over the transport), after the job is queued held.
    mirror_root = posixpath.join(p.bundle_root, "git")
    repo_url = repo.url if cluster.git_reachable else posixpath.join(mirror_root, f"{Path(repo.root).name}.git")
    text = p.script(run_id=run_id, run_dir=run_dir, repo_url=repo_url)
    log_prefix = f"{p.abs_log_root}/{run_id}_"
    to = Destination(cluster, p.client, p.fs, p.store)

    def write(queued: list[tuple[int, str]]) -> Written:
        ((job_id, _),) = queued
        paths = BundlePaths(p.abs_log_root, run_id, job_id)
        spec = p.run_spec(run_id=run_id, run_dir=run_dir, args=args, repo=RepoRef(repo_url, repo.commit, repo.name))
        record = p.record(
            job_id=job_id, run_id=run_id, run_dir=run_dir, log_path=paths.log, bundle_dir=paths.bundle_dir
        )
        jj = JobJson.submitted(record, paths.script, p.options.description, python_env=p.python_env.to_json())
        # node.sh is run with bash: it needs no exec bit
        files = {paths.script: text, paths.spec: spec.to_json(), paths.node_sh: node_script()}
        push = functools.partial(push_commit, cluster, repo.root, repo.commit, mirror_root=mirror_root)
        return Written(
            [record],
            {**files, paths.job_json: jj.to_json()},
            [paths.bundle_dir],
            runtime_root=p.bundle_root,
            experiment=p.options.experiment,
            before=None if cluster.git_reachable else functools.partial(push, transport=p.client.transport),
        )

    _, written = pipeline.start_one(
        to,
        text,
        write,
        log_prefix=log_prefix,
        what="submission of job",
        spend=pipeline.Spend.of(p.resources, p.options.experiment, what=f"run {run_id}"),
    )
    return Job(cluster, written.records[0], p.store)


def dry_run(
    target: str,
    args: Mapping[str, Any] | None = None,
    options: Options | None = None,
    **fields: Unpack[SubmitFields],
) -> Prepared:
    """Every check :func:`submit` makes, and what it would run (the resources, the commit, the Python environment
    and why), with nothing queued or written."""
    return prepare(target, Options.of(options, fields), args=check_args(args or {}))


def resume(run_id: str, **fields: Unpack[SubmitFields]) -> Job:
    """Submit run ``run_id`` again (its last job's target, args, paths and experiment) so it continues from its
    checkpoint, on other resources or another cluster that sees the same run directory.

    The code is the repo's current pushed HEAD, like any submit. ``fields`` are :func:`submit`'s, over what the
    run's last job had: ``resources`` (default: what it asked for), ``cluster`` (default: where it ran; another
    must see the same run directory), ``store`` and the rest.
    """
    store = fields.get("store") or Store()
    rec = store.latest_for_run(run_id)
    if rec is None:
        raise UsageError(f"no record of run {run_id} in the store", hint="`roach ls` lists the runs roach knows")
    cluster = fields.get("cluster")
    given = get_cluster(cluster) if cluster is not None else None
    old = given if given is not None and given.name == rec.cluster else get_cluster(rec.cluster)
    if rec.via and given is None:  # submitted through another ssh alias: read and resubmit the same way
        old = as_recorded(old, rec)
    spec_dir = rec.bundle_dir
    if rec.task is not None:  # a sweep's run: its array's spec lists every run's args
        spec_dir = posixpath.join(posixpath.dirname(rec.bundle_dir), str(rec.job_id))
    spec = RunSpec.from_json(ClusterFS(old.client().transport).read(posixpath.join(spec_dir, "spec.json")))
    if rec.task is not None:
        spec = spec.task(rec.task)
    kept = Options(
        resources=Resources.from_json(rec.resources),
        cluster=given or old,
        name=rec.name,
        job_env=spec.job_env or None,
        log_root=spec.log_root,
        clone_root=spec.clone_root,
        secrets_dir=spec.secrets_dir,
        run_root=posixpath.dirname(spec.run_dir),
        checkpoint_every=spec.checkpoint_every,
        experiment=store.experiment_of(rec.cluster, rec.job_id),  # every job of a run stays in its experiment
        store=store,
    )
    over = fields.copy()
    over.pop("cluster", None)  # kept: the cluster given, reached as named
    over["store"] = store
    return submit(spec.target, spec.args, kept, run_id=run_id, **over)
