"""A finer clock for when a process started: the kernel's fork events, recorded by ``perf`` (microseconds).

/proc gives a process's start (its fork) in clock ticks (10 ms): two starts 40 or 50 ms apart cannot be told from
45. While a :class:`ProcessClock` runs, ``perf record`` keeps every ``sched:sched_process_fork`` of the machine
with its time on CLOCK_MONOTONIC (``time.monotonic()`` in any process); :meth:`ProcessClock.stop` returns them by
pid. Needs root and ``perf`` (Debian: linux-perf);
:meth:`ProcessClock.start` returns None where it cannot run, and the benchmark keeps /proc's ticks.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

EVENT = "sched:sched_process_fork"
_CHILD = re.compile(r"\bchild_pid=(\d+)")


@dataclass
class Processes:
    """What the clock saw: each process's forks (its start, as /proc counts it), in time order."""

    forked: dict[int, list[float]] = field(default_factory=dict)  # pid -> CLOCK_MONOTONIC seconds (a pid is reused)

    def started(self, pid: int, before: float) -> float | None:
        """When ``pid`` was last forked before ``before`` (CLOCK_MONOTONIC), or None if the clock missed it."""
        times = [t for t in self.forked.get(pid, []) if t <= before]
        return times[-1] if times else None


@dataclass
class ProcessClock:
    data: Path
    proc: subprocess.Popen

    @classmethod
    def start(cls, workdir: Path) -> ProcessClock | None:
        perf = shutil.which("perf")
        if perf is None:
            return None
        data = workdir / "processes.perf"
        argv = [perf, "record", "-q", "-k", "mono", "-a", "-e", EVENT, "-o", str(data)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # perf has no ready signal; it records within a fraction of a second
        if proc.poll() is not None:
            return None
        return cls(data, proc)

    def stop(self) -> Processes:
        """Stop recording; every fork since :meth:`start`."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        out = subprocess.run(
            ["perf", "script", "-i", str(self.data), "--ns", "-F", "time,trace"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return parse(out)


def parse(text: str) -> Processes:
    """``perf script -F time,trace`` lines: ``<seconds>: comm=.. pid=.. child_comm=.. child_pid=<pid>``."""
    got = Processes()
    for line in text.splitlines():
        head, _, trace = line.partition(": ")
        m = _CHILD.search(trace)
        try:
            t = float(head)
        except ValueError:
            continue
        if m:
            got.forked.setdefault(int(m[1]), []).append(t)
    for times in got.forked.values():
        times.sort()
    return got
