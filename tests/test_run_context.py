"""The Run contract in one process: resume, steps, checkpoint on a real signal, re-arming, atomic saves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run, RunInterrupted
from roach.runtime.signals import SignalHandler, parse_signal
from tests.conftest import slack
from tests.support.ranks import two_ranks


def _run(tmp_path, **kw) -> Run:
    run = Run(
        run_id="r1", job_id=7, rank=0, world_size=1, local_rank=0, local_world_size=1, node="n1", run_dir=tmp_path, **kw
    )
    run.signals = SignalHandler(on_catch=lambda sig: run.log("caught_signal %s at step %d", sig.name[3:], run.step))
    run.signals.install()
    return run


@pytest.fixture(autouse=True)
def _restore_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_fresh_start_then_signal_checkpoints_at_the_next_boundary_and_leaves(tmp_path, caplog):
    run = _run(tmp_path)
    state = run.resume(default={"w": 0})
    done = []
    with pytest.raises(RunInterrupted) as stop:
        for step in run.steps(run.start_step, 100):
            state["w"] += step
            done.append(step)
            if step == 5:
                os.kill(os.getpid(), signal.SIGUSR1)  # arrives during step 5
            if run.should_checkpoint():
                run.checkpoint(state)
    assert done == [0, 1, 2, 3, 4, 5]  # the step in flight finishes; no further step starts
    assert stop.value.signal is signal.SIGUSR1 and stop.value.step == 6 and stop.value.checkpointed
    saved = ckpt.load(tmp_path / "resume.pt")
    assert saved["roach"]["next_step"] == 6 and saved["state"] == {"w": sum(range(6))}

    again = _run(tmp_path, restart_count=1)
    state2 = again.resume(default={"w": 0})
    assert again.start_step == 6 and state2 == {"w": 15}
    assert list(again.steps(again.start_step, 9)) == [6, 7, 8]


def test_steps_checkpoints_the_resumed_state_itself_when_the_function_does_not(tmp_path):
    run = _run(tmp_path)
    state = run.resume(default={"n": 0})
    with pytest.raises(RunInterrupted) as stop:
        for step in run.steps(0, 50):
            state["n"] = step + 1
            if step == 2:
                os.kill(os.getpid(), signal.SIGTERM)
    assert stop.value.step == 3 and stop.value.checkpointed
    assert ckpt.load(tmp_path / "resume.pt")["state"] == {"n": 3}


def test_periodic_checkpoints_and_no_leave_without_a_signal(tmp_path):
    run = _run(tmp_path, checkpoint_every=4)
    run.resume(default=[])
    due = [step for step in run.steps(0, 10) if run.should_checkpoint()]
    assert due == [3, 7]  # boundaries 4 and 8
    assert not (tmp_path / "resume.pt").exists()  # should_checkpoint only says when; the function saves


def test_a_signal_in_the_last_step_does_not_stop_a_finished_run(tmp_path):
    run = _run(tmp_path)
    run.resume(default=0)
    steps = []
    for step in run.steps(0, 3):
        steps.append(step)
        if step == 2:
            os.kill(os.getpid(), signal.SIGUSR1)
    assert steps == [0, 1, 2]


def test_handler_is_rearmed_after_a_library_replaces_it(tmp_path):
    run = _run(tmp_path)
    run.resume(default=None)
    it = run.steps(0, 10)
    next(it)
    signal.signal(signal.SIGUSR1, lambda *a: None)  # what NCCL does to USR1
    next(it)  # the next step re-arms
    assert signal.getsignal(signal.SIGUSR1) == run.signals._handle
    os.kill(os.getpid(), signal.SIGUSR1)
    with pytest.raises(RunInterrupted):
        next(it)


def test_signal_names_parse_and_unknown_lists_valid():
    assert parse_signal("usr1") is signal.SIGUSR1 and parse_signal("SIGTERM") is signal.SIGTERM
    with pytest.raises(ValueError, match="valid: USR1, USR2, TERM, INT"):
        parse_signal("NOPE")


def test_kill_during_checkpoint_leaves_the_previous_resume_pt_loadable(tmp_path):
    ckpt.save(tmp_path / "resume.pt", {"roach": {"next_step": 3}, "state": "good"})
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from roach.runtime.context import Run
        run = Run(run_id="r", job_id=1, rank=0, world_size=1, local_rank=0, local_world_size=1, node="n",
                  run_dir=Path({str(tmp_path)!r}))
        run.step = 9
        run.checkpoint({{"big": b"x" * (400 * 1024 * 1024)}})  # slow enough to be killed in the middle
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + slack(60)
    while not ckpt.stale_temporaries(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ckpt.stale_temporaries(tmp_path), "the save never started"
    proc.kill()
    proc.wait()
    saved = ckpt.load(tmp_path / "resume.pt")
    assert saved == {"roach": {"next_step": 3}, "state": "good"}


_TWO_RANKS = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    import torch.distributed as dist
    from roach.runtime.context import Run, RunInterrupted
    from roach.runtime.signals import SignalHandler

    rank, init, run_dir = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    run = Run(run_id="r1", job_id=7, rank=rank, world_size=2, local_rank=rank, local_world_size=2, node="n1",
              run_dir=run_dir)
    run.signals = SignalHandler(on_catch=lambda sig: None)
    run.signals.install()
    state = run.resume(default={"w": 0})
    try:
        for step in run.steps(0, 1000):
            state["w"] += 1
            if rank == 1 and step == 5:
                os.kill(os.getpid(), signal.SIGUSR1)  # rank 0's own USR1 is late: it never comes here
            if run.should_checkpoint():
                run.checkpoint(state)
    except RunInterrupted as stop:
        print(json.dumps({"rank": rank, "signal": stop.signal.name, "step": stop.step, "saved": stop.checkpointed}))
    dist.destroy_process_group()
""")


@pytest.mark.lab
def test_a_rank_that_has_not_caught_the_signal_yet_stops_for_the_one_another_rank_caught(tmp_path, lab):
    """Slurm signals the ranks one by one. Rank 0, which decides whether the job comes back, must stop for the
    USR1 another rank caught (the wall clock: requeue), never read its own silence as a TERM (cancelled)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    codes, outs = two_ranks(lab, _TWO_RANKS, tmp_path, run_dir)
    assert codes == [0, 0], outs
    said = [json.loads(ln) for out in outs for ln in out.splitlines() if ln.startswith("{")]
    assert said == [
        {"rank": 0, "signal": "SIGUSR1", "step": 6, "saved": True},
        {"rank": 1, "signal": "SIGUSR1", "step": 6, "saved": True},
    ], outs
    assert "checkpoint at step 6 after caught_signal USR1" in outs[0], outs[0]
    assert (run_dir / "resume.pt").exists()  # torch.save's: it loads where torch is
