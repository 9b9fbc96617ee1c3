"""`roach top`'s rendering: a :class:`~roach.watch.screen.Frame` as exactly the lines a terminal of a given size
holds, each cut to its width (never wrapped), so the screen fits 80x24 and redraws cleanly on a resize.

Pure: lines of :class:`rich.text.Text` from a frame and what the user looks at (:class:`View`); the command
(:mod:`roach.cli.top`) reads keys and puts the lines on the screen.
"""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich.text import Text

from roach.ops.events import human_seconds
from roach.watch.health import holder_text
from roach.watch.screen import Frame, JobRow, short_progress

CUT = "~"  # what a cut cell ends with: ASCII, whatever the terminal's encoding over SSH
KEYS = "up/down select  l log  w why  p promote  q quit"


class Mode(enum.Enum):
    TABLE = "table"  # the tier table and the jobs
    LOG = "log"  # the selected job's log, followed
    WHY = "why"  # why the selected job is pending (roach why)
    CONFIRM = "confirm"  # a promotion proposed: y makes it


@dataclass
class View:
    """What the user looks at: the selected job, the mode, and what that mode shows."""

    selected: str | None = None  # the selected row's key
    mode: Mode = Mode.TABLE
    message: str = ""  # the bottom line's message (else the keys)
    log_lines: list[str] = field(default_factory=list)
    log_title: str = ""
    why_lines: list[str] = field(default_factory=list)
    question: str = ""  # CONFIRM's question


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells (one line), ending with :data:`CUT` where it was cut."""
    text = text.replace("\n", " ").replace("\t", " ")
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + CUT if width > 1 else text[:width]


def cut_middle(text: str, width: int) -> str:
    """Cut in the middle, so both ends show (a sweep's run ids differ at their end)."""
    if len(text) <= width or width < 5:
        return cut(text, width)
    head = (width - 1) // 2
    return text[:head] + CUT + text[len(text) - (width - 1 - head) :]


# -- the job table's columns ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Columns:
    """Column widths for a terminal ``width`` cells wide; NOTE takes what is left."""

    job: int
    run: int
    state: int = 9
    tier: int = 5
    nodes: int = 5
    rp: int = 3
    rate: int = 5
    eta: int = 6
    note: int = 0

    @classmethod
    def fit(cls, width: int) -> Columns:
        job, run = 9, 11
        fixed = 1 + job + run + 9 + 5 + 5 + 3 + 5 + 6 + 8  # the marker, the cells, a space between each but the first
        left = max(width - fixed, 8)
        more = max(left - 17, 0)
        run += min(more // 3, 18)
        return cls(job=job, run=run, note=max(width - (fixed - 11 + run), 1))


def fmt_rate(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _short(s: float) -> str:
    """A likely start's distance in a few cells: ``45s``, ``12m``, ``3h05``."""
    n = int(round(s))
    return f"{n}s" if n < 120 else f"{n // 60}m" if n < 3600 else f"{n // 3600}h{n % 3600 // 60:02d}"


def note_of(r: JobRow) -> tuple[str, str]:
    """The NOTE cell and its style: a stall, a pending reason and its outlook, how it ended, or progress."""
    if r.superseded_by:
        return f"moved to {r.superseded_by}", "dim"  # short: an 80-column NOTE (18 cells) holds an 8-digit id
    if r.done:
        return f"exit {r.exit_code or '?'}", "green" if r.state == "COMPLETED" else "red"
    if r.explanation is not None:
        out = r.explanation.outlook.value
        promo = f" p->{r.promotion}" if r.promotion else ""
        likely = (r.estimate or {}).get("likely_in_s")
        starts = f" ~{_short(likely)}" if likely is not None else ""
        # the outlook, a promotion and the likely start first: a narrow NOTE cuts the reason, never whether it clears
        out_text = "NEVER" if out == "never" else out
        return f"{out_text}{promo}{starts}: {r.reason or r.explanation.reason.value}", (
            "red" if out == "never" else "yellow"
        )
    if r.holder and r.held_s is not None:
        limit = f"/{human_seconds(r.time_limit_s)}" if r.time_limit_s else ""
        return f"holder, held {human_seconds(r.held_s)}{limit}", "cyan"
    text = short_progress(r.progress)
    if r.stalled:
        return f"STALLED {text}", "bold red"
    return text, ""


def state_style(state: str) -> str:
    return {
        "RUNNING": "green",
        "PENDING": "yellow",
        "COMPLETED": "green",
        "FAILED": "red",
        "CANCELLED": "red",
        "TIMEOUT": "red",
        "PREEMPTED": "magenta",
        "NODE_FAIL": "red",
        "OUT_OF_MEMORY": "red",
    }.get(state, "")


def job_line(r: JobRow, cols: Columns, selected: bool) -> Text:
    live = not r.done and r.state == "RUNNING"  # a pace is shown while it runs: an ended run has none to go
    eta = human_seconds(r.pace.eta_s) if live and r.pace.eta_s is not None else "-"
    note, note_style = note_of(r)
    cells: list[tuple[str, str]] = [
        (">" if selected else " ", "bold"),
        (cut_middle(r.key, cols.job).ljust(cols.job), ""),
        (cut_middle(r.run_id or r.name or "-", cols.run).ljust(cols.run), ""),
        (cut(r.state, cols.state).ljust(cols.state), state_style(r.state)),
        (cut(r.tier or "-", cols.tier).ljust(cols.tier), ""),
        (cut(r.nodes or "-", cols.nodes).ljust(cols.nodes), ""),
        (cut(f"{r.restarts}/{r.preemptions}", cols.rp).rjust(cols.rp), "magenta" if r.restarts else ""),
        (cut(fmt_rate(r.pace.steps_per_min if live else None), cols.rate).rjust(cols.rate), ""),
        (cut(eta, cols.eta).rjust(cols.eta), ""),
        (cut(note, cols.note), note_style),
    ]
    line = Text(style="reverse" if selected else "")
    for i, (text, style) in enumerate(cells):
        if i > 1:
            line.append(" ")
        line.append(text, style=style)
    return line


def header_line(cols: Columns) -> Text:
    names = [
        " ",
        "JOB".ljust(cols.job),
        "RUN".ljust(cols.run),
        "STATE".ljust(cols.state),
        "TIER".ljust(cols.tier),
        "NODES".ljust(cols.nodes),
        "R/P".rjust(cols.rp),
        "ST/M".rjust(cols.rate),
        "ETA".rjust(cols.eta),
        "NOTE",
    ]
    return Text(names[0] + " ".join(names[1:]), style="bold")


# -- the top of the screen ---------------------------------------------------------------------------------------
def title_line(frame: Frame, width: int) -> Text:
    live = [r for r in frame.rows if not r.done]
    running = sum(r.state == "RUNNING" for r in live)
    pending = sum(r.state == "PENDING" for r in live)
    ended = sum(r.done for r in frame.rows)
    at = datetime.fromtimestamp(frame.time, UTC).strftime("%H:%M:%SZ")
    text = (
        f"roach top  {frame.cluster}  {at}  {len(frame.rows)} jobs: {running} running, {pending} pending, {ended} ended"
    )
    return Text(cut(text, width), style="bold")


def tier_lines(frame: Frame, width: int) -> list[Text]:
    if not frame.tiers:
        return [Text(cut("no tiers declared for this cluster", width), style="dim")]
    out = [Text(cut("TIER      CAP CLAIMED  RUN PEND FREE PREEMPTIBLE", width), style="bold")]
    for t in frame.tiers:
        cap = "-" if t.cap is None else str(t.cap)
        free = "-" if t.free is None else str(t.free)
        line = (
            f"{cut(t.name, 8):<8} {cap:>4} {t.claimed:>7} {t.running:>4} {t.pending:>4} {free:>4} "
            f"{'yes' if t.preemptible else 'no'}"
        )
        out.append(Text(cut(line, width), style="red" if t.free == 0 else ""))
    return out


def holder_lines(frame: Frame, width: int) -> list[Text]:
    out = []
    for r in frame.rows:
        if r.holder and r.held_s is not None:
            idle = (frame.holders_idle or {}).get(r.key)
            said = holder_text(
                {"job_id": r.key, "name": r.name, "held_s": r.held_s, "time_limit_s": r.time_limit_s, "idle": idle}
            )
            out.append(Text(cut(said, width), style="cyan"))
    return out


def footer_line(view: View, width: int) -> Text:
    if view.mode is Mode.CONFIRM:
        return Text(cut(view.question, width), style="bold yellow")
    if view.message:
        return Text(cut(view.message, width), style="yellow")
    keys = {
        Mode.TABLE: KEYS,
        Mode.LOG: "l or esc back  up/down select  q quit",
        Mode.WHY: "w or esc back  p promote  q quit",
    }[view.mode]
    return Text(cut(keys, width), style="dim")


def wrap(lines: list[str], width: int) -> list[str]:
    out = []
    for ln in lines:
        indent = " " * (len(ln) - len(ln.lstrip()) + 2)
        out += textwrap.wrap(ln, width=max(width, 10), subsequent_indent=indent) or [""]
    return out


def visible(rows: tuple[JobRow, ...], selected: str | None, room: int) -> tuple[int, int]:
    """The slice of rows that fits ``room`` lines with the selected one in it."""
    if len(rows) <= room:
        return 0, len(rows)
    at = next((i for i, r in enumerate(rows) if r.key == selected), 0)
    start = min(max(at - room // 2, 0), len(rows) - room)
    return start, start + room


def screen_lines(frame: Frame | None, view: View, width: int, height: int, fill: bool = True) -> list[Text]:
    """The lines of the screen: at most ``height``, none wider than ``width``; with ``fill``, exactly
    ``height``, the keys on the last line."""
    width, height = max(width, 20), max(height, 3)
    if frame is None:
        first = [Text(cut("roach top: the first round ...", width))]
        return first + [Text("") for _ in range(height - 2 if fill else 0)] + [footer_line(view, width)]
    body = height - 1  # the footer
    lines: list[Text] = [title_line(frame, width)]
    if view.mode is Mode.LOG:
        lines.append(Text(cut(view.log_title, width), style="bold"))
        room = body - len(lines)
        lines += [Text(cut(ln, width)) for ln in view.log_lines[-room:]] if room > 0 else []
    else:
        lines += [Text(cut(o, width), style="bold red") for o in frame.outages]
        lines += tier_lines(frame, width) + holder_lines(frame, width)
        if view.mode is Mode.WHY:
            lines += [Text(ln) for ln in wrap(view.why_lines, width)]
        else:
            cols = Columns.fit(width)
            lines.append(header_line(cols))
            room = body - len(lines)
            if not frame.rows:
                lines.append(Text(cut("no job to watch", width), style="dim"))
            elif room > 0:
                rows = frame.rows
                more = len(rows) > room
                start, stop = visible(rows, view.selected, room - 1 if more else room)
                lines += [job_line(r, cols, r.key == view.selected) for r in rows[start:stop]]
                if more:  # say what is off the screen
                    lines.append(Text(cut(f"  rows {start + 1}-{stop} of {len(rows)} (up/down)", width), style="dim"))
    lines = [ln[:width] if len(ln) > width else ln for ln in lines[:body]]
    if fill:
        lines += [Text("") for _ in range(body - len(lines))]
    return lines + [footer_line(view, width)]
