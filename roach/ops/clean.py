"""Cleaning up after an experiment, and the clones on the nodes.

``clean(EXPERIMENT)``: every job of the experiment (running, pending, requeued, and the allocations its
steps ran in) is cancelled, and nothing else; then its logs and bundles are deleted, and its node-local
scratch (``<node_scratch>/<run_id>*``, ``/tmp`` by default) on every node any of its jobs ran on, by a short
job step on each node. Run directories stay, and with them every ``resume.pt``: no roach command deletes a
checkpoint. A job's experiment is the name it was submitted under (:meth:`Store.set_experiment`), else the
directory above its log root (``~/scratch/<repo>/<expt>/slurm-logs`` belongs to ``<expt>``).

``clones()`` lists ``<clone_root>/<repo>-<commit>`` on each node with its size and whether a job uses it
(a process of the user's on that node runs from it, or the store has a running job at that commit there);
``clones(prune=True)`` removes, under the clone's lock, only those nothing uses and no queued job of the
user's is at (they are read-only: ``chmod -R u+w`` first).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from roach.errors import RoachError, SlurmError, UsageError, WaitTimeoutError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured, get_cluster
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.records.workspace_job import is_workspace_record
from roach.runtime.checkpoint import RESUME_FILE
from roach.scheduler.client import SlurmClient
from roach.scheduler.clusterfs import ClusterFS

# Fixed programs run on the login host or a node; paths and names are their arguments, never spliced in.
# The login host's print NUL-terminated paths (a path may hold a newline).
_EXISTING = 'for p in "$@"; do if [ -e "$p" ]; then printf "%s\\0" "$p"; fi; done'
_REMOVE = (
    'for p in "$@"; do case "$p" in */bundles/*|*.out) if [ -e "$p" ]; then rm -rf -- "$p" && '
    'printf "%s\\0" "$p"; fi;; *) echo "refusing $p" >&2; exit 2;; esac; done'
)
# A log root is removed only when nothing but bundles/ with shipped roach copies is left in it.
_TIDY = (
    'for d in "$@"; do [ -d "$d" ] || continue; other=$(find "$d" -mindepth 1 -maxdepth 1 ! -name bundles | head -n 1); '
    'left=$(find "$d/bundles" -mindepth 1 -maxdepth 1 ! -name "roach-*" 2>/dev/null | head -n 1); '
    'if [ -z "$other" ] && [ -z "$left" ]; then rm -rf -- "$d" && printf "%s\\0" "$d"; fi; done'
)
# On a node: MODE(list|delete) DIR... -- RUN... -- EXCLUDE...: <dir>/<run>* (not <dir>/<excluded>*).
_SCRATCH = r"""set -u
mode=$1; shift; dirs=(); runs=(); excl=(); which=dirs
for a in "$@"; do
  if [ "$a" = "--" ]; then if [ $which = dirs ]; then which=runs; else which=excl; fi; continue; fi
  case $which in dirs) dirs+=("$a");; runs) runs+=("$a");; *) excl+=("$a");; esac
done
for d in "${dirs[@]}"; do for r in "${runs[@]}"; do for p in "$d/$r"*; do
  [ -e "$p" ] || [ -L "$p" ] || continue
  b="${p##*/}"; skip=0
  for x in "${excl[@]+"${excl[@]}"}"; do case "$b" in "$x"*) skip=1;; esac; done
  [ $skip = 1 ] && continue
  if [ "$mode" = delete ]; then chmod -R u+w -- "$p" 2>/dev/null; rm -rf -- "$p" && echo "deleted $p" || echo "failed $p"
  else echo "found $p"; fi
done; done; done
"""
# On a node: MODE(list|prune) CLONE_ROOT KEEP...: one line per clone: name, KiB, complete, used, action.
_CLONES = r"""set -u
mode=$1; root=$2; shift 2
case "$root" in "~") root=$HOME;; "~/"*) root="$HOME/${root#"~/"}";; esac
[ -d "$root" ] || exit 0
used_by_a_process() {
  for e in /proc/[0-9]*/environ; do
    if tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "ROACH_CLONE_DIR=$1"; then return 0; fi
  done
  return 1
}
for d in "$root"/*; do
  [ -d "$d" ] || continue
  name=${d##*/}; size=$(du -sk -- "$d" 2>/dev/null | cut -f1); complete=0; used=0; action=kept
  [ -e "$d/.roach-clone-complete" ] && complete=1
  used_by_a_process "$d" && used=1
  keep=0; for k in "$@"; do [ "$k" = "${name%%.tmp.*}" ] && keep=1; done
  if [ "$mode" = prune ] && [ $used = 0 ] && [ $keep = 0 ]; then
    if ( flock -w 10 9 || exit 1; used_by_a_process "$d" && exit 1; chmod -R u+w -- "$d" && rm -rf -- "$d" ) \
        9>>"$root/.${name%%.tmp.*}.lock"; then action=pruned; else action=failed; fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${size:-0}" "$complete" "$used" "$action"
