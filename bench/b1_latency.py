"""Benchmark 1, submit latency: from the submit call to the first line of the user's function.

The function (bench/jobfns.py ``first_line``) writes ``time.time()`` to a file as its first line; the
benchmark takes the time just before the submit call and polls for the file. Each repetition submits
with every method in turn, so a busier moment of the cluster hits them alike:

* roach: ``roach.slurm.submit`` of ``pkg.jobfns:first_line`` from a pushed git repo, in a process running
  as the bench user (bench/roach_driver.py, as submitit's: the time is taken in that process, around
  ``submit``); warm: one submission first, so the commit's clone on the cluster exists.
* sbatch: ``sbatch --wrap "<python> -c 'from bench.jobfns import first_line; first_line(None, out)'"``.
* submitit: ``AutoExecutor(folder).submit(first_line, None, out)``, in a process running as the bench
  user (bench/submitit_driver.py; the time is taken in that process, before ``submit``).

All three ask for 1 task, 1 CPU, no GPU, and run the lab job venv's python.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from bench.execclock import ProcessClock, Processes
from bench.labenv import ROOT, BenchError, Jobs, Lab
from bench.repo import make_repo
from bench.report import Section
from bench.stats import Row, comparison_table, target_row
from roach.model.resources import Resources

METHODS = ("roach", "sbatch", "submitit")
ONE_CPU = Resources(gpus_per_node=0, cpus_per_task=1, time="00:05:00")


def _wait_file(path: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.01)
    raise BenchError(f"the function's first line did not run within {timeout:.0f}s (no {path})")


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


class Methods:
    def __init__(self, lab: Lab, jobs: Jobs, wd: Path):
        self.lab, self.jobs, self.wd = lab, jobs, wd
        self.work = make_repo(lab, wd / "repo")
        # roach's submits run as the bench user, in its process: the repository must be that user's own
        subprocess.run(["chown", "-R", lab.user, str(wd / "repo")], check=True)
        (wd / "roach").mkdir()
        shutil.chown(wd / "roach", lab.user, lab.user)
        self.n = 0

    def _out(self, m: str) -> Path:
        self.n += 1
        return self.wd / "marks" / f"{m}-{self.n}.t"

    def roach(self) -> tuple[float, float, Path]:
        out = self._out("roach")
        proc = self.lab.as_user(
            [
                self.lab.python,
                "-m",
                "bench.roach_driver",
                "latency",
                "--work",
                str(self.work),
                "--wd",
                str(self.wd / "roach"),
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BenchError(f"roach driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        self.jobs.add([got["job_id"]])
        return got["t0"], got["t_ret"], Path(got["out"])

    def sbatch(self) -> tuple[float, float, Path]:
        out = self._out("sbatch")
        code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.jobfns import first_line; first_line(None, {str(out)!r})"
        argv = [
            "sbatch",
            "--parsable",
            "--job-name=lat-sbatch",
            f"--output={self.wd}/logs/sbatch-%j.out",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--time=5",
            f"--wrap={shlex.quote(self.lab.python)} -c {shlex.quote(code)}",
        ]
        client = self.lab.user_client()
        t0 = time.time()
        res = client.run(argv, retry=False)
        t_ret = time.time()
        self.jobs.add([res.stdout.strip().split(";")[0]])
        return t0, t_ret, out

    def submitit(self) -> tuple[float, float, Path]:
        out = self._out("submitit")
        proc = self.lab.as_user(
            [
                self.lab.python,
                "-m",
                "bench.submitit_driver",
                "latency",
                "--folder",
                str(self.wd / "submitit" / "%j"),
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BenchError(f"submitit driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        self.jobs.add([got["job_id"]])
        return got["t0"], got["t_ret"], out


def _fine_starts(mark: dict, seen: Processes) -> tuple[float, float] | None:
    """The forks of the job's batch shell and of the python process (what /proc's start times count, here to the
    microsecond), on time.time()'s clock; None when the clock missed either."""
    if "mono" not in mark or not mark.get("batch_pid"):
        return None
    batch, python = seen.started(mark["batch_pid"], mark["mono"]), seen.started(mark["pid"], mark["mono"])
    if batch is None or python is None:
        return None
    offset = mark["t"] - mark["mono"]  # CLOCK_MONOTONIC to time.time(), as the job's process read both
    return batch + offset, python + offset


def _parts(t0: float, t_ret: float, mark: dict, starts: tuple[float, float] | None) -> dict[str, float | None]:
    batch, process = starts if starts else (mark.get("batch"), mark.get("process"))
    parts = {
        "total": mark["t"] - t0,
        "call": t_ret - t0,
        "to_batch": _minus(batch, t0),
        "batch_to_process": _minus(process, batch),
        "process_to_line": _minus(mark["t"], process),
    }
    parts["own"] = _minus(parts["total"], _minus(parts["to_batch"], parts["call"]))
    return parts


