"""`roach clean EXPERIMENT` and `roach clones [prune]`: the experiment's jobs (running, pending, requeued) end,
its logs and node-local scratch go, every resume.pt stays, and nothing of another experiment is touched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import CONTEXT, RoachGroup
from roach.errors import UsageError
from roach.lab.config import LAB_USER, NODES
from roach.ops.clean import _SCRATCH, clean, clones, experiment_of, experiments
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import CPU, LAB, NODES2_GPU2
from tests.conftest import wait_until
from tests.support.labs import node_path, on_any_node

CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {
    "pkg/__init__.py": "",
    "pkg/work.py": """
import pathlib, time

def work(run, seconds=300):
    scratch = pathlib.Path("/tmp") / f"{run.run_id}_scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / "data").write_text("node-local scratch")
    state = run.resume({"n": 0})
    run.checkpoint(state)
    run.log("working")
    for _ in run.steps(stop=seconds * 10):  # leaves at a step boundary when Slurm signals the job
        time.sleep(0.1)
""",
}


def record(job_id, log_root="/s/repo/expA/slurm-logs", run_id=None, cluster="lab", **kw) -> JobRecord:
    run_id = run_id or f"r{job_id}"
    values = dict(
        cluster=cluster,
        job_id=job_id,
        run_id=run_id,
        name="n",
        target="pkg.m:f",
        commit="c" * 40,
        repo="repo",
        log_path=f"{log_root}/{run_id}_{job_id}.out",
        bundle_dir=f"{log_root}/bundles/{job_id}",
        run_dir=f"/s/repo/runs/{run_id}",
        submitted_at="2026-01-01T00:00:00Z",
        resources={},
        status="submitted",
        slurm_state=None,
        exit_code=None,
        recorded_at=None,
    )
    values.update(kw)
    return JobRecord(**values)


# -- experiments --------------------------------------------------------------------------------------------
def test_the_experiment_is_the_name_given_else_the_log_roots_parent(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.add(record(1))
    store.add(record(2, log_root="/s/repo/expB/slurm-logs"))
    store.add(record(3, log_root="/s/repo/expB/slurm-logs"))
    store.set_experiment("lab", 3, "named")
    assert experiment_of(record(1)) == "expA"
    by = experiments(store)
    assert {k: [r.job_id for r in v] for k, v in by.items()} == {"expA": [1], "expB": [2], "named": [3]}
    with pytest.raises(UsageError, match="no experiment 'nosuch'") as e:
        clean("nosuch", store=store, dry_run=True)
    assert e.value.hint == "experiments: expA, expB, named"
    with pytest.raises(UsageError, match="must be non-empty and have no '/'"):
        store.set_experiment("lab", 1, "a/b")


def test_a_workspaces_sbatch_jobs_are_in_no_experiment_and_clean_refuses_them(tmp_path):
    from roach.records.workspace_job import WorkspaceJob, store_record

    store = Store(tmp_path / "s.sqlite")
    store.add(record(1))
    root = "/home/me/ws"
    store.add(
        store_record(
            WorkspaceJob(job_id="77", cluster="lab", script="train.sbatch"),
            name="train",
            log=f"{root}/dsi-slurm-artifacts/77/slurm_77.out",
            bundle=f"{root}/dsi-slurm-artifacts/77",
            remote_root=root,
            workspace="/local/ws",
            requests={},
            via=None,
        )
    )
    assert {k: [r.job_id for r in v] for k, v in experiments(store).items()} == {"expA": [1]}
    with pytest.raises(UsageError, match="remote workspace's `roach sbatch` jobs, not an experiment") as e:
        clean("dsi-slurm-artifacts", store=store, dry_run=True)
    assert "roach cancel sbatch-<JOB_ID>" in e.value.hint and "experiments: expA" in e.value.hint
    assert store.get("lab", 77).status == "submitted"


def test_the_node_program_deletes_only_the_experiments_runs(tmp_path):
    for name in ("r1", "r1_scratch", "r1.data", "r10_other", "r2", "unrelated"):
        (tmp_path / name).mkdir()
    (tmp_path / "r1_scratch" / "ro").write_text("x")
    os.chmod(tmp_path / "r1_scratch", 0o555)  # read-only scratch is made writable first
    out = subprocess.run(
        ["bash", "-c", _SCRATCH, "roach", "delete", str(tmp_path), "--", "r1", "--", "r10"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r10_other", "r2", "unrelated"]
    assert out.count("deleted ") == 3


def test_the_login_host_programs_take_hostile_paths_as_arguments(tmp_path):
    from roach.ops.clean import _EXISTING, _REMOVE
    from roach.scheduler.transport import LocalTransport

    root = tmp_path / "we ird'$(touch PWNED)\n"
    (root / "bundles" / "7").mkdir(parents=True)
    log = root / "r-1_7.out"
    log.write_text("log")
    t = LocalTransport(cwd=str(tmp_path))
    paths = [str(log), str(root / "bundles" / "7"), str(root / "absent.out")]
    assert t.run(["sh", "-c", _EXISTING, "sh", *paths]).stdout.split("\0")[:-1] == paths[:2]
    assert t.run(["sh", "-c", _REMOVE, "sh", *paths]).stdout.split("\0")[:-1] == paths[:2]
    assert not log.exists() and not (root / "bundles" / "7").exists() and not (tmp_path / "PWNED").exists()
    r = t.run(["sh", "-c", _REMOVE, "sh", str(root)])
    assert r.returncode == 2 and "refusing" in r.stderr and root.exists()  # never a directory that is not a bundle


# -- clean on the lab ---------------------------------------------------------------------------------------
@pytest.fixture
def setup(git_repo, shared_tmp, user_slurm, lab):
    git_repo.commit(PKG, "clean test package")
    store = Store(shared_tmp / "store.sqlite")
    made = []

    def go(expt, **kw):
        kw.setdefault("resources", CPU.replace(time="00:05:00"))
        job = submit(
            "pkg.work:work",
            cluster=CLUSTER,
            repo_root=git_repo.work,
            store=store,
            log_root=str(shared_tmp / expt / "slurm-logs"),
            clone_root=str(shared_tmp / "clones"),
            **kw,
        )
        made.append(job)
        return job

    yield go, store
    user_slurm.scancel([j.job_id for j in made])
    for j in made:
        for n in NODES:
            subprocess.run(["rm", "-rf", str(node_path(lab, n, f"/tmp/{j.run_id}_scratch"))])


def _active(user_slurm, job_id):
    recs = [q for q in user_slurm.squeue(job_ids=[job_id]) if q.raw_id == job_id and q.state.is_active]
    return recs[0] if recs else None


def _working(job):
    return "working" in job.log()


@pytest.mark.lab
def test_clean_ends_the_experiment_keeps_its_checkpoints_and_touches_nothing_else(
    setup, shared_tmp, user_slurm, monkeypatch, lab
):
    go, store = setup
    running = go("expA", name="running")
    requeued = go("expA", name="requeued")
    pending = go("expA", name="pending", resources=CPU.replace(time="00:05:00", extra=("--begin=now+3600",)))
    other = go("expB", name="other")
    for job in (running, requeued, other):
        wait_until(f"{job} to checkpoint", lambda job=job: _working(job), timeout=90)
    pending_run = Path(shared_tmp / "expA" / "runs" / pending.run_id)  # an earlier attempt left a checkpoint
    pending_run.mkdir(parents=True)
    (pending_run / "resume.pt").write_bytes(b"earlier checkpoint")
    user_slurm.requeue(requeued.job_id)
    wait_until(
        "the requeued job back in the queue",
        lambda: (q := _active(user_slurm, requeued.job_id)) and (q.state.is_pending or q.restart_count),
        timeout=40,
    )
    expa = [running, requeued, pending]
    logs = [Path(j.paths.log) for j in expa]
    checkpoints = [Path(shared_tmp / "expA" / "runs" / j.run_id / "resume.pt") for j in expa]
    scratch = [Path(f"/tmp/{j.run_id}_scratch") for j in (running, requeued)]
    assert all(p.exists() for p in logs[:2] + checkpoints) and all(on_any_node(lab, p) for p in scratch)

    monkeypatch.setenv("ROACH_STORE", str(store.path))
    group = RoachGroup(context_settings=CONTEXT)  # loads each command from roach.cli.app.COMMANDS
    r = CliRunner().invoke(
        group,
        ["clean", "expA", "--run-as", LAB_USER, "--dry-run", "--json"],  # the experiment's own clusters, as ls does
        catch_exceptions=False,
    )
    (dry,) = json.loads(r.output)
    assert dry["dry_run"] and sorted(int(c.split()[0]) for c in dry["cancelled"]) == sorted(j.job_id for j in expa)
    assert str(logs[0]) in dry["logs"] and any(f"/tmp/{running.run_id}*" in s for s in dry["scratch"])
    assert all(_active(user_slurm, j.job_id) for j in expa) and all(p.exists() for p in logs[:2])
    assert all(on_any_node(lab, p) for p in scratch)

    (report,) = clean("expA", store=store, cluster=CLUSTER)
    assert not [j for j in expa if _active(user_slurm, j.job_id)]  # no job of it
    assert not (shared_tmp / "expA" / "slurm-logs").exists()  # no log, no bundle
    assert not any(on_any_node(lab, p) for p in scratch)  # no node-local scratch
    assert all(p.read_bytes() for p in checkpoints), report  # every resume.pt in place
    assert sorted(report.checkpoints_kept) == sorted(map(str, checkpoints)) and not report.failed
    assert set(report.nodes) <= {"n1", "n2"} and report.nodes
    assert _active(user_slurm, other.job_id).state.is_running  # another experiment's job runs on
    assert Path(other.paths.log).exists() and on_any_node(lab, f"/tmp/{other.run_id}_scratch/data")
    r = CliRunner().invoke(group, ["clean", "expA", "--cluster", "lab", "--run-as", LAB_USER], catch_exceptions=False)
    assert r.exit_code == 0, r.output  # again: nothing left to do, the checkpoints still there
    assert "cancel (did): nothing queued" in r.output and "delete logs (did): 0" in r.output
    assert "checkpoints kept: 3" in r.output


@pytest.mark.lab
def test_clean_reaches_the_node_local_scratch_of_each_node_a_run_used(setup, lab):
    """On the hosts lab each node has its own /tmp: one rm on one host cleans one node, not both."""
    go, store = setup
    job = go("expC", name="two-nodes", resources=NODES2_GPU2.replace(gpus_per_node=1, time="00:05:00"))
    wait_until(f"{job}'s two ranks to work", lambda: job.log().count(" working") >= 2, timeout=90)
    mine = {n: node_path(lab, n, f"/tmp/{job.run_id}_scratch/data") for n in NODES}
    theirs = {n: node_path(lab, n, f"/tmp/not-{job.run_id}") for n in NODES}
    for n in NODES:
        theirs[n].write_text("another run's scratch")
    try:
        assert all(p.exists() for p in mine.values())
        if lab.hosts:  # a file a job writes to n1's /tmp is not on n2
            assert mine["n1"] != mine["n2"] and mine["n1"].read_text() == "node-local scratch"
        (report,) = clean("expC", store=store, cluster=CLUSTER)
        assert sorted(report.nodes) == ["n1", "n2"] and not report.failed, report
        assert sorted(s.split(":")[0] for s in report.scratch) == ["n1", "n2"], report.scratch
        assert not any(p.parent.exists() for p in mine.values())
        assert all(p.exists() for p in theirs.values())  # nothing else
    finally:
        for p in theirs.values():
            p.unlink(missing_ok=True)


@pytest.mark.lab
def test_a_running_jobs_node_comes_from_the_queue_where_sacct_has_not_recorded_it(setup, user_slurm, lab):
    """slurmdbd records a started job's nodes after slurmctld starts it (in the whole suite, a dry run once came
    before that record and listed no scratch at all). With slurmdbd away, the longest such wait, clean still
    finds the running job's node from the queue, and says what it could not read."""
    from roach.lab import lab as lablib

    go, store = setup
    job = go("expD", name="dbd-away")
    wait_until(f"{job} to work", lambda: _working(job), timeout=90)
    (node,) = [q.nodelist for q in user_slurm.squeue(job_ids=[job.job_id]) if q.raw_id == job.job_id]
    dbd = next(d for d in lablib.daemons(lab) if d.name == "slurmdbd")
    env = {**os.environ, **lab.env()}
    dbd.stop()
    try:
        (dry,) = clean("expD", store=store, cluster=CLUSTER, dry_run=True)
    finally:
        dbd.start(ready=lambda: subprocess.run(["sacctmgr", "-n", "show", "cluster"], env=env).returncode == 0)
    assert dry.nodes == [node] and dry.scratch == [f"{node}:/tmp/{job.run_id}*"], dry
    assert len(dry.failed) == 1 and "slurmdbd answers" in dry.failed[0] and "sacct" in dry.failed[0], dry.failed
    assert _active(user_slurm, job.job_id) and node_path(lab, node, f"/tmp/{job.run_id}_scratch/data").exists()


