"""Run a submission as steps of a holder: ``submit(..., inside=<holder>)``.

An attempt starts at once. A driver script, detached on the submit host (``setsid nohup``: it outlives
the submitting shell; its output is appended to the run's log ``<log_root>/<run_id>_<holder>.out``), runs
the node step and then the ranks' step with ``srun --jobid=<holder> --overlap``: the same ``node.sh
prepare`` and ``python -m roach.slurm.run <spec>`` as a batch job. It writes its exit status into the
attempt's bundle ``<log_root>/bundles/<holder>.<n>/exit``; :meth:`InsideJob.wait` records it in the
store. Nothing is requeued: a step dies with its holder. The guide is docs/hold.md.

An attempt's store record has ``holder=<holder>`` and a ``job_id`` of its own, :func:`attempt_id`: the
holder's id in the low 32 bits and the attempt number above them, so it is unique per cluster and never
a Slurm job id (those are 32-bit).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import roach
from roach.errors import RoachError, UsageError
from roach.slurm.bundle import JobJson
from roach.slurm.cluster import Cluster
from roach.slurm.clusterfs import ClusterFS, shipped_dir
from roach.slurm.hold import STEP_NODE, STEP_RANKS, Holder, HolderInfo, Step, StepKind
from roach.slurm.job import Job
from roach.slurm.resources import Resources
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.states import JobState
from roach.slurm.store import JobRecord, Store, utc_now

EXIT_LEFT = 3  # rank 0's exit code when the ranks checkpointed and left (roach.slurm.attempts)
SETTLE_S = 120.0  # how long a new attempt waits for a stopped one's steps to leave squeue -s
_LOST_GRACE_S = 30.0  # after the holder ended, how long a driver may take to write its exit status


def attempt_id(holder: int, n: int) -> int:
    """The store's job id of attempt ``n`` (1, 2, ...) inside ``holder``."""
    return (n << 32) | holder


def split_attempt_id(job_id: int) -> tuple[int, int] | None:
    """``(holder, n)`` for an attempt's job id, None for a Slurm job id."""
    return (job_id & 0xFFFFFFFF, job_id >> 32) if job_id >> 32 else None


def is_attempt(rec: JobRecord) -> bool:
    return rec.holder is not None and rec.job_id != rec.holder


@dataclass(frozen=True)
class AttemptPaths:
    """Every path of one attempt on the cluster (``log_root`` absolute)."""

    log_root: str
    run_id: str
    holder: int
    attempt: int

    @classmethod
    def of(cls, rec: JobRecord) -> AttemptPaths:
        holder, n = split_attempt_id(rec.job_id) or (rec.job_id, 0)
        return cls(posixpath.dirname(rec.log_path), rec.run_id, holder, n)

    @property
    def bundle_dir(self) -> str:
        return posixpath.join(self.log_root, "bundles", f"{self.holder}.{self.attempt}")

    def _in(self, name: str) -> str:
        return posixpath.join(self.bundle_dir, name)

    driver = property(lambda self: self._in("driver.sh"))  # runs on the submit host
    step_sh = property(lambda self: self._in("step.sh"))  # runs on the nodes: prepare | rank
    script = driver
    spec = property(lambda self: self._in("spec.json"))
    node_sh = property(lambda self: self._in("node.sh"))
    job_json = property(lambda self: self._in("job.json"))
    exit = property(lambda self: self._in("exit"))  # {"exit_code": N, "ended_at_utc": ...}, by the driver
    pid = property(lambda self: self._in("driver.pid"))  # "<host> <pid>" of the driver
    stop = property(lambda self: self._in("stop"))  # roach signal asked the ranks to leave
    cancel = property(lambda self: self._in("cancel"))  # cancel() asked the driver not to start the ranks

    @property
    def log(self) -> str:
        return posixpath.join(self.log_root, f"{self.run_id}_{self.holder}.out")


@dataclass(frozen=True)
class AttemptExit:
    """The driver's exit status, and what it means."""

    exit_code: int
    ended_at: str

    @property
    def state(self) -> JobState:
        if self.exit_code == 0:
            return JobState.COMPLETED
        return JobState.CANCELLED if self.exit_code == EXIT_LEFT else JobState.FAILED

    @property
    def status(self) -> str:
        return self.state.value.lower()

    @property
    def state_text(self) -> str:
        if self.exit_code == EXIT_LEFT:
            return "CANCELLED (stopped: the ranks left to come back)"
        return self.state.value


