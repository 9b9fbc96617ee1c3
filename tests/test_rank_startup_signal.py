"""A checkpoint signal that reaches a rank while Python starts, before run.py's handlers exist.

Slurm may send the wall clock's USR1 at once after a requeue (seen on 22.05 and 26.05 under load): a rank
still importing died of it ("srun: error: n1: tasks 0-1: User defined signal 1", the attempt lost). The
ranks now start through node.sh's ``roach_block_signals`` prefix (``env --block-signal``): the signal
waits, pending, and run.py takes it once its handlers are in place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NODE_SH = REPO / "roach" / "runtime" / "node.sh"

TRAIN = """
import time
def train(run, steps=20):
    state = run.resume(default={"n": 0})
    for step in run.steps(run.start_step, steps):
        state["n"] += 1
        time.sleep(0.05)
        if run.should_checkpoint():
            run.checkpoint(state)
    return state["n"]
"""
# Python's start-up made long on purpose (site imports sitecustomize before run.py runs), so the signal
# surely comes before the handlers: the window a slow node or a heavy import opens.
SLOW_START = "import time\ntime.sleep(1.0)\n"


def _start_rank(tmp_path: Path, blocked: bool) -> subprocess.Popen:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "f.py").write_text(TRAIN)
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW_START)
    spec = tmp_path / "spec.json"
    spec.write_text(
        '{"version": 1, "target": "pkg.f:train", "args": {}, "run_id": "r1", '
        f'"run_dir": "{tmp_path}/run", "python_path": ["."], "checkpoint_signal": "USR1"}}'
    )
    script = (
        f"source {NODE_SH}\nroach_block_signals USR1\n"
        + ("" if blocked else "ROACH_BLOCK=()\n")
        + f'exec ${{ROACH_BLOCK[@]+"${{ROACH_BLOCK[@]}}"}} {sys.executable} -m roach.slurm.run {spec}\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(ROACH_CLONE_DIR=str(tmp_path), PYTHONPATH=f"{tmp_path}/slow:{REPO}")
    return subprocess.Popen(
        ["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _signal_during_start(p: subprocess.Popen) -> str:
    time.sleep(0.3)  # env has blocked the signal and exec'd Python, which sleeps in sitecustomize
    p.send_signal(signal.SIGUSR1)
    return p.communicate(timeout=60)[0]


def test_a_checkpoint_signal_during_start_up_waits_for_the_handlers(tmp_path):
    if subprocess.run(["env", "--block-signal=USR1", "true"], capture_output=True).returncode != 0:
        pytest.skip("this env has no --block-signal (coreutils < 8.31): the ranks start unblocked, as before")
    p = _start_rank(tmp_path, blocked=True)
    out = _signal_during_start(p)
    assert p.returncode >= 0, f"the rank died of the signal:\n{out}"
    assert "caught_signal USR1 at step 0" in out, out
    assert "wall clock at step 1 (checkpointed, USR1)" in out, out  # stopped at the first boundary, saved
    assert (tmp_path / "run" / "resume.pt").exists()


def test_without_the_block_the_same_signal_kills_the_rank(tmp_path):
    """The other branch: what a rank started plainly (an env without --block-signal) does."""
    p = _start_rank(tmp_path, blocked=False)
    out = _signal_during_start(p)
    assert p.returncode == -signal.SIGUSR1 or p.returncode == 128 + signal.SIGUSR1, out
    assert not (tmp_path / "run" / "resume.pt").exists()


OLD_ENV = """#!/bin/sh
# coreutils before 8.31 (RHEL 8, Debian 10): no --block-signal
for a in "$@"; do case "$a" in --block-signal*) echo "env: unrecognized option '$a'" >&2; exit 125 ;; esac; done
exec /usr/bin/env "$@"
"""


@pytest.mark.parametrize("probe", ["in the background", "asked now"])
@pytest.mark.parametrize("old", [False, True], ids=["env 8.31+", "older env"])
def test_the_ranks_start_blocked_only_where_env_can(tmp_path, probe, old):
    """The batch script asks env in the background (its pid given to roach_block_signals); a holder's step asks
    on the spot. An env without --block-signal starts the ranks as before, with no prefix."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if old:
        (bin_dir / "env").write_text(OLD_ENV)
        (bin_dir / "env").chmod(0o755)
    env_bin = str(bin_dir / "env") if old else "/usr/bin/env"
    asked = (
        f'{env_bin} --block-signal=USR1 --version >/dev/null 2>&1 &\nroach_block_signals USR1 "$!"'
        if probe == "in the background"
        else "roach_block_signals USR1"
    )
    script = f'source {NODE_SH}\nROACH_ENV_BIN={env_bin}\n{asked}\necho "${{ROACH_BLOCK[*]-}}"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("" if old else "/usr/bin/env --block-signal=USR1 --block-signal=TERM")
