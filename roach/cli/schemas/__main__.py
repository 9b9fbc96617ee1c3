"""``python -m roach.cli.schemas NAME``: print record NAME's JSON Schema (``--list``: the names; ``--doc``:
docs/json.md's generated reference; ``--doc-into docs/json.md``: replace that part of the page)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roach._fs import atomic_write
from roach.cli.schemas import SCHEMAS
from roach.cli.schemas.doc import reference, with_reference


def main(argv: list[str]) -> int:
    if argv == ["--doc"]:
        sys.stdout.write(reference(SCHEMAS))
        return 0
    if len(argv) == 2 and argv[0] == "--doc-into":
        atomic_write(argv[1], with_reference(Path(argv[1]).read_text(), reference(SCHEMAS)))
        return 0
    if argv == ["--list"] or not argv:
        print("\n".join(SCHEMAS))
        return 0
    unknown = [a for a in argv if a not in SCHEMAS]
    if unknown:
        print(f"no schema {', '.join(unknown)}; the names: {', '.join(SCHEMAS)}", file=sys.stderr)
        return 2
    for name in argv:
        print(json.dumps(SCHEMAS[name], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