@dataclass(frozen=True)
class AttemptStatus:
    """What an attempt's bundle says now."""

    exit: AttemptExit | None
    stop_requested: bool
    driver_alive: bool | None  # None: the driver ran on another host than the one asked


# One call for many attempts: per bundle dir, a line "<dir> US <exit json or -> US <stop 0/1> US <alive 1/0/?>"
# (alive "?": the driver ran on another host than the one that answers).
_READ = r"""me="$(hostname)"
for d in "$@"; do
  if [ ! -d "$d" ]; then printf '%s\037-\0370\0370\n' "$d"; continue; fi  # removed (roach clean): not running
  e=-; [ -r "$d/exit" ] && e="$(tr -d '\n' < "$d/exit")"
  s=0; [ -e "$d/stop" ] && s=1
  a=?; if [ -r "$d/driver.pid" ]; then read -r h p < "$d/driver.pid"
    if [ "$h" = "$me" ]; then if kill -0 "$p" 2>/dev/null; then a=1; else a=0; fi; fi; fi
  printf '%s\037%s\037%s\037%s\n' "$d" "$e" "$s" "$a"
done"""


def read_attempts(fs: ClusterFS, bundle_dirs: list[str]) -> dict[str, AttemptStatus]:
    """Each attempt's status from its bundle, in one command on the cluster (for ``roach ls`` too)."""
    if not bundle_dirs:
        return {}
    res = fs.transport.run(["sh", "-c", _READ, "sh", *bundle_dirs])
    if res.returncode != 0:
        raise RoachError(f"reading the attempts' bundles failed: {res.stderr.strip()}")
    out = {}
    for line in res.stdout.splitlines():
        d, e, s, a = line.split("\x1f")
        ex = None
        if e != "-":
            try:
                data = json.loads(e)
                ex = AttemptExit(int(data["exit_code"]), str(data.get("ended_at_utc", "")))
            except (ValueError, KeyError, TypeError):
                raise RoachError(f"the exit status in {d}/exit is not roach's: {e!r}") from None
        out[d] = AttemptStatus(ex, s == "1", None if a == "?" else a == "1")
    return out


def attempt_records(store: Store, cluster: str, holder: int, limit: int = 500) -> list[JobRecord]:
    """The store's attempts inside ``holder``, newest first."""
    return [r for r in store.recent(limit, cluster) if r.holder == holder and is_attempt(r)]


