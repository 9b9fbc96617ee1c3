"""bench/results.md: one section per benchmark, each kept as JSON in bench/out/results/ so that
``--only 3`` rewrites section 3 and keeps the others from their last run; plots go beside results.md.
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.labenv import OUT

SECTIONS = OUT / "results"
NOTES = Path(__file__).resolve().parent / "notes"  # <n>.md: what a person wrote about section n, kept across runs

HEADER = """# roach benchmark results

Written by `python -m bench` (`make bench`) on the lab cluster (`roach lab up`: one host, Slurm {slurm}, two
nodes of 4 fake GPUs). Each benchmark runs roach and its baselines side by side, repetition by
repetition; a cell is the median over the repetitions with (min–max); a ratio is baseline / roach per
repetition, summarised the same way. Timings depend on the machine; the ratios and the RPC counts are what
carry over. How each number is measured: bench/README.md.
"""


@dataclass
class Section:
    """One benchmark's result: its Markdown body, its parameters and the plot it drew (if any)."""

    number: int
    title: str
    body: str
    params: dict = field(default_factory=dict)
    smoke: bool = False
    plot: str | None = None  # file name beside results.md
    summary: list[dict] = field(default_factory=list)  # stats.target_row lines for results.md's summary
    when: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    host: str = field(default_factory=platform.node)

    def save(self) -> Path:
        SECTIONS.mkdir(parents=True, exist_ok=True)
        path = SECTIONS / f"{self.number}.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    def render(self, notes: Path = NOTES) -> str:
        """The section as results.md shows it: its body, then ``notes/<n>.md`` (a person's reading of the figures,
        which a run of the benchmark cannot write and must not drop), then its plot."""
        size = "**smoke sizes** (a quick check, not the issue's sizes)" if self.smoke else "full sizes"
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        out = [f"## {self.number}. {self.title}", "", f"_{self.when}, {size}; {params}_", "", self.body.rstrip(), ""]
        note = notes / f"{self.number}.md"
        if note.exists():
            out += [note.read_text().rstrip(), ""]
        if self.plot:
            out += [f"![{self.title}]({self.plot})", ""]
        return "\n".join(out)


def load_sections() -> list[Section]:
    out = []
    for p in sorted(SECTIONS.glob("*.json"), key=lambda p: int(p.stem)) if SECTIONS.exists() else []:
        out.append(Section(**json.loads(p.read_text())))
    return out


def write_results(path: Path, sections: list[Section], pending: dict[int, tuple[str, str]], slurm: str) -> None:
    """results.md from the saved sections. A benchmark with no saved section keeps what results.md holds for it
    now (its section and its summary rows): the saved sections live only in the clone that ran them
    (bench/out), and a run of `--only N` elsewhere must not wipe the others' figures. Only a benchmark results.md
    has never held gets a "not measured" line (``pending``)."""
    have = {s.number: s for s in sections}
    kept, kept_rows = committed(path.read_text()) if path.exists() else ({}, {})
    kept_rows = {n: rows for n, rows in kept_rows.items() if n not in have and n in kept}
    parts = [HEADER.format(slurm=slurm), summary_table(sections, kept_rows)]
    for n in sorted(set(have) | set(pending)):
        if n in have:
            parts.append(have[n].render())
        elif n in kept:
            parts.append(kept[n])
        else:
            title, why = pending[n]
            parts.append(f"## {n}. {title}\n\n_Not measured: {why}_\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))


_SECTION = re.compile(r"^## (\d+)\. ", re.M)
_ROW = re.compile(r"^\| .* \(§(\d+)\) \|.*\|$", re.M)


def committed(text: str) -> tuple[dict[int, str], dict[int, list[str]]]:
    """The measured sections of a results.md text by number (a "not measured" one is left out), and its summary
    table's rows by the section they cite."""
    starts = [(int(m[1]), m.start()) for m in _SECTION.finditer(text)]
    sections = {}
    for (n, start), end in zip(starts, [s for _, s in starts[1:]] + [len(text)]):
        chunk = text[start:end].rstrip("\n") + "\n"
        if "_Not measured:" not in chunk:
            sections[n] = chunk
    summary = text[: starts[0][1]] if starts else ""
    rows: dict[int, list[str]] = {}
    for m in _ROW.finditer(summary):
        rows.setdefault(int(m[1]), []).append(m[0])
    return sections, rows


def _holds(holds: bool | None) -> str:
    return "–" if holds is None else "yes" if holds else "**no**"


def summary_table(sections: list[Section], kept_rows: dict[int, list[str]] | None = None) -> str:
    """Every benchmark's figures with a target (issue 18) in one table, each from its section's last run
    (``kept_rows``: the rows results.md holds for sections this clone has not saved, kept as they are)."""
    lines = [
        "## Summary",
        "",
        "Each figure that has a target, and each other figure of issue 18's table: roach, the baseline, roach / "
        "baseline (paired per repetition; below 1 roach is faster or lighter), the target and whether it holds in "
        "that run (a figure with no target of its own: the figure whose target covers it). The sections below "
        "give how.",
        "",
        "| figure | roach | baseline | roach / baseline | target | holds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows = [
        (
            s.number,
            f"| {r['figure']} (§{s.number}) | {r['roach']} | {r['baseline']} | {r['ratio']} | {r['target']} | "
            f"{_holds(r['holds'])} |",
        )
        for s in sections
        for r in s.summary
    ]
    rows += [(n, line) for n, ls in (kept_rows or {}).items() for line in ls]
    lines += [line for _, line in sorted(rows, key=lambda x: x[0])]  # by section, each section's in its order
    if not rows:
        lines.append("| (no benchmark with a target has run yet) | | | | | |")
    return "\n".join(lines) + "\n"


def plot_lines(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    panels: dict[str, dict[str, tuple[list, list]]],
    logx: bool = True,
    logy: bool = True,
) -> str | None:
    """One PNG with a panel per key of ``panels``, each a line per method (x values, y medians).

    Returns the file name, or None when matplotlib is missing (the table still says everything)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False)
    for ax, (panel, lines) in zip(axes[0], panels.items()):
        ticks: set = set()
        for i, (label, (xs, ys)) in enumerate(lines.items()):
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None and (y > 0 or not logy)]
            if pts:
                # distinct dashes and markers: lines that coincide (same counts) must both show
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker="os^dv"[i % 5],
                    linestyle=["-", "--", ":", "-."][i % 4],
                    markersize=8 - 1.5 * i,
                    label=label,
                )
                ticks.update(p[0] for p in pts)
        if logx:
            ax.set_xscale("log")
        if ticks:
            ax.set_xticks(sorted(ticks))
            ax.set_xticklabels([str(t) for t in sorted(ticks)])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if logy:
            ax.set_yscale("log")
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
