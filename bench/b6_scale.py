"""Benchmark 6, watch scale: CPU time of one status round with N jobs in the queue (one held array).

For each N the bench user holds an array of N tasks (``squeue --array`` lists one line per task). Per
repetition: roach's round (after the adoption round, not counted), roach's ``squeue`` parser alone on
that round's output, and submitit's ``SlurmInfoWatcher.update()`` with the N task ids registered.
CPU is this process's (``time.process_time``: parsing and bookkeeping); the commands' own CPU is shown
apart (``getrusage`` of the children).
"""

from __future__ import annotations

import time

from bench import rounds
from bench.labenv import BENCH_DIR, Jobs, Lab, submit_held_array
from bench.report import Section, plot_lines
from bench.stats import Row, Summary, comparison_table, fmt, target_row
from roach.scheduler import parse as P

METHODS = ("roach", "submitit")


def run(lab: Lab, jobs: Jobs, sizes: list[int], reps: int, log=print) -> Section:
    out_dir = lab.workdir("scale")  # a fresh store per run: an old one would make the watcher ask about old jobs
    data = {}
    kind_of_round = None
    for n in sizes:
        log(f"bench 6: one held array of {n} tasks")
        array = submit_held_array(lab, n)
        jobs.add([array])
        try:
            roach = rounds.RoachRound(lab, out_dir / f"b6-store-{n}.sqlite", job_ids=[array])
            kind_of_round = roach.kind
            t0 = time.process_time()
            roach()
            first_cpu = time.process_time() - t0
            sub = rounds.SubmititRound(lab, [f"{array}_{i}" for i in range(n)])
            argv = ["squeue", "--noheader", "--array", "-O", P.squeue_format(), "--me"]
            got = {
                "round": {m: [] for m in METHODS},
                "parse": {m: [] for m in METHODS},
                "child": {m: [] for m in METHODS},
                "wall": {m: [] for m in METHODS},
            }
            for _ in range(reps):
                for m, fn in (("roach", roach), ("submitit", sub)):
                    c = rounds.measure(lab, fn)
                    got["round"][m].append(c.cpu_s)
                    got["child"][m].append(c.child_cpu_s)
                    got["wall"][m].append(c.wall_s)
                text = lab.user_client().run(argv).stdout
                t0 = time.process_time()
                recs = P.parse_squeue(text)
                got["parse"]["roach"].append(time.process_time() - t0)
                raw = sub.watcher._output
                t0 = time.process_time()
                sub.watcher.read_info(raw)
                got["parse"]["submitit"].append(time.process_time() - t0)
            if len(recs) != n:
                log(f"  warning: squeue listed {len(recs)} records for {n} tasks")
            data[n] = (got, first_cpu)
            log(
                f"  roach round cpu {Summary.of(got['round']['roach']).median * 1000:.1f} ms "
                f"(first {first_cpu * 1000:.1f} ms), submitit {Summary.of(got['round']['submitit']).median * 1000:.1f} ms"
            )
        finally:
            jobs.cancel([array])
    return _section(data, sizes, reps, kind_of_round)


def _section(data, sizes, reps, kind_of_round) -> Section:
    rows = []
    for n, (got, _first) in data.items():
        rows.append(
            Row(f"{n} tasks: round CPU (this process)", {m: [x * 1000 for x in got["round"][m]] for m in METHODS}, "ms")
        )
        rows.append(Row(f"{n} tasks: parser alone", {m: [x * 1000 for x in got["parse"][m]] for m in METHODS}, "ms"))
        rows.append(
            Row(f"{n} tasks: the commands' CPU", {m: [x * 1000 for x in got["child"][m]] for m in METHODS}, "ms")
        )
        rows.append(Row(f"{n} tasks: wall time", {m: [x * 1000 for x in got["wall"][m]] for m in METHODS}, "ms"))
    firsts = ", ".join(f"{n}: {first * 1000:.0f} ms" for n, (_, first) in data.items())
    body = [
        f"CPU per status round (roach's round: {kind_of_round}; submitit: one `sacct` and its parser). "
        f"roach's first round, which adopts every task, is not in the table; it took {firsts}. "
        "roach reads one `squeue --array` line per task and keeps a watch record per task; a round re-reads "
        "only the lines that changed (here none: squeue prints what it printed last round, so the last round's "
        "records are kept) and looks again only at the jobs whose line changed; submitit's "
        "`sacct` of a held array that never started returns one line for the whole range, which is the "
        "best case for it (tasks that ran are one line each).",
        "",
        comparison_table(rows, METHODS),
    ]
    xs = [n for n in sizes if n in data]
    panels = {
        "CPU of one round (this process)": {
            "roach round": (xs, [Summary.of(data[n][0]["round"]["roach"]).median * 1000 for n in xs]),
            "roach squeue parser": (xs, [Summary.of(data[n][0]["parse"]["roach"]).median * 1000 for n in xs]),
            "submitit update": (xs, [Summary.of(data[n][0]["round"]["submitit"]).median * 1000 for n in xs]),
        }
    }
    plot = plot_lines(
        BENCH_DIR / "watch_scale.png", "CPU per status round", "array tasks in the queue", "CPU (ms)", panels
    )
    summary = []
    if 1000 in data:
        r1000 = data[1000][0]["round"]
        summary.append(
            target_row(
                "a watch round over 1,000 array tasks: CPU",
                r1000["roach"],
                r1000["submitit"],
                "submitit",
                "ms",
                max_ratio=3.0,
                scale=1000,
            )
        )
        if 10000 in data:
            big = Summary.of(data[10000][0]["round"]["roach"]).median / Summary.of(r1000["roach"]).median
            summary.append(
                {
                    "figure": "a watch round over 10,000 array tasks: CPU, as a multiple of the 1,000-task round",
                    "roach": f"{fmt(big)}x",
                    "baseline": "–",
                    "ratio": "–",
                    "target": "<= 10x",
                    "holds": big <= 10,
                }
            )
    return Section(
        6,
        "Watch scale: CPU time of one status round",
        "\n".join(body),
        {"sizes": ",".join(map(str, sizes)), "reps": reps},
        plot=plot,
        summary=summary,
    )
