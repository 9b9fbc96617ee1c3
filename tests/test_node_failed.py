"""node.sh's node-local failures: a clone a node cannot hold (no space left, a read-only file system) is one line and
a record in the bundle, and the batch script requeues the job without that node, at most ROACH_MAX_EXCLUDED nodes a
job; a failure every node would meet (a bad repository URL) is not a node's. The lab runs both: tests/faults/
test_node_disk.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from roach.launch.shipping import node_script
from roach.watch.logs import INTEREST, read_facts

# A git that fails as git does on a full disk (and logs nothing else).
FULL_GIT = """#!/bin/bash
echo "fatal: could not write to '$4/objects/pack/tmp_pack_x': No space left on device" >&2
exit 128
"""

# An scontrol that logs its calls and shows the job with ExcNodeList=$EXC.
FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$SCONTROL_CALLS"
[ "$1 $2" != "show job" ] || echo "   ReqNodeList=(null) ExcNodeList=${EXC:-(null)}"
"""


def _env(tmp_path: Path, url: str, **more: str) -> dict[str, str]:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    (bundle / "node.sh").write_text(node_script())
    return {
        **os.environ,
        "ROACH_REPO_URL": url,
        "ROACH_COMMIT": "0" * 40,
        "ROACH_REPO_NAME": "proj",
        "ROACH_CLONE_ROOT": str(tmp_path / "clones"),
        "ROACH_BUNDLE": str(bundle),
        "ROACH_ENV": "system",
        "ROACH_RUN_ID": "r-1",
        "SLURMD_NODENAME": "n2",
        "SLURM_JOB_ID": "41",
        "SCONTROL_CALLS": str(tmp_path / "calls"),
        **more,
    }


def _bin(tmp_path: Path, name: str, text: str) -> str:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    (d / name).chmod(0o755)
    return f"{d}:{os.environ['PATH']}"


def test_a_clone_with_no_room_is_one_line_naming_node_and_path_and_exit_8(tmp_path: Path):
    env = _env(tmp_path, "file:///nowhere", PATH=_bin(tmp_path, "git", FULL_GIT))
    r = subprocess.run(["bash", f"{env['ROACH_BUNDLE']}/node.sh", "prepare"], env=env, capture_output=True, text=True)
    assert r.returncode == 8, r.stderr
    (line,) = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert line.startswith("roach: node_failed: n2: no space left on device cloning "), line
    assert f"{tmp_path}/clones/proj-" in line
    recorded = (tmp_path / "bundle" / "node_failed.0.n2").read_text()
    assert recorded.startswith("n2: no space left on device cloning "), recorded


def test_a_bad_repository_url_fails_as_git_says_and_is_no_nodes_failure(tmp_path: Path):
    env = _env(tmp_path, f"file://{tmp_path}/no-such-repo")
    r = subprocess.run(["bash", f"{env['ROACH_BUNDLE']}/node.sh", "prepare"], env=env, capture_output=True, text=True)
    assert r.returncode not in (0, 8), r.stderr
    assert "fatal:" in r.stderr
    assert "node_failed" not in r.stdout + r.stderr
    assert not list((tmp_path / "bundle").glob("node_failed.*"))


def _exclude(tmp_path: Path, excluded_before: int, exc: str = "n1", **more: str) -> subprocess.CompletedProcess:
    env = _env(tmp_path, "file:///x", PATH=_bin(tmp_path, "scontrol", FAKE_SCONTROL), EXC=exc, **more)
    bundle = tmp_path / "bundle"
    (bundle / "node_failed.0.n2").write_text("n2: no space left on device cloning c into /tmp/c\n")
    if excluded_before:
        (bundle / "excluded.41").write_text("".join(f"x{i}\n" for i in range(excluded_before)))
    script = f'source "{bundle}/node.sh" --hot; roach_prepare_failed 8'
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)


