"""The remote-workspace backend: a local folder mirrored to a remote root, plain sbatch scripts, bundles back.

The way of working it serves: the local workspace is the source of truth; the cluster is compute. roach
syncs the workspace up (:func:`sync`), submits a user's sbatch script so that its logs land in the job's
bundle (:func:`sbatch_script`), watches it from one session (:func:`wait`), copies the bundle and the
outputs back (:func:`pull`) and checks that what scoring needs is here (:func:`verify`).
The guide is ``docs/remote-workspace.md``; the pieces live in ``workspace_base`` (workspace file, records,
reaching the cluster), ``workspace_script`` (reading and amending a script) and ``workspace_wait``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roach.errors import RoachError, UsageError
from roach.fleet.cluster import Cluster
from roach.fleet.route import submitted_route
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob, log_path, store_record
from roach.scheduler.transport import Transport
from roach.workspace.base import (
    ALWAYS_EXCLUDED,
    DEFAULT_EXCLUDES,
    DEFAULT_OUTPUTS,
    GIT_DIR,
    SETTINGS_FILE,
    Remote,
    Settings,
    Workspace,
    check_job_id,
    check_relative,
    connect,
    min_poll_interval,
    open_workspace,
    read_local,
    resolve_cluster,
)
from roach.workspace.file import WorkspaceError
from roach.workspace.interface import (
    INTERFACE_FILE,
    InterfaceError,
)
from roach.workspace.mirror import queued_states, read_record, record_final, write_both, write_local
from roach.workspace.script import (
    ARRAY_OUTPUT,
    ARTIFACTS_DIR,
    OUTPUT,
    REQUIREMENTS,
    PreparedScript,
    ScriptRefused,
    prepare_script,
)
from roach.workspace.script import (
    CHECKABLE as CHECKABLE_SKIPS,
)
from roach.workspace.stage import archived_bundle, earlier_stage_error
from roach.workspace.verify import VerifyResult, read_interface, required_files, verify
from roach.workspace.wait import WaitEvent, wait

__all__ = [
    "ARTIFACTS_DIR",
    "CHECKABLE_SKIPS",
    "DEFAULT_EXCLUDES",
    "DEFAULT_OUTPUTS",
    "INTERFACE_FILE",
    "PullResult",
    "ScriptRefused",
    "Settings",
    "Submission",
    "SyncResult",
    "VerifyResult",
    "WaitEvent",
    "Workspace",
    "WorkspaceError",
    "WorkspaceJob",
    "min_poll_interval",
    "pull",
    "required_files",
    "sbatch_script",
    "sync",
    "verify",
    "wait",
]


# -- sync ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SyncResult:
    source: str
    destination: str
    excludes: tuple[str, ...]
    changed: tuple[str, ...]  # files sent (or, dry run, that would be)
    deleted: tuple[str, ...]  # remote files removed (only with delete=True)
    dry_run: bool


def sync(
    workspace: Workspace | str | os.PathLike[str],
    cluster: Cluster | str | None = None,
    *,
    excludes: Sequence[str] | None = None,
    extra_excludes: Sequence[str] = (),
    delete: bool = False,
    dry_run: bool = False,
    include_git: bool = False,
    transport: Transport | None = None,
) -> SyncResult:
    """Copy the workspace up to its remote root with rsync, over the cluster's one SSH connection.

    ``excludes`` replaces the workspace's (``roach.toml``, else ``.venv/ .conda/ __pycache__/ .cache/
    logs/ .git/``); ``extra_excludes`` adds to them; ``include_git`` sends ``.git/`` after all.
    ``dsi-slurm-artifacts/`` is never sent. Remote files that are not here are kept unless ``delete``.
    """
    ws = open_workspace(workspace)
    remote = connect(resolve_cluster(ws, cluster), transport)
    remote.open()
    ws = remote.resolve(ws)
    dest = remote.rsync_root(ws)
    ex = tuple(dict.fromkeys([*(ws.settings.exclude if excludes is None else excludes), *extra_excludes]))
    if include_git:
        ex = tuple(e for e in ex if e.strip("/") != GIT_DIR.strip("/"))
    args = ["-rlpt", "--out-format=%i %n"]  # one line per change: what changed (itemized) and the name
    for pattern in (*ex, *ALWAYS_EXCLUDED):
        args.append(f"--exclude={pattern}")
    if delete:
        args.append("--delete")
    if dry_run:
        args.append("--dry-run")
    proc = remote.rsync([*args, f"{ws.root}/", dest], f"of {ws.root} to {dest}")
    changed, deleted = [], []
    for line in proc.stdout.splitlines():
        flags, _, name = line.partition(" ")
        if flags.startswith("*deleting"):
            deleted.append(name.strip())
        elif len(flags) >= 2 and flags[0] in "<>c" and flags[1] == "f":
            changed.append(name)
    return SyncResult(f"{ws.root}/", dest, ex, tuple(changed), tuple(deleted), dry_run)


# -- sbatch -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submission:
    job_id: str
    cluster: str
    script: PreparedScript
    record: WorkspaceJob
    remote_bundle: str
    local_bundle: Path


def sbatch_script(
    workspace: Workspace | str | os.PathLike[str],
    cluster: Cluster | str | None,
    script: str | os.PathLike[str],
    description: str = "",
    *,
    preemptible: bool = False,
    skip_checks: Sequence[str] = (),
    transport: Transport | None = None,
    store: Store | None = None,
) -> Submission:
    """Submit a sbatch script of the workspace, from the remote root, with its logs in its bundle.

    The script is read here and checked (:func:`~roach.workspace.script.prepare_script`; a missing
    request refuses it, listing all); the amended text is submitted held, the bundle
    ``dsi-slurm-artifacts/<JOB_ID>/`` is made on the cluster with job.json (``submitted``) and the script as
    submitted, job.json is written here too, the job is recorded in roach's store (``store``, default
    :class:`~roach.records.store.Store`; with the ssh alias it went through when not the cluster's own), and
    only then is it released. If anything between fails, the held job is cancelled and its record removed.
    The script file is never changed.
    """
    ws = open_workspace(workspace)
    c = resolve_cluster(ws, cluster)
    rel = ws.relative(script)
    local = ws.root / rel
    try:
        text = local.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the script {local}: {exc.strerror or exc}") from None
    prepared = prepare_script(text, rel, preemptible=preemptible, skip_checks=tuple(skip_checks))
    remote = connect(c, transport)
    remote.open()
    ws = remote.resolve(ws)
    options = ["--hold"]
    if prepared.job_name is None:
        options.append(f"--job-name={Path(rel).name}")  # sent on stdin, the job would be named "sbatch"
    client = remote.client(ws.remote_root)  # sbatch runs in the remote root: relative paths match here
    job_id = str(client.sbatch(options, prepared.text))
    rec = WorkspaceJob(
        job_id=job_id,
        script=rel,
        description=description,
        submitted_at_utc=utc_now(),
        cluster=c.name,
        array=prepared.array,
    )
    bundle = ws.remote_bundle(job_id)
    store = store if store is not None else Store()
    recorded = False
    try:
        remote.fs.write(posixpath.join(bundle, f"submitted-{Path(rel).name}"), prepared.text)
        write_both(ws, remote, rec)
        store.add(_store_record(ws, rec, prepared, **submitted_route(c)))
        recorded = True
        remote.client().release(job_id)
    except BaseException as exc:
        _cancel_held(remote, job_id)
        if recorded:  # never a record without a job (a refused add leaves an older job's record alone)
            store.delete(c.name, int(job_id))
        shutil.rmtree(ws.local_bundle(job_id), ignore_errors=True)
        if isinstance(exc, RoachError):
            raise
        raise RoachError(f"submission of job {job_id} failed and the held job was cancelled: {exc}") from exc
    return Submission(job_id, c.name, prepared, rec, bundle, ws.local_bundle(job_id))


def _store_record(ws: Workspace, rec: WorkspaceJob, prepared: PreparedScript, via: str | None, via_config: str | None):
    name = prepared.job_name or Path(prepared.path).name
    outputs = [d.value for d in prepared.directives if d.key == "output" and d.value]
    output = outputs[-1] if outputs else (ARRAY_OUTPUT if prepared.is_array else OUTPUT)
    requests = {d.key: d.value for d in prepared.directives if d.key in REQUIREMENTS and d.value}
    return store_record(
        rec,
        name=name,
        log=log_path(output, rec.job_id, name, ws.remote_root),
        bundle=ws.remote_bundle(rec.job_id),
        remote_root=ws.remote_root,
        workspace=str(ws.root),
        requests=requests,
        via=via,
        via_config=via_config,
    )


def _cancel_held(remote: Remote, job_id: str) -> None:
    try:
        remote.client().scancel([job_id])
    except RoachError:
        pass  # the original failure is what the caller must see


# -- pull ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PullResult:
    job_id: str
    record: WorkspaceJob
    bundle: Path
    bundle_found: bool
    copied: tuple[str, ...]  # outputs copied back (workspace-relative)
    missing: tuple[str, ...]  # outputs that do not exist on the cluster
    still_queued: tuple[str, ...]  # the job's states if it has not ended yet (job.json is then not final)
    notes: tuple[str, ...] = ()


_EXISTING = 'root=$1; shift; for p do if [ -e "$root/$p" ]; then printf "%s\\n" "$p"; fi; done'


def pull_paths(ws: Workspace, extra: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """What ``pull`` brings back besides the bundle, and notes: every path ``scoring/interface.md`` names,
    ``roach.toml``'s outputs (without a roach.toml and an interface: ``metrics.json artifacts/ results/``),
    then ``extra``."""
    notes: list[str] = []
    named: list[str] = []
    try:
        named = [e.path for e in read_interface(ws.root) if not e.is_glob]
    except InterfaceError as err:
        notes.append(f"{err.message}: its paths are not pulled")
    except WorkspaceError:
        pass  # no interface.md: the outputs alone
    if (ws.root / SETTINGS_FILE).exists() or not named:
        named += ws.settings.outputs
    outs = [check_relative(o, "output") for o in [*named, *extra]]
    return list(dict.fromkeys(outs)), notes


def pull(
    workspace: Workspace | str | os.PathLike[str],
    job_id: str | int,
    cluster: Cluster | str | None = None,
    *,
    outputs: Sequence[str] = (),
    transport: Transport | None = None,
    store: Store | None = None,
) -> PullResult:
    """Copy the job's bundle back to ``dsi-slurm-artifacts/<JOB_ID>/`` and, to the same relative paths here,
    every path the interface names, the workspace's outputs and ``outputs`` (see :func:`pull_paths`).

    If the job has ended but job.json does not say so yet (no ``wait`` ran), its final state is recorded
    first. Outputs that do not exist are reported in ``missing``, not raised: after a failure, whatever
    exists is brought back.
    """
    job_id = check_job_id(job_id)
    ws = workspace if isinstance(workspace, Workspace) else Workspace.load(workspace, job_id)
    remote = connect(resolve_cluster(ws, cluster, job_id, store), transport)
    remote.open()
    ws = remote.resolve(ws)
    outs, notes = pull_paths(ws, outputs)
    rec = read_record(ws, remote, job_id)
    still: list[str] = []
    if not rec.is_final:
        still = queued_states(remote, job_id)
        if not still:
            rec = record_final(ws, remote, job_id, rec, store=store)
    bundle_rel = f"{ARTIFACTS_DIR}/{job_id}/"
    probe = remote.transport.run(["sh", "-c", _EXISTING, "sh", ws.remote_root, bundle_rel, *outs])
    if not probe.ok:
        raise RoachError(
            f"could not look for job {job_id}'s files under {ws.remote_root} on {remote.where}: {probe.stderr.strip()}"
        )
    found = probe.stdout.splitlines()
    if bundle_rel not in found:
        old = archived_bundle(ws.root, job_id)
        if old is not None:
            raise earlier_stage_error(ws.root, job_id, old)
    sources = [p for p in [bundle_rel, *outs] if p in found]
    if sources:
        root = remote.rsync_root(ws)  # rsync's -R keeps what follows /./ as the path here
        srcs = [f"{root}./{p}" for p in sources]
        remote.rsync(
            ["-rlt", "--relative", *srcs, f"{ws.root}/"], f"of job {job_id}'s files back to {ws.root}", up=False
        )
    if bundle_rel not in found and rec.is_final:
        write_local(ws, rec)  # at least the record, even where the bundle is gone
    local = read_local(ws, job_id) or rec
    return PullResult(
        job_id,
        local,
        ws.local_bundle(job_id),
        bundle_rel in found,
        tuple(o for o in outs if o in found),
        tuple(o for o in outs if o not in found),
        tuple(still),
        tuple(notes),
    )