done
"""


def _nul(text: str) -> list[str]:
    return [p for p in text.split("\0") if p]


def experiment_of(rec: JobRecord, named: dict[tuple[str, int], str] | None = None) -> str:
    """The experiment ``rec`` belongs to: the name it was submitted under, else its log root's parent's name."""
    if named and (rec.cluster, rec.job_id) in named:
        return named[(rec.cluster, rec.job_id)]
    log_root = posixpath.dirname(rec.log_path.rstrip("/"))
    return posixpath.basename(posixpath.dirname(log_root.rstrip("/"))) or log_root


def experiments(store: Store) -> dict[str, list[JobRecord]]:
    """The store's jobs by experiment. A remote workspace's ``roach sbatch`` jobs are in none: their logs sit
    in their bundles (``dsi-slurm-artifacts/<JOB_ID>/``), which are the workspace's record to keep."""
    named = store.experiment_names()
    out: dict[str, list[JobRecord]] = {}
    for rec in store.all_jobs():
        if not is_workspace_record(rec):
            out.setdefault(experiment_of(rec, named), []).append(rec)
    return out


def _workspace_experiment(store: Store, name: str) -> bool:
    """Whether ``name`` is what a workspace job's log path would make its experiment (``dsi-slurm-artifacts``)."""
    return any(is_workspace_record(r) and experiment_of(r) == name for r in store.all_jobs())


def hostnames(client: SlurmClient, lists: Iterable[str]) -> list[str]:
    """Node names of Slurm host lists (``n[1-2],gpu7``), in one ``scontrol show hostnames``."""
    wanted = sorted({n for n in lists if n and n not in ("None assigned", "(null)", "None")})
    if not wanted:
        return []
    return sorted(set(client.hostnames(",".join(wanted))))


def on_nodes(
    cluster: Cluster,
    client: SlurmClient,
    nodes: Sequence[str],
    program: str,
    args: Sequence[str],
    *,
    name: str,
    immediate_s: int = 60,
) -> dict[str, tuple[int, str, str]]:
    """Run ``bash -c program`` with ``args`` once on each node as a short job (``srun``, one CPU, five
    minutes; given up when no CPU frees within ``immediate_s``). Nodes in parallel; returns rc, stdout,
    stderr per node."""
    parts = {n.name: n.partitions for n in client.nodes()}

    def one(node: str) -> tuple[int, str, str]:
        argv = [
            "srun",
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--time=5",
            f"--immediate={immediate_s}",
            f"--job-name={name}",
            "--quiet",
        ]
        if cluster.default_account:
            argv.append(f"--account={cluster.default_account}")
        mine = parts.get(node, ())
        part = cluster.default_partition if cluster.default_partition in mine else (mine[0] if mine else None)
        if part:
            argv.append(f"--partition={part}")
        r = client.transport.run([*argv, "bash", "-c", program, "roach", *args], timeout=immediate_s + 120)
        return r.returncode, r.stdout, r.stderr

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(one, nodes)))


