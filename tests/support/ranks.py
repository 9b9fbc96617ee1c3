"""Two ranks of a script in processes of their own, joined by torch.distributed's gloo through a file: what a
2-rank run's ranks do between Slurm's start and end, without Slurm (the lab's job venv has torch)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from roach.lab.config import LabConfig
from tests.conftest import slack

REPO = Path(__file__).resolve().parent.parent.parent


def two_ranks(lab: LabConfig, script: str, tmp_path: Path, run_dir: Path) -> tuple[list[int], list[str]]:
    """Run ``script`` as ranks 0 and 1 (argv: rank, the init file's URL, ``run_dir``); their exit codes and
    outputs (stdout and stderr together)."""
    python = lab.state / "pyenv" / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [str(python), "-c", script, str(rank), f"file://{tmp_path}/init", str(run_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=slack(120))[0] for p in procs]
    return [p.returncode for p in procs], outs
