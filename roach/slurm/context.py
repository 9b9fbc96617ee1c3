"""The ``Run`` object a job's function receives as its first parameter (if it asks for one)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    """Who this rank is and where the run keeps its files.

    ``run_dir`` is the run's own directory (shared by every job of the run id, so a resubmitted run
    finds what the earlier job wrote). Progress lines go to the job's log through :meth:`log`.
    """

    run_id: str
    job_id: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: str
    run_dir: Path
    restart_count: int = 0
    cluster: str = ""
    logger: logging.Logger = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.logger is None:
            self.logger = _make_logger(self.rank)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str, *args: object) -> None:
        """One progress line in the job's log (with time and rank), flushed at once."""
        self.logger.info(message, *args)


def _make_logger(rank: int) -> logging.Logger:
    logger = logging.getLogger(f"roach.run.rank{rank}")
    if not logger.handlers:
        h = logging.StreamHandler(sys.stdout)
        fmt = logging.Formatter("%(asctime)sZ roach rank %(rank)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
        fmt.converter = time.gmtime
        h.setFormatter(fmt)
        h.addFilter(_RankFilter(rank))
        logger.addHandler(h)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True