def run(lab: Lab, jobs: Jobs, reps: int, log=print, timeout: float = 180) -> Section:
    wd = lab.workdir("latency")
    for sub in ("marks", "logs", "submitit"):
        (wd / sub).mkdir()
        shutil.chown(wd / sub, lab.user, lab.user)
    ms = Methods(lab, jobs, wd)
    keys = ("total", "call", "to_batch", "batch_to_process", "process_to_line", "own")
    got = {k: {m: [] for m in METHODS} for k in keys}
    clock = ProcessClock.start(wd)
    samples = []
    try:
        for rep in range(reps + 1):  # repetition 0 warms every method (roach: the clone) and is not counted
            for m in METHODS:
                t0, t_ret, out = getattr(ms, m)()
                mark = _wait_file(out, timeout)
                if rep:
                    samples.append((m, t0, t_ret, mark))
                log(
                    f"bench 1: {'warm-up' if not rep else f'rep {rep}'} {m:9s} submit call {t_ret - t0:6.3f}s, "
                    f"first line after {mark['t'] - t0:6.3f}s"
                )
    finally:
        seen = clock.stop() if clock else Processes()
    jobs.cancel(jobs.user_ids)  # they have ended or are ending; cancel whatever is left
    # the fine clock for every sample or for none: one median of two clocks would mean neither
    starts = [_fine_starts(mark, seen) for _, _, _, mark in samples]
    fine = bool(samples) and all(starts)
    for (m, t0, t_ret, mark), st in zip(samples, starts):
        parts = _parts(t0, t_ret, mark, st if fine else None)
        for k in keys:
            got[k][m].append(parts[k])
    clock_words = (
        "Start times are each process's fork, as /proc counts them, but to the microsecond: the kernel's fork "
        "events, recorded by perf. (roach's rank process execs env, which blocks its signals, then python: "
        "about 1 ms, in the python process's part.)"
        if fine
        else "Start times come from /proc (10 ms ticks): "
        + ("no perf on this machine." if clock is None else "perf missed a start.")
    )
    rows = [
        Row("submit call to the function's first line", got["total"], "s"),
        Row("... the submit call itself", got["call"], "s"),
        Row("... submit call to the batch script's start (with the call)", got["to_batch"], "s"),
        Row("... batch script's start to the python process's", got["batch_to_process"], "s"),
        Row("... python process's start to the first line", got["process_to_line"], "s"),
        Row("the tool's own part (all but Slurm's queue, scheduling and launch)", got["own"], "s"),
    ]
    body = [
        "Seconds from the submit call to the first line of the same function (1 CPU, no GPU, the lab's "
        "job python); roach warm (its clone of the commit exists). The split: Slurm's part (queue, "
        "scheduling, launch: up to the batch script's start), the batch script's (roach: its node step "
        "and `srun`; submitit: `srun`; sbatch: nothing), and the python process's (imports, unpickling, "
        f"roach's rank setup). {clock_words} Slurm's part varies by up to a "
        "second with where the submission falls in the scheduler's cycle, for every method alike; the last "
        "row leaves it out.",
        "",
        comparison_table(rows, METHODS),
    ]
    summary = [
        target_row(
            "the tool's own part of submit -> first line",
            got["own"]["roach"],
            got["own"]["submitit"],
            "submitit",
            "ms",
            max_ratio=1.0,
            scale=1000,
        ),
        target_row(
            "the submit call (warm)",
            got["call"]["roach"],
            got["call"]["submitit"],
            "submitit",
            "ms",
            max_value=40,
            scale=1000,
        ),
        target_row(
            "batch script start -> python start",
            got["batch_to_process"]["roach"],
            got["batch_to_process"]["submitit"],
            "submitit",
            "ms",
            scale=1000,
            part_of="rank start-up (next row): both are bash and one srun (bench/notes/1.md)",
        ),
        target_row(
            "rank start-up: batch script start -> first line",
            [_plus(a, b) for a, b in zip(got["batch_to_process"]["roach"], got["process_to_line"]["roach"])],
            [_plus(a, b) for a, b in zip(got["batch_to_process"]["submitit"], got["process_to_line"]["submitit"])],
            "submitit",
            "ms",
            max_ratio=1.0,
            scale=1000,
        ),
    ]
    return Section(
        1, "Submit latency", "\n".join(body), {"reps": reps, "clock": "perf" if fine else "proc"}, summary=summary
    )


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b
