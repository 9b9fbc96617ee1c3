"""Every rank of an attempt runs the function exactly once, whatever order the ranks start and end in.

Rank 0's done marker belongs to the attempt that wrote it: a rank of that attempt that starts after rank 0
finished still runs, while a later attempt (a requeue, a new job) of a completed run does not
(test_resume.py::test_a_completed_run_does_not_run_again_when_requeued keeps that guarantee)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.store import Store
from roach.runtime import attempts
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB, NODES2_GPU2
from tests.conftest import slack

CLUSTER = LAB.with_(run_as=LAB_USER)
RUNS = 10

PKG = {
    "pkg/__init__.py": "",
    "pkg/ranks.py": '''
import json, os, time

def per_rank(run):
    """No collective: each rank writes its own file; rank 0 returns at once, the others a moment later."""
    if run.rank != 0:
        time.sleep(1.0 + 0.5 * run.rank)
    out = run.run_dir / "out"
    out.mkdir(exist_ok=True)
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps({"rank": run.rank, "node": run.node}))
    return run.rank
''',
}


def test_attempt_key_tells_the_attempts_of_a_run_apart(tmp_path):
    first = attempts.attempt_key({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0", "SLURM_STEP_ID": "0"})
    requeued = attempts.attempt_key({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "SLURM_STEP_ID": "0"})
    other_step = attempts.attempt_key({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3"})
    assert len({first, requeued, other_step}) == 3
    assert attempts.completed_before(tmp_path, first) is None  # no marker yet
    attempts.mark_done(tmp_path, 7, first)
    assert attempts.completed_before(tmp_path, first) is None  # its own attempt: the ranks run
    assert "completed by job 7" in attempts.completed_before(tmp_path, requeued)
    attempts.done_marker(tmp_path).write_text("completed by job 5\n")  # an older roach's marker
    assert attempts.completed_before(tmp_path, first) == "completed by job 5"


@pytest.mark.slow
@pytest.mark.lab
def test_every_rank_of_two_nodes_runs_a_function_without_collectives(git_repo, shared_tmp, tmp_path):
    git_repo.commit(PKG, "ranks without collectives")
    store = Store(tmp_path / "store.sqlite")
    roots = {"log_root": str(shared_tmp / "logs"), "clone_root": str(shared_tmp / "clones")}
    jobs = [
        submit(
            "pkg.ranks:per_rank",
            cluster=CLUSTER,
            repo_root=git_repo.work,
            store=store,
            resources=NODES2_GPU2,
            name=f"ranks{i}",
            **roots,
        )
        for i in range(RUNS)
    ]
    try:
        for job in jobs:
            assert job.wait(timeout=slack(300)).state is JobState.COMPLETED, job.log()
    finally:
        for job in jobs:
            try:
                job.cancel()
            except Exception:
                pass
    for job in jobs:
        run_dir = Path(roots["log_root"]).parent / "runs" / job.run_id
        files = sorted(p.name for p in (run_dir / "out").iterdir())
        assert files == [f"rank{r}.json" for r in range(4)], job.log()
        nodes = {json.loads((run_dir / "out" / f).read_text())["node"] for f in files}
        assert nodes == {"n1", "n2"}
        assert json.loads((run_dir / "result.json").read_text()) == 0
        assert "already completed" not in job.log()
