"""sweep() on the lab: job arrays, one run per grid entry, split at MaxArraySize, a handful of Slurm calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.lab.config import LAB_USER
from roach.launch.prepare import read_grid
from roach.launch.sweep import Sweep, split, sweep
from roach.model.job_state import JobState
from roach.records.bundle import JobJson
from roach.records.store import Store
from roach.slurm.clusters.lab import CPU, LAB
from tests.conftest import slack, wait_until

CLUSTER = LAB.with_(run_as=LAB_USER)

PKG = {
    "pkg/__init__.py": "",
    "pkg/grid.py": """
import time

def counter(run, steps=40, step_s=0.25):
    state = run.resume(default={"total": 0})
    total = state["total"]
    for step in run.steps(run.start_step, steps):
        total += step
        run.log("step %d done", step)
        time.sleep(step_s)
        if run.should_checkpoint():
            run.checkpoint({"total": total})
    return total

def square(run, x, tag="t"):
    run.log("square of %s (%s) in run %s", x, tag, run.run_id)
    return {"x": x, "sq": x * x, "tag": tag, "run_id": run.run_id}

def fail_on(run, x, bad=-1):
    if x == bad:
        raise ValueError(f"x={x} fails on purpose")
    return x

def fit(run, width, depth=2):
    return width * depth
