"""``python -m bench.profile submit|sweep``: where a warm submit (or a sweep's submission) spends its time.

As root on a running lab (``ROACH_LAB_DIR`` names it): makes a pushed repository (bench/repo.py), then runs
``bench.roach_driver profile`` (or ``sweep-profile``) as the bench user, in a process of that user like the
benchmarks', and prints its report: wall times, the subprocesses it started by program, and cProfile's
cumulative listing. The jobs it queued are cancelled. ``--keep DIR`` keeps the .prof files there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench.labenv import Jobs, Lab, ensure_bench_user
from bench.repo import make_repo
from roach.records.store import Store


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    ap.add_argument("what", choices=("submit", "sweep"))
    ap.add_argument("--n", type=int, default=3, help="sweeps profiled after the warm-up (default 3; a submit: 1)")
    ap.add_argument("--runs", type=int, default=1000, help="sweep: runs per sweep (default 1000)")
    ap.add_argument(
        "--max-array-size", type=int, default=1001, help="sweep: arrays of at most this many runs (default 1001)"
    )
    ap.add_argument(
        "--no-warm",
        action="store_true",
        help="sweep: no warm-up sweep (two 10,000-run sweeps queued at once fill the lab's MaxJobCount)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="copy submit.prof / submit.txt here")
    a = ap.parse_args(argv)
    lab = Lab.load()
    ensure_bench_user(lab)
    wd = lab.workdir("profile")
    for sub in ("roach", "out"):
        (wd / sub).mkdir()
        shutil.chown(wd / sub, lab.user, lab.user)
    work = make_repo(lab, wd / "repo")
    subprocess.run(["chown", "-R", lab.user, str(wd / "repo")], check=True)
    jobs = Jobs(lab)
    cmd = "profile" if a.what == "submit" else "sweep-profile"
    argv2 = [lab.python, "-m", "bench.roach_driver", cmd, "--work", str(work), "--wd", str(wd / "roach")]
    argv2 += ["--out-dir", str(wd / "out"), "--n", str(a.n)]
    if a.what == "sweep":
        argv2 += ["--runs", str(a.runs), "--max-array-size", str(a.max_array_size)]
        argv2 += ["--no-warm"] if a.no_warm else []
    if a.what == "submit":  # the warm-up in a process of its own: the profiled submit is its process's first
        argv2 += ["--no-warm", "--n", "1"]
        warm = [lab.python, "-m", "bench.roach_driver", "latency", "--work", str(work), "--wd", str(wd / "roach")]
        warm += ["--out", str(wd / "out" / "warm.t")]
    try:
        if a.what == "sweep":  # the nodes busy: no task of the warm-up runs beside the profiled sweeps
            from bench.b4_sweep import _hold_nodes

            _hold_nodes(lab, jobs)
        if a.what == "submit":
            w = lab.as_user(warm, capture_output=True, text=True)
            if w.returncode != 0:
                print(w.stderr[-3000:], file=sys.stderr)
                return 1
            jobs.add([json.loads(line)["job_id"] for line in w.stdout.splitlines() if line.startswith("{")])
        proc = lab.as_user(argv2, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        jobs.add(got["job_ids"])
        print((wd / "out" / "submit.txt").read_text())
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            for name in ("submit.prof", "submit.txt"):
                shutil.copy(wd / "out" / name, a.keep / name)
    finally:
        # what the driver queued before it failed, too: its store lists every job it submitted
        jobs.add(_driver_jobs(wd / "roach" / "store.sqlite"))
        jobs.cancel_all()
        lab.remove_workdirs()
    return 0


def _driver_jobs(store: Path) -> list[str]:
    """The job ids the roach driver's store records (none when it made no store)."""
    if not store.exists():
        return []
    return sorted({str(r.job_id) for r in Store(store).all_jobs()})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