@dataclass
class CleanReport:
    """What clean did (or, with ``dry_run``, would do) on one cluster."""

    experiment: str
    cluster: str
    dry_run: bool
    jobs: list[int]  # every recorded job of the experiment there
    cancelled: list[str] = field(default_factory=list)  # "id STATE" of the active ones
    logs: list[str] = field(default_factory=list)  # deleted (or to delete): logs, bundles, emptied log roots
    nodes: list[str] = field(default_factory=list)
    scratch: list[str] = field(default_factory=list)  # "node:path" deleted (dry run: the patterns)
    failed: list[str] = field(default_factory=list)
    checkpoints_kept: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def clean(
    experiment: str,
    *,
    store: Store | None = None,
    cluster: Cluster | str | None = None,
    dry_run: bool = False,
    run_as: str | None = None,
    wait_s: float = 120.0,
    immediate_s: int = 60,
    sleep: Callable[[float], None] = time.sleep,
) -> list[CleanReport]:
    """Cancel every job of ``experiment`` and only those, delete its logs and node-local scratch, keep its
    checkpoints. ``cluster`` limits it to one cluster (and is the object used to reach it); ``run_as`` reaches
    each of the experiment's clusters as that user where no cluster is given."""
    store = store or Store()
    by_exp = experiments(store)
    if experiment not in by_exp and _workspace_experiment(store, experiment):
        raise UsageError(
            f"{experiment!r} holds a remote workspace's `roach sbatch` jobs, not an experiment: "
            "clean does not touch them (their bundles and logs are the workspace's record)",
            hint="cancel one with `roach cancel sbatch-<JOB_ID>`; "
            f"experiments: {', '.join(sorted(by_exp)) or '(none)'}",
        )
    if experiment not in by_exp:
        raise UsageError(
            f"no experiment {experiment!r} in the store {store.path}",
            hint=f"experiments: {', '.join(sorted(by_exp)) or '(none)'}",
        )
    given = get_cluster(cluster) if cluster is not None else None
    groups: dict[str, list[JobRecord]] = {}
    for rec in by_exp[experiment]:
        if given is None or rec.cluster == given.name:
            groups.setdefault(rec.cluster, []).append(rec)
    if not groups:
        raise UsageError(
            f"experiment {experiment!r} has no job on cluster {given.name if given else '?'}",
            hint=f"its clusters: {', '.join(sorted({r.cluster for r in by_exp[experiment]}))}",
        )
    reports = []
    for name, recs in groups.items():
        c = given if given is not None else get_cluster(name)
        c = c.with_(run_as=run_as) if run_as and given is None else c
        reports.append(_clean_cluster(experiment, c, recs, store, dry_run, wait_s, immediate_s, sleep))
    return reports


def _nodes_ran_on(
    experiment: str, client: SlurmClient, ids: list[int], queued: list[str], report: CleanReport
) -> list[str]:
    """Every node an attempt of ``ids`` ran on: the queue's node lists (read before any cancel) and sacct's
    (-D: requeued attempts too). The queue's are needed as well: slurmdbd records a job's nodes a moment after
    slurmctld starts it (longer when it is busy or away), and a running job's scratch must not be missed for
    it. Where sacct cannot be read, the queue's nodes are cleaned and ``report.failed`` says what was not."""
    lists = list(queued)
    try:
        lists += [a.nodelist for a in client.sacct(ids, duplicates=True) if a.step is None] if ids else []
    except SlurmError as e:
        report.failed.append(
            f"{(str(e).splitlines() or [type(e).__name__])[0]}: the nodes ended attempts ran on "
            f"are not known, and their scratch was not looked at; run `roach clean {experiment}` again when "
            "slurmdbd answers"
        )
    return hostnames(client, lists)


def _clean_cluster(
    experiment: str,
    c: Cluster,
    recs: list[JobRecord],
    store: Store,
    dry_run: bool,
    wait_s: float,
    immediate_s: int,
    sleep: Callable[[float], None],
) -> CleanReport:
    c = configured(c)
    client = c.client()
    ids = {r.job_id for r in recs}  # Slurm's ids: each job's, and an attempt's holder
    report = CleanReport(experiment, c.name, dry_run, sorted(ids))
    active = [q for q in client.squeue() if q.ref.job in ids and q.state.is_active]
    report.cancelled = [f"{q.job_id} {q.state.value}" for q in active]
    if active and not dry_run:
        client.scancel(sorted({q.ref.job for q in active}))
        poll = max(1.0, min(c.min_poll_s, 10.0))
        deadline = time.monotonic() + wait_s
        while [q for q in client.squeue(job_ids=sorted(ids)) if q.ref.job in ids and q.state.is_active]:
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"jobs of {experiment} on {c.name} were cancelled and are still in the queue after "
                    f"{wait_s:.0f}s; nothing was deleted yet",
                    hint=f"run `roach clean {experiment}` again",
                )
            sleep(poll)
    report.nodes = _nodes_ran_on(experiment, client, sorted(ids), [q.nodelist for q in active], report)
    run_ids = sorted({r.run_id for r in recs})
    others = sorted({r.run_id for r in store.all_jobs()} - set(run_ids))
    exclude = [o for o in others if any(o != r and o.startswith(r) for r in run_ids)]
    args = [*c.node_scratch, "--", *run_ids, "--", *exclude]
    if dry_run:
        report.scratch = [f"{n}:{d}/{r}*" for n in report.nodes for d in c.node_scratch for r in run_ids]
    elif report.nodes:
        for node, (rc, out, err) in on_nodes(
            c, client, report.nodes, _SCRATCH, ["delete", *args], name="roach-clean", immediate_s=immediate_s
        ).items():
            report.scratch += [f"{node}:{ln.split(' ', 1)[1]}" for ln in out.splitlines() if ln.startswith("deleted ")]
            report.failed += [f"{node}:{ln.split(' ', 1)[1]}" for ln in out.splitlines() if ln.startswith("failed ")]
            if rc != 0:
                report.failed.append(f"{node}: the cleaning step failed (exit {rc}): {err.strip()[-300:]}")
    # a sweep's run has its own bundle (job.json) beside its array's shared one (script, spec)
    shared = {posixpath.join(posixpath.dirname(r.bundle_dir), str(r.job_id)) for r in recs if r.task is not None}
    paths = [p for r in recs for p in (r.log_path, r.bundle_dir) if "/bundles/" in r.bundle_dir] + sorted(shared)
    t = client.transport
    if dry_run:
        report.logs = _nul(t.run(["sh", "-c", _EXISTING, "sh", *paths]).stdout)
    else:
        r = t.run(["sh", "-c", _REMOVE, "sh", *paths])
        report.logs = _nul(r.stdout)
        if r.returncode != 0:
            report.failed.append(f"deleting logs: {r.stderr.strip()}")
        roots = sorted({posixpath.dirname(r.log_path) for r in recs})
        report.logs += _nul(t.run(["sh", "-c", _TIDY, "sh", *roots]).stdout)
    fs = ClusterFS(t)  # a run directory under ~ is the cluster user's home there
    ckpts = sorted({posixpath.join(fs.expand(r.run_dir), RESUME_FILE) for r in recs})
    report.checkpoints_kept = _nul(t.run(["sh", "-c", _EXISTING, "sh", *ckpts]).stdout) if ckpts else []
    return report


