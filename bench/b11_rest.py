"""Benchmark 11, REST: a status round and the submit call through slurmrestd, beside Slurm's commands run here and
over SSH.

The lab must be up with ``--rest`` (slurmrestd with JWT at its port base + 5) and in the hosts layout (its login
host's sshd). Every method acts as the lab's user, on the same queue: N held jobs of that user, in one held array
(``--array``: squeue lists one line per task, slurmctld's job list one record per pending range) or N held jobs
one by one. A round is the two reads of roach's status round: the user's queue, and accounting of a few jobs that
already ended (what ``roach ls`` and the watch ask when a job leaves the queue), through the one client each
method gives (``SlurmClient`` on a local or an SSH transport, ``RestClient``):

* rest: one ``GET .../jobs`` and one ``GET .../slurmdb/.../jobs``, HTTP from this process, asking slurmrestd only
  for what the round needs: the ended jobs by id (``step``), and from v0.0.42 the queue only if it changed since the
  last read (``update_time``);
* rest-all: the same requests without those filters (every job since the epoch, the whole queue each round);
* local: ``squeue`` and ``sacct`` run here (as the lab's user: runuser);
* ssh: the same commands on the login host over roach's shared connection (ControlMaster), opened before.

Before the rounds, ``HISTORY`` short jobs run to their end, so that slurmdbd holds more than the few ended ones a
round asks about (a real cluster's slurmdbd holds every job since it was set up), and before each size's rounds the
controller has purged every job that ended (so the queue does not change between rounds). Counted: wall and CPU per round (this process; the commands' own CPU apart, as children), and the RPCs the user
sent slurmctld and slurmdbd during it (sdiag, sacctmgr show stats). The submit call: one held ``sbatch`` of a
two-line script, each job cancelled after.
"""

from __future__ import annotations

import time

from bench import rounds
from bench.labenv import BenchError, Jobs, Lab, submit_held, submit_held_array
from bench.report import Section
from bench.stats import Row, comparison_table
from roach.lab import login
from roach.lab.conf_files import rest_url
from roach.lab.config import LAB_USER
from roach.scheduler.client import SlurmClient
from roach.scheduler.rest.client import RestClient
from roach.scheduler.rest.request import RestApi
from roach.scheduler.rest.token import TokenSource
from roach.scheduler.ssh import SSHTransport
from roach.scheduler.transport import LocalTransport

METHODS = ("rest", "rest-all", "local", "ssh")
TITLE = "REST: a status round and the submit call through slurmrestd"
ENDED = 5  # jobs that already ended, whose accounting each round reads
HISTORY = 300  # short jobs that ran to their end before the rounds: slurmdbd's other jobs
SCRIPT = "#!/bin/bash\ntrue\n"


def clients(lab: Lab) -> dict[str, SlurmClient]:
    """Each method's client, as the lab's user (ssh only in the hosts layout, whose login host has an sshd)."""
    if not lab.cfg.rest:
        raise BenchError("benchmark 11 needs the lab up with --rest: `roach lab up --rest`")
    local = LocalTransport(env=lab.env, user=lab.user, default_timeout=600)
    token = TokenSource(lab.user, ("scontrol", "token", "lifespan=3600"), transport=local)
    out: dict[str, SlurmClient] = {
        "rest": RestClient(LocalTransport(), api=RestApi(rest_url(lab.cfg), token, timeout_s=600)),
        "rest-all": RestClient(LocalTransport(), api=RestApi(rest_url(lab.cfg), token, timeout_s=600), filters=False),
        "local": SlurmClient(local),
    }
    if lab.cfg.hosts:
        out["ssh"] = SlurmClient(SSHTransport(login.alias(lab.cfg), env=lab.env, default_timeout=600))
    return out


def _forgotten(lab: Lab, ids: list[str], log) -> None:
    """Wait until slurmctld has purged the ended ``ids`` (MinJobAge after their end): until then a purge changes
    its job list, and a round's queue read between two purges is the whole list again."""
    client = lab.user_client()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and any(client.show_job(j) is not None for j in ids):
        time.sleep(5)
    log(f"  the controller forgot {len(ids)} ended jobs and arrays")


