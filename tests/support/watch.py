"""The watcher's fakes: squeue/sacct/log text in roach's own formats, a fake cluster answering through a
MockTransport, an injected clock, and the records and helpers tests/test_watch*.py share."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roach.lab.config import LAB_USER
from roach.model.tiers import Tier
from roach.ops.events import Event, EventKind
from roach.records import job_json_end as watch_final
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler import clusterfs
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.parse import RS, US
from roach.slurm.clusters.lab import LAB
from roach.watch.watcher import Watcher
from tests.support.schemas import validate_output

T0 = 1_800_000_000.0
# The unit tests' own tier table (capped, uncapped, preemptible), whatever the lab declares.
TIERED = LAB.with_(
    tiers=(Tier("high", qos="high", gpu_cap=4), Tier("normal", qos="normal"), Tier("low", qos="low", preemptible=True))
)

# A training function for the lab tests: checkpoints, and can hang at a step.
TRAIN = """
import time

def train(run, steps=10, step_s=0.2, hang_at=None):
    state = run.resume(default={"x": 0})
    for step in run.steps(run.start_step, steps):
        if step == hang_at:
            time.sleep(600)
        state["x"] += 1
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint(state)
    return state["x"]
"""


def sq(
    job: int | str,
    state: str = "RUNNING",
    *,
    reason: str = "None",
    qos: str = "normal",
    gpus: int = 1,
    elapsed: str = "0:10",
    restarts: int = 0,
    name: str = "j",
    nodelist: str = "n1",
    task: int | None = None,
    user: str = LAB_USER,
) -> str:
    """One squeue record as `squeue -O <squeue_format()>` prints it."""
    key = f"{job}_{task}" if task is not None else str(job)
    tres = "cpu=1,mem=500M,node=1,billing=1" + (f",gres/gpu={gpus}" if gpus else "")
    running = state not in ("PENDING", "RESV_DEL_HOLD")
    fields_ = [
        str(job),
        key,
        str(job),
        str(task) if task is not None else "N/A",
        name,
        user,
        "lab",
        "gpu",
        qos,
        state,
        reason,
        elapsed if running else "0:00",
        "UNLIMITED",
        str(restarts),
        "1",
        nodelist if running else "",
        tres,
        "2026-11-29T23:39:47",
        "2026-11-29T23:40:00" if running else "N/A",
    ]
    return US.join(fields_) + RS + "\n"


def se(job: int | str, state: str = "COMPLETED", *, status: int = 0, **kw: Any) -> str:
    """One record of slurmctld's ended jobs as ``squeue -t all -O <ended_format()>`` prints it (``status``: the
    wait status, as 22.05 prints exit_code)."""
    return sq(job, state, **kw).replace(RS, f"{US}{status}{US}2026-11-29T23:45:00{RS}")


def sa(
    job: int | str,
    state: str = "COMPLETED",
    *,
    exit_code: str = "0:0",
    elapsed: int = 5,
    qos: str = "normal",
    started: bool = True,
) -> str:
    """One sacct allocation line as `sacct -P --delimiter=US --format=<SACCT_FIELDS>` prints it (``started=False``:
    a job that ended before it started, as sacct shows one cancelled while pending)."""
    ended = state not in ("RUNNING", "PENDING")
    fields_ = [
        str(job),
        str(job).split("_")[0],
        "j",
        LAB_USER,
        "lab",
        "gpu",
        qos,
        state,
        exit_code,
        str(elapsed),
        "UNLIMITED",
        "2026-11-29T23:39:47",
        "2026-11-29T23:40:00" if started else "None",
        "2026-11-29T23:40:05" if ended else "Unknown",
        "1",
        "n1" if started else "None assigned",
        "billing=1,cpu=1,gres/gpu=1,mem=500M,node=1" if started else "",
        "None",
    ]
    return US.join(fields_) + "\n"


@dataclass
class FakeLog:
    size: int
    mtime: float
    lines: list[str] = field(default_factory=list)


@dataclass
class FakeCluster:
    """What squeue, sacct, sbatch --test-only, scontrol show reservation and the log look say, from what a test
    sets; ``transport`` (a MockTransport over :meth:`answer`) is what a watcher's client runs them through."""

    queue: list[str] = field(default_factory=list)
    acct: list[str] = field(default_factory=list)
    logs: dict[str, FakeLog] = field(default_factory=dict)
    req_nodes: dict[str, str] = field(default_factory=dict)
    remote_now: float = T0
    down: dict[str, str] = field(default_factory=dict)  # command -> stderr it fails with
    starts_at: str | None = None  # what sbatch --test-only says
    preempts: str = ""  # the raw job ids it says starting there preempts ("5,6")
    resv_of: dict[str, str] = field(default_factory=dict)  # job key -> the reservation it asks for (squeue %v)
    reservations: dict[str, str] = field(default_factory=dict)  # name -> StartTime (scontrol show reservation)
    finals: dict[str, list[str]] = field(default_factory=dict)  # job.json path -> the values written there
    steps: list[str] = field(default_factory=list)  # `squeue --steps` records
    ended: list[str] = field(default_factory=list)  # what `squeue -t all` of ended jobs prints (se records)
    dead: str = ""  # what `sinfo --dead` prints: the nodes not responding (none by default)
    requeue_refused: str | None = None  # the stderr `scontrol requeue` fails with (None: it succeeds)
    release_refused: str | None = None  # the stderr `scontrol release` fails with (None: it succeeds)
    written: dict[str, str] = field(default_factory=dict)  # files the watch wrote on the cluster, by path
    transport: MockTransport = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.transport = MockTransport(self.answer)

    @property
    def calls(self) -> list[list[str]]:
        """Every command run so far, in order."""
        return [list(c.argv) for c in self.transport.calls]

    def answer(self, command: tuple[str, ...], input: str | bytes | None) -> tuple[int, str, str] | None:
        argv = list(command)
        cmd = argv[0]
        if cmd in self.down:
            return 1, "", self.down[cmd]
        if cmd == "squeue" and "--steps" in argv:
            return 0, "".join(self.steps), ""
        if cmd == "squeue" and "-t" in argv and argv[argv.index("-t") + 1] == "all":
            return 0, "".join(self.ended), ""
        if cmd == "squeue" and "ReqNodes" in " ".join(argv):
            keys = argv[argv.index("--jobs") + 1].split(",")
            out = "".join(f"{k}{US}{self.req_nodes.get(k, '(null)')}\x1e" for k in keys)
            return 0, out, ""
        if cmd == "squeue":
            queue = self.queue
            if "Reservation:" in argv[argv.index("-O") + 1]:  # one field more, before each record's end
                queue = [q.replace(RS, US + self.resv_of.get(q.split(US)[1], "(null)") + RS) for q in queue]
            return 0, "".join(queue), ""
        if argv[:2] == ["sinfo", "--dead"]:
            return 0, self.dead, ""
        if argv[:2] == ["scontrol", "release"]:
            return (0, "", "") if self.release_refused is None else (1, "", self.release_refused)
        if argv[:2] == ["scontrol", "requeue"]:
            return (0, "", "") if self.requeue_refused is None else (1, "", self.requeue_refused)
        if argv[:3] == ["scontrol", "show", "reservation"]:
            out = "".join(
                f"ReservationName={n} StartTime={t} EndTime=2027-01-16T00:00:00 Duration=1-00:00:00 "
                f"Nodes=n1 NodeCnt=1 Users={LAB_USER} State=INACTIVE\n"
                for n, t in self.reservations.items()
            )
            return 0, out or "No reservations in the system\n", ""
        if cmd == "sacct":
            return 0, "".join(self.acct), ""
        if cmd == "sbatch" and "--test-only" in argv:
            said = f"sbatch: Job 9 to start at {self.starts_at} using 1 processors on nodes n1 in partition gpu\n"
            said += f"sbatch:   Preempts: {self.preempts}\n" if self.preempts else ""
            return 0, "", said if self.starts_at else "allocation failure\n"
        if cmd == "sh" and argv[2] == clusterfs._WRITE:  # a file written whole: kept, by its path
            self.written[argv[4]] = input.decode() if isinstance(input, bytes) else (input or "")
            return 0, "", ""
        if cmd == "sh" and argv[2] == watch_final._PROGRAM:  # the round's final states into job.json files
            args = argv[6:]  # after the awk program and the tail's size: groups of path, four values, log
            out = ""
            for i in range(0, len(args), 6):
                self.finals[args[i]] = [json.loads(v) for v in args[i + 1 : i + 5]]
                out += f"W{US}{args[i]}{RS}"
                if (log := self.logs.get(args[i + 5])) is not None:  # a failed job's log: its tail
                    out += f"L{US}{args[i]}{US}" + "".join(ln + "\n" for ln in log.lines) + RS
            return 0, out, ""
        if cmd == "sh":
            n = int(argv[4])
            paths = argv[5 + n :]
            out = f"T{US}{int(self.remote_now)}{US}2027-01-15T08:00:00{RS}"
            for d in argv[5 : 5 + n]:
                out += f"D{US}{d}{US}1000{US}100000 50000{RS}"
            for p in paths:
                log = self.logs.get(p)
                if log is None:
                    out += f"M{US}{p}{RS}"
                else:
                    out += f"F{US}{p}{US}{log.size} {int(log.mtime)}{US}" + "".join(ln + "\n" for ln in log.lines) + RS
            return 0, out, ""
        return None  # the MockTransport fails the test: a command this fake does not know

    def slurm_calls(self) -> int:
        return sum(1 for c in self.calls if c[0] in ("squeue", "sacct", "sbatch", "scontrol", "sh"))


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, s: float) -> None:
        self.t += s


