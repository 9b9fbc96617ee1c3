"""Summaries over repetitions and the Markdown tables they render to (pure: no Slurm, no clock).

Every measured quantity is a list of samples, one per repetition. A table row shows each method's median
with its min and max, and the ratio of a baseline to roach computed per repetition (repetition i of the
baseline over repetition i of roach, which ran beside it) and summarised the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median, min and max of one quantity over the repetitions (``n`` samples)."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        values = [float(s) for s in samples if s is not None and not math.isnan(float(s))]
        if not values:
            raise ValueError("no samples to summarise")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def render(self, unit: str = "", digits: int | None = None) -> str:
        """``1.23 s (1.10–1.40)``; one value alone when every sample is the same."""
        u = f" {unit}" if unit else ""
        med = fmt(self.median, digits)
        if self.min == self.max:
            return f"{med}{u}"
        return f"{med}{u} ({fmt(self.min, digits)}–{fmt(self.max, digits)})"


def fmt(x: float, digits: int | None = None) -> str:
    """A number as a person reads it: integers plain, others with 3 significant digits (or ``digits``)."""
    if digits is not None:
        return f"{x:.{digits}f}"
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax == 0:
        return "0"
    return f"{x:.3g}"


def paired_ratios(baseline: Sequence[float], roach: Sequence[float]) -> list[float]:
    """``baseline[i] / roach[i]`` for each repetition both have; a zero roach value gives ``inf``
    (or nothing when the baseline is zero too: 0/0 says nothing)."""
    out = []
    for b, r in zip(baseline, roach):
        if b is None or r is None:
            continue
        if r == 0:
            if b != 0:
                out.append(math.inf)
            continue
        out.append(b / r)
    return out


def render_ratio(ratios: Sequence[float]) -> str:
    """``12× (10×–14×)``; ``∞`` where roach needed none of what the baseline needed; ``–`` with no pair."""
    if not ratios:
        return "–"
    if all(math.isinf(r) for r in ratios):
        return "∞ (roach: 0)"
    s = Summary.of(ratios)

    def one(x: float) -> str:
        return "∞" if math.isinf(x) else f"{fmt(x)}×"

    return one(s.median) if s.min == s.max else f"{one(s.median)} ({one(s.min)}–{one(s.max)})"


@dataclass(frozen=True)
class Row:
    """One line of a comparison table: a label, then one sample list per method (roach first)."""

    label: str
    samples: dict[str, list[float]]
    unit: str = ""


def comparison_table(rows: Sequence[Row], methods: Sequence[str], roach: str = "roach") -> str:
    """A Markdown table: label, each method's median (min–max), then each baseline's ratio to roach."""
    baselines = [m for m in methods if m != roach]
    head = ["", *methods, *[f"{b} / {roach}" for b in baselines]]
    lines = [_md_row(head), _md_row(["---"] * len(head))]
    for row in rows:
        cells = [row.label]
        for m in methods:
            xs = row.samples.get(m) or []
            cells.append(Summary.of(xs).render(row.unit) if _has(xs) else "–")
        for b in baselines:
            cells.append(render_ratio(paired_ratios(row.samples.get(b) or [], row.samples.get(roach) or [])))
        lines.append(_md_row(cells))
    return "\n".join(lines) + "\n"


def simple_table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [_md_row([str(h) for h in head]), _md_row(["---"] * len(head))]
    lines += [_md_row([str(c) for c in r]) for r in rows]
    return "\n".join(lines) + "\n"


def _has(xs: Sequence[float]) -> bool:
    return any(x is not None and not math.isnan(float(x)) for x in xs)


def load_sentence(load: float, cores: int | None) -> str:
    """The sentence a section gives the machine's load at its start: the same code measured twice as slow beside
    a test suite on these shared 2-core machines (bench 4 and 8)."""
    return f"The machine's load average at the start was {load:.1f} on {cores} cores."


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def target_row(
    figure: str,
    roach: Sequence[float],
    baseline: Sequence[float] | None,
    baseline_name: str,
    unit: str,
    *,
    max_ratio: float | None = None,
    max_value: float | None = None,
    scale: float = 1.0,
    part_of: str | None = None,
) -> dict:
    """One line of results.md's summary: the figure, roach's and the baseline's medians, roach / baseline
    (paired per repetition), the target and whether it holds (a ratio at most ``max_ratio``, and/or roach's
    median at most ``max_value``, in ``unit`` after ``scale``). A figure with no target of its own names the
    figure whose target covers it (``part_of``) and holds nothing (``None``)."""
    r = Summary.of([x * scale for x in roach if x is not None])
    b = Summary.of([x * scale for x in baseline if x is not None]) if baseline else None
    ratios = paired_ratios(list(roach), list(baseline)) if baseline else []
    ratio = statistics.median(ratios) if ratios else None
    targets: list[str] = []
    holds: bool | None = True
    if max_ratio is not None:
        targets.append(f"<= {max_ratio:g}x {baseline_name}")
        holds = holds and ratio is not None and ratio <= max_ratio
    if max_value is not None:
        targets.append(f"<= {fmt(max_value)} {unit}")
        holds = holds and r.median <= max_value
    if not targets:
        holds = None
        targets.append(f"none of its own: a part of {part_of}" if part_of else "–")
    return {
        "figure": figure,
        "roach": f"{fmt(r.median)} {unit}",
        "baseline": f"{fmt(b.median)} {unit} ({baseline_name})" if b else "–",
        "ratio": f"{ratio:.2f}x" if ratio is not None else "–",
        "target": ", ".join(targets),
        "holds": holds,
    }
