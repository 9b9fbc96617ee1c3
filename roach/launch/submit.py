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
from typing import Any

from roach.errors import UsageError
from roach.fleet import guardrails
from roach.fleet.cluster import Cluster
from roach.fleet.paths import check_cluster_path
from roach.fleet.route import as_recorded, submitted_record
from roach.fleet.userconfig import get_cluster
from roach.launch import pipeline
from roach.launch import script as batch
from roach.launch.gitpush import push_commit
from roach.launch.inside import submit_inside
from roach.launch.job import Job
from roach.launch.pipeline import Destination, Written
from roach.launch.prepare import RUN_ID, check_args, default_run_root, new_run_id, prepare
from roach.launch.shipping import node_script, runtime_dir
from roach.model.resources import Resources
from roach.model.run_spec import RepoRef, RunSpec
from roach.records.bundle import BundlePaths, JobJson
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.scheduler.clusterfs import ClusterFS


def submit(
    target: str,
    args: Mapping[str, Any] | None = None,
    *,
    resources: Resources | str,
    cluster: Cluster | str | None = None,
    name: str | None = None,
    job_env: Mapping[str, str] | None = None,
    repo_root: str | Path = ".",
    log_root: str | None = None,
    clone_root: str = "~/roach_clones",
    secrets_dir: str | None = None,
    run_root: str | None = None,
    run_id: str | None = None,
    description: str = "",
    checkpoint_every: int | None = None,
    experiment: str | None = None,
    allow_metered: bool = False,
    inside: int | None = None,
    force: bool = False,
    wait_holder_s: float | None = None,
    commit: str | None = None,
    store: Store | None = None,
) -> Job:
    """Submit ``pkg.module:function`` of the repo's pushed HEAD as a Slurm job; returns its :class:`Job`.

    Paths may start with ``~``: the cluster user's home, expanded on the cluster. ``inside=<holder job id>``
    starts it now as steps of that running holder instead (an :class:`~roach.launch.inside.InsideJob`; see
    docs/hold.md); ``force`` then starts it even beside another attempt's running ranks, and ``wait_holder_s``
    waits up to that long for a holder still pending to run (without it, a pending holder is refused). ``commit`` submits
    that pushed commit instead of HEAD (what promote and move use to resubmit a run's own code).
    """
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
    args = check_args(args or {})
    p = prepare(
        target,
        resources=resources,
        cluster=cluster,
        name=name,
        job_env=job_env,
        repo_root=repo_root,
        log_root=log_root,
        clone_root=clone_root,
        secrets_dir=secrets_dir,
        allow_metered=allow_metered,
        experiment=experiment,
        store=store,
        commit=commit,
    )
    cluster, res, name, repo, store = p.cluster, p.resources, p.name, p.repo, p.store
    log_root, abs_log_root, client, fs = p.log_root, p.abs_log_root, p.client, p.fs
    resuming = run_id is not None
    run_id = run_id or new_run_id(name)
    earlier = store.latest_for_run(run_id) if resuming else None
    run_root = run_root or (posixpath.dirname(earlier.run_dir) if earlier else default_run_root(log_root))
    check_cluster_path("run_root", run_root)
    run_dir = posixpath.join(run_root, run_id)
    if resuming and not fs.exists(fs.expand(run_dir)):
        raise UsageError(
            f"run {run_id} does not exist: no run directory at {run_dir} on {cluster.name}"
            + ("" if earlier else " and no record of it in the store"),
            hint="pass the run id of an earlier run (see `roach ls`), or omit run_id to start a new run",
        )

    if inside is not None:  # steps of a running holder, started now (roach/launch/inside.py)
        return submit_inside(
            p,
            holder=int(inside),
            args=args,
            run_id=run_id,
            run_dir=run_dir,
            description=description,
            checkpoint_every=checkpoint_every,
            force=force,
            wait_holder_s=wait_holder_s,
        )

    guardrails.check_live(cluster, res, client)
    bundle_root = posixpath.join(abs_log_root, "bundles")
    # A cluster whose nodes cannot reach the git remote clones from a mirror on its shared storage that
    # submit fills from here (a git bundle over the transport), after the job is queued held.
    mirror_root = posixpath.join(bundle_root, "git")
    repo_url = repo.url if cluster.git_reachable else posixpath.join(mirror_root, f"{Path(repo.root).name}.git")
    script_text = batch.render(
        batch.ScriptInputs(
            cluster=cluster,
            resources=res,
            name=name,
            run_id=run_id,
            log_root=abs_log_root,
            bundle_root=bundle_root,
            roach_path=runtime_dir(bundle_root),
            repo_url=repo_url,
            repo_name=repo.name,
            commit=repo.commit,
            clone_root=clone_root,
            run_dir=run_dir,
        )
    )
    log_prefix = f"{abs_log_root}/{run_id}_"
    to = Destination(cluster, client, fs, store)
    queued = pipeline.queue_held(to, pipeline.one(script_text), log_prefix)

    def write(ids: list[int]) -> Written:
        (job_id,) = ids
        paths = BundlePaths(abs_log_root, run_id, job_id)
        spec = p.run_spec(
            run_id=run_id,
            run_dir=run_dir,
            args=args,
            checkpoint_every=checkpoint_every,
            repo=RepoRef(repo_url, repo.commit, repo.name),
        )
        record = submitted_record(
            cluster,
            job_id=job_id,
            run_id=run_id,
            name=name,
            target=target,
            commit=repo.commit,
            repo=repo.name,
            log_path=paths.log,
            bundle_dir=paths.bundle_dir,
            run_dir=run_dir,
            submitted_at=utc_now(),
            resources=res.to_json(),
        )
        jj = JobJson.submitted(record, paths.script, description)
        # node.sh is run with bash: it needs no exec bit
        files = {paths.script: script_text, paths.spec: spec.to_json(), paths.node_sh: node_script()}
        return Written(
            [record],
            {**files, paths.job_json: jj.to_json()},
            [paths.bundle_dir],
            runtime_root=bundle_root,
            experiment=experiment,
            before=None
            if cluster.git_reachable
            else functools.partial(
                push_commit, cluster, repo.root, repo.commit, mirror_root=mirror_root, transport=client.transport
            ),
        )

    written = pipeline.start(to, queued, write, log_prefix=log_prefix, what=f"submission of job {queued[0][0]}")
    return Job(cluster, written.records[0], store)


