"""One status round of each method, and what it cost the controllers.

* roach: :class:`roach.watch.watcher.Watcher` ``round()`` (one ``squeue`` of the user's jobs, at most one
  ``sacct`` for watched jobs that left the queue, a log look only for running jobs). Where the watcher
  is missing, the round ``roach ls`` makes (``roach.launch.job_view.live_views``): one ``squeue`` + one
  ``sacct`` for the listed jobs not in the queue.
* submitit: ``SlurmInfoWatcher.update()``: one ``sacct -j ...`` for every registered job not finished
  (what ``job.state``/``job.done()`` polling triggers at most every ``delay_s``).
* per-job loop: ``squeue -h -j <id>`` for each job, one after another (a shell loop).

Every round runs as the bench user; :func:`measure` reads the controllers' per-user counters around it.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import rpcstats
from bench.labenv import Lab, import_submitit
from roach.records.job_record import JobRecord, utc_now
from roach.records.store import Store
from roach.slurm.clusters.lab import LAB


@dataclass
class Cost:
    """What one round cost: RPCs the bench user sent to slurmctld and slurmdbd, time, CPU."""

    ctld: int
    dbd: int
    wall_s: float
    cpu_s: float  # this process (parsing, bookkeeping)
    child_cpu_s: float  # the commands it ran (squeue, sacct, runuser)
    commands: int | None = None
    server_us: int = 0  # time slurmctld and slurmdbd spent serving those RPCs (their own accounting)
    ctld_types: dict[str, int] = field(default_factory=dict)  # whole controller, anyone's
    dbd_types: dict[str, int] = field(default_factory=dict)

    @property
    def rpcs(self) -> int:
        return self.ctld + self.dbd


def measure(lab: Lab, fn: Callable[[], int | None], tries: int = 3) -> Cost:
    """Run ``fn`` (one round; it may return how many commands it ran) between two counter snapshots."""
    for attempt in range(tries):
        before = lab.snapshot()
        t0, c0, k0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        commands = fn()
        wall, cpu, k1 = time.perf_counter() - t0, time.process_time() - c0, resource.getrusage(resource.RUSAGE_CHILDREN)
        after = lab.snapshot()
        try:
            ctld, dbd = after[0].minus(before[0]), after[1].minus(before[1])
        except rpcstats.StatsReset:
            if attempt + 1 == tries:
                raise
            continue
        child = (k1.ru_utime - k0.ru_utime) + (k1.ru_stime - k0.ru_stime)
        server = ctld.time_by_user.get(lab.user, 0) + dbd.time_by_user.get(lab.user, 0)
        return Cost(
            ctld.user(lab.user), dbd.user(lab.user), wall, cpu, child, commands, server, ctld.by_type, dbd.by_type
        )
    raise AssertionError("unreachable")


# -- roach -------------------------------------------------------------------------------------------------
def have_watcher() -> bool:
    try:
        from roach.watch.watcher import Watcher  # noqa: F401
    except ImportError:
        return False
    return True


class RoachRound:
    """roach's round over ``job_ids`` (plain ids or one array id) or over store ``records``."""

    def __init__(self, lab: Lab, store_path: Path, job_ids: Sequence[str] = (), records: Sequence[JobRecord] = ()):
        self.lab = lab
        self.client = lab.user_client()
        self.store = Store(store_path)
        for rec in records:
            self.store.add(rec)
        self.records = list(records)
        self.job_ids = tuple(job_ids)
        self.watcher = None
        if have_watcher():
            from roach.watch.watcher import Watcher

            self.watcher = Watcher(
                LAB.with_(run_as=lab.user), self.client, self.store, job_ids=self.job_ids, heartbeat_s=1e9
            )

    @property
    def kind(self) -> str:
        return "roach watch round" if self.watcher is not None else "roach ls round (live_views)"

    def __call__(self) -> int | None:
        if self.watcher is not None:
            self.watcher.round()
            return None
        from roach.launch.job_view import live_views

        live_views(self.client, self.records or self.store.unfinished("lab"), self.store, whole_queue=True)
        return None


def fake_records(ids: Sequence[str], user_home: str) -> list[JobRecord]:
    """Store records for held plain jobs, as if roach had submitted them (what `roach watch` watches)."""
    now = utc_now()
    out = []
    for jid in ids:
        run_id = f"bench-held-{jid}"
        out.append(
            JobRecord(
                cluster="lab",
                job_id=int(jid),
                run_id=run_id,
                name="bench-held",
                target="pkg.jobfns:first_line",
                commit="0" * 40,
                repo="bench",
                log_path=f"{user_home}/bench-logs/{run_id}_{jid}.out",
                bundle_dir=f"{user_home}/bench-logs/bundles/{jid}",
                run_dir=f"{user_home}/bench-runs/{run_id}",
                submitted_at=now,
                resources={},
                status="submitted",
                slurm_state=None,
                exit_code=None,
                recorded_at=None,
            )
        )
    return out


# -- submitit ----------------------------------------------------------------------------------------------
class SubmititRound:
    """submitit's shared watcher with ``ids`` registered; each round is one forced ``update()``."""

    def __init__(self, lab: Lab, ids: Sequence[str]):
        submitit = import_submitit()
        user = lab.user

        class AsUser(submitit.slurm.slurm.SlurmInfoWatcher):
            def _make_command(self):
                cmd = super()._make_command()
                return None if cmd is None else ["runuser", "-u", user, "--", *cmd]

        os.environ.update(lab.env)  # SLURM_CONF for the sacct it runs
        self.watcher = AsUser(delay_s=60)
        for jid in ids:
            self.watcher.register_job(str(jid))

    def __call__(self) -> int:
        before = self.watcher.num_calls
        self.watcher.update()
        return self.watcher.num_calls - before


# -- a loop of squeue -j -----------------------------------------------------------------------------------
class SqueueLoop:
    """``squeue -h -j <id> -o %T`` for each id, as the bench user, in one shell loop."""

    def __init__(self, lab: Lab, ids: Sequence[str]):
        self.client = lab.user_client()
        self.ids = [str(i) for i in ids]

    def __call__(self) -> int:
        self.client.run(
            ["bash", "-c", 'for id in "$@"; do squeue -h -j "$id" -o %T || true; done', "loop", *self.ids], retry=False
        )
        return len(self.ids)