""",
}


def test_split_keeps_task_indices_below_max_array_size():
    assert split(5, 10) == [(0, 5)]
    assert split(10, 4) == [(0, 4), (4, 4), (8, 2)]
    with pytest.raises(UsageError):
        split(0, 4)


def test_a_grid_is_checked_as_each_of_its_entries_would_be():
    from roach.launch.prepare import check_args, check_grid

    class Odd:
        pass

    grids = [
        [{"x": 1}, {"x": [1, 2], "y": {"z": None}}],
        [{"x": 1}, {"x": Odd()}, "not a dict"],  # the first fault is said: entry 1's value
        [{"x": float("nan")}, {3: "a"}],
        [{"x": 1}, {3: "a"}, {"x": Odd()}],
        [],
    ]
    for grid in grids:
        try:
            want = [check_args(g) for g in grid]
        except UsageError as e:
            with pytest.raises(UsageError) as got:
                check_grid(grid)
            assert got.value.message == e.message
        else:
            assert check_grid(grid) == want


def test_grid_files(tmp_path):
    (tmp_path / "g.json").write_text('[{"x": 1}, {"x": 2}]')
    (tmp_path / "g.jsonl").write_text('{"x": 1}\n\n{"x": 2}\n')
    assert read_grid(tmp_path / "g.json") == read_grid(tmp_path / "g.jsonl") == [{"x": 1}, {"x": 2}]
    (tmp_path / "g.txt").write_text("x")
    with pytest.raises(UsageError, match=r"must end in \.json"):
        read_grid(tmp_path / "g.txt")
    (tmp_path / "bad.json").write_text('{"x": 1}')
    with pytest.raises(UsageError, match="JSON list of objects"):
        read_grid(tmp_path / "bad.json")


@pytest.mark.lab
def test_a_sweep_split_over_arrays_runs_every_grid_entry_as_its_own_run(repo, store, roots, shared_tmp):
    grid = [{"x": i, "tag": f"t{i}"} for i in range(7)]
    sw = sweep(
        "pkg.grid:square",
        grid,
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        parallelism=3,
        max_array_size=3,
        name="sq",
        description="squares",
        **roots,
    )
    assert len(sw.array_ids) == 3 and len(sw) == 7  # 3 + 3 + 1
    done = sw.wait(timeout=slack(240), poll_s=2)
    assert {r: a.state for r, a in done.items()} == {f"{sw.sweep_id}-{i}": JobState.COMPLETED for i in range(7)}
    run_root = Path(roots["log_root"]).parent / "runs"
    for i, job in enumerate(sw):
        assert job.run_id == f"{sw.sweep_id}-{i}"
        assert job.slurm_id == f"{sw.array_ids[i // 3]}_{i % 3}"
        result = json.loads((run_root / job.run_id / "result.json").read_text())
        assert result == {"x": i, "sq": i * i, "tag": f"t{i}", "run_id": job.run_id}
        assert Path(job.record.log_path).name == f"{sw.sweep_id}_{job.slurm_id}.out"
        assert f"square of {i} (t{i}) in run {job.run_id}" in job.log()
        jj = JobJson.from_json(Path(job.paths.job_json).read_text())
        assert (jj.job_id, jj.run_id, jj.status, jj.exit_code) == (job.slurm_id, job.run_id, "completed", "0:0")
        assert jj.script.endswith(f"/bundles/{sw.array_ids[i // 3]}/job.sh") and jj.description == "squares"
    recs = store.array_tasks("lab", sw.array_ids[1])
    assert [(r.task, r.run_id, r.status) for r in recs] == [
        (t, f"{sw.sweep_id}-{3 + t}", "completed") for t in range(3)
    ]
    assert store.find(f"{sw.array_ids[2]}_0").run_id == f"{sw.sweep_id}-6"
    # with parallelism, the arrays run one after the other: each later one depends on the one before
    script = Path(roots["log_root"], "bundles", str(sw.array_ids[1]), "job.sh").read_text()
    assert f"--dependency=afterany:{sw.array_ids[0]}" in script and "--array=0-2%3" in script


@pytest.mark.lab
def test_with_room_for_two_arrays_at_once_two_run_at_once_and_the_third_waits_for_the_first(repo, store, roots):
    """parallelism=6 over arrays of 3, 3 and 1: two arrays hold the 6, so the second starts with the first (no
    dependency) and the third waits for the first. (Before, each array waited for the one before it whatever K.)"""
    sw = sweep(
        "pkg.grid:square",
        [{"x": i, "tag": f"t{i}"} for i in range(7)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        parallelism=6,
        max_array_size=3,
        name="sq2",
        **roots,
    )
    assert len(sw.array_ids) == 3
    scripts = [Path(roots["log_root"], "bundles", str(a), "job.sh").read_text() for a in sw.array_ids]
    assert "--dependency" not in scripts[0] and "--dependency" not in scripts[1]
    assert f"--dependency=afterany:{sw.array_ids[0]}" in scripts[2]
    done = sw.wait(timeout=slack(240), poll_s=2)
    assert {a.state for a in done.values()} == {JobState.COMPLETED} and len(done) == 7


@pytest.mark.lab
def test_a_failed_run_is_that_run_only(repo, store, roots):
    sw = sweep(
        "pkg.grid:fail_on",
        [{"x": i, "bad": 1} for i in range(3)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        **roots,
    )
    assert len(sw.array_ids) == 1
    later = Sweep.load(sw.sweep_id, store=store)  # as another process would, from the store
    assert ([j.slurm_id for j in later], later.array_ids) == ([j.slurm_id for j in sw], sw.array_ids)
    done = later.wait(timeout=slack(180), poll_s=2)
    assert [done[j.run_id].state for j in sw] == [JobState.COMPLETED, JobState.FAILED, JobState.COMPLETED]
    assert "x=1 fails on purpose" in sw[1].log()
    assert [r.status for r in store.array_tasks("lab", sw.array_ids[0])] == ["completed", "failed", "completed"]


def test_bad_grids_are_refused_before_anything_is_queued(repo, store, roots):
    def go(grid, **kw):
        return sweep(
            "pkg.grid:square", grid, resources=CPU, cluster=CLUSTER, repo_root=repo.work, store=store, **roots, **kw
        )

    with pytest.raises(UsageError, match="grid is empty"):
        go([])
    with pytest.raises(UsageError, match="not JSON-serialisable"):
        go([{"x": 1}, {"x": object()}])
    with pytest.raises(UsageError, match="list of dicts"):
        go("x=1")
    with pytest.raises(UsageError, match="parallelism"):
        go([{"x": 1}], parallelism=0)
    with pytest.raises(UsageError, match="sweep id"):
        go([{"x": 1}], sweep_id="no/slash")
    with pytest.raises(
        UsageError, match=r"^grid entry 1 of 2 \(counted from 0\): pkg.grid:square at commit \w+: square"
    ):
        go([{"x": 1}, {"x": 2, "y": 3}])
    with pytest.raises(UsageError, match="no sweep 'nope'"):
        Sweep.load("nope", store=store)
    assert store.all_jobs() == []
    assert not Path(roots["log_root"], "bundles").exists()


@pytest.mark.lab
def test_a_grid_entry_the_function_does_not_take_is_refused_exit_2_and_nothing_is_queued(
    repo, store, roots, tmp_path, monkeypatch, user_slurm
):
    from click.testing import CliRunner

    from roach.cli.app import cli

    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))  # the store fixture's file
    grid = tmp_path / "grid.jsonl"
    grid.write_text("".join(json.dumps(g) + "\n" for g in ({"width": 32}, {"widht": 64}, {"width": 128})))
    before = {r.raw_id for r in user_slurm.squeue()}
    common = ["--cluster", "lab", "--run-as", LAB_USER, "--resources", "CPU", "--repo-root", str(repo.work)]
    common += ["--log-root", roots["log_root"], "--clone-root", roots["clone_root"]]
    r = CliRunner().invoke(cli, ["sweep", "pkg.grid:fit", "--grid", str(grid), *common], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert "grid entry 1 of 3 (counted from 0): pkg.grid:fit at commit " in r.stderr
    assert "fit takes no argument 'widht'; it is fit(run, width, depth=2)" in r.stderr
    assert "hint: did you mean 'width'? its arguments are: width, depth" in r.stderr
    assert {r.raw_id for r in user_slurm.squeue()} == before
    assert not Path(roots["log_root"]).exists()
    assert store.all_jobs() == []


@pytest.mark.slow
@pytest.mark.lab
def test_a_signalled_run_of_a_sweep_checkpoints_requeues_itself_and_resumes_at_its_step(repo, store, roots, slurm):
    sw = sweep(
        "pkg.grid:counter",
        [{"steps": 40}, {"steps": 5}],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        **roots,
    )
    first = sw[0]
    wait_until("run 0 reaching step 8", lambda: "step 8 done" in first.log(), timeout=120)
    # what the wall clock's warning does: USR1 to the task's ranks (not its batch shell)
    slurm.scancel([first.slurm_id], signal="USR1")
    done = sw.wait(timeout=slack(240), poll_s=2)
    assert {a.state for a in done.values()} == {JobState.COMPLETED}
    log = first.log()
    assert "caught_signal USR1" in log and "requeueing job" in log, log
    assert "resumed at step" in log, log
    assert json.loads(Path(roots["log_root"]).parent.joinpath("runs", first.run_id, "result.json").read_text()) == sum(
        range(40)
    )
    assert (Path(roots["log_root"]).parent / "runs" / first.run_id / "resume.pt").exists()
    assert "caught_signal" not in sw[1].log()  # the other run of the array was left alone


@pytest.mark.lab
def test_roach_sweep_from_a_grid_file_then_status_and_logs_of_one_run(repo, roots, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from roach.cli.app import cli

    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "cli-store.sqlite"))
    grid = tmp_path / "grid.jsonl"
    grid.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(3)))

    def roach(*args):
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    r = roach(
        "sweep",
        "pkg.grid:fail_on",
        "--grid",
        str(grid),
        "--cluster",
        "lab",
        "--resources",
        "CPU",
        "--run-as",
        LAB_USER,
        "--repo-root",
        str(repo.work),
        "--log-root",
        roots["log_root"],
        "--clone-root",
        roots["clone_root"],
        "--sweep-id",
        "cli-sweep",
        "--wait",
        "--json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["sweep_id"], out["runs"], out["states"], out["failed"]) == ("cli-sweep", 3, {"COMPLETED": 3}, [])
    (array_id,) = out["array_ids"]
    r = roach("status", f"{array_id}_2", "--run-as", LAB_USER, "--json")
    assert r.exit_code == 0, r.output
    view = json.loads(r.output)
    assert (view["run_id"], view["status"]) == ("cli-sweep-2", "completed")
    r = roach("logs", "cli-sweep-1", "--run-as", LAB_USER)
    assert "finished; result in" in r.output and r.exit_code == 0
    r = roach("ls", "--cluster", "lab", "--run-as", LAB_USER, "--json")
    rows = {v["run_id"]: v for v in json.loads(r.output)}
    assert {
        (rows[f"cli-sweep-{t}"]["job_id"], rows[f"cli-sweep-{t}"]["task"], rows[f"cli-sweep-{t}"]["status"])
        for t in range(3)
    } == {(array_id, t, "completed") for t in range(3)}
    r = roach("ls", "--cluster", "lab", "--run-as", LAB_USER)
    assert f"{array_id}_2" in r.output and "cli-sweep-2" in r.output
    r = roach("status", str(array_id), "--run-as", LAB_USER)
    assert r.exit_code == 2 and "job array of 3 tasks" in r.output
    r = roach(
        "sweep",
        "pkg.grid:fail_on",
        "--grid",
        str(grid),
        "--cluster",
        "lab",
        "--resources",
        "CPU",
        "--run-as",
        LAB_USER,
        "--repo-root",
        str(repo.work),
        "--sweep-id",
        "cli-sweep",
    )
    assert r.exit_code == 2 and "sweep id cli-sweep is already used" in r.output


@pytest.mark.slow
@pytest.mark.lab
def test_a_cancelled_run_of_a_sweep_is_resumed_alone_as_a_plain_job_with_its_args(repo, store, roots):
    from roach.launch.submit import resume

    sw = sweep(
        "pkg.grid:counter",
        [{"steps": 30}],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        checkpoint_every=1,
        **roots,
    )
    run = sw[0]
    wait_until("the run reaching step 6", lambda: "step 6 done" in run.log(), timeout=120)
    run.cancel()
    assert sw.wait(timeout=slack(120), poll_s=2)[run.run_id].state is JobState.CANCELLED
    again = resume(run.run_id, cluster=CLUSTER, repo_root=repo.work, store=store)
    assert again.record.task is None and again.run_id == run.run_id
    assert again.wait(timeout=slack(180)).state is JobState.COMPLETED, again.log()
    assert "resumed at step" in again.log()
    out = Path(roots["log_root"]).parent / "runs" / run.run_id / "result.json"
    assert json.loads(out.read_text()) == sum(range(30))  # its args (steps=30), its checkpointed total


@pytest.mark.lab
def test_roach_clean_ends_a_sweep_and_removes_its_logs_and_bundles_keeping_checkpoints(repo, store, roots):
    from roach.ops.clean import clean

    sw = sweep(
        "pkg.grid:counter",
        [{"steps": 400} for _ in range(4)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        checkpoint_every=1,
        parallelism=2,
        experiment="sweepclean",
        **roots,
    )
    wait_until("two runs checkpointing", lambda: sum("step 3 done" in j.log() for j in sw) == 2, timeout=120)
    (report,) = clean("sweepclean", store=store, cluster=CLUSTER)
    assert len(report.cancelled) >= 2 and not report.failed
    states = sw.states()
    assert all(s is JobState.CANCELLED for s in states.values()), states
    logs = Path(roots["log_root"])
    assert not list(logs.glob(f"{sw.sweep_id}_*.out"))
    assert not (logs / "bundles" / str(sw.array_ids[0])).exists()
    assert not list((logs / "bundles").glob(f"{sw.array_ids[0]}_*"))
    kept = sorted(Path(p).parent.name for p in report.checkpoints_kept)
    assert kept == sorted(j.run_id for j in sw if j.task in (0, 1)) and all(
        Path(p).exists() for p in report.checkpoints_kept
    )


@pytest.mark.lab
def test_the_slurm_calls_of_a_submission_do_not_grow_with_the_grid(repo, store, roots, monkeypatch, tmp_path):
    from roach.scheduler.client import SlurmClient
    from roach.scheduler.transport import LocalTransport

    # Each size starts from an empty site cache: with the one in $HOME, whether config and partitions come from
    # Slurm or the cache hangs on how long ago an earlier test read them (CI saw 3 scontrol for 3 runs, 2 for 60).
    calls: list[str] = []
    slurm_run, transport_run = SlurmClient.run, LocalTransport.run

    def counting_slurm(self, argv, **kw):
        calls.append(argv[0])
        return slurm_run(self, argv, **kw)

    def counting_transport(self, argv, **kw):
        calls.append(f"remote:{argv[0]}")
        return transport_run(self, argv, **kw)

    monkeypatch.setattr(SlurmClient, "run", counting_slurm)
    monkeypatch.setattr(LocalTransport, "run", counting_transport)
    per_size = {}
    for n in (3, 60):
        calls.clear()
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cache-{n}"))
        sw = sweep(
            "pkg.grid:square",
            [{"x": i} for i in range(n)],
            resources=CPU,
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            **roots,
        )
        per_size[n] = (
            sorted(c for c in calls if not c.startswith("remote:")),
            sum(c.startswith("remote:") for c in calls),
        )
        sw.cancel()
    assert per_size[3] == per_size[60], per_size  # the same Slurm commands, the same number of remote calls
    slurm_calls, _ = per_size[60]
    assert slurm_calls.count("sbatch") == 1 and slurm_calls.count("scontrol") <= 3 and len(slurm_calls) <= 8, (
        slurm_calls
    )


@pytest.mark.lab
def test_roach_watch_reports_every_run_of_a_sweep_and_records_each_job_json(repo, roots, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from roach.cli.app import cli

    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "watch-store.sqlite"))
    n = 12
    sw = sweep(
        "pkg.grid:fail_on",
        [{"x": i, "bad": 5} for i in range(n)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=Store(tmp_path / "watch-store.sqlite"),
        max_array_size=8,
        **roots,
    )
    run = CliRunner().invoke(
        cli,
        ["watch", "--cluster", "lab", "--run-as", LAB_USER, "--json", "--interval", "1", "--heartbeat", "3600"],
        catch_exceptions=False,
    )
    events = [json.loads(line) for line in run.output.splitlines() if line.startswith("{")]
    ours = {j.slurm_id for j in sw}
    started = [e["job_id"] for e in events if e["event"] == "started" and e["job_id"] in ours]
    finished = {e["job_id"]: e for e in events if e["event"] == "finished" and e["job_id"] in ours}
    assert sorted(set(started)) == sorted(ours) and sorted(finished) == sorted(ours), run.output
    assert finished[sw[5].slurm_id]["run_id"] == sw[5].run_id
    assert run.exit_code == 6, (run.output, sw[5].log())  # one run failed
    assert events[-1]["event"] == "queue_empty"
    for j in sw:
        jj = JobJson.from_json(Path(j.paths.job_json).read_text())
        assert jj.status == ("failed" if j.run_id.endswith("-5") else "completed"), (j.run_id, jj, j.log())


@pytest.mark.lab
def test_a_grid_larger_than_the_clusters_max_array_size_is_split_transparently(
    repo, store, roots, lab, monkeypatch, tmp_path
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no site cache yet: MaxArraySize is read
    from roach.lab import lab as lablib

    lablib.up(log=lambda *_: None, max_array_size=4)  # task indices 0..3: four tasks an array
    try:
        sw = sweep(
            "pkg.grid:square",
            [{"x": i} for i in range(9)],
            resources=CPU,
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            **roots,
        )
    finally:
        lablib.up(log=lambda *_: None, max_array_size=lab.max_array_size)
    assert [len(store.array_tasks("lab", a)) for a in sw.array_ids] == [4, 4, 1]
    done = sw.wait(timeout=slack(240), poll_s=2)
    assert {a.state for a in done.values()} == {JobState.COMPLETED}
    runs = Path(roots["log_root"]).parent / "runs"
    assert [json.loads((runs / j.run_id / "result.json").read_text())["sq"] for j in sw] == [i * i for i in range(9)]


@pytest.mark.lab
def test_a_stale_cached_max_array_size_is_asked_again_when_sbatch_refuses_the_array(
    repo, store, roots, lab, monkeypatch, tmp_path
):
    """The sweep splits by the site cache's MaxArraySize (no call); an admin may have lowered it since. Here the
    cache says 20000 while slurmctld enforces the lab's 10001: sbatch refuses the one array of 10002, the sweep
    reads MaxArraySize fresh and splits, nothing of the refused array left behind."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    client = CLUSTER.client()
    config = client.run(["scontrol", "show", "config"]).stdout
    stale = re.sub(r"^(MaxArraySize\s*=\s*)\d+", r"\g<1>20000", config, flags=re.M)
    assert stale != config
    client.site_cache.put("config", stale)
    assert CLUSTER.client().max_array_size(cached=True) == 20000
    n = lab.max_array_size + 1
    sw = sweep(
        "pkg.grid:square",
        [{"x": i} for i in range(n)],
        resources=CPU,
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        **roots,
    )
    try:
        assert [len(store.array_tasks("lab", a)) for a in sw.array_ids] == [lab.max_array_size, 1]
        assert CLUSTER.client().max_array_size(cached=True) == lab.max_array_size  # the fresh read is cached
        queued = {q.ref.job for q in CLUSTER.client().squeue(user=LAB_USER)}
        assert queued == set(sw.array_ids), queued  # the refused array queued nothing
    finally:
        sw.cancel()


