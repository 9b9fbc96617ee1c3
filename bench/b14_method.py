"""``python -m bench.b14_method METHOD --out FILE ...``: one method of benchmark 14 run to its end on the lab
``$ROACH_LAB_DIR`` names, beside its own crowd, its figures written to FILE as JSON.

It is what benchmark 14 starts on each lab of its own when its methods run side by side (``--crowd-labs``,
bench/b14_labs.py), here or in a release lab's root (`roach lab shell --slurm V -- ...`), where this same source
tree is bound in. It writes nothing else: results.md is the parent's.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from roach._fs import atomic_write


def parse_args(argv: list[str]) -> argparse.Namespace:
    from bench.b14_crowd import METHODS

    ap = argparse.ArgumentParser(prog="python -m bench.b14_method", description=__doc__.split("\n\n")[0])
    ap.add_argument("method", choices=METHODS)
    ap.add_argument("--out", type=Path, required=True, help="the JSON file the method's figures go to")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--offset", type=float, required=True)
    ap.add_argument("--speed", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--warmup", type=float, required=True)
    ap.add_argument("--deadline", type=float, default=None)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--step-s", type=float, default=1.0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    from bench.b14_crowd import SUBMITIT_METHODS, Crowd, lengths, measure
    from bench.labenv import BenchError, Jobs, Lab, ensure_bench_user, ensure_submitit

    def log(msg: str) -> None:
        print(msg, flush=True)

    def on_term(signum, frame):  # let `finally` cancel the method's jobs
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    crowd = Crowd(a.trace, a.offset, a.speed, a.seed, warmup_s=a.warmup, deadline_s=a.deadline)
    try:
        lab = Lab.load()
        ensure_bench_user(lab, log)
        if a.method in SUBMITIT_METHODS:
            ensure_submitit(lab, log)
    except BenchError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 2
    jobs = Jobs(lab)
    try:
        figures = measure(lab, jobs, a.method, crowd, lengths(a.runs, a.seed), a.step_s, log)
    finally:
        jobs.cancel_all()
    lab.remove_workdirs()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(a.out, json.dumps(figures, indent=1) + "\n")
    log(f"{a.method}: makespan {figures['makespan_s']:.0f} s, {figures['completed']} completed ({a.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
