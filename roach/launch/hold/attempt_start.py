"""Start an attempt as steps of a running holder: ``submit(..., inside=<holder>)`` and ``Holder.submit``.

An attempt starts at once. A driver script, detached on the submit host (``setsid nohup``: it outlives
the submitting shell; its output is appended to the run's log ``<log_root>/<run_id>_<holder>.out``), runs
the node step and then the ranks' step with ``srun --jobid=<holder> --overlap``: the same ``node.sh
prepare`` and ``python -m roach.slurm.run <spec>`` as a batch job. It writes its exit status into the
attempt's bundle ``<log_root>/bundles/<holder>.<n>/exit``; :meth:`~roach.launch.hold.holder.InsideJob.wait`
records it in the store. Nothing is requeued: a step dies with its holder. The guide is docs/hold.md.

An attempt's store record is of kind ``attempt``: its ``job_id`` and ``holder`` are the holder's, its
``attempt`` its number there (key ``<holder>/<n>``). :func:`start_attempt` refuses a holder that is not
running, too small, ending or busy, claims the attempt's number, and starts it through the pipeline
(:mod:`roach.launch.pipeline`); the holder it is given is what :class:`Holding` names.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from roach.errors import RoachError, UsageError
from roach.fleet.cluster import Cluster
from roach.launch import pipeline
from roach.launch.hold.attempts import AttemptPaths, attempt_records, read_attempts
from roach.launch.hold.scripts import AttemptInputs, render_driver, render_step
from roach.launch.hold.steps import HolderInfo, Step, StepKind
from roach.launch.pipeline import Destination, Written
from roach.launch.prepare import Prepared
from roach.launch.shipping import node_script, runtime_dir
from roach.model.ids import RecordKind
from roach.model.resources import Resources
from roach.records.bundle import JobJson
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.clusterfs import ClusterFS

SETTLE_S = 120.0  # how long a new attempt waits for a stopped one's steps to leave squeue -s


# `setsid`: its own session and process group, so the submitting shell's end (or ^C) does not reach it.
_LAUNCH = 'cd "$1" || exit 1; setsid nohup bash "$2" >>"$3" 2>&1 </dev/null & echo "$!"'


class Holding(Protocol):
    """What starting an attempt asks of its holder (:class:`~roach.launch.hold.holder.Holder` is one)."""

    cluster: Cluster
    job_id: int

    @property
    def ending_path(self) -> str | None: ...

    def info(self) -> HolderInfo: ...

    def wait_running(self, timeout: float | None = None, poll_s: float = 2.0) -> HolderInfo: ...

    def lead_s(self) -> int | None: ...

    def steps(self, info: HolderInfo | None = None) -> list[Step]: ...


# -- the holder's checks ---------------------------------------------------------------------------------------
def _check_fits(res: Resources, info: HolderInfo, holder: int) -> None:
    if res.nodes > info.nodes or res.gpus_per_node > info.gpus_per_node:
        raise UsageError(
            f"the attempt asks {res.nodes} node(s) x {res.gpus_per_node} GPU(s) and holder {holder} has "
            f"{info.nodes} node(s) x {info.gpus_per_node} GPU(s) ({info.nodelist})",
            hint="ask for at most what the holder has (its time, account and QOS are the holder's)",
        )


def _wait_for_previous(h: Holding, info: HolderInfo, store: Store, fs: ClusterFS, settle_s: float) -> None:
    """Return once no other attempt's step runs in the holder. A stopped attempt (roach signal) or an ended
    one whose steps linger is waited for up to ``settle_s``; a running one is refused at once."""
    deadline = time.monotonic() + settle_s
    while True:
        steps = [s for s in h.steps(info) if s.kind.is_attempt]
        recs = attempt_records(store, h.cluster.name, h.job_id)
        status = read_attempts(fs.transport, [AttemptPaths.of(r).bundle_dir for r in recs])
        by_n = {AttemptPaths.of(r).attempt: (r, status[AttemptPaths.of(r).bundle_dir]) for r in recs}
        busy: list[str] = []
        for n, (r, st) in sorted(by_n.items()):
            own = [s for s in steps if s.attempt == n]
            alive = st.exit is None and (bool(own) or st.driver_alive is not False)
            if alive and not st.stop_requested:
                where = ", ".join(f"{s.id} {s.describe()} for {s.elapsed_s} s" for s in own) or "starting"
                raise UsageError(
                    f"holder {h.job_id} is running attempt {n} (run {r.run_id}: {where}); a second attempt "
                    f"would run on the same GPUs",
                    hint=f"stop it first: `roach signal {h.job_id}` (it checkpoints "
                    f"and exits; submit again then), or pass force=True (--force) to run both",
                )
            if alive or own:
                busy.append(f"attempt {n} (run {r.run_id})")
        strangers = [s for s in steps if s.attempt is None or s.attempt not in by_n]
        for s in strangers:
            if s.kind is StepKind.RANKS:
                raise UsageError(
                    f"holder {h.job_id} runs step {s.id} ({s.name}: {s.describe()}), which roach did "
                    f"not start here; a second instance would run on the same GPUs",
                    hint="end that step first, or pass force=True (--force)",
                )
            busy.append(f"step {s.id}")
        if not busy:
            return
        if time.monotonic() > deadline:
            raise UsageError(
                f"{', '.join(busy)} still in holder {h.job_id} after {settle_s:.0f} s",
                hint=f"`roach steps {h.job_id}` shows what runs; wait, or pass force=True (--force)",
            )
        time.sleep(max(1.0, min(h.cluster.min_poll_s, 5.0)))


def _claim(p: Prepared, run_id: str, holder: int) -> AttemptPaths:
    """The next attempt's paths in ``holder``, claimed by making its bundle directory (mkdir is atomic)."""
    fs = p.fs
    fs.makedirs(p.bundle_root)
    res = fs.transport.run(
        ["sh", "-c", 'cd "$1" 2>/dev/null && ls -1d -- "$2".* 2>/dev/null || true', "sh", p.bundle_root, str(holder)]
    )
    used = [int(x.rpartition(".")[2]) for x in res.stdout.split() if x.rpartition(".")[2].isdigit()]
    used += [r.attempt or 0 for r in attempt_records(p.store, p.cluster.name, holder)]
    first = max(used, default=0) + 1
    for n in range(first, first + 100):
        paths = AttemptPaths(p.abs_log_root, run_id, holder, n)
        if fs.transport.run(["mkdir", "--", paths.bundle_dir]).returncode == 0:
            return paths
    raise RoachError(f"could not claim an attempt number in holder {holder} under {p.bundle_root}")