def resume(
    run_id: str,
    *,
    resources: Resources | str | None = None,
    cluster: Cluster | str | None = None,
    repo_root: str | Path = ".",
    store: Store | None = None,
    **overrides: Any,
) -> Job:
    """Submit run ``run_id`` again (its last job's target, args and paths) so it continues from its
    checkpoint, on other resources or another cluster that sees the same run directory.

    The code is the repo's current pushed HEAD, like any submit. ``overrides`` go to :func:`submit`.
    """
    store = store or Store()
    rec = store.latest_for_run(run_id)
    if rec is None:
        raise UsageError(f"no record of run {run_id} in the store", hint="`roach ls` lists the runs roach knows")
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
    if resources is None:
        resources = Resources.from_json(rec.resources)
    kwargs: dict[str, Any] = dict(
        name=rec.name,
        job_env=spec.job_env or None,
        log_root=spec.log_root,
        clone_root=spec.clone_root,
        secrets_dir=spec.secrets_dir,
        run_root=posixpath.dirname(spec.run_dir),
        checkpoint_every=spec.checkpoint_every,
    )
    kwargs.update(overrides)
    return submit(
        spec.target,
        spec.args,
        resources=resources,
        cluster=given or old,
        repo_root=repo_root,
        run_id=run_id,
        store=store,
        **kwargs,
    )
