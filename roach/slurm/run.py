"""Rank entry point: ``python -m roach.slurm.run <spec.json>``, one process per GPU.

The command line the batch script and a holder's step run (and ``pkill -USR1 -f roach.slurm.run`` finds).
It loads only the runtime layer, ``roach/runtime/`` (what a rank does is :mod:`roach.runtime.rank`):
``roach.slurm`` is a lazy facade, so starting a rank imports no store, ssh or submit code.
"""

from __future__ import annotations

import sys

from roach.runtime.rank import entry

if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
