"""A resumed attempt's way from the rank's start to its first step: what runs at once, what is not done at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run

REPO = Path(__file__).resolve().parent.parent


def _saved(path: Path, next_step: int, state) -> None:
    ckpt.save(path, {"roach": {"next_step": next_step, "job_id": 7}, "state": state})


def _run(run_dir: Path, **kw) -> Run:
    return Run(
        run_id="r1",
        job_id=7,
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node="n1",
        run_dir=run_dir,
        restart_count=1,
        **kw,
    )


def test_resume_takes_the_checkpoint_the_rank_read_while_it_started(tmp_path, monkeypatch, capsys):
    _saved(tmp_path / ckpt.RESUME_FILE, 12, {"w": [1, 2, 3]})
    early = ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE)
    assert early is not None
    early.wait()
    reads = []
    monkeypatch.setattr(ckpt, "load", lambda path: reads.append(path))  # a read now would be a second one
    run = _run(tmp_path, prefetch=early)
    assert run.resume(default=None) == {"w": [1, 2, 3]}
    assert run.start_step == 12 and reads == []
    assert "resumed at step 12 (checkpoint of job 7; restart count 1; read while the rank started)" in (
        capsys.readouterr().out
    )


def test_a_checkpoint_written_after_that_read_is_the_one_resume_returns(tmp_path):
    path = tmp_path / ckpt.RESUME_FILE
    _saved(path, 12, "old")
    early = ckpt.Prefetch.start(path)
    assert early is not None
    early.wait()
    _saved(path, 20, "new")  # the function checkpointed before it asked to resume
    run = _run(tmp_path, prefetch=early)
    assert run.resume(default=None) == "new" and run.start_step == 20


def test_an_unreadable_checkpoint_fails_in_resume_as_it_did_without_the_early_read(tmp_path):
    path = tmp_path / ckpt.RESUME_FILE
    path.write_bytes(b"not a checkpoint")
    early = ckpt.Prefetch.start(path)
    assert early is not None
    with pytest.raises(Exception) as raised:
        _run(tmp_path, prefetch=early).resume(default=None)
    with pytest.raises(type(raised.value)):
        _run(tmp_path).resume(default=None)


def test_no_early_read_without_a_checkpoint_or_a_model_to_warm(tmp_path):
    assert ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE) is None


_WARM = r"""
import os, sys
from pathlib import Path
from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run, imports_hint, warm_modules

run_dir = Path(sys.argv[1])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1")
if sys.argv[3] == "first":
    run = Run(run_id="r", job_id=1, rank=0, world_size=1, local_rank=0, local_world_size=1, node="n", run_dir=run_dir)
    run.imports_before = set(sys.modules)  # as the rank does before it calls the function, which imports torch
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    run.resume(default=None)
    model = run.ddp(torch.nn.Linear(2, 2))
    for step in run.steps(0, 1):
        pass
    run.checkpoint({"model": model.module.state_dict()}, next_step=1)
    print(imports_hint(run_dir).exists() and "torch._dynamo" in warm_modules(run_dir))
else:
    early = ckpt.Prefetch.start(run_dir / ckpt.RESUME_FILE, warm=warm_modules(run_dir))
    before = "torch._dynamo" in sys.modules
    early.release()  # the rank's own imports are made
    early.wait()
    print(not before and "torch._dynamo" in sys.modules)
"""


@pytest.mark.lab
def test_an_attempt_imports_what_the_last_one_imported_before_its_first_step_while_it_reads_the_checkpoint(
    lab, tmp_path
):
    """Rank 0 notes in the run directory what the function imported from its call to its first step (here DDP's
    constructor: torch._dynamo, about a second of a rank's start); the next attempt's early read imports it, in
    the same thread, once the rank has imported the function, while the function forms its process group."""
    import socket

    python = str(lab.state / "pyenv" / "bin" / "python")  # the lab's job venv, which has torch
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    for attempt in ("first", "again"):
        done = subprocess.run(
            [python, "-c", _WARM, str(tmp_path), port, attempt], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == "True", (attempt, done.stdout[-2000:])


def test_the_early_read_imports_nothing_before_the_rank_has_imported_the_function(tmp_path):
    sys.modules.pop("colorsys", None)
    early = ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE, warm=("colorsys",))
    assert early is not None
    early._thread.join(0.2)
    assert "colorsys" not in sys.modules and early._thread.is_alive()
    early.release()
    early.wait()
    assert "colorsys" in sys.modules
