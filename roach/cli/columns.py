"""Styled text and a table of columns in plain ``click`` (no rich: ``roach ls`` and ``status`` load none of it).

A :data:`Spans` is a line's text in pieces, each with its ``click.style`` keywords (``{"fg": "green"}``, ``{}``
for none); ``click.echo`` drops the styles where the output is not a terminal. :func:`table_lines` lays rows
out in columns two spaces apart under a bold header: on a terminal the widest columns are narrowed until the
table fits its width and their cells fold onto more lines; piped, each row is one whole line (for grep and awk).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

Style = dict[str, Any]
Spans = list[tuple[str, Style]]
Cell = str | Spans

GAP = "  "  # between two columns
BOLD: Style = {"bold": True}


def spans(cell: Cell) -> Spans:
    return [(cell, {})] if isinstance(cell, str) else cell


def plain(cell: Cell) -> str:
    """The cell's text without its styles."""
    return "".join(text for text, _ in spans(cell))


def styled(cell: Cell) -> str:
    """The cell's text with its styles, as ``click.echo`` prints (and strips, off a terminal)."""
    return "".join(click.style(text, **style) if style and text else text for text, style in spans(cell))


def terminal_width() -> int | None:
    """The width to fit a table to: ``$COLUMNS`` or the terminal's on a terminal; None when piped."""
    if not sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return 80


def fit(widths: Sequence[int], total: int) -> list[int]:
    """Column widths that fit in ``total`` characters with their gaps: the widest columns are narrowed to the
    next widest, in turn, the excess spread over them (the first takes the odd character), never below 1."""
    out = list(widths)
    room = max(total - len(GAP) * (len(out) - 1), len(out))
    while sum(out) > room:
        top = max(out)
        second = max((w for w in out if w != top), default=1)
        tops = [i for i, w in enumerate(out) if w == top]
        left = min(sum(out) - room, len(tops) * (top - second))
        for k, i in enumerate(tops):
            cut = -(-left // (len(tops) - k))
            out[i] -= cut
            left -= cut
    return out


def _breaks(text: str, width: int) -> list[tuple[int, int]]:
    """Where ``text`` splits into lines of at most ``width``: at spaces where it can, else inside a word."""
    lines, start = [], 0
    while len(text) - start > width:
        cut = text.rfind(" ", start, start + width + 1)
        if cut <= start:  # no space to break at: fold the word
            lines.append((start, start + width))
            start += width
        else:
            lines.append((start, cut))
            start = cut + 1
    lines.append((start, len(text)))
    return lines


def _slice(cell: Spans, start: int, end: int) -> Spans:
    out, pos = [], 0
    for text, style in cell:
        a, b = max(start, pos), min(end, pos + len(text))
        if a < b:
            out.append((text[a - pos : b - pos], style))
        pos += len(text)
    return out


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[Cell]], width: int | None) -> list[str]:
    """The table's lines, styled: the header (bold), then each row, its columns padded to one width; fitted
    to ``width`` with folded cells, or each row whole on one line when ``width`` is None."""
    cells = [[[(h, BOLD)] for h in headers], *[[spans(c) for c in row] for row in rows]]
    natural = [max(len(plain(row[i])) for row in cells) for i in range(len(headers))]
    widths = natural if width is None else fit(natural, width)
    out = []
    for row in cells:
        folded = [
            [_slice(c, a, b) for a, b in _breaks(plain(c), w)] if len(plain(c)) > w else [c]
            for c, w in zip(row, widths)
        ]
        for k in range(max(len(f) for f in folded)):
            parts = []
            for f, w in zip(folded, widths):
                piece = f[k] if k < len(f) else []
                parts.append(styled(piece) + " " * (w - len(plain(piece))))
            out.append(GAP.join(parts))
    return out