# -- clones ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Clone:
    node: str
    name: str  # <repo>-<commit>, or a half-made <repo>-<commit>.tmp.<host>.<pid>
    size_kib: int
    complete: bool
    used: bool  # a process on the node runs from it, or the store has a running job at it there
    used_by: tuple[int, ...]  # running jobs of the store's at it on that node
    action: str  # kept, pruned, failed

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def clones(
    cluster: Cluster | str,
    *,
    clone_root: str = "~/roach_clones",
    nodes: Sequence[str] = (),
    store: Store | None = None,
    prune: bool = False,
    immediate_s: int = 60,
) -> list[Clone]:
    """The clones under ``clone_root`` on each node (default: every node the store's jobs there ran on).
    With ``prune``, removes those no process uses and no running or pending job of the user's is at."""

    c = configured(get_cluster(cluster))
    store = store or Store()
    client = c.client()
    recs = store.all_jobs(cluster=c.name)
    if not nodes:
        ids = sorted({r.job_id for r in recs})[-500:]
        acct = client.sacct(ids) if ids else []
        nodes = hostnames(client, [a.nodelist for a in acct if a.step is None])
    if not nodes:
        raise UsageError(
            f"no node to look at on {c.name}: the store has no job there that ran on one",
            hint="name the nodes: --node NAME (repeatable)",
        )
    queue = [q for q in client.squeue() if q.state.is_active]
    at: dict[tuple[str, str], list[int]] = {}
    keep: set[str] = set()
    by_slurm_id: dict[int, list[JobRecord]] = {}
    for r in recs:  # a job, or an attempt inside a holder (counted as the holder's)
        by_slurm_id.setdefault(r.job_id, []).append(r)
    for q in queue:
        names = {f"{r.repo}-{r.commit}" for r in by_slurm_id.get(q.raw_id, ()) if r.commit}
        keep |= names  # a queued job may start on any node at any moment: its commit's clones stay
        for n in hostnames(client, [q.nodelist]) if q.state.is_running and names else ():
            for name in names:
                at.setdefault((n, name), []).append(q.raw_id)
    results = on_nodes(
        c,
        client,
        list(nodes),
        _CLONES,
        ["prune" if prune else "list", clone_root, *sorted(keep)],
        name="roach-clones",
        immediate_s=immediate_s,
    )
    out: list[Clone] = []
    for node, (rc, stdout, stderr) in results.items():
        if rc != 0:
            raise RoachError(
                f"listing the clones on {node} of {c.name} failed (exit {rc}): {stderr.strip()[-300:]}",
                hint="the node may be busy (no free CPU within the wait) or down; try again, or --node another",
            )
        for line in stdout.splitlines():
            parts = line.split("\t")
            if len(parts) != 5:
                raise RoachError(f"unexpected line from the clone listing on {node}: {line!r}")
            name, size, complete, used, action = parts
            jobs = tuple(at.get((node, name), ()))
            out.append(Clone(node, name, int(size or 0), complete == "1", used == "1" or bool(jobs), jobs, action))
    return sorted(out, key=lambda x: (x.node, x.name))
