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


# An env that counts its calls in $ENV_CALLS, then does what the real one does (or what an old one did).
COUNTING_ENV = """#!/bin/sh
echo x >> "$ENV_CALLS"
%s
exec /usr/bin/env "$@"
"""


def _block(tmp_path: Path, old: bool = False, yes_dir: Path | None = None) -> tuple[str, int]:
    """ROACH_BLOCK as node.sh's roach_block_signals sets it, and how many times it ran env."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    env_bin = bin_dir / "env"
    refuse = OLD_ENV.splitlines()[2] if old else ""
    env_bin.write_text(COUNTING_ENV % refuse)
    env_bin.chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    yes_dir = yes_dir or tmp_path / "yes"
    yes_dir.mkdir(exist_ok=True)
    script = (
        f"source {NODE_SH}\nROACH_ENV_BIN={env_bin}\nROACH_BLOCK_YES_DIR={yes_dir}\n"
        'roach_block_signals USR1\necho "${ROACH_BLOCK[*]-}"\n'
    )
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, env={**os.environ, "ENV_CALLS": str(calls)}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), len(calls.read_text().split())


@pytest.mark.parametrize("old", [False, True], ids=["env 8.31+", "older env"])
def test_the_ranks_start_blocked_only_where_env_can(tmp_path, old):
    """An env without --block-signal starts the ranks as before, with no prefix; one with it, blocked."""
    block, calls = _block(tmp_path, old=old)
    assert block == ("" if old else f"{tmp_path}/bin/env --block-signal=USR1 --block-signal=TERM")
    assert calls == 1


def test_env_is_asked_once_per_node_and_boot_then_its_yes_is_remembered(tmp_path):
    """The second start on this node asks env nothing (~1 ms less before the ranks start); a no is not remembered."""
    yes_dir = tmp_path / "yes"
    assert _block(tmp_path, old=True) == ("", 1)
    assert _block(tmp_path, old=True) == ("", 1)  # an old env is asked every time: nothing was remembered
    assert not list(yes_dir.iterdir())
    first = _block(tmp_path)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert [p.name for p in yes_dir.iterdir()] == [f".roach-env-blocks-USR1.{os.getuid()}.{boot}"]
    assert first[1] == 1
    again = _block(tmp_path)
    assert again == (first[0], 0)


def test_a_yes_left_by_another_user_is_not_trusted(tmp_path):
    """Only this user's own file counts: another user cannot make this user's ranks start through env."""
    yes_dir = tmp_path / "yes"
    yes_dir.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    planted = yes_dir / f".roach-env-blocks-USR1.{os.getuid()}.{boot}"
    planted.write_text("")
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    os.chown(planted, 65534, 65534)  # nobody's
    block, calls = _block(tmp_path, old=True, yes_dir=yes_dir)
    assert (block, calls) == ("", 1)  # asked, and the old env said no


def test_a_one_node_job_reads_only_node_sh_s_first_functions_and_a_holder_s_step_reads_them_all():
    """`source node.sh --hot` (the batch script of a one-node job) stops before the prepare's functions: bash does
    not parse them. A plain source (a holder's step.sh, whose own $1 is prepare or rank) and `bash node.sh
    prepare` define everything."""
    probe = 'for f in roach_clone_dir_to roach_python_to roach_block_signals roach_prepare roach_free_port; do\n  declare -F "$f" >/dev/null && echo "$f"\ndone\n'
    hot = subprocess.run(["bash", "-c", f"source {NODE_SH} --hot\n{probe}"], capture_output=True, text=True)
    assert hot.stdout.split() == ["roach_clone_dir_to", "roach_python_to", "roach_block_signals"], hot.stderr
    for first in ("prepare", "rank"):
        full = subprocess.run(
            ["bash", "-c", f"source {NODE_SH}\n{probe}", "step.sh", first], capture_output=True, text=True
        )
        assert len(full.stdout.split()) == 5, (first, full.stdout, full.stderr)