def _history(lab: Lab, log) -> str:
    """``HISTORY`` one-second array tasks run to their end, waited for in accounting; the array's id."""
    client = lab.user_client()
    opts = [f"--array=0-{HISTORY - 1}", "--job-name=bench-rest-history", "--output=/dev/null", "--time=1"]
    job = client.sbatch(opts, "#!/bin/bash\ntrue\n")
    log(f"bench 11: {HISTORY} short jobs to their end (slurmdbd's history)")
    deadline = time.monotonic() + 900
    while client.squeue(job_ids=[job]) and time.monotonic() < deadline:
        time.sleep(2)
    while len(client.sacct([job])) < HISTORY and time.monotonic() < deadline:
        time.sleep(2)
    return str(job)


def _ended(lab: Lab) -> list[str]:
    ids = [str(j) for j in submit_held(lab, ENDED, name="bench-rest-ended")]
    lab.user_client().scancel(ids)
    deadline = time.monotonic() + 60
    while lab.user_client().squeue(job_ids=ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return ids


def run(
    lab: Lab, _bench_jobs: Jobs, sizes: list[int], reps: int, log=print, shapes: tuple[str, ...] = ("array", "jobs")
) -> Section:
    lab = Lab(lab.cfg, user=LAB_USER)  # the user every way in acts as: slurmrestd's token, the login host's ssh
    jobs = Jobs(lab)
    try:
        return _run(lab, jobs, sizes, reps, log, shapes)
    finally:
        jobs.cancel_all()


def _run(lab: Lab, jobs: Jobs, sizes: list[int], reps: int, log, shapes: tuple[str, ...]) -> Section:
    methods = clients(lab)
    for c in methods.values():
        c.squeue()  # a first read each: the token made, the version chosen, the ssh connection open
    gone = [_history(lab, log)]
    ended = _ended(lab)
    gone += ended
    rows: list[Row] = []
    for shape in shapes:
        for n in sizes:
            log(f"bench 11: {n} held {'array tasks' if shape == 'array' else 'jobs'}")
            ids = [submit_held_array(lab, n)] if shape == "array" else submit_held(lab, n)
            jobs.add(ids)
            try:
                _forgotten(lab, gone, log)
                rows += _rounds(lab, methods, ended, n, shape, reps, log)
            finally:
                jobs.cancel(ids)
                gone += ids
    rows.append(_submits(lab, methods, jobs, reps))
    body = comparison_table(rows, [m for m in METHODS if m in methods], roach="rest")
    rest = methods["rest"]
    version = rest.rest.versions()[0].value if isinstance(rest, RestClient) else "?"
    return Section(11, TITLE, body, {"reps": reps, "data version": version, "history": HISTORY})


def _rounds(
    lab: Lab, methods: dict[str, SlurmClient], ended: list[str], n: int, shape: str, reps: int, log
) -> list[Row]:
    got: dict[str, dict[str, list[float]]] = {k: {m: [] for m in methods} for k in ("wall", "cpu", "child", "rpcs")}
    for name, client in methods.items():
        listed = len(client.squeue())
        if listed < n:
            log(f"  warning: {name} lists {listed} records for {n}")
    for _ in range(reps):
        for name, client in methods.items():

            def one(c: SlurmClient = client) -> None:
                c.squeue()
                c.sacct(ended)

            cost = rounds.measure(lab, one)
            got["wall"][name].append(cost.wall_s * 1000)
            got["cpu"][name].append(cost.cpu_s * 1000)
            got["child"][name].append(cost.child_cpu_s * 1000)
            got["rpcs"][name].append(cost.rpcs)
    what = f"{n} {'array tasks' if shape == 'array' else 'jobs'}"
    return [
        Row(f"{what}: round wall", got["wall"], "ms"),
        Row(f"{what}: round CPU (this process)", got["cpu"], "ms"),
        Row(f"{what}: the commands' CPU (children)", got["child"], "ms"),
        Row(f"{what}: Slurm RPCs (slurmctld + slurmdbd)", got["rpcs"], ""),
    ]


def _submits(lab: Lab, methods: dict[str, SlurmClient], jobs: Jobs, reps: int) -> Row:
    walls: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(reps):
        for name, client in methods.items():
            t0 = time.perf_counter()
            job = client.sbatch(["--hold", "--job-name=bench-rest-submit", "--output=/dev/null", "--time=1"], SCRIPT)
            walls[name].append((time.perf_counter() - t0) * 1000)
            jobs.add([job])
            jobs.cancel([job], wait_s=0)
    return Row("the submit call (held)", walls, "ms")
