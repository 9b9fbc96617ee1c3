"""Benchmark 2, controller load: Slurm RPCs per status round while N jobs are queued (held).

For each N, twice: N individual held jobs, then one held array of N tasks. Each repetition runs one
round of each method (roach, submitit's watcher, a per-job ``squeue -j`` loop) between snapshots of
``sdiag`` (slurmctld) and ``sacctmgr show stats`` (slurmdbd); the count is the bench user's own RPCs.
roach's first round (which adopts the jobs) is run before and not counted; its later rounds are the
steady state a watcher lives in.
"""

from __future__ import annotations

from collections import Counter

from bench import rounds
from bench.labenv import BENCH_DIR, Jobs, Lab, submit_held, submit_held_array
from bench.report import Section, plot_lines
from bench.stats import Row, Summary, comparison_table, simple_table

METHODS = ("roach", "submitit", "squeue -j loop")


def run(lab: Lab, jobs: Jobs, sizes: list[int], reps: int, log=print) -> Section:
    out_dir = lab.workdir("load")  # a fresh store per run: an old one would make the watcher ask about old jobs
    data: dict[tuple[str, int], dict[str, list[rounds.Cost]]] = {}
    kind_of_round = None
    idle = [rounds.measure(lab, lambda: None) for _ in range(2)]  # the snapshots' own calls, and background
    for n in sizes:
        for kind in ("jobs", "array"):
            log(f"bench 2: {n} held {'individual jobs' if kind == 'jobs' else 'array tasks'}")
            if kind == "jobs":
                ids = submit_held(lab, n)
                jobs.add(ids)
                task_ids = ids
                roach = rounds.RoachRound(
                    lab, out_dir / f"b2-store-{n}-{kind}.sqlite", records=rounds.fake_records(ids, lab.home)
                )
            else:
                array = submit_held_array(lab, n)
                jobs.add([array])
                ids = [array]
                task_ids = [f"{array}_{i}" for i in range(n)]
                roach = rounds.RoachRound(lab, out_dir / f"b2-store-{n}-{kind}.sqlite", job_ids=[array])
            kind_of_round = roach.kind
            try:
                roach()  # adoption round, not counted
                methods = {
                    "roach": roach,
                    "submitit": rounds.SubmititRound(lab, task_ids),
                    "squeue -j loop": rounds.SqueueLoop(lab, task_ids),
                }
                got: dict[str, list[rounds.Cost]] = {m: [] for m in METHODS}
                for _rep in range(reps):
                    for m in METHODS:
                        got[m].append(rounds.measure(lab, methods[m]))
                data[(kind, n)] = got
            finally:
                jobs.cancel(ids)
            for m in METHODS:
                c = got[m][-1]
                log(f"  {m:15s} ctld {c.ctld:6d}  dbd {c.dbd:5d}  wall {c.wall_s:7.3f}s")
    return _section(data, sizes, reps, kind_of_round, idle)


def _section(data, sizes, reps, kind_of_round, idle) -> Section:
    rows = []
    for (kind, n), got in data.items():
        what = f"{n} {'jobs' if kind == 'jobs' else 'array tasks'}"
        rows.append(Row(f"{what}: RPCs (slurmctld + slurmdbd)", {m: [c.rpcs for c in got[m]] for m in METHODS}))
        rows.append(Row(f"{what}: slurmctld RPCs", {m: [c.ctld for c in got[m]] for m in METHODS}))
        rows.append(Row(f"{what}: slurmdbd RPCs", {m: [c.dbd for c in got[m]] for m in METHODS}))
        rows.append(
            Row(
                f"{what}: controllers' time serving them",
                {m: [c.server_us / 1000 for c in got[m]] for m in METHODS},
                "ms",
            )
        )
        rows.append(Row(f"{what}: wall time", {m: [c.wall_s for c in got[m]] for m in METHODS}, "s"))
    body = [
        f"RPCs the bench user sent per status round (roach's round: {kind_of_round}).",
        "",
        comparison_table(rows, METHODS),
    ]
    # which RPC types a round makes: whole-controller counts, less what an empty round shows
    # (the snapshots' own sdiag/sacctmgr calls), so other users' calls may still show up
    noise = Counter()
    for key in {k for c in idle for k in _mix(c)}:
        noise[key] = min(_mix(c).get(key, 0) for c in idle)
    types = []
    for (kind, n), got in data.items():
        for m in METHODS:
            best = min(got[m], key=lambda c: sum(_mix(c).values()))  # the quietest: fewest others' calls
            mix = {k: v for k, v in (_mix(best) - noise).items() if v > 0}
            types.append(
                [f"{n} {kind}", m, ", ".join(f"{k} {v}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1])) or "–"]
            )
    body += [
        "RPC types in the quietest repetition (slurmctld's `sdiag`, slurmdbd's `sacctmgr show stats`; "
        "whole-controller counts less an empty round's):",
        "",
        simple_table(["queue", "method", "RPC types"], types),
    ]
    panels = {}
    for title, kind, value in (
        ("RPCs, individual held jobs", "jobs", lambda c: c.rpcs),
        ("RPCs, one held array", "array", lambda c: c.rpcs),
        ("controllers' ms serving them, individual jobs", "jobs", lambda c: c.server_us / 1000),
    ):
        xs = [n for n in sizes if (kind, n) in data]
        panels[title] = {
            m: (xs, [Summary.of([value(c) for c in data[(kind, n)][m]]).median for n in xs]) for m in METHODS
        }
    plot = plot_lines(
        BENCH_DIR / "controller_load.png",
        "Slurm RPCs per status round",
        "jobs in the queue",
        "per round (slurmctld + slurmdbd)",
        panels,
    )
    return Section(
        2,
        "Controller load: Slurm RPCs per status round",
        "\n".join(body),
        {"sizes": ",".join(map(str, sizes)), "reps": reps},
        plot=plot,
    )


def _mix(c: rounds.Cost) -> Counter:
    return Counter(
        {**{f"ctld:{k}": v for k, v in c.ctld_types.items()}, **{f"dbd:{k}": v for k, v in c.dbd_types.items()}}
    )
