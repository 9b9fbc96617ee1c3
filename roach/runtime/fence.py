"""The run's current attempt, claimed in its run directory: an attempt another has taken over writes nothing more.

A node cut off from Slurm's network goes on running its attempt while Slurm fails the node and requeues the job
elsewhere; where the run directory is still reachable from both (a site whose storage has a network of its own),
the old attempt must not replace what the new one writes. Rank 0 of each attempt claims the run (``.roach/attempt``:
the attempt's key, job, node and start) before it reads ``resume.pt``, and reads the claim again just before each
write of the run's files (the checkpoint, the result and the done marker, a progress line, a requeue): where a later
attempt's claim is there, this attempt is superseded and stops without writing (:class:`Superseded`).

A write that passed its check a moment before the new attempt claimed the run can still land; it is a whole
checkpoint of a later step (written atomically), which the new attempt may read as its own.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roach._fs import atomic_write

CLAIM_FILE = "attempt"
# Rank 0's exit code when a later attempt took its run over: 0, because a non-zero one makes the old attempt's srun
# (--kill-on-bad-exit) kill step J.0 once its node is reachable again, and J.0 is by then the new attempt's step.
EXIT_SUPERSEDED = 0


class Superseded(BaseException):
    """A later attempt claimed this attempt's run: nothing more may be written (not an ``Exception``, so a user's
    ``except Exception`` does not swallow it)."""

    def __init__(self, key: str, holder: dict[str, Any], what: str):
        super().__init__(f"attempt {key} superseded by attempt {holder.get('key')} before {what}")
        self.key, self.holder, self.what = key, holder, what

    def line(self, run_id: str, step: int) -> str:
        h = self.holder
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.get("time") or 0))
        return (
            f"superseded at step {step}: attempt {h.get('key')} (job {h.get('job')} on {h.get('node')}, started "
            f"{when}) took run {run_id} over, so this attempt ({self.key}) stops without writing {self.what}"
        )


@dataclass(frozen=True)
class Fence:
    """Attempt ``key``'s claim on the run in ``run_dir``."""

    run_dir: Path
    key: str

    @property
    def path(self) -> Path:
        return self.run_dir / ".roach" / CLAIM_FILE

    def claim(self, job_id: int, node: str) -> None:
        """Make this attempt the run's current one (rank 0, before it reads the run's files)."""
        atomic_write(self.path, json.dumps({"key": self.key, "job": job_id, "node": node, "time": time.time()}) + "\n")

    def holder(self) -> dict[str, Any] | None:
        """The claim in the run directory; None where there is none (or it cannot be read: nothing to fence on)."""
        try:
            claim = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return claim if isinstance(claim, dict) else None

    def check(self, what: str) -> None:
        """Raise :class:`Superseded` when another attempt holds the run; ``what`` names the write refused."""
        claim = self.holder()
        if claim is not None and claim.get("key") != self.key:
            raise Superseded(self.key, claim, what)