@pytest.mark.lab
def test_the_caps_per_submission_hold_for_a_sweep_as_a_whole(repo, store, roots, tmp_path, monkeypatch):
    from roach.fleet.guardrails import Refused
    from roach.slurm.clusters.lab import GPU1

    toml = tmp_path / "clusters.toml"
    toml.write_text("[clusters.lab]\nmax_gpus = 2\nmax_gpu_hours = 2\n")
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))

    def go(n, **kw):
        return sweep(
            "pkg.grid:square",
            [{"x": i} for i in range(n)],
            resources=GPU1.replace(time="00:30:00"),
            cluster=CLUSTER,
            repo_root=repo.work,
            store=store,
            **roots,
            **kw,
        )

    with pytest.raises(Refused, match="may hold 3 GPUs at once") as e:
        go(3)  # each run is within the caps; three at once are not
    assert "parallelism" in e.value.hint
    with pytest.raises(Refused, match="asks for 2.5 GPU-hours"):
        go(5, parallelism=2)  # two at a time, but 5 x 0.5 GPU-hours in all
    assert store.all_jobs() == [] and not Path(roots["log_root"], "bundles").exists()
    sw = go(4, parallelism=2)  # 2 at once, 2 GPU-hours: within both
    sw.cancel()
    assert len(sw) == 4