def record(
    job_id: int, run_id: str | None = None, *, qos: str = "normal", gpus: int = 1, log_root: str = "/logs"
) -> JobRecord:
    run_id = run_id or f"run{job_id}"
    res = {
        "account": None,
        "partition": None,
        "qos": qos,
        "constraint": None,
        "nodes": 1,
        "gpus_per_node": gpus,
        "cpus_per_gpu": 1,
        "cpus_per_task": None,
        "mem": None,
        "time": "00:30:00",
        "reservation": None,
        "gpu_type": None,
        "extra": [],
    }
    return JobRecord(
        "lab",
        job_id,
        run_id,
        f"n{job_id}",
        "pkg.m:f",
        "c" * 40,
        "work",
        f"{log_root}/{run_id}_{job_id}.out",
        f"{log_root}/bundles/{job_id}",
        f"/runs/{run_id}",
        "2026-11-29T23:39:47Z",
        res,
        "submitted",
        None,
        None,
        None,
    )


def watcher(fake: FakeCluster, store: Store, clock: Clock, **kw) -> Watcher:
    client = SlurmClient(fake.transport, retries=1, backoff_s=0.0, sleep=lambda s: None)
    kw.setdefault("interval_s", 10.0)
    kw.setdefault("heartbeat_s", 900.0)
    return Watcher(TIERED, client, store, clock=clock, sleep=lambda s: clock.tick(s), **kw)


def kinds(events: list[Event]) -> list[str]:
    """The events' kinds; each event's JSON validated against its schema on the way (docs/json.md), so every
    watch test that looks at its events checks what `roach watch --json` would print of them."""
    for e in events:
        validate_output("watch", json.loads(json.dumps(e.to_json())))
        VALIDATED.add(e.kind.value)
    return [e.kind.value for e in events]


def only(events: list[Event], kind: EventKind) -> list[Event]:
    kinds(events)
    return [e for e in events if e.kind is kind]


VALIDATED: set[str] = set()  # the kinds validated so far in this session


_HOLD_LOCK = """import sys, time
from pathlib import Path
from roach.records.poller.lock import WatchLock
assert WatchLock(Path(sys.argv[1]), sys.argv[2]).try_acquire()
print("locked", flush=True)
time.sleep(120)
"""


@contextmanager
def poller_elsewhere(store: Path, cluster: str = "lab") -> Iterator[subprocess.Popen[str]]:
    """Another process holding the poller's lock of ``store`` and ``cluster`` (as a running watch would) for the
    block, killed after it."""
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(store), cluster], stdout=subprocess.PIPE, text=True, cwd=repo
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        yield p
    finally:
        p.kill()
        p.wait()
