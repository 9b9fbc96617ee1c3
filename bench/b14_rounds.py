"""Benchmark 14's second part: what one `roach watch` round costs beside thousands of other people's jobs.

The bench user's array of ``tasks`` jobs of a whole node each (QOS normal) is watched by
:class:`roach.watch.watcher.Watcher` (bench/rounds.py's round), first on the empty lab (the array held: nothing else
is queued), then while a trace played fast and four times over the lab's GPUs fills the queue: once ``few`` of the
load's jobs are queued (the array released: submitted before them, its tasks are older than every job of the load,
so those that find no free node pend on Resources or Priority within the estimate's horizon, the reasons whose start
estimates read the cluster's queue) and again once ``others`` are. Each is measured ``rounds`` times: the Slurm calls
the bench user made (slurmctld's and slurmdbd's own per-user counters), the CPU of the round's process and of the
commands it ran, and the time the daemons spent serving them. The calls must be the same beside ``few`` and beside
``others``; the empty lab's round says what a round costs without pending estimates.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench.labenv import Lab, wait_for
from bench.rounds import Cost, RoachRound, measure
from roach.lab.load import LoadSpec, status
from roach.lab.load import start as start_load
from roach.lab.load import stop as stop_load

SPEED, LOAD, USERS = 5000.0, 4.0, 8  # the trace at 5000x, offered at four times the lab's GPUs
HOLD = "#!/bin/bash\nsleep 600\n"


@dataclass(frozen=True)
class RoundCosts:
    """The rounds measured on the empty lab and beside the crowd, and how many of the load's jobs were queued."""

    empty: list[Cost]
    few: list[Cost]
    crowd: list[Cost]
    few_queued: int
    others_queued: int
    filled_s: float  # how long the load took to queue them
    watched: str  # what the watch watched

    def rows(self) -> list[tuple[str, float, float, float]]:
        """(figure, and the medians of the empty lab's, the small crowd's and the crowd's rounds; the last two rows
        the most)."""
        figures = {
            "slurmctld calls": lambda c: c.ctld,
            "slurmdbd calls": lambda c: c.dbd,
            "CPU of the round's process": lambda c: c.cpu_s,
            "CPU of the commands it ran": lambda c: c.child_cpu_s,
            "daemons' time serving it": lambda c: c.server_us / 1e6,
            "wall time": lambda c: c.wall_s,
        }
        groups = (self.empty, self.few, self.crowd)
        rows = [(name, *(statistics.median(map(f, costs)) for costs in groups)) for name, f in figures.items()]
        # the watch keeps its estimates between the rounds that make them: the most shows one that makes them
        most = ("slurmctld calls", "CPU of the round's process")
        return rows + [
            (f"{name}, the most of the rounds", *(max(map(figures[name], c)) for c in groups)) for name in most
        ]

    def table(self) -> str:
        lines = [
            f"| one watch round of {self.watched} | empty lab | beside {self.few_queued} other users' jobs "
            f"| beside {self.others_queued} |",
            "| --- | --- | --- | --- |",
        ]
        for name, *values in self.rows():
            fmt = "{:.0f}" if "calls" in name else "{:.3f} s"
            lines.append(f"| {name} | " + " | ".join(fmt.format(v) for v in values) + " |")
        return "\n".join(lines)


def measure_rounds(
    lab: Lab,
    trace: str,
    *,
    tasks: int = 48,
    few: int = 100,
    others: int = 2000,
    rounds: int = 5,
    seed: int = 1,
    log=print,
) -> RoundCosts:
    """The rounds of a watch over the bench user's array: on the empty lab, beside ``few`` and beside ``others``
    queued jobs of the load."""
    user = lab.user_client()
    whole = f"--gres=gpu:{lab.cfg.gpus_per_node}"
    opts = [f"--array=0-{tasks - 1}", "--qos=normal", whole, "--time=10", "--output=/dev/null"]
    array = user.sbatch(["--hold", *opts], HOLD)
    try:
        store = lab.workdir("crowd-rounds") / "store.sqlite"
        watch = RoachRound(lab, store, job_ids=[str(array)])
        watch()  # the first round reads everything once; the measured ones compare with it
        empty = [measure(lab, watch) for _ in range(rounds)]
        t0 = time.monotonic()
        start_load(lab.cfg, LoadSpec(trace, "", 0.0, SPEED, LOAD, USERS, seed))
        wait_for(f"{few} of the load's jobs in the queue", lambda: _queued(lab) >= few, 600, 2)
        user.run(["scontrol", "release", str(array)])
        watch()
        small = [measure(lab, watch) for _ in range(rounds)]
        n_few = _queued(lab)
        wait_for(f"{others} of the load's jobs in the queue", lambda: _queued(lab) >= others, 900, 5)
        filled = time.monotonic() - t0
        watch()
        crowd = [measure(lab, watch) for _ in range(rounds)]
        n = _queued(lab)
        log(f"  rounds: {n_few}, then {n} of the load's jobs queued ({filled:.0f} s)")
        return RoundCosts(empty, small, crowd, n_few, n, filled, f"an array of {tasks} whole-node tasks")
    finally:
        stop_load(lab.cfg)
        user.scancel([array])


def _queued(lab: Lab) -> int:
    s = status(lab.cfg)
    return s.running + s.pending


def section_text(costs: RoundCosts, trace: str) -> str:
    return (
        f"\n\nA watch round beside the crowd ({Path(trace).name} at {SPEED:g}x, offered at {LOAD:g}x the lab's GPUs "
        f"as {USERS} users, {costs.others_queued} of its jobs queued after {costs.filled_s:.0f} s; medians of "
        f"{len(costs.crowd)} rounds each):\n\n" + costs.table() + "\n"
    )
