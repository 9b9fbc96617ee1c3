"""Record what Slurm prints of faults on a running lab: a node not responding, slurmdbd catching up, and the
controller's own record of ended jobs (what a watch reads where accounting never gets them).

    python -m tests.record_faults_output --out DIR    (as root in the lab's shell, the lab up and its queue empty)

On another release's lab: ``roach lab shell --slurm 24.11 -- bash -c 'cd /work/main && python -m
tests.record_faults_output --out /tmp/rec'``, then copy ``<root>/tmp/rec/*`` into tests/data/24.11/.
The lab is the one ``SLURM_CONF`` names (its state directory holds ``etc/slurm.conf``), or ``--state-dir``.

- n2's slurmd stopped (SIGSTOP, by the lab's pid file) until slurmctld marks n2 not responding (``idle*``): with no
  job on it, ``sinfo_dead_idle.txt`` (``parse_control.dead_argv()``) and ``sinfo_nodes_state_one_not_responding.txt``
  (the same fields for every node: ``dead_argv()`` without ``--dead``); then with a job running on it (``mixed*``),
  ``sinfo_dead_mixed.txt``. slurmctld pings a node every SlurmdTimeout/3 and sets it DOWN after SlurmdTimeout: the
  slurmd is continued (SIGCONT) as soon as the ``*`` shows, and each wait is bounded well below that.
- slurmdbd stopped (the lab's pid file) while a job (``rec-dbd-down``: ``sleep 4; exit 3``) is submitted and ends,
  then started again and sacct read at once, as ``SlurmClient.sacct`` asks for one job (``--jobs ID --allocations
  --starttime 1970-01-01``): while it lists the job ended with no End (22.05), ``sacct_X_dbd_catching_up.txt``; once
  the End arrived, ``sacct_X_dbd_caught_up.txt``. A release that lists the job only with its End (24.11: nothing for
  about 9 s, then the whole record) has no catching-up file; each new answer is printed as it comes.
- ``squeue_ended.txt``: :func:`~roach.scheduler.controller_ends.ended_argv` for jobs that ended as they can (exit 0,
  exit 3, killed by SIGKILL, a two-task array whose task 1 exits 1) and one still running, read within
  ``MinJobAge`` of their ends (``--only ended``: about 20 s).

Takes about 8 minutes (each wait for the ``*``, and for the node to answer again, is up to a ping cycle,
SlurmdTimeout/3: 100 s on the lab).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from roach.lab.config import LabConfig
from roach.lab.daemons import Daemon
from roach.lab.lab import daemons
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.controller_ends import ended_argv
from tests.record_slurm import SACCT, Recorder

NODE = "n2"  # the node whose slurmd stops
NODES = [a for a in PC.dead_argv() if a != "--dead"]  # every node, in the same fields (the 22.05 file's argv)
DBD_JOB = "rec-dbd-down"


def node_states(rec: Recorder) -> dict[str, str]:
    r = rec.run(NODES)
    if r.returncode != 0:
        return {}
    return {f[0].strip(): f[1].strip() for f in P.records(r.stdout, len(PC.DEAD_FIELDS), P.RS, "sinfo")}


def until(what: str, cond: Callable[[], bool], timeout: float, every: float = 1.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def slurmd_timeout(rec: Recorder) -> int:
    config = PC.parse_show_config(rec.run(["scontrol", "show", "config"]).stdout)
    return int(config["SlurmdTimeout"].split()[0])  # "300 sec"


@contextmanager
def stopped(d: Daemon) -> Iterator[None]:
    """``d`` stopped (SIGSTOP) for the block, continued (SIGCONT) after it whatever happens."""
    pid = d.pid()
    if pid is None:
        raise SystemExit(f"{d.name} is not running (its pid file {d.pidfile} names no live process)")
    print(f"  SIGSTOP {d.name} (pid {pid})", flush=True)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        print(f"  SIGCONT {d.name} (pid {pid})", flush=True)


def not_responding(rec: Recorder, slurmd: Daemon, timeout: int, save: Callable[[], None]) -> None:
    """Stop ``slurmd`` until slurmctld marks its node not responding, call ``save``, then wait for the node to
    answer again."""
    with stopped(slurmd):

        def marked() -> bool:
            state = node_states(rec).get(NODE, "")
            if state.startswith("down"):
                raise SystemExit(f"{NODE} went {state} before it was recorded not responding")
            return "*" in state

        until(f"{NODE} marked not responding (a * on its state)", marked, timeout * 0.8)
        print(f"  {NODE}: {node_states(rec)[NODE]}", flush=True)
        save()
    until(f"{NODE} to answer again", lambda: "*" not in node_states(rec).get(NODE, "*"), timeout * 0.8)


def dead_nodes(rec: Recorder, lab: dict[str, Daemon]) -> None:
    print(f"{NODE} not responding", flush=True)
    timeout = slurmd_timeout(rec)
    slurmd = lab[f"slurmd-{NODE}"]
    until("every node to answer", lambda: all("*" not in s for s in node_states(rec).values()), timeout * 0.8)

    def idle() -> None:
        rec.save("sinfo_dead_idle.txt", PC.dead_argv())
        rec.save("sinfo_nodes_state_one_not_responding.txt", NODES)

    not_responding(rec, slurmd, timeout, idle)
    rec.sbatch("rec-on-n2", ["-w", NODE], "sleep 900")
    rec.wait("the job on n2 to run", lambda q: rec.state("rec-on-n2", q) == {"RUNNING"})
    time.sleep(2)

    def mixed() -> None:
        rec.save("sinfo_dead_mixed.txt", PC.dead_argv())

    not_responding(rec, slurmd, timeout, mixed)
    rec.cancel("rec-on-n2")
    rec.wait("the job on n2 to end", lambda q: not q.get("rec-on-n2"), 120)


def sacct_dbd_down(rec: Recorder, lab: dict[str, Daemon]) -> None:
    print("slurmdbd down", flush=True)
    dbd = lab["slurmdbd"]
    if not dbd.stop():
        raise SystemExit("slurmdbd was not running")
    print("  slurmdbd stopped", flush=True)
    try:
        rec.sbatch(DBD_JOB, ["-w", "n1"], "sleep 4; exit 3")
        rec.wait("the job to end", lambda q: not q.get(DBD_JOB), 120)
    finally:
        here = os.getcwd()
        os.chdir("/")  # as `roach lab up` starts it: not in the source tree, bound read-only into a release's root
        try:
            dbd.start(ready=lambda: True)
        finally:
            os.chdir(here)
        print("  slurmdbd started", flush=True)
    argv = [*SACCT, "--jobs", str(rec.ids[DBD_JOB]), "--allocations", "--starttime", "1970-01-01"]
    started, seen, last = time.monotonic(), False, None
    while time.monotonic() < started + 120:
        r = rec.run(argv)
        answer = (r.returncode, r.stdout, r.stderr.strip()[:200])
        if answer != last:  # each new answer, as slurmdbd catches up
            print(f"  {time.monotonic() - started:.1f}s: rc {r.returncode} {r.stdout!r} {answer[2]!r}", flush=True)
            last = answer
        listed = P.parse_sacct(r.stdout) if r.returncode == 0 else []
        ended = [a for a in listed if a.state.is_terminal]
        if any(a.end_time is None for a in ended) and not seen:
            (rec.out / "sacct_X_dbd_catching_up.txt").write_bytes(r.stdout.encode())
            print("  sacct_X_dbd_catching_up.txt", flush=True)
            seen = True
        if ended and all(a.end_time is not None for a in ended):
            (rec.out / "sacct_X_dbd_caught_up.txt").write_bytes(r.stdout.encode())
            print("  sacct_X_dbd_caught_up.txt", flush=True)
            if not seen:  # 24.11: nothing for ~9 s, then the job with its End
                print("  sacct listed the job only with its End: no sacct_X_dbd_catching_up.txt", flush=True)
            return
        time.sleep(0.05)
    raise SystemExit("timed out after 120s waiting for slurmdbd to hold the job's end")


ENDED = {  # job name: (sbatch options, body)
    "rec-ended-ok": ([], "exit 0"),
    "rec-ended-3": ([], "exit 3"),
    "rec-ended-kill": ([], "kill -9 $$"),
    "rec-ended-arr": (["--array=0-1"], "exit $SLURM_ARRAY_TASK_ID"),
    "rec-ended-run": ([], "sleep 600"),
}


def controller_ended(rec: Recorder) -> None:
    """``squeue -t all`` of jobs that ended each way, and of one still running, before slurmctld forgets them."""
    ids = [str(rec.sbatch(name, opts, body)) for name, (opts, body) in ENDED.items()]
    rec.wait(
        "every job but the running one to end",
        lambda q: (
            not any(n in q for n in ENDED if n != "rec-ended-run") and rec.state("rec-ended-run", q) == {"RUNNING"}
        ),
        timeout=120,
    )
    rec.save("squeue_ended.txt", ended_argv(ids))
    rec.run(["scancel", ids[-1]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the folder the files are written into")
    ap.add_argument("--state-dir", help="the lab's state directory (default: the one SLURM_CONF lies in)")
    ap.add_argument(
        "--only", choices=("dead", "dbd", "ended"), help="record only the node's, slurmdbd's or the ended jobs' files"
    )
    args = ap.parse_args()
    if args.state_dir:
        state = Path(args.state_dir)
    elif os.environ.get("SLURM_CONF"):
        state = Path(os.environ["SLURM_CONF"]).parent.parent  # <state>/etc/slurm.conf
    else:
        raise SystemExit("no lab: set SLURM_CONF (`roach lab shell` does) or give --state-dir")
    cfg = LabConfig.load(state)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(cfg, out)
    rec.rest = None  # the commands' output only
    version = rec.run(["scontrol", "--version"]).stdout.strip()
    print(f"recording {version} ({state}) into {out}", flush=True)
    if rec.queue():
        raise SystemExit("the lab's queue is not empty: cancel its jobs first")
    lab = {d.name: d for d in daemons(cfg)}
    if args.only in (None, "dead"):
        dead_nodes(rec, lab)
    if args.only in (None, "dbd"):
        sacct_dbd_down(rec, lab)
    if args.only in (None, "ended"):
        controller_ended(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