# -- clones ---------------------------------------------------------------------------------------------------
def _runs_from(clone: Path) -> bool:
    """Whether a process on this host (the lab's nodes are this host) has ROACH_CLONE_DIR=clone."""
    want = f"ROACH_CLONE_DIR={clone}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if want in environ.read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


@pytest.mark.lab
def test_clones_lists_sizes_and_use_and_prune_removes_only_unused(shared_tmp, user_slurm, jobs, tmp_path):
    root = shared_tmp / "clones"
    for name in ("work-aaaa", "work-bbbb", "work-cccc.tmp.vm.123"):
        (root / name / "pkg").mkdir(parents=True)
        (root / name / "pkg" / "big.bin").write_bytes(b"\0" * 300_000)
        if ".tmp." not in name:
            (root / name / ".roach-clone-complete").touch()
    subprocess.run(["chown", "-R", LAB_USER, str(root)], check=True)
    for name in ("work-aaaa", "work-bbbb"):
        subprocess.run(["chmod", "-R", "a-w", str(root / name)], check=True)  # as node.sh leaves them
    used = root / "work-bbbb"
    job = user_slurm.sbatch(
        [
            f"--export=ALL,ROACH_CLONE_DIR={used}",
            "--nodelist=n1",
            "--time=3",
            "--output=/dev/null",
            "--job-name=clone-user",
        ],
        "#!/bin/bash\nsleep 120\n",
    )
    jobs.append(job)
    wait_until("the clone's user to run", lambda: (q := _active(user_slurm, job)) and q.state.is_running, timeout=60)
    # RUNNING in squeue comes before the batch shell's process exists: wait for the process that uses the clone,
    # which is what the prune below must see (in the whole suite, the prune once ran in between and said "failed")
    wait_until("the clone's user's process to start", lambda: _runs_from(used), timeout=60)
    store = Store(tmp_path / "s.sqlite")
    store.add(record(job, repo="work", commit="bbbb"))

    listed = {c.name: c for c in clones(CLUSTER, clone_root=str(root), nodes=["n1"], store=store)}
    assert set(listed) == {"work-aaaa", "work-bbbb", "work-cccc.tmp.vm.123"}
    assert listed["work-bbbb"].used and listed["work-bbbb"].used_by == (job,)
    assert not listed["work-aaaa"].used and listed["work-aaaa"].complete and listed["work-aaaa"].size_kib >= 290
    assert not listed["work-cccc.tmp.vm.123"].complete
    assert all(c.action == "kept" for c in listed.values()) and (root / "work-aaaa").exists()

    pruned = {
        c.name: c.action
        for c in clones(CLUSTER, clone_root=str(root), nodes=["n1"], store=Store(tmp_path / "e"), prune=True)
    }
    assert pruned == {"work-aaaa": "pruned", "work-bbbb": "kept", "work-cccc.tmp.vm.123": "pruned"}
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["work-bbbb"]
    assert (used / "pkg" / "big.bin").exists()
