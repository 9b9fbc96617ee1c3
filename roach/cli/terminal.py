"""The terminal under `roach top`: keys from its bytes (cbreak mode, no curses), its size asked of it, and
whole frames drawn from the top left corner."""

from __future__ import annotations

import os
import select
import sys

from rich.console import Console
from rich.text import Text

_SEQUENCES = {
    "\x1b[A": "up",
    "\x1b[B": "down",
    "\x1bOA": "up",
    "\x1bOB": "down",
}


def parse_keys(data: str) -> list[str]:
    """Key names from what the terminal sent: arrows (both modes), esc, and plain characters."""
    out, i = [], 0
    while i < len(data):
        for seq, name in _SEQUENCES.items():
            if data.startswith(seq, i):
                out.append(name)
                i += len(seq)
                break
        else:
            ch = data[i]
            if ch == "\x1b" and data.startswith("[", i + 1):  # another escape sequence: skip it whole
                j = i + 2
                while j < len(data) and not data[j].isalpha() and data[j] != "~":
                    j += 1
                i = j + 1
                continue
            out.append({"\x1b": "esc", "k": "up", "j": "down"}.get(ch, ch))
            i += 1
    return out


def read_keys(fd: int, timeout: float) -> list[str]:
    ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
    if not ready:
        return []
    data = os.read(fd, 256).decode(errors="replace")
    if data == "\x1b":  # an arrow's bytes may come in two reads
        more, _, _ = select.select([fd], [], [], 0.05)
        if more:
            data += os.read(fd, 256).decode(errors="replace")
    return parse_keys(data)


def terminal_size(console: Console) -> tuple[int, int]:
    """The terminal's size now, asked of the terminal itself: rich takes $COLUMNS and $LINES, when they are
    exported, as a fixed size that no resize changes."""
    try:
        ts = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return console.size.width, console.size.height
    console.size = (ts.columns, ts.lines)
    return ts.columns, ts.lines


def draw(console: Console, lines: list[Text], clear: bool = False) -> None:
    """The whole screen in one write, from its top left corner: each line padded to the width, so nothing of
    the last frame is left, and no relative cursor moves that a resize would throw off."""
    width = console.size.width
    with console.capture() as cap:
        for i, ln in enumerate(lines):
            last = i == len(lines) - 1
            t = ln.copy()
            t.set_length(width - 1 if last else width)  # the last cell of the last line would scroll some terminals
            console.print(t, end="" if last else "\n", no_wrap=True, overflow="crop", soft_wrap=True)
    console.file.write(("\x1b[2J" if clear else "") + "\x1b[H" + cap.get())
    console.file.flush()