def _running_holder(p: Prepared, h: Holding, force: bool, wait_holder_s: float | None) -> HolderInfo:
    """What Slurm says of the holder, refused unless it runs, fits the attempt, is not ending and (without
    ``force``) is free."""
    holder = h.job_id
    info = h.info()
    if info.state.is_pending and wait_holder_s is not None:  # before anything is written: a timeout leaves nothing
        info = h.wait_running(timeout=wait_holder_s)
    if not info.state.is_running:
        why = f" ({info.reason})" if info.reason else ""
        raise UsageError(
            f"holder {holder} is {info.state.value}{why}: an attempt starts only inside a running holder",
            hint="wait for it: submit(..., wait_holder_s=S) (--wait-holder S), or `roach hold --wait`, "
            "Holder.wait_running()"
            if info.state.is_pending
            else "hold again (`roach hold`)",
        )
    _check_fits(p.resources, info, holder)
    lead = h.lead_s()
    ending = h.ending_path is not None and p.fs.exists(h.ending_path)
    if not force and (ending or lead is not None and info.time_left_s is not None and info.time_left_s <= lead):
        raise UsageError(
            f"holder {holder} ends in {info.time_left_s} s and already stopped its attempts "
            f"({lead} s before its end, up to 30 s earlier): this attempt would be killed without a "
            f"checkpoint",
            hint="release it and hold again (`roach release`, `roach hold`)",
        )
    if not force:
        _wait_for_previous(h, info, p.store, p.fs, SETTLE_S)
    return info


