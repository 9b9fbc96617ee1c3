"""Submits with roach as the bench user, in a process of that user, and prints what the benchmark needs as JSON.

Run as ``runuser -u roachbench -- <lab python> -m bench.roach_driver ...`` with the repository on PYTHONPATH,
the way :mod:`bench.submitit_driver` runs submitit: so roach's Slurm commands are the bench user's own, as
they are for a user on a login host, and not each wrapped in ``runuser`` (what a root process driving the
lab as another user pays per command).

    latency --work W --wd D --out PATH [--n N]    N submits of first_line (the first warms); prints each t0, t_ret, job_id
    profile --work W --wd D --out-dir O [--n N]   the same under cProfile; writes O/submit.prof and O/submit.txt
    sweep-profile --work W --wd D --out-dir O [--n N] [--runs R] [--max-array-size M]   N sweeps of R runs (after one warm-up), the same
    sweep --work W --wd D --out-dir O --runs R --tag T [--max-array-size M]   one sweep of R runs (arrays of at most M
        tasks), this process's first; prints its wall, job ids, and (after the clock) how many runs have their
        bundle directory and job.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.b1_latency import ONE_CPU
from roach.launch.submit import submit
from roach.launch.sweep import sweep
from roach.records.store import Store
from roach.slurm.clusters.lab import LAB


def _submit(a: argparse.Namespace, out: str, store: Store):
    return submit(
        "pkg.jobfns:first_line",
        {"out": out},
        resources=ONE_CPU,
        cluster=LAB,
        name="lat-roach",
        repo_root=a.work,
        store=store,
        log_root=f"{a.wd}/logs",
        clone_root=f"{a.wd}/clones",
        run_root=f"{a.wd}/runs",
    )


def _grid(a: argparse.Namespace, out_dir: Path, tag: str) -> list[dict]:
    return [{"out": f"{out_dir}/{tag}-{i}.t"} for i in range(a.runs)]


def _sweep(a: argparse.Namespace, tag: str, store: Store, grid: list[dict]):
    return sweep(
        "pkg.jobfns:first_line",
        grid=grid,
        resources=ONE_CPU,
        cluster=LAB,
        name=f"sweep-{tag}",
        parallelism=a.runs,
        max_array_size=a.max_array_size,
        repo_root=a.work,
        store=store,
        log_root=f"{a.wd}/logs",
        clone_root=f"{a.wd}/clones",
        run_root=f"{a.wd}/runs",
    )


class _Subprocesses:
    """Counts every subprocess the submits start, by program, and the time from its start to its end (several may
    run at once: git's checks do)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self._popen = subprocess.Popen

    def __enter__(self) -> _Subprocesses:
        outer = self

        class Counted(self._popen):  # type: ignore[misc, valid-type]
            def __init__(self, argv, *args, **kw):
                self._t = time.perf_counter()
                name = Path(str(argv[0] if isinstance(argv, (list, tuple)) else argv).split()[0]).name
                if name in ("sh", "bash") and isinstance(argv, (list, tuple)) and len(argv) > 2:
                    name = f"{name} -c {str(argv[2])[:40]!r}"
                self._name, self._done = name, False
                super().__init__(argv, *args, **kw)

            def wait(self, timeout=None):
                rc = super().wait(timeout)
                if not self._done:
                    self._done = True
                    outer.count[self._name] += 1
                    outer.seconds[self._name] += time.perf_counter() - self._t
                return rc

        subprocess.Popen = Counted  # type: ignore[misc]
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.Popen = self._popen  # type: ignore[misc]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.roach_driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("latency", "profile", "sweep-profile", "sweep"):
        p = sub.add_parser(name)
        p.add_argument("--work", required=True)
        p.add_argument("--wd", required=True)
        p.add_argument("--n", type=int, default=1)
        p.add_argument("--runs", type=int, default=1000)
        p.add_argument(
            "--no-warm", action="store_true", help="no warm-up in this process (the profiled call is its first)"
        )
        if name == "latency":
            p.add_argument("--out", required=True)
        else:
            p.add_argument("--out-dir", required=True)
        p.add_argument("--max-array-size", type=int, default=None, help="a sweep's max_array_size")
        if name == "sweep":
            p.add_argument("--tag", required=True)
    a = ap.parse_args(argv)
    store = Store(f"{a.wd}/store.sqlite")
    if a.cmd == "sweep":  # as submitit_driver's map: the time of the call alone
        grid = _grid(a, Path(a.out_dir), a.tag)
        t0 = time.perf_counter()
        sw = _sweep(a, a.tag, store, grid)
        wall = time.perf_counter() - t0
        ids = sw.array_ids
        # after the clock: every run's bundle directory and job.json, as the sweep wrote them
        bundles = sum(1 for j in sw if Path(j.paths.bundle_dir).is_dir())
        job_json = sum(1 for j in sw if Path(j.paths.job_json).is_file())
        scripts = sum(1 for i in ids if Path(f"{a.wd}/logs/bundles/{i}/job.sh").is_file())  # each array's own
        got = {"wall": wall, "job_ids": [str(i) for i in ids], "runs": len(sw), "bundles": bundles}
        print(json.dumps({**got, "job_json": job_json, "array_scripts": scripts}), flush=True)
        return 0
    if a.cmd == "latency":
        for i in range(a.n):
            t0 = time.time()
            job = _submit(a, f"{a.out}.{i}", store)
            t_ret = time.time()
            print(json.dumps({"t0": t0, "t_ret": t_ret, "job_id": job.job_id, "out": f"{a.out}.{i}"}), flush=True)
        return 0
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if a.cmd == "sweep-profile":
        once = lambda tag: _sweep(a, tag, store, _grid(a, out_dir, tag)).array_ids  # noqa: E731
    else:
        once = lambda tag: [_submit(a, f"{out_dir}/{tag}.t", store).job_id]  # noqa: E731
    # the warm-up: the clone and the shipped runtime exist after it (--no-warm: an earlier process made them, and
    # the profiled call is this process's first, as the benchmark's is)
    ids = [] if a.no_warm else once("warm")
    prof = cProfile.Profile()
    walls = []
    with _Subprocesses() as subs:
        for i in range(a.n):
            t = time.perf_counter()
            prof.enable()
            ids += once(f"p{i}")
            prof.disable()
            walls.append(time.perf_counter() - t)
    prof.dump_stats(str(out_dir / "submit.prof"))
    text = io.StringIO()
    what = f"sweeps of {a.runs} runs" if a.cmd == "sweep-profile" else "submits"
    text.write(f"{a.n} warm {what}: wall {', '.join(f'{w * 1000:.0f} ms' for w in walls)}\n\n")
    text.write("subprocesses per call (count, ms):\n")
    for name, n in subs.count.most_common():
        text.write(f"  {n / a.n:5.1f}  {subs.seconds[name] * 1000 / a.n:7.1f} ms  {name}\n")
    text.write("\n")
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    (out_dir / "submit.txt").write_text(text.getvalue())
    print(json.dumps({"walls": walls, "job_ids": ids}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
