"""The attempt fence in one process: once a later attempt claims the run, an older one writes nothing more."""

from __future__ import annotations

import json
import textwrap

import pytest

from roach.runtime import attempts
from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run
from roach.runtime.fence import Fence, Superseded
from roach.runtime.rank import write_result
from tests.support.ranks import two_ranks


def _run(tmp_path, key: str) -> Run:
    run = Run(run_id="r1", job_id=7, rank=0, world_size=1, local_rank=0, local_world_size=1, node="n2",
              run_dir=tmp_path)  # fmt: skip
    run.fence = Fence(tmp_path, key)
    run.fence.claim(7, "n2")
    return run


def _taken_over(tmp_path) -> None:
    Fence(tmp_path, "7.1.0").claim(7, "n1")  # the requeued attempt, on another node


def test_the_attempt_that_claimed_the_run_last_writes_its_checkpoint(tmp_path):
    run = _run(tmp_path, "7.0.0")
    run.checkpoint({"w": 1}, next_step=5)
    assert ckpt.load(tmp_path / "resume.pt")["roach"]["next_step"] == 5


def test_an_older_attempts_checkpoint_is_refused_and_the_newer_one_stays(tmp_path):
    old = _run(tmp_path, "7.0.0")
    _taken_over(tmp_path)
    new = Run(run_id="r1", job_id=7, rank=0, world_size=1, local_rank=0, local_world_size=1, node="n1",
              run_dir=tmp_path, fence=Fence(tmp_path, "7.1.0"))  # fmt: skip
    new.checkpoint({"w": "new"}, next_step=9)
    with pytest.raises(Superseded):
        old.checkpoint({"w": "old"}, next_step=12)
    assert ckpt.load(tmp_path / "resume.pt")["state"] == {"w": "new"}


def test_a_refused_checkpoint_leaves_no_temporary_file(tmp_path):
    old = _run(tmp_path, "7.0.0")
    _taken_over(tmp_path)
    with pytest.raises(Superseded):
        old.checkpoint({"w": "old"}, next_step=12)
    assert ckpt.stale_temporaries(tmp_path) == []


def test_an_older_attempt_writes_no_progress_line(tmp_path, caplog):
    old = _run(tmp_path, "7.0.0")
    steps = old.steps(0, 10)
    assert next(steps) == 0
    _taken_over(tmp_path)
    with pytest.raises(Superseded):
        for _ in steps:
            pass
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("step")] == ["step 0/10"]


def test_an_older_attempt_writes_no_result(tmp_path):
    old = _run(tmp_path, "7.0.0")
    _taken_over(tmp_path)
    with pytest.raises(Superseded):
        write_result(tmp_path, {"loss": 1.0}, old.check_fence)
    assert not (tmp_path / "result.json").exists()


def test_an_older_attempt_writes_no_done_marker(tmp_path):
    old = _run(tmp_path, "7.0.0")
    _taken_over(tmp_path)
    with pytest.raises(Superseded):
        attempts.mark_done(tmp_path, 7, "7.0.0", old.check_fence)
    assert not attempts.done_marker(tmp_path).exists()


def test_the_refusal_names_the_attempt_that_took_the_run_over(tmp_path):
    old = _run(tmp_path, "7.0.0")
    _taken_over(tmp_path)
    with pytest.raises(Superseded) as gone:
        old.check_fence("the checkpoint of step 12")
    line = gone.value.line("r1", 12)
    assert "attempt 7.1.0 (job 7 on n1" in line
    assert line.endswith("so this attempt (7.0.0) stops without writing the checkpoint of step 12")


def test_a_run_with_no_claim_is_not_fenced(tmp_path):
    Fence(tmp_path, "7.0.0").check("anything")  # an attempt of an older roach claimed nothing: no refusal


_TWO_RANKS = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch.distributed as dist
    from roach.runtime.context import Run
    from roach.runtime.fence import Fence, Superseded

    rank, init, run_dir = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    run = Run(run_id="r1", job_id=7, rank=rank, world_size=2, local_rank=rank, local_world_size=2, node="n2",
              run_dir=run_dir, log_every=1, fence=Fence(run_dir, "7.0.0"))
    if rank == 0:
        run.fence.claim(7, "n2")
    dist.barrier()
    try:
        for step in run.steps(0, 1000):
            if rank == 1 and step == 5:
                Fence(run_dir, "7.1.0").claim(7, "n1")  # the requeued attempt, on another node, takes the run over
            dist.barrier()  # the step's own collective: the claim is there before rank 0 reads it
    except Superseded as gone:
        print(json.dumps({"rank": rank, "step": run.step, "by": gone.holder.get("key")}))
""")


@pytest.mark.lab
def test_every_rank_of_a_superseded_attempt_stops_at_the_same_step(tmp_path, lab):
    """Rank 0 alone reads the claim; the others must stop with it, not wait in the next all-reduce for a rank
    that left (and then fail, which makes srun kill step J.0: by then the new attempt's)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _, outs = two_ranks(lab, _TWO_RANKS, tmp_path, run_dir)
    said = [json.loads(ln) for out in outs for ln in out.splitlines() if ln.startswith("{")]
    assert said == [{"rank": 0, "step": 6, "by": "7.1.0"}, {"rank": 1, "step": 6, "by": "7.1.0"}], outs
