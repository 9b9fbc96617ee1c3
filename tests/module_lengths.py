"""The modules of roach over 400 lines, listed by ``make lint`` (a report: it never fails).

A long module is a prompt to look, not an error: one idea whole may be long (STYLE.md 12), and a module is
split where two ideas meet, never to pass a count. ``python -m tests.module_lengths [LIMIT]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 400
PACKAGE = Path(__file__).resolve().parent.parent / "roach"


def long_modules(package: Path = PACKAGE, limit: int = LIMIT) -> dict[str, int]:
    """Each module of ``package`` over ``limit`` lines, longest first, by its path from the package's parent."""
    lengths = {str(p.relative_to(package.parent)): len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    return dict(sorted(((k, n) for k, n in lengths.items() if n > limit), key=lambda kn: (-kn[1], kn[0])))


def main(argv: list[str]) -> int:
    limit = int(argv[0]) if argv else LIMIT
    long = long_modules(limit=limit)
    if not long:
        print(f"module lengths: none over {limit} lines")
        return 0
    print(f"module lengths: {len(long)} over {limit} lines (split one only where two ideas meet):")
    for path, n in long.items():
        print(f"  {n:5d}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
