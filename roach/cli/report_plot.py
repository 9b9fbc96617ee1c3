"""`roach report --plot FILE.png`: one picture of a report, drawn with matplotlib (the ``plot`` extra).

A row per run: each attempt's time requeued (dotted) and queued (hatched), its start-up, the steps it did again and its useful
training, coloured by the tier it ran in; the totals beside the timeline. matplotlib is imported only here,
only when a picture is asked for; the file is written atomically.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

from roach._fs import atomic_write
from roach.errors import MissingError, UsageError
from roach.ops.ledger import AttemptLedger
from roach.ops.report import Report

PHASES = (("requeued", 0.1), ("queued", 0.25), ("starting", 0.45), ("recomputed", 0.7), ("training", 1.0))  # opacity
HATCH = {"requeued": "..", "queued": "//", "recomputed": "//"}
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def check_plot(path: Path) -> None:
    """Refuse, before anything is read, a picture roach cannot draw or write."""
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingError(
            "--plot needs matplotlib, which is not installed",
            hint="pip install 'roach[plot]' (or pip install matplotlib); the report without --plot needs nothing",
        )
    if path.suffix.lower() != ".png":
        raise UsageError(f"--plot {path}: the picture is a PNG", hint=f"e.g. --plot {path.with_suffix('.png')}")
    if not path.parent.is_dir():
        raise UsageError(f"--plot {path}: no directory {path.parent}", hint="make it first, or name another path")


def _segments(a: AttemptLedger, t0: float) -> list[tuple[str, float, float]]:
    """(phase, start, length) in minutes from ``t0``, in order."""
    out: list[tuple[str, float, float]] = []
    if a.eligible is not None and a.requeue_s:
        out.append(("requeued", (a.eligible - a.requeue_s - t0) / 60, a.requeue_s / 60))
    if a.eligible is not None and a.pending_s:
        out.append(("queued", (a.eligible - t0) / 60, a.pending_s / 60))
    if a.start is None:
        return out
    at = a.start
    for phase, secs in (("starting", a.starting_s), ("recomputed", a.recomputed_s), ("training", a.useful_s)):
        if secs > 0:
            out.append((phase, (at - t0) / 60, secs / 60))
            at += secs
    return out


def plot(rep: Report, path: Path) -> None:
    """Draw ``rep`` into ``path`` (a PNG)."""
    import matplotlib  # the plot extra: imported only when a picture is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    times = [t for r in rep.runs for a in r.attempts for t in (a.eligible, a.start) if t is not None]
    t0 = min(times) if times else rep.generated_at
    tiers = sorted({a.tier for r in rep.runs for a in r.attempts})
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tiers)}
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=(12, max(4.0, 1.2 + 0.55 * len(rep.runs))), gridspec_kw={"width_ratios": [3, 1]}
    )
    for y, r in enumerate(rep.runs):
        for a in r.attempts:
            for phase, x, w in _segments(a, t0):
                alpha = dict(PHASES)[phase]
                ax.broken_barh(
                    [(x, w)],
                    (y - 0.35, 0.7),
                    facecolors=colour[a.tier],
                    alpha=alpha,
                    hatch=HATCH.get(phase),
                    edgecolor="black",
                    linewidth=0.4,
                )
    ax.set_yticks(range(len(rep.runs)), [r.run_id for r in rep.runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("minutes from the first attempt's eligible time")
    ax.set_title(f"{rep.scope.value} {rep.name}", fontsize=9)
    handles: list[Any] = [Patch(facecolor=colour[t], label=f"tier {t}") for t in tiers]
    handles += [Patch(facecolor="grey", alpha=al, hatch=HATCH.get(p), label=p) for p, al in PHASES]
    side.axis("off")
    side.legend(handles=handles, fontsize=7, loc="lower right")
    side.text(0, 1, _totals(rep), va="top", family="monospace", fontsize=8, transform=side.transAxes)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def _totals(rep: Report) -> str:
    runs = rep.runs
    alloc = sum(r.allocated_gpu_h for r in runs)
    lines = [
        "GPU-hours",
        f"allocated  {alloc:9.3f}",
        f"useful     {sum(r.useful_gpu_h for r in runs):9.3f}",
        f"recomputed {sum(r.recomputed_gpu_h for r in runs):9.3f}",
        f"idle       {sum(r.idle_gpu_h for r in runs):9.3f}",
        "",
        f"runs {len(runs)}, attempts {sum(len(r.attempts) for r in runs)}",
        f"preemptions {sum(r.preemptions for r in runs)}",
        f"wall-clock stops {sum(r.wall_clock_stops for r in runs)}",
        f"recomputed steps {sum(r.recomputed_steps for r in runs)}",
    ]
    pending: dict[str, float] = {}
    for r in runs:
        for t, s in r.pending_s_by_tier.items():
            pending[t] = pending.get(t, 0.0) + s
    lines += ["", "queued (min)"] + [f"  {t:<10} {s / 60:7.1f}" for t, s in sorted(pending.items())]
    lines += [f"requeued (min) {sum(r.requeue_s for r in runs) / 60:5.1f}"]
    return "\n".join(lines)