# -- the handle ----------------------------------------------------------------------------------------------
@dataclass
class InsideJob(Job):
    """An attempt run as steps of a holder. Its state is the driver's exit status, not Slurm's job state."""

    _holder: Holder | None = field(default=None, init=False, repr=False)

    @property
    def holder(self) -> int:
        return self.record.holder  # type: ignore[return-value]

    @property
    def attempt(self) -> int:
        return (split_attempt_id(self.record.job_id) or (0, 0))[1]

    @property
    def paths(self) -> AttemptPaths:  # type: ignore[override]
        return AttemptPaths.of(self.record)

    def __str__(self) -> str:
        return f"attempt {self.attempt} of run {self.run_id} inside holder {self.holder} on {self.cluster.name}"

    def _holder_handle(self) -> Holder:
        if self._holder is None:
            self._holder = Holder(self.cluster, self.holder, None, self.store)
            self._holder._client = self.client
        return self._holder

    def status(self) -> AttemptStatus:
        return read_attempts(self.fs, [self.paths.bundle_dir])[self.paths.bundle_dir]

    def state(self) -> JobState:
        """COMPLETED, FAILED or CANCELLED (stopped) once the driver wrote its exit status; RUNNING before,
        while the holder runs; FAILED if the holder ended and the driver never wrote one."""
        st = self.status()
        if st.exit is not None:
            return st.exit.state
        return JobState.RUNNING if self._holder_handle().state().is_active else JobState.FAILED

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> AttemptExit:  # type: ignore[override]
        """Block until the driver wrote its exit status; record it in the store and job.json."""
        poll_s = max(poll_s, self.cluster.min_poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        holder_gone_at = None
        while True:
            st = self.status()
            if st.exit is not None:
                self.record_final(st.exit)
                return st.exit
            if holder_gone_at is None and not self._holder_handle().state().is_active:
                holder_gone_at = time.monotonic()
            if holder_gone_at is not None and time.monotonic() - holder_gone_at > _LOST_GRACE_S:
                lost = AttemptExit(-1, utc_now())
                self.record_final(lost, "FAILED (the holder ended and the driver wrote no exit status)")
                return lost
            if deadline is not None and time.monotonic() > deadline:
                raise RoachError(f"{self} did not end within {timeout:.0f}s",
                                 hint=f"wait again, or stop it: roach signal {self.holder}")
            time.sleep(poll_s)

    def record_final(self, ex: AttemptExit, text: str | None = None) -> None:  # type: ignore[override]
        now = utc_now()
        text = text or ex.state_text
        code = f"{ex.exit_code}:0"
        try:
            base = JobJson.from_json(self.fs.read(self.paths.job_json))
        except RoachError:
            base = None
        if base is not None:
            from dataclasses import replace as _replace

            self.fs.write(self.paths.job_json, _replace(base, status=ex.status, slurm_state=text, exit_code=code,
                                                        recorded_at_utc=now).to_json())
        if self.store is not None:
            from dataclasses import replace as _replace

            self.store.update_final(self.cluster.name, self.job_id, ex.status, text, code, now)
            self.record = _replace(self.record, status=ex.status, slurm_state=text, exit_code=code, recorded_at=now)

    def steps(self) -> list[Step]:
        return [s for s in self._holder_handle().steps() if s.attempt == self.attempt and s.kind.is_attempt]

    def cancel(self) -> None:
        """Stop this attempt; the holder goes on. The driver starts no ranks' step any more; running ranks get
        SIGTERM the way ``roach signal`` sends it (they log it, checkpoint at their next step and exit). A
        second cancel, or a node step, is ``scancel``-ed (killed at once)."""
        again = self.fs.exists(self.paths.cancel)
        self.fs.write(self.paths.cancel, utc_now() + "\n")
        steps = self.steps()
        ranks = [s for s in steps if s.kind is StepKind.RANKS]
        if ranks and not again:
            self._holder_handle().signal(ranks[0].step, "TERM")
            steps = [s for s in steps if s not in ranks]
        if steps:
            self.client.scancel([s.id for s in steps])


def job_for(cluster: Cluster, record: JobRecord, store: Store | None = None) -> Job:
    """The handle of a recorded job: an :class:`InsideJob` for an attempt inside a holder, else a :class:`Job`."""
    return InsideJob(cluster, record, store) if is_attempt(record) else Job(cluster, record, store)


# -- scripts -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttemptInputs:
    cluster: Cluster
    resources: Resources
    holder: int
    attempt: int
    run_id: str
    paths: AttemptPaths
    nodes: tuple[str, ...]  # the step's nodes, first = MASTER_ADDR
    gpus_per_node: int  # the holder's, per node
    roach_path: str
    repo_url: str
    repo_name: str
    commit: str
    clone_root: str
    run_dir: str
    holder_ending: str | None = None  # the holder's "ending" marker: no ranks start once it exists


def render_step(i: AttemptInputs) -> str:
    """``step.sh``: what runs on the nodes. ``prepare`` (one task per node) makes the clone; ``rank`` (one
    task per GPU) becomes the rank."""
    return f"""#!/bin/bash
# roach attempt {i.attempt} of run {i.run_id} inside holder {i.holder}: the nodes' side (docs/hold.md).
set -euo pipefail

# --- site file of cluster {i.cluster.name} ---
{i.cluster.site_file().rstrip()}
# --- end of site file ---

source {shlex.quote(i.paths.node_sh)}
case "${{1:-}}" in
  prepare) roach_prepare ;;
  rank)
    clone="$(roach_clone_dir)"
    export ROACH_CLONE_DIR="$clone"
    py="$(roach_python "$clone")"
    export PYTHONPATH="$ROACH_ROACH_PATH:$clone${{PYTHONPATH:+:$PYTHONPATH}}"
    run_dir="$(roach_expand "$ROACH_RUN_DIR")"
    mkdir -p "$run_dir"
    cd "$run_dir"
    exec "$py" -m roach.slurm.run {shlex.quote(i.paths.spec)} ;;
  *) echo "usage: step.sh prepare|rank" >&2; exit 2 ;;
esac
"""


def render_driver(i: AttemptInputs) -> str:
    """``driver.sh``: runs detached on the submit host; its output is the run's log."""
    q, res, p = shlex.quote, i.resources, i.paths
    exports = {
        "ROACH_RUN_ID": i.run_id, "ROACH_REPO_URL": i.repo_url, "ROACH_REPO_NAME": i.repo_name,
        "ROACH_COMMIT": i.commit, "ROACH_CLONE_ROOT": i.clone_root, "ROACH_ROACH_PATH": i.roach_path,
        "ROACH_RUN_DIR": i.run_dir, "ROACH_BUNDLE": p.bundle_dir, "ROACH_INSIDE_HOLDER": str(i.holder),
        "ROACH_ATTEMPT": str(i.attempt),
    }
    export_lines = "\n".join(f"export {k}={q(v)}" for k, v in exports.items())
    n = len(i.nodes)
    common = [f"--jobid={i.holder}", "--overlap", f"--nodelist={','.join(i.nodes)}", f"--nodes={n}"]
    cpus = res.cpus_per_gpu or res.cpus_per_task
    per_task = [f"--cpus-per-task={cpus}"] if cpus else []
    gpus = []
    if res.gpus_per_node and res.gpus_per_node < i.gpus_per_node:  # a part of the holder's GPUs
        gpus = [f"--gres=gpu:{res.gpus_per_node}" if i.cluster.gpu_flag == "gres"
                else f"--gpus-per-node={res.gpus_per_node}"]
    node_step = " ".join(q(a) for a in ["srun", *common, f"--job-name={STEP_NODE}:{i.attempt}", f"--ntasks={n}",
                                         "--ntasks-per-node=1", "--kill-on-bad-exit=1", "bash", p.step_sh, "prepare"])
    ranks_step = " ".join(q(a) for a in [
        "srun", *common, f"--job-name={STEP_RANKS}:{i.attempt}", f"--ntasks={n * res.tasks_per_node}",
        f"--ntasks-per-node={res.tasks_per_node}", *per_task, *gpus, "--kill-on-bad-exit=1",
        f"--wait={i.cluster.rank_exit_wait_s}", "--label", "bash", p.step_sh, "rank"])
    port = 20000 + (i.holder + 1009 * i.attempt) % 20000
    ending_check = "" if i.holder_ending is None else f"""if [ -e {q(i.holder_ending)} ]; then
  echo "roach: holder {i.holder} is near its wall clock and stopped its attempts; the ranks did not start"
  finish 130
fi
"""
    return f"""#!/bin/bash
# roach attempt {i.attempt} of run {i.run_id} inside holder {i.holder}: started detached on the submit host by
# submit(inside={i.holder}); its output is the run's log. It runs the node step, then the ranks' step, as steps
# of the holder, and writes its exit status to the file `exit` beside it (docs/hold.md).
set -uo pipefail
# Another allocation's variables (a shell inside a job) would change what srun does here.
for v in $(compgen -e); do case "$v" in SLURM_CONF) ;; SLURM_*) unset "$v" ;; esac; done
{export_lines}
now() {{ date -u +%Y-%m-%dT%H:%M:%SZ; }}
finish() {{
  printf '{{"exit_code": %d, "ended_at_utc": "%s"}}\\n' "$1" "$(now)" > "$ROACH_BUNDLE/exit.tmp"
  mv -f "$ROACH_BUNDLE/exit.tmp" "$ROACH_BUNDLE/exit"
  exit "$1"
}}
echo "$(hostname) $$" > "$ROACH_BUNDLE/driver.pid"
echo "roach: attempt {i.attempt} of run $ROACH_RUN_ID: inside holder {i.holder} on {','.join(i.nodes)} at $(now) \\
(a step of the holder: no requeue)"
first={q(i.nodes[0])}
MASTER_ADDR="$(scontrol show node "$first" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1)"
export MASTER_ADDR="${{MASTER_ADDR:-$first}}"
export MASTER_PORT={port}
{node_step}
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "roach: the node step failed (exit code $rc); the ranks did not start"
  finish "$rc"
fi
if [ -e "$ROACH_BUNDLE/cancel" ]; then
  echo "roach: attempt {i.attempt} was cancelled before its ranks started"
  finish 130
fi
{ending_check}{ranks_step}
rc=$?
echo "roach: ranks' step ended with exit code $rc"
finish "$rc"
"""


# `setsid`: its own session and process group, so the submitting shell's end (or ^C) does not reach it.
_LAUNCH = 'cd "$1" || exit 1; setsid nohup bash "$2" >>"$3" 2>&1 </dev/null & echo "$!"'


# -- submit(inside=...) ----------------------------------------------------------------------------------------
def _check_fits(res: Resources, info: HolderInfo, holder: int) -> None:
    if res.nodes > info.nodes or res.gpus_per_node > info.gpus_per_node:
        raise UsageError(
            f"the attempt asks {res.nodes} node(s) x {res.gpus_per_node} GPU(s) and holder {holder} has "
            f"{info.nodes} node(s) x {info.gpus_per_node} GPU(s) ({info.nodelist})",
            hint="ask for at most what the holder has (its time, account and QOS are the holder's)")


def _wait_for_previous(h: Holder, info: HolderInfo, store: Store, fs: ClusterFS, settle_s: float) -> None:
    """Return once no other attempt's step runs in the holder. A stopped attempt (roach signal) or an ended
    one whose steps linger is waited for up to ``settle_s``; a running one is refused at once."""
    deadline = time.monotonic() + settle_s
    while True:
        steps = [s for s in h.steps(info) if s.kind.is_attempt]
        recs = attempt_records(store, h.cluster.name, h.job_id)
        status = read_attempts(fs, [AttemptPaths.of(r).bundle_dir for r in recs])
        by_n = {AttemptPaths.of(r).attempt: (r, status[AttemptPaths.of(r).bundle_dir]) for r in recs}
        busy: list[str] = []
        for n, (r, st) in sorted(by_n.items()):
            own = [s for s in steps if s.attempt == n]
            alive = st.exit is None and (bool(own) or st.driver_alive is not False)
            if alive and not st.stop_requested:
                where = ", ".join(f"{s.id} {s.describe()} for {s.elapsed_s} s" for s in own) or "starting"
                raise UsageError(
                    f"holder {h.job_id} is running attempt {n} (run {r.run_id}: {where}); a second attempt "
                    f"would run on the same GPUs", hint=f"stop it first: `roach signal {h.job_id}` (it checkpoints "
                    f"and exits; submit again then), or pass force=True (--force) to run both")
            if alive or own:
                busy.append(f"attempt {n} (run {r.run_id})")
        strangers = [s for s in steps if s.attempt is None or s.attempt not in by_n]
        for s in strangers:
            if s.kind is StepKind.RANKS:
                raise UsageError(f"holder {h.job_id} runs step {s.id} ({s.name}: {s.describe()}), which roach did "
                                 f"not start here; a second instance would run on the same GPUs",
                                 hint="end that step first, or pass force=True (--force)")
            busy.append(f"step {s.id}")
        if not busy:
            return
        if time.monotonic() > deadline:
            raise UsageError(f"{', '.join(busy)} still in holder {h.job_id} after {settle_s:.0f} s",
                             hint=f"`roach steps {h.job_id}` shows what runs; wait, or pass force=True (--force)")
        time.sleep(max(1.0, min(h.cluster.min_poll_s, 5.0)))


def _next_attempt(fs: ClusterFS, store: Store, cluster: str, holder: int, bundle_root: str) -> int:
    res = fs.transport.run(["sh", "-c", 'cd "$1" 2>/dev/null && ls -1d -- "$2".* 2>/dev/null || true', "sh",
                            bundle_root, str(holder)])
    used = [int(x.rpartition(".")[2]) for x in res.stdout.split() if x.rpartition(".")[2].isdigit()]
    used += [(split_attempt_id(r.job_id) or (0, 0))[1] for r in attempt_records(store, cluster, holder)]
    return max(used, default=0) + 1


def submit_inside(
    *, holder: int, cluster: Cluster, resources: Resources, target: str, args: dict[str, Any],
    job_env: dict[str, str], name: str, run_id: str, repo: Any, python_path: list[str], log_root: str,
    abs_log_root: str, clone_root: str, secrets_dir: str | None, run_dir: str, description: str,
    checkpoint_every: int | None, store: Store, client: SlurmClient, fs: ClusterFS, force: bool = False,
    settle_s: float = SETTLE_S,
) -> InsideJob:
    """Start an attempt now as steps of ``holder``; the values are submit()'s, validated there."""
    h = Holder(cluster, holder, store.get(cluster.name, holder), store)
    h._client = client
    info = h.info()
    if not info.state.is_running:
        why = f" ({info.reason})" if info.reason else ""
        raise UsageError(f"holder {holder} is {info.state.value}{why}: an attempt starts only inside a running holder",
                         hint="wait for it (`roach hold --wait`, Holder.wait_running())" if info.state.is_pending
                         else "hold again (`roach hold`)")
    _check_fits(resources, info, holder)
    lead = h.lead_s()
    ending = h.ending_path is not None and fs.exists(h.ending_path)
    if not force and (ending or lead is not None and info.time_left_s is not None and info.time_left_s <= lead):
        raise UsageError(f"holder {holder} ends in {info.time_left_s} s and already stopped its attempts "
                         f"({lead} s before its end, up to 30 s earlier): this attempt would be killed without a "
                         f"checkpoint",
                         hint="release it and hold again (`roach release`, `roach hold`)")
    if not force:
        _wait_for_previous(h, info, store, fs, settle_s)
    nodes = tuple(client.run(["scontrol", "show", "hostnames", info.nodelist]).stdout.split())[:resources.nodes]
    bundle_root = posixpath.join(abs_log_root, "bundles")
    fs.makedirs(bundle_root)
    roach_dir = Path(roach.__file__).parent
    n = _next_attempt(fs, store, cluster.name, holder, bundle_root)
    for _ in range(100):  # claim attempt n: its bundle directory (mkdir is atomic), then its record
        paths = AttemptPaths(abs_log_root, run_id, holder, n)
        if fs.transport.run(["mkdir", "--", paths.bundle_dir]).returncode != 0:
            n += 1
            continue
        record = JobRecord(
            cluster=cluster.name, job_id=attempt_id(holder, n), run_id=run_id, name=name, target=target,
            commit=repo.commit, repo=repo.name, log_path=paths.log, bundle_dir=paths.bundle_dir, run_dir=run_dir,
            submitted_at=utc_now(), resources=resources.to_json(), status="submitted", slurm_state=None,
            exit_code=None, recorded_at=None, holder=holder)
        try:
            store.add(record)
        except UsageError:
            fs.rmdir_if_empty(paths.bundle_dir)
            n += 1
            continue
        break
    else:
        raise RoachError(f"could not claim an attempt number in holder {holder} under {bundle_root}")
    try:
        fs.ship_package(roach_dir, bundle_root)
        inputs = AttemptInputs(
            cluster=cluster, resources=resources, holder=holder, attempt=n, run_id=run_id, paths=paths, nodes=nodes,
            gpus_per_node=info.gpus_per_node, roach_path=shipped_dir(roach_dir, bundle_root), repo_url=repo.url,
            repo_name=repo.name, commit=repo.commit, clone_root=clone_root, run_dir=run_dir,
            holder_ending=h.ending_path)
        spec = {
            "version": 1, "target": target, "args": args, "run_id": run_id, "name": name, "cluster": cluster.name,
            "run_dir": run_dir, "log_root": log_root, "clone_root": clone_root, "secrets_dir": secrets_dir,
            "job_env": job_env, "python_path": python_path, "checkpoint_every": checkpoint_every,
            "checkpoint_signal": cluster.checkpoint_signal,
            # A step cannot be requeued: a wall-clock stop must never `scontrol requeue` the holder.
            "max_timeout_requeues": 0, "holder": holder, "attempt": n,
            "repo": {"url": repo.url, "commit": repo.commit, "name": repo.name},
        }
        from roach.slurm.submit import _node_sh

        fs.write(paths.spec, json.dumps(spec, indent=2) + "\n")
        fs.write(paths.node_sh, _node_sh(), mode="755")
        fs.write(paths.step_sh, render_step(inputs), mode="755")
        fs.write(paths.driver, render_driver(inputs), mode="755")
        fs.write(paths.job_json, JobJson(
            job_id=str(holder), script=paths.driver, description=description, submitted_at_utc=record.submitted_at,
            cluster=cluster.name, run_id=run_id, commit=repo.commit, resources=resources.to_json(), name=name,
            target=target).to_json())
        launched = fs.transport.run(["sh", "-c", _LAUNCH, "sh", paths.bundle_dir, paths.driver, paths.log])
        if launched.returncode != 0 or not launched.stdout.strip().isdigit():
            raise RoachError(f"starting the driver failed: {launched.stderr.strip() or launched.stdout.strip()}")
    except BaseException as exc:
        store.delete(cluster.name, record.job_id)
        fs.remove_bundle(paths.bundle_dir)
        if isinstance(exc, RoachError):
            raise
        raise RoachError(f"starting attempt {n} inside holder {holder} failed and was undone: {exc}") from exc
    job = InsideJob(cluster, record, store)
    job._client = client
    return job