def test_a_nodes_failure_requeues_the_job_held_excludes_the_node_and_releases_it(tmp_path: Path):
    r = _exclude(tmp_path, 0)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["show job 41", "requeuehold 41", "update JobId=41 ExcNodeList=n1,n2", "release 41"]
    assert "roach: excluded node n2 from job 41 of run r-1 (n2: no space left on device" in r.stdout
    assert "1 of at most 2 nodes excluded" in r.stdout
    assert (tmp_path / "bundle" / "excluded.41").read_text() == "n2\n"


def test_past_two_excluded_nodes_the_job_fails_as_it_is(tmp_path: Path):
    r = _exclude(tmp_path, 2)
    assert r.returncode == 8, r.stderr
    assert not (tmp_path / "calls").exists()  # Slurm is not asked
    assert "not excluding n2: job 41 already excluded 2 node(s) (at most 2); the job ends here" in r.stdout


def test_the_watch_reads_the_node_failed_and_excluded_lines():
    lines = [
        "roach: attempt 1 of run r: job 4 on n2 (restart count 0) at 2026-12-06T14:24:03Z",
        "roach: node_failed: n2: no space left on device cloning c into /tmp/x; no rank started",
        "roach: excluded node n2 from job 4 of run r (...): attempt 2 runs on other nodes",
        "0: roach rank 0: n1: no space left on device writing /tmp/r/resume.pt; this attempt ends",
    ]
    assert all(re.search(INTEREST, ln) for ln in lines[1:])
    assert read_facts(lines[:2]).node_failed == (lines[1].removeprefix("roach: "),)
    assert read_facts(lines[:3]).node_failed[-1] == lines[2].removeprefix("roach: ")
    assert read_facts(lines).node_failed == (
        lines[1].removeprefix("roach: "),
        lines[2].removeprefix("roach: "),
        lines[3].removeprefix("0: "),
    )


def _job_json(tmp_path: Path, attempts_key: bool = True) -> Path:
    from roach.records.bundle import JobJson

    jj = JobJson(job_id="41", script="s.sh", submitted_at_utc="2026-12-06T14:00:00Z", cluster="lab", run_id="r-1",
                 commit="0" * 40, name="n", target="p.m:f")  # fmt: skip
    text = jj.to_json()
    if not attempts_key:  # as an older roach wrote it
        text = "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith('  "attempts"'))
    path = tmp_path / "bundle" / "job.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_an_excluded_nodes_attempt_is_appended_to_job_jsons_attempts(tmp_path: Path):
    from roach.records.bundle import JobJson

    path = _job_json(tmp_path)
    _exclude(tmp_path, 0)
    (attempt,) = JobJson.from_json(path.read_text()).attempts
    assert attempt == {
        "attempt": 1,
        "job_id": "41",
        "nodes": ["n2"],
        "ended": "node_failed",
        "causes": "n2: no space left on device cloning c into /tmp/c",
        "exc_node_list": "n1,n2",
    }


def test_a_second_exclusion_adds_a_second_attempt(tmp_path: Path):
    from roach.records.bundle import JobJson

    path = _job_json(tmp_path)
    _exclude(tmp_path, 0)
    _exclude(tmp_path, 1, exc="n1,n2")
    attempts = JobJson.from_json(path.read_text()).attempts
    assert [a["exc_node_list"] for a in attempts] == ["n1,n2", "n1,n2,n2"]


def test_a_job_json_an_older_roach_wrote_is_left_as_it_is(tmp_path: Path):
    path = _job_json(tmp_path, attempts_key=False)
    before = path.read_text()
    r = _exclude(tmp_path, 0)
    assert r.returncode == 0, r.stderr
    assert path.read_text() == before


def test_a_sweep_tasks_attempt_goes_into_the_tasks_own_job_json(tmp_path: Path):
    from roach.records.bundle import JobJson

    path = _job_json(tmp_path)
    task_json = tmp_path / "bundle_5" / "job.json"
    task_json.parent.mkdir()
    task_json.write_text(path.read_text())
    _exclude(tmp_path, 0, SLURM_ARRAY_TASK_ID="5")
    assert len(JobJson.from_json(task_json.read_text()).attempts) == 1