# -- the attempt ---------------------------------------------------------------------------------------------


def _inputs(p: Prepared, h: Holding, info: HolderInfo, paths: AttemptPaths, run_id: str, run_dir: str) -> AttemptInputs:
    """What the attempt's driver and step scripts are rendered from."""
    return AttemptInputs(
        cluster=p.cluster,
        resources=p.resources,
        holder=h.job_id,
        attempt=paths.attempt,
        run_id=run_id,
        paths=paths,
        nodes=tuple(p.client.hostnames(info.nodelist))[: p.resources.nodes],
        gpus_per_node=info.gpus_per_node,
        roach_path=runtime_dir(p.bundle_root),
        repo_url=p.repo.url,
        repo_name=p.repo.name,
        commit=p.repo.commit,
        clone_root=p.options.clone_root,
        run_dir=run_dir,
        holder_ending=h.ending_path,
        python_env=p.python_env.env,
    )


def _written(p: Prepared, i: AttemptInputs, args: dict[str, Any]) -> Written:
    """The attempt's record and its bundle's files (spec, node script, step script, driver, job.json)."""
    paths, n = i.paths, i.attempt
    record = p.record(
        job_id=i.holder,
        run_id=i.run_id,
        run_dir=i.run_dir,
        log_path=paths.log,
        bundle_dir=paths.bundle_dir,
        holder=i.holder,
        attempt=n,
        kind=RecordKind.ATTEMPT,
    )
    # A step cannot be requeued: a wall-clock stop must never `scontrol requeue` the holder.
    spec = p.run_spec(run_id=i.run_id, run_dir=i.run_dir, args=args, max_timeout_requeues=0, holder=i.holder, attempt=n)
    files = {
        paths.spec: spec.to_json(),
        paths.node_sh: node_script(),  # each script is run with bash: none needs an exec bit
        paths.step_sh: render_step(i),
        paths.driver: render_driver(i),
        paths.job_json: JobJson.submitted(
            record, paths.driver, p.options.description, python_env=p.python_env.to_json()
        ).to_json(),
    }
    return Written([record], files, [paths.bundle_dir], runtime_root=p.bundle_root)


def start_attempt(
    p: Prepared,
    h: Holding,
    *,
    args: dict[str, Any],
    run_id: str,
    run_dir: str,
    force: bool = False,
    wait_holder_s: float | None = None,
) -> JobRecord:
    """Start an attempt now as steps of holder ``h``; ``p`` and the values are submit()'s, validated there. A
    holder still pending is waited for up to ``wait_holder_s`` (None: refused at once). Returns its record."""
    holder = h.job_id
    info = _running_holder(p, h, force, wait_holder_s)
    paths = _claim(p, run_id, holder)
    n = paths.attempt
    inputs = _inputs(p, h, info, paths, run_id, run_dir)

    def write(_: list[int]) -> Written:
        return _written(p, inputs, args)

    def launch() -> None:
        ran = p.fs.transport.run(["sh", "-c", _LAUNCH, "sh", paths.bundle_dir, paths.driver, paths.log])
        if ran.returncode != 0 or not ran.stdout.strip().isdigit():
            raise RoachError(f"starting the driver failed: {ran.stderr.strip() or ran.stdout.strip()}")

    to = Destination(p.cluster, p.client, p.fs, p.store)
    written = pipeline.start(
        to,
        [(holder, "")],
        write,
        log_prefix=None,
        what=f"starting attempt {n} inside holder {holder}",
        release=launch,
        unqueue=lambda: p.fs.remove_bundle(paths.bundle_dir),
    )
    return written.records[0]
