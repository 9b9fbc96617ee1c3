"""``python -m bench``: run the benchmarks on the lab cluster and rewrite bench/results.md.

Each benchmark runs roach beside its baselines in one run; timings are reported, never judged (no
pass/fail). Needs root and a running lab (`make lab`); submitit is installed into bench/out/pylib on
first use, and the benchmarks' own user (roachbench) is made if missing.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import time
from pathlib import Path

DEFAULT_REPS = {1: 5, 2: 3, 3: 10, 4: 3, 5: 2, 6: 3, 7: 1, 8: 5, 9: 1, 10: 15, 11: 5, 12: 3, 13: 1, 14: 1}
SMOKE = {
    "reps": 2,
    "sizes": [10, 50],
    "scale_sizes": [100, 1000],
    "ssh_jobs": 10,
    "sweep_runs": 10,
    "sweep_big_runs": 30,
    "sweep_max_array_size": 11,
    "preempt_modes": ["as-is"],
    "store_records": 1000,
    "viewers": [1, 5],
    "viewer_tasks": 100,
    "rest_sizes": [100],
    "restart_sizes": [100],
    "estimate_jobs": 30,
    "crowd_runs": 12,
    "crowd_warmup": 30.0,
}
TITLES = {
    1: "Submit latency",
    2: "Controller load: Slurm RPCs per status round",
    3: "SSH cost: a status round over SSH",
    4: "Sweep submission",
    5: "Preemption loss",
    6: "Watch scale: CPU time of one status round",
    7: "Fault suite",
    8: "The store at scale: ls and status",
    9: "Viewers: Slurm RPCs per minute with 1, 5 and 20 viewers",
    10: "A uv environment once built: a warm job's start",
    11: "REST: a status round and the submit call through slurmrestd",
    12: "The cost of coming back: a requeued DDP attempt's restart",
    13: "Start estimates: roach's interval and Slurm's squeue --start against the real start",
    14: "A sweep on a crowded cluster",
}


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="benchmarks: " + "; ".join(f"{n} {t}" for n, t in TITLES.items()),
    )
    ap.add_argument("--only", type=_ints, default=None, help="which benchmarks, e.g. 1,3 (default: all that can run)")
    ap.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions for every benchmark (default per benchmark: "
        + ", ".join(f"{n}: {r}" for n, r in DEFAULT_REPS.items())
        + ")",
    )
    ap.add_argument(
        "--sizes", type=_ints, default=[10, 100, 1000], help="benchmark 2: jobs queued (default 10,100,1000)"
    )
    ap.add_argument(
        "--scale-sizes",
        type=_ints,
        default=[100, 1000, 10000],
        help="benchmark 6: array tasks queued (default 100,1000,10000)",
    )
    ap.add_argument(
        "--rest-sizes",
        type=_ints,
        default=[1000, 10000],
        help="benchmark 11: held jobs (and array tasks) queued, through REST, locally and over SSH (default 1000,10000)",
    )
    ap.add_argument(
        "--restart-sizes",
        type=_ints,
        default=[100, 1000],
        help="benchmark 12: checkpoint sizes in MB (default 100,1000)",
    )
    ap.add_argument(
        "--restart-big-reps",
        type=int,
        default=1,
        help="benchmark 12: repetitions of checkpoints of 1000 MB and more (default 1; 0: as --reps)",
    )
    ap.add_argument(
        "--estimate-jobs", type=int, default=200, help="benchmark 13: jobs of the workload played (default 200)"
    )
    ap.add_argument(
        "--estimate-crowd-offset",
        type=float,
        default=None,
        help="benchmark 13: play --crowd-trace from this offset (its seconds) as other people's load beside the "
        "workload, at --crowd-speed (default: no load; 864000 is Helios's 11th day, which bench 14 does not play)",
    )
    ap.add_argument(
        "--crowd-trace",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "traces" / "helios-15k.csv"),
        help="benchmark 14: the trace played as other people's load (default ../shared/traces/helios-15k.csv)",
    )
    ap.add_argument(
        "--crowd-offset",
        type=float,
        default=432000.0,
        help="benchmark 14: where in the trace to start, in its seconds (default 432000: Helios's 6th day, busy)",
    )
    ap.add_argument("--crowd-speed", type=float, default=60.0, help="benchmark 14: the trace's time divided by (60)")
    ap.add_argument("--crowd-seed", type=int, default=1, help="benchmark 14: the load's and the runs' seed (1)")
    ap.add_argument("--crowd-runs", type=int, default=48, help="benchmark 14: runs of the sweep (default 48)")
    from bench.b14_crowd import METHODS as METHODS_14

    ap.add_argument(
        "--crowd-methods",
        default=",".join(METHODS_14),
        help=f"benchmark 14: the methods, comma-separated (default {','.join(METHODS_14)})",
    )
    ap.add_argument(
        "--crowd-deadline",
        type=float,
        default=None,
        help="benchmark 14: seconds after which a method's sweep still running is cancelled, its figures then "
        "lower bounds (default: none)",
    )
    ap.add_argument(
        "--crowd-no-rounds",
        action="store_true",
        help="benchmark 14: leave out the watch-round table (its load plays at 5000x: minutes of both cores)",
    )
    ap.add_argument(
        "--crowd-warmup", type=float, default=120.0, help="benchmark 14: seconds the load plays before the sweep (120)"
    )
    ap.add_argument(
        "--crowd-labs",
        action="store_true",
        help="benchmark 14: run the methods side by side, each on a fresh lab of its own the bench starts with the "
        "named lab's size and settings (ports from the named lab's base + 1000), taken down at the end",
    )
    ap.add_argument(
        "--crowd-native-slurm",
        choices=("24.11", "26.05"),
        default=None,
        help="benchmark 14 with --crowd-labs: where this machine's Slurm refuses a QOS list, run slurm-native on a "
        "lab of this release (`roach lab up --slurm V`; default: not run then)",
    )
    ap.add_argument(
        "--crowd-native-state",
        default=None,
        help="benchmark 14: the state directory of --crowd-native-slurm's lab (default: that of `roach lab up --slurm V`)",
    )
    ap.add_argument("--ssh-jobs", type=int, default=100, help="benchmark 3: held jobs in the queue (default 100)")
    ap.add_argument("--sweep-runs", type=int, default=1000, help="benchmark 4: runs per sweep (default 1000)")
    ap.add_argument(
        "--sweep-big-runs",
        type=int,
        default=10000,
        help="benchmark 4: runs of roach's large sweep, timed beside the --sweep-runs one (default 10000; 0: none)",
    )
    ap.add_argument(
        "--sweep-max-array-size",
        type=int,
        default=1001,
        help="benchmark 4: roach's sweeps split into arrays of at most this many tasks where it is below the lab's "
        "MaxArraySize (default 1001, Slurm's default; 0: the lab's)",
    )
    ap.add_argument(
        "--store-records", type=int, default=10000, help="benchmark 8: records in the store (default 10000)"
    )
    ap.add_argument("--viewers", type=_ints, default=[1, 5, 20], help="benchmark 9: viewers at once (default 1,5,20)")
    ap.add_argument(
        "--viewer-tasks", type=int, default=1000, help="benchmark 9: tasks of the held array they follow (default 1000)"
    )
    ap.add_argument(
        "--preempt-modes",
        default="term,user-signal",
        help="benchmark 5: how the lab preempts, 'term', 'user-signal' (preempt_send_user_signal) or "
        "'as-is'; the lab is reconfigured live and restored after (default term,user-signal)",
    )
    ap.add_argument(
        "--preempt-cred-expire",
        type=int,
        default=None,
        metavar="S",
        help="benchmark 5: also run on a second lab whose job credentials live S seconds (Slurm's default: 120; "
        "the lab's: 10), started and stopped for it",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="small sizes for a quick check (2 reps, 10,50 jobs, 100,1000 tasks, sweeps of 10 and 30 runs in arrays "
        "of 11, lab's preemption as-is); "
        "results.md says so",
    )
    ap.add_argument("--results", type=Path, default=None, help="the Markdown file to write (default bench/results.md)")
    a = ap.parse_args(argv)
    a.preempt_modes = [m.strip() for m in a.preempt_modes.split(",") if m.strip()]
    bad = [m for m in a.preempt_modes if m not in ("term", "user-signal", "as-is")]
    if bad:
        ap.error(f"--preempt-modes: unknown {', '.join(bad)} (valid: term, user-signal, as-is)")
    bad = [m for m in a.crowd_methods.split(",") if m not in METHODS_14]
    if bad:
        ap.error(f"--crowd-methods: unknown {', '.join(bad)} (valid: {', '.join(METHODS_14)})")
    if a.crowd_native_slurm and not a.crowd_labs:
        ap.error("--crowd-native-slurm: only with --crowd-labs (one after another, every method runs on the named lab)")
    if a.smoke:

        def given(flag: str) -> bool:
            return any(x == flag or x.startswith(flag + "=") for x in argv)

        a.reps = a.reps if given("--reps") else SMOKE["reps"]
        for key in SMOKE:
            if key == "reps":
                continue
            if not given(f"--{key.replace('_', '-')}"):
                setattr(a, key, SMOKE[key])
    unknown = [n for n in (a.only or []) if n not in TITLES]
    if unknown:
        ap.error(f"--only: no benchmark {unknown} (valid: {', '.join(map(str, TITLES))})")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    from bench import b4_sweep
    from bench.labenv import BENCH_DIR, BenchError, Jobs, Lab, ensure_bench_user, ensure_submitit
    from bench.report import load_sections, write_results

    def log(msg: str) -> None:
        print(msg, flush=True)

    def on_term(signum, frame):  # let `finally` cancel the jobs
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        lab = Lab.load()
        wanted = a.only or list(TITLES)
        # the fault suite (7) runs as the tests do, REST (10) as the lab's user: neither needs the bench user or submitit
        if set(wanted) - {7, 10}:
            ensure_bench_user(lab, log)
        if set(wanted) - {7, 10, 13, 14}:  # the uv environment, the estimates and the crowd have no submitit baseline
            ensure_submitit(lab, log)
    except BenchError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 2
    reps = lambda n: a.reps or DEFAULT_REPS[n]  # noqa: E731

    def mod(name: str):
        return importlib.import_module(f"bench.{name}")

    runners = {
        1: lambda jobs: mod("b1_latency").run(lab, jobs, reps(1), log),
        2: lambda jobs: mod("b2_load").run(lab, jobs, a.sizes, reps(2), log),
        3: lambda jobs: mod("b3_ssh").run(lab, jobs, a.ssh_jobs, reps(3), log),
        4: lambda jobs: b4_sweep.run(
            lab, jobs, a.sweep_runs, reps(4), log, big=a.sweep_big_runs, max_array_size=a.sweep_max_array_size or None
        ),
        5: lambda jobs: mod("b5_preempt").run(
            lab, jobs, reps(5), a.preempt_modes, cred_expire=a.preempt_cred_expire, log=log
        ),
        6: lambda jobs: mod("b6_scale").run(lab, jobs, a.scale_sizes, reps(6), log),
        # the smoke run leaves out the slow storm (ROACH_FAULTS_STORM keeps it short in a full run if set)
        7: lambda jobs: mod("b7_faults").run(lab, jobs, log, ("-m", "not slow") if a.smoke else ()),
        8: lambda jobs: mod("b8_store").run(lab, jobs, a.store_records, reps(8), log),
        9: lambda jobs: mod("b9_viewers").run(lab, jobs, a.viewers, a.viewer_tasks, log),
        10: lambda jobs: mod("b10_uvenv").run(lab, jobs, reps(10), log),
        11: lambda jobs: mod("b11_rest").run(lab, jobs, a.rest_sizes, reps(11), log),
        12: lambda jobs: mod("b12_restart").run(
            lab, jobs, a.restart_sizes, reps(12), a.restart_big_reps or None, log=log
        ),
        13: lambda jobs: mod("b13_estimate").run(
            lab,
            jobs,
            a.estimate_jobs,
            log,
            crowd=None
            if a.estimate_crowd_offset is None
            else mod("b14_crowd").Crowd(a.crowd_trace, a.estimate_crowd_offset, a.crowd_speed, a.crowd_seed),
        ),
        14: lambda jobs: mod("b14_crowd").run(
            lab,
            jobs,
            log,
            crowd=mod("b14_crowd").Crowd(
                a.crowd_trace,
                a.crowd_offset,
                a.crowd_speed,
                a.crowd_seed,
                warmup_s=a.crowd_warmup,
                deadline_s=a.crowd_deadline,
            ),
            runs=a.crowd_runs,
            step_s=1.0,
            methods=tuple(a.crowd_methods.split(",")),
            rounds=not a.crowd_no_rounds,
            labs=mod("b14_labs").SideBySide(a.crowd_native_slurm, a.crowd_native_state) if a.crowd_labs else None,
        ),
    }
    failed = []
    for n in wanted:
        log(f"== benchmark {n}: {TITLES[n]}")
        jobs = Jobs(lab)
        t0 = time.monotonic()
        try:
            section = runners[n](jobs)
        except KeyboardInterrupt:
            log("bench: interrupted; cancelling this benchmark's jobs")
            jobs.cancel_all()
            raise
        except Exception as exc:  # one benchmark failing must not lose the others' results
            failed.append(n)
            log(f"bench: benchmark {n} failed: {type(exc).__name__}: {exc}")
            log(f"bench: its files are kept for a post-mortem: {', '.join(map(str, lab.made)) or '(none)'}")
            lab.made.clear()
            continue
        finally:
            jobs.cancel_all()
        lab.remove_workdirs()
        section.smoke = a.smoke
        section.params["seconds"] = round(time.monotonic() - t0)
        section.save()
        log(f"== benchmark {n} done in {time.monotonic() - t0:.0f}s")
    results = a.results or BENCH_DIR / "results.md"
    pending = {n: (TITLES[n], "not run yet (`python -m bench --only N`)") for n in TITLES}
    caps = lab.root_client().capabilities()
    major, minor, micro = caps.version
    write_results(results, load_sections(), pending, f"{major}.{minor:02d}.{micro}")
    log(f"bench: wrote {results}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
