"""Holding an allocation: holders, attempts as steps of them, roach steps/signal/release.

Pure tests first (step parsing, the scripts, the signal program on real local processes); then the
behaviour on the lab: three attempts in one holder, a clean stop and a resume, stacking refused, and a
holder near its wall clock that stops its attempt first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import CONTEXT, RoachGroup
from roach.errors import UsageError, WaitTimeoutError
from roach.lab.config import LAB_USER
from roach.launch.hold import holder
from roach.launch.hold.attempts import (
    EXIT_LEFT,
    AttemptExit,
    AttemptPaths,
    attempt_records,
    read_attempts,
)
from roach.launch.hold.holder import Holder, InsideJob, job_for
from roach.launch.hold.scripts import AttemptInputs, render_driver, render_holder, render_step
from roach.launch.hold.start import hold
from roach.launch.hold.steps import (
    SIGNAL_PROGRAM,
    STEP_RANKS,
    StepKind,
    classify_step,
    idle_holders,
    parse_steps,
    steps_format,
)
from roach.model.ids import RecordKind
from roach.model.job_state import JobState
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.parse import RS, US
from roach.scheduler.transport import LocalTransport
from roach.slurm import Resources, submit
from roach.slurm.clusters.lab import GPU1, LAB, NODES2_GPU2
from tests.conftest import slack, wait_until
from tests.support.resumable import repo, roots, store  # noqa: F401  (fixtures)
from tests.support.submitting import submit_to_lab

CLUSTER = LAB.with_(run_as=LAB_USER)


# -- pure ----------------------------------------------------------------------------------------------
def _squeue_steps(*rows: tuple[str, ...]) -> str:
    return "".join(US.join(r) + RS + "\n" for r in rows)


def test_steps_format_and_parse_tell_the_ranks_step_from_node_steps():
    assert steps_format() == f"StepId:{US},StepName:{US},NumTasks:{US},TimeUsed:{US},StepState:{US},Nodes:{RS}"
    text = _squeue_steps(
        ("412.3", "roach-ranks:2", "4", "1:02", "RUNNING", "n[1-2]"),
        ("412.4", "roach-signal", "2", "0:00", "RUNNING", "n[1-2]"),
        ("412.5", "python", "4", "10:00", "RUNNING", "n[1-2]"),
        ("412.6", "bash", "2", "0:03", "RUNNING", "n[1-2]"),
        ("412.7", "weird name", "3", "0:03", "RUNNING", "n1"),
        ("412.batch", "batch", "1", "1-02:03:04", "RUNNING", "n1"),
        ("412.extern", "extern", "2", "5:00", "RUNNING", "n[1-2]"),
    )
    steps = parse_steps(text, gpus=4, nodes=2)
    assert [(s.id, s.kind, s.attempt) for s in steps] == [
        ("412.3", StepKind.RANKS, 2),
        ("412.4", StepKind.SIGNAL, None),
        ("412.5", StepKind.RANKS, None),
        ("412.6", StepKind.NODE, None),
        ("412.7", StepKind.OTHER, None),
        ("412.batch", StepKind.BATCH, None),
        ("412.extern", StepKind.EXTERN, None),
    ]
    assert steps[0].elapsed_s == 62 and steps[5].elapsed_s == 93784 and steps[0].nodelist == "n[1-2]"
    assert steps[0].describe() == "ranks' step (4 tasks, one per GPU) of attempt 2"
    assert parse_steps("") == []
    with pytest.raises(Exception, match="expected 6 fields"):
        parse_steps("412.3" + US + "x" + RS)


def test_idle_holders_asks_once_for_all_and_counts_only_attempts_and_strangers():
    steps = _squeue_steps(
        ("7.batch", "batch", "1", "9:00", "RUNNING", "n1"),
        ("7.4", "roach-signal", "1", "0:01", "RUNNING", "n1"),
        ("8.batch", "batch", "1", "9:00", "RUNNING", "n2"),
        ("8.2", "roach-ranks:1", "4", "1:00", "RUNNING", "n2"),
        ("9.batch", "batch", "1", "9:00", "RUNNING", "n3"),
        ("9.0", "python", "1", "1:00", "RUNNING", "n3"),
    )
    t = MockTransport({"squeue": steps})
    assert idle_holders(SlurmClient(t), [7, 8, 9, 10]) == {7: True, 8: False, 9: False}  # 10: not running
    assert len(t.calls) == 1 and t.argvs[0][:5] == ("squeue", "--steps", "--noheader", "--jobs", "7,8,9,10")


def test_roach_step_names_win_over_task_counts():
    # one node, one GPU: the node step and the ranks' step both have one task; the names tell them apart
    assert classify_step("roach-node:7", "1", 1, 1, 1) == (StepKind.NODE, 7)
    assert classify_step("roach-ranks:7", "2", 1, 1, 1) == (StepKind.RANKS, 7)
    assert classify_step("batch", "batch", 1, 1, 1) == (StepKind.BATCH, None)


def test_an_attempts_record_is_its_holders_job_id_and_its_number():
    rec = _record(412, holder=412, run_id="r1", log_path="/l/r1_412.out", attempt=3, kind=RecordKind.ATTEMPT)
    assert str(rec.key) == "412/3" and rec.is_attempt and rec.slurm_id == "412"
    p = AttemptPaths.of(rec)
    assert (p.bundle_dir, p.log, p.spec) == ("/l/bundles/412.3", "/l/r1_412.out", "/l/bundles/412.3/spec.json")
    assert isinstance(job_for(LAB, rec), InsideJob)
    assert not isinstance(job_for(LAB, _record(412, holder=412, kind=RecordKind.HOLDER)), InsideJob)  # the holder


def _held(monkeypatch, tmp_path) -> tuple[Holder, dict]:
    """A Holder of a recorded holder whose ``submit`` hands its call to a stand-in for roach's submit."""
    seen: dict = {}
    monkeypatch.setattr(
        holder, "submit_attempt", lambda target, args, **kw: seen.update(target=target, args=args, **kw)
    )
    rec = _record(412, holder=412, kind=RecordKind.HOLDER, resources=Resources(gpus_per_node=2).to_json())
    return Holder(LAB, 412, rec, Store(tmp_path / "store.db")), seen


def test_holder_submit_starts_inside_it_with_its_resources_and_store(monkeypatch, tmp_path):
    h, seen = _held(monkeypatch, tmp_path)
    h.submit("pkg.m:f", {"lr": 1}, force=True, log_root="/l")
    assert seen["inside"] == 412
    assert seen["cluster"] is LAB
    assert seen["resources"] == Resources(gpus_per_node=2)
    assert seen["store"] is h.store
    assert (seen["force"], seen["log_root"], seen["args"]) == (True, "/l", {"lr": 1})


def test_holder_submit_refuses_another_cluster(monkeypatch, tmp_path):
    h, seen = _held(monkeypatch, tmp_path)
    with pytest.raises(UsageError, match="its holder's cluster"):
        h.submit("pkg.m:f", cluster="ilc")
    assert seen == {}


def test_exit_codes_mean_completed_stopped_or_failed():
    assert AttemptExit(0, "t").state is JobState.COMPLETED
    assert AttemptExit(EXIT_LEFT, "t").status == "cancelled"
    assert "left to come back" in AttemptExit(EXIT_LEFT, "t").state_text
    assert AttemptExit(1, "t").status == "failed" and AttemptExit(137, "t").state is JobState.FAILED


def test_wait_holder_s_needs_a_holder_and_seconds_and_is_refused_before_anything_is_queued(tmp_path):
    store = Store(tmp_path / "store.sqlite")
    for bad in (dict(wait_holder_s=5), dict(inside=412, wait_holder_s=-1), dict(inside=412, wait_holder_s="5")):
        with pytest.raises(UsageError, match=r"wait_holder_s=.* \(--wait-holder\) needs inside= \(--inside\)"):
            submit("pkg.resumable:plain_loop", cluster=CLUSTER, resources=GPU1, repo_root=tmp_path, store=store, **bad)
    assert store.all_jobs() == []


HOSTILE = "/tmp/we ird/$(touch pwned)/`id`/'q\"/\nrm -rf x"


def _inputs(tmp: str = HOSTILE, **kw) -> AttemptInputs:
    base = dict(
        cluster=LAB,
        resources=NODES2_GPU2,
        holder=412,
        attempt=2,
        run_id="r-1",
        paths=AttemptPaths(tmp, "r-1", 412, 2),
        nodes=("n1", "n2"),
        gpus_per_node=2,
        roach_path=f"{tmp}/bundles/roach-x",
        repo_url=f"file://{tmp}/remote.git",
        repo_name="work",
        commit="c" * 40,
        clone_root=f"{tmp}/clones",
        run_dir=f"{tmp}/runs/r-1",
    )
    base.update(kw)
    return AttemptInputs(**base)


def test_driver_and_step_scripts_are_valid_bash_and_quote_hostile_paths(tmp_path):
    i = _inputs()
    values = [
        i.roach_path,
        i.repo_url,
        i.clone_root,
        i.run_dir,
        i.paths.bundle_dir,
        i.paths.step_sh,
        i.paths.spec,
        i.paths.node_sh,
        i.paths.left,
    ]
    for text in (render_driver(i), render_step(i)):
        f = tmp_path / "s.sh"
        f.write_text(text)
        subprocess.run(["bash", "-n", str(f)], check=True)
        for v in sorted(values, key=len, reverse=True):
            text = text.replace(shlex.quote(v), "<quoted>")
        assert "pwned" not in text and "rm -rf" not in text  # every hostile value went through shlex.quote
    driver = render_driver(_inputs())
    assert "srun --jobid=412 --overlap --nodelist=n1,n2 --nodes=2 --job-name=roach-node:2 --ntasks=2" in driver
    assert "--job-name=roach-ranks:2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=1 --kill-on-bad-exit=1" in driver
    assert "--gres" not in driver  # the whole holder's GPUs: as in a batch job
    assert "export ROACH_INSIDE_HOLDER=412\nexport ROACH_ATTEMPT=2" in driver
    half = render_driver(_inputs(resources=NODES2_GPU2.replace(gpus_per_node=1), gpus_per_node=2))
    assert "--gres=gpu:1" in half and "--ntasks=2 --ntasks-per-node=1" in half
    assert (
        'exec ${ROACH_BLOCK[@]+"${ROACH_BLOCK[@]}"} "$py" -m roach.slurm.run \'/tmp/we ird/$(touch pwned)'
        in render_step(_inputs())
    )


def test_holder_script_does_not_requeue_and_stops_attempts_before_its_wall_clock(tmp_path):
    text = render_holder(cluster=LAB, resources=GPU1, name="h", hold_id="hold-h-1", log_root=HOSTILE, lead_s=45)
    assert "#SBATCH --no-requeue\n#SBATCH --signal=B:USR1@45\n" in text and "trap near_end USR1" in text
    assert "bundle='/tmp/we ird/$(touch pwned)/`id`/'\"'\"'q\"/\nrm -rf x/bundles'/\"$SLURM_JOB_ID\"" in text
    f = tmp_path / "h.sh"
    f.write_text(text)
    subprocess.run(["bash", "-n", str(f)], check=True)


def _fake_rank(tmp: Path, name: str, env: dict[str, str], fork_child: bool = False) -> subprocess.Popen:
    """A process that looks like a rank (an argument `roach.slurm.run`) and notes the signals it gets."""
    code = (
        f"import os, signal, sys, time\n"
        f"def note(s, f):\n open({str(tmp / name)!r} + '.' + str(os.getpid()), 'a').write(str(s))\n"
        f"signal.signal(signal.SIGUSR1, note)\n"
        + ("os.fork()\n" if fork_child else "")
        + "open("
        + repr(str(tmp / name))
        + " + '.ready.' + str(os.getpid()), 'w')\n"
        "time.sleep(30)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, "-m", "roach.slurm.run", "/b/spec.json"],
        env={**os.environ, **env},
        start_new_session=True,
    )


def test_signal_program_reaches_the_attempts_ranks_only(tmp_path):
    procs = [
        _fake_rank(tmp_path, "mine", {"ROACH_INSIDE_HOLDER": "412", "ROACH_ATTEMPT": "2"}, fork_child=True),
        _fake_rank(tmp_path, "other-attempt", {"ROACH_INSIDE_HOLDER": "412", "ROACH_ATTEMPT": "1"}),
        _fake_rank(tmp_path, "other-holder", {"ROACH_INSIDE_HOLDER": "4120", "ROACH_ATTEMPT": "2"}),
        _fake_rank(tmp_path, "batch-job", {}),
    ]
    try:
        wait_until("the fake ranks", lambda: len(list(tmp_path.glob("*.ready.*"))) == 5, timeout=20, every=0.1)
        out = subprocess.run(
            ["bash", "-c", SIGNAL_PROGRAM, "roach-signal", "USR1", "412", "2"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert re.search(r"sent SIGUSR1 to 1 rank\(s\) of holder 412 attempt 2$", out.strip()), out
        wait_until("the signal", lambda: list(tmp_path.glob("mine.[0-9]*")), timeout=10, every=0.1)
        time.sleep(0.3)
        got = sorted(p.name.split(".")[0] for p in tmp_path.iterdir() if ".ready." not in p.name)
        assert got == ["mine"]  # its forked child, the other attempt, holder and the batch job: untouched
        out = subprocess.run(
            ["bash", "-c", SIGNAL_PROGRAM, "roach-signal", "USR1", "412", ""],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "sent SIGUSR1 to 2 rank(s) of holder 412\n" in out  # every attempt of the holder
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)


def test_read_attempts_reads_exit_stop_and_driver_in_one_call(tmp_path):
    a, b, c = (tmp_path / n for n in ("412.1", "412.2", "412.3"))
    for d in (a, b, c):
        d.mkdir()
    (a / "exit").write_text('{"exit_code": 3, "ended_at_utc": "2026-01-01T00:00:00Z"}\n')
    (b / "stop").write_text("x")
    (b / "driver.pid").write_text(f"{os.uname().nodename} {os.getpid()}\n")
    (c / "driver.pid").write_text(f"{os.uname().nodename} 999999999\n")
    got = read_attempts(LocalTransport(), [str(a), str(b), str(c), str(tmp_path / "none")])
    assert got[str(a)].exit == AttemptExit(3, "2026-01-01T00:00:00Z") and not got[str(a)].stop_requested
    assert got[str(b)].exit is None and got[str(b)].stop_requested and got[str(b)].driver_alive is True
    assert got[str(c)].driver_alive is False and got[str(tmp_path / "none")].driver_alive is False
    (c / "driver.pid").write_text("another-host 1\n")
    assert read_attempts(LocalTransport(), [str(c)])[str(c)].driver_alive is None


def _record(job_id: int, **kw) -> JobRecord:
    base = dict(
        cluster="lab",
        job_id=job_id,
        run_id="r",
        name="n",
        target="pkg.m:f",
        commit="c",
        repo="work",
        log_path="/l/r_1.out",
        bundle_dir="/l/bundles/1",
        run_dir="/r/r",
        submitted_at="2026-01-01T00:00:00Z",
        resources={},
        status="submitted",
        slurm_state=None,
        exit_code=None,
        recorded_at=None,
    )
    base.update(kw)
    return JobRecord(**base)


# -- on the lab --------------------------------------------------------------------------------------------


@pytest.fixture
def cli(store, monkeypatch):
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    group = RoachGroup(context_settings=CONTEXT)  # loads each command from roach.cli.app.COMMANDS

    def invoke(*args: str):
        r = CliRunner().invoke(group, [*args, "--run-as", LAB_USER], catch_exceptions=False)
        return r

    return invoke


@pytest.fixture
def holders(user_slurm):
    ids: list[int] = []
    yield ids
    if ids:
        user_slurm.scancel(ids)


def _inside(repo, store, roots, holder, target, **kw):
    kw.setdefault("resources", NODES2_GPU2)
    return submit_to_lab(repo, store, roots, target, inside=holder, **kw)


_SUBMIT_AND_EXIT = """
import sys
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB, NODES2_GPU2
from roach.records.store import Store
job = submit("pkg.resumable:plain_loop", {"steps": 12, "step_s": 0.25}, resources=NODES2_GPU2,
             cluster=LAB.with_(run_as=sys.argv[1]), repo_root=sys.argv[2], store=Store(sys.argv[3]),
             inside=int(sys.argv[4]), log_root=sys.argv[5], clone_root=sys.argv[6])
print(job.key)
"""


def _hold(cli, roots) -> dict:
    """A 2-node, 4-GPU holder of 5 minutes, running: what `roach hold --json` says of it."""
    r = cli(
        "hold",
        "--cluster",
        "lab",
        "--resources",
        "NODES2_GPU2",
        "--time",
        "5",
        "--name",
        "dbg",
        "--log-root",
        roots["log_root"],
        "--wait",
        "60",
        "--json",
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.lab
def test_a_rank_that_aborts_after_rank_0_left_leaves_the_attempt_stopped_not_failed(repo, store, roots, cli, holders):
    # CI once saw a stopped attempt end with exit code 134 (a rank's SIGABRT after leaving) and called it FAILED
    holder = _hold(cli, roots)["job_id"]
    holders.append(holder)
    job = _inside(repo, store, roots, holder, "pkg.resumable:leave_then_abort", args={"steps": 300, "step_s": 0.1})
    wait_until("steps", lambda: "abort-loop step 10" in job.log(), timeout=90)
    r = cli("signal", str(holder))
    assert r.exit_code == 0, r.output
    ended = job.wait(timeout=slack(60))
    log = job.log()
    assert "roach: ranks' step ended with exit code 134" in log, log[-3000:]  # the abort did happen
    assert "rank 0 had left to come back (USR1 at step" in log, log[-3000:]
    assert ended.exit_code == EXIT_LEFT and ended.state is JobState.CANCELLED, log[-3000:]
    assert Path(job.paths.left).read_text().startswith("USR1 at step ")
    assert store.get_key("lab", job.key).status == "cancelled"


@pytest.mark.slow
@pytest.mark.lab
def test_three_attempts_in_one_holder_stop_resume_and_no_stacking(repo, store, roots, cli, holders, user_slurm):
    info = _hold(cli, roots)
    holder = info["job_id"]
    holders.append(holder)
    assert info["state"] == "RUNNING" and info["nodes"] == 2 and info["gpus"] == 4
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))

    # 1: submitted by a process that exits at once: the driver outlives it
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _SUBMIT_AND_EXIT,
            LAB_USER,
            str(repo.work),
            str(store.path),
            str(holder),
            roots["log_root"],
            roots["clone_root"],
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    ).stdout
    first = job_for(CLUSTER, store.find(out.split()[-1], cluster="lab"), store)
    assert isinstance(first, InsideJob) and first.record.holder == holder and first.attempt == 1
    assert first.wait(timeout=slack(90)).state is JobState.COMPLETED, first.log()
    assert store.get_key("lab", first.key).status == "completed"
    assert "roach: ranks' step ended with exit code 0" in first.log()
    st = cli("status", f"{holder}/1", "--json")  # an attempt is named by its holder and number
    assert st.exit_code == 0, st.output
    got = json.loads(st.output)
    assert (got["job_id"], got["holder"], got["attempt"], got["status"]) == (holder, holder, 1, "completed"), got

    # 2: a resumable run, stopped cleanly by `roach signal`
    second = _inside(
        repo, store, roots, holder, "pkg.resumable:ddp_train", args={"steps": 300, "step_s": 0.1}, name="held-ddp"
    )
    wait_until("progress", lambda: second.log().count("done loss") >= 10, timeout=90)
    with pytest.raises(
        UsageError,
        match=rf"holder {holder} is running attempt 2 \(run {second.run_id}: {holder}\.\d+ "
        r"ranks' step \(4 tasks, one per GPU\)",
    ):
        _inside(repo, store, roots, holder, "pkg.resumable:plain_loop", args={"steps": 3})
    assert len(attempt_records(store, "lab", holder)) == 2  # the refused one left nothing

    steps = json.loads(cli("steps", str(holder), "--json").output)
    ranks = [s for s in steps["steps"] if s["kind"] == "ranks"]
    assert len(ranks) == 1 and ranks[0]["tasks"] == 4 and ranks[0]["name"] == f"{STEP_RANKS}:2"
    assert ranks[0]["run_id"] == second.run_id and steps["idle"] is False

    r = cli("signal", str(holder))
    assert r.exit_code == 0, r.output
    assert f"sent SIGUSR1 to attempt 2 (step {ranks[0]['id']}), run {second.run_id}" in r.output

    # 3: the same run id, submitted at once: it waits for attempt 2 to leave, then resumes where it stopped
    third = _inside(
        repo,
        store,
        roots,
        holder,
        "pkg.resumable:ddp_train",
        args={"steps": 300, "step_s": 0.1},
        name="held-ddp",
        run_id=second.run_id,
    )
    ended = second.attempt_status().exit
    assert ended is not None and ended.ended_at <= third.record.submitted_at
    assert second.wait(timeout=slack(5)) == ended
    log = second.log()
    assert "caught_signal USR1" in log and "requeueing job" not in log, log[-3000:]
    saved = int(re.findall(r"checkpoint at step (\d+) after caught_signal USR1", log)[-1])
    # EXIT_LEFT once roach.runtime.attempts knows ROACH_INSIDE_HOLDER; 1 from its wall-clock branch before that
    assert ended.exit_code == EXIT_LEFT and ended.state is not JobState.COMPLETED, log[-4000:]
    assert third.wait(timeout=slack(90)).state is JobState.COMPLETED, third.log()[-3000:]
    log = third.log()
    assert re.search(rf"rank 0: resumed at step {saved} \(checkpoint of job {holder};", log)
    assert "rank 0: finished; result in" in log

    # no new job id: three attempts, all steps of the holder, each log <run_id>_<holder>.out
    assert not [a for a in user_slurm.sacct(user=LAB_USER, since=started) if a.name == "held-ddp"]
    for job in (first, second, third):
        assert Path(job.record.log_path).name == f"{job.run_id}_{holder}.out" and job.record.holder == holder
        assert Path(job.paths.bundle_dir).name == f"{holder}.{job.attempt}"
    assert [j.attempt for j in (first, second, third)] == [1, 2, 3]
    assert re.findall(rf"(?m)^roach: attempt (\d+) of run {second.run_id}: inside holder {holder} ", log) == ["2", "3"]

    assert json.loads(cli("steps", str(holder), "--json").output)["idle"] is True
    r = cli("release", str(holder), "--json")
    assert json.loads(r.output)["state"] == "CANCELLED"
    assert store.get("lab", holder).status == "cancelled"


@pytest.mark.lab
@pytest.mark.slow
def test_a_holder_near_its_wall_clock_stops_its_attempt_first(repo, store, roots, holders):
    # USR1 to the holder's shell 20 s before a 1-minute limit: Slurm's 30 s timer sends it 10-40 s after the
    # start. Should it come before the attempt's ranks run, the holder's second try 10 s later reaches them.
    h = hold(GPU1, cluster=CLUSTER, name="short", time="1", lead_s=20, log_root=roots["log_root"], store=store)
    holders.append(h.job_id)
    h.wait_running(timeout=slack(60))
    job = _inside(
        repo,
        store,
        roots,
        h.job_id,
        "pkg.resumable:ddp_train",
        args={"steps": 3000, "step_s": 0.1},
        resources=GPU1,
        name="long",
    )
    ended = job.wait(timeout=slack(75))
    assert h.state() is JobState.RUNNING  # the attempt left, checkpointed, before the holder's end
    resume = Path(job.record.run_dir) / "resume.pt"
    assert resume.exists()
    log = job.log()
    holder_log = Path(h.log_path).read_text()
    assert f"roach: holder {h.job_id}: its wall clock is 20 s away" in holder_log, holder_log
    assert re.search(r"sent SIGUSR1 to 1 rank\(s\) of holder", holder_log)
    assert "caught_signal USR1" in log and re.search(r"checkpoint at step \d+ after caught_signal USR1", log)
    assert ended.state is not JobState.COMPLETED
    # too late for another attempt: it would be killed without a checkpoint
    with pytest.raises(UsageError, match="already stopped its attempts"):
        _inside(repo, store, roots, h.job_id, "pkg.resumable:plain_loop", resources=GPU1, args={"steps": 3})
    h.release()


@pytest.mark.lab
def test_ls_shows_a_holders_held_time_and_that_it_sits_idle(tmp_path, monkeypatch, lab, shared_tmp):
    from roach.cli.listing import ls

    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    h = hold(
        GPU1,
        cluster=LAB.with_(run_as=LAB_USER),
        name="idle-probe",
        time="5",
        log_root=str(shared_tmp / "holders"),
        store=Store(tmp_path / "store.sqlite"),
    )
    try:
        h.wait_running(timeout=slack(60))
        time.sleep(2)
        out = CliRunner().invoke(ls, ["--json", "--run-as", LAB_USER])
        assert out.exit_code == 0, out.output
        row = next(v for v in json.loads(out.output) if v["job_id"] == h.job_id)
        assert row["state"] == "RUNNING" and row["held_s"] >= 1 and row["idle"] is True
        text = CliRunner().invoke(ls, ["--run-as", LAB_USER], terminal_width=300).output
        assert "IDLE: charged, no attempt runs" in text
    finally:
        h.release()


@pytest.mark.lab
def test_cancel_stops_only_the_attempt_and_release_ends_the_holder(repo, store, roots, holders, user_slurm):
    h = hold(GPU1, cluster=CLUSTER, name="cancel", time="5", log_root=roots["log_root"], store=store)
    holders.append(h.job_id)
    h.wait_running(timeout=slack(60))

    # cancel(): the attempt's ranks get TERM, checkpoint and leave; its steps go; the holder stays
    first = _inside(
        repo,
        store,
        roots,
        h.job_id,
        "pkg.resumable:ddp_train",
        args={"steps": 3000, "step_s": 0.1},
        resources=GPU1,
        name="to-cancel",
    )
    wait_until("attempt 1 to make progress", lambda: first.log().count("done loss") >= 5, timeout=90)
    assert [s.kind for s in first.steps()] == [StepKind.RANKS]
    first.cancel()
    ended = first.wait(timeout=slack(60))
    assert ended.exit_code == EXIT_LEFT and ended.status == "cancelled", first.log()[-2000:]
    assert store.get_key("lab", first.key).status == "cancelled"
    assert json.loads(Path(first.paths.job_json).read_text())["status"] == "cancelled"
    assert "caught_signal TERM" in first.log()
    wait_until("attempt 1's steps to leave squeue -s", lambda: not first.steps(), timeout=30)
    (q,) = user_slurm.squeue(job_ids=[h.job_id])
    assert q.state is JobState.RUNNING and h.idle()
    assert not [a for a in user_slurm.sacct([h.job_id]) if a.step is None and a.state.is_terminal]

    # release(): the holder ends, and with it a running attempt, whose end is recorded too
    second = _inside(
        repo,
        store,
        roots,
        h.job_id,
        "pkg.resumable:plain_loop",
        args={"steps": 3000, "step_s": 0.1},
        resources=GPU1,
        name="to-release",
    )
    wait_until("attempt 2 to run", lambda: "plain step 10" in second.log(), timeout=90)
    assert h.release() is JobState.CANCELLED
    assert not [r for r in user_slurm.squeue(job_ids=[h.job_id]) if r.state.is_active]
    assert [a.state for a in user_slurm.sacct([h.job_id]) if a.step is None] == [JobState.CANCELLED]
    assert store.get("lab", h.job_id).status == "cancelled"
    gone = second.wait(timeout=slack(90))
    assert gone.state is not JobState.COMPLETED and store.get_key("lab", second.key).status == gone.status
    assert json.loads(Path(second.paths.job_json).read_text())["status"] == gone.status


@pytest.mark.lab
def test_a_with_hold_block_that_raises_releases_the_holder_after_its_attempt_checkpoints(
    repo, store, roots, holders, user_slurm
):
    with (
        pytest.raises(RuntimeError, match="the script failed"),
        hold(GPU1, cluster=CLUSTER, name="with", time="5", log_root=roots["log_root"], store=store) as h,
    ):
        holders.append(h.job_id)
        h.wait_running(timeout=slack(60))
        job = _inside(
            repo,
            store,
            roots,
            h.job_id,
            "pkg.resumable:ddp_train",
            args={"steps": 3000, "step_s": 0.1},
            resources=GPU1,
            name="in-with",
        )
        wait_until("the attempt to make progress", lambda: job.log().count("done loss") >= 5, timeout=90)
        raise RuntimeError("the script failed")
    # the holder is gone, not left charged until its wall clock; its end is recorded
    assert not [r for r in user_slurm.squeue(job_ids=[h.job_id]) if r.state.is_active]
    assert store.get("lab", h.job_id).status == "cancelled"
    # its running attempt checkpointed on the way out
    ended = job.wait(timeout=slack(90))
    log = job.log()
    assert ended.state is not JobState.COMPLETED
    assert re.search(r"checkpoint at step \d+ after caught_signal TERM", log), log[-3000:]
    assert (Path(job.record.run_dir) / "resume.pt").exists()

    # a block that ends without an error releases its holder too, whatever its state (here: just queued)
    with hold(GPU1, cluster=CLUSTER, name="with-ok", time="5", log_root=roots["log_root"], store=store) as ok:
        holders.append(ok.job_id)
    assert ok.state() is JobState.CANCELLED and store.get("lab", ok.job_id).status == "cancelled"


ALL_GPUS = Resources(nodes=2, gpus_per_node=4, cpus_per_gpu=1, time="00:10:00")  # the lab's 8 GPUs


@pytest.mark.lab
def test_submit_inside_a_pending_holder_is_refused_unless_told_to_wait_for_it(
    repo, store, roots, holders, cli, monkeypatch
):
    # a holder that takes every GPU keeps the next one PENDING (Resources) until it is released
    big = hold(ALL_GPUS, cluster=CLUSTER, name="all", time="5", log_root=roots["log_root"], store=store)
    holders.append(big.job_id)
    big.wait_running(timeout=slack(60))
    h = hold(GPU1, cluster=CLUSTER, name="later", time="5", log_root=roots["log_root"], store=store)
    holders.append(h.job_id)
    assert h.state().is_pending
    with pytest.raises(UsageError, match=rf"(?s)holder {h.job_id} is PENDING.*--wait-holder S"):
        _inside(repo, store, roots, h.job_id, "pkg.resumable:plain_loop", args={"steps": 3}, resources=GPU1)
    with pytest.raises(WaitTimeoutError, match=rf"holder {h.job_id} on lab did not start within 1s"):
        _inside(
            repo, store, roots, h.job_id, "pkg.resumable:plain_loop", args={"steps": 3}, resources=GPU1, wait_holder_s=1
        )
    from roach.cli.app import cli as roach_cli

    r = CliRunner().invoke(
        roach_cli,
        [
            "submit",
            "pkg.resumable:plain_loop",
            "--cluster",
            "lab",
            "--resources",
            "GPU1",
            "--inside",
            str(h.job_id),
            "--wait-holder",
            "1",
            "--repo-root",
            str(repo.work),
            "--log-root",
            roots["log_root"],
            "--clone-root",
            roots["clone_root"],
            "--run-as",
            LAB_USER,
        ],
    )
    assert r.exit_code == WaitTimeoutError.exit_code == 10 and "did not start within 1s" in r.output, r.output
    assert attempt_records(store, "lab", h.job_id) == []  # the refusals and the timeouts left nothing

    # waiting: the submission blocks in the holder's wait until the big holder goes, then starts at once
    waiting = threading.Event()
    real_wait = Holder.wait_running

    def noting(self, *a, **kw):
        waiting.set()
        return real_wait(self, *a, **kw)

    monkeypatch.setattr(Holder, "wait_running", noting)
    result: dict = {}

    def go():  # a store connection of its own: SQLite's belong to their thread
        try:
            result["job"] = _inside(
                repo,
                Store(store.path),
                roots,
                h.job_id,
                "pkg.resumable:plain_loop",
                args={"steps": 3, "step_s": 0.1},
                resources=GPU1,
                wait_holder_s=slack(120),
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            result["error"] = exc
            waiting.set()

    t = threading.Thread(target=go)
    t.start()
    assert waiting.wait(timeout=slack(60))
    big.release()
    t.join(timeout=slack(180))
    assert "error" not in result, result.get("error")
    job = job_for(CLUSTER, store.get_key("lab", result["job"].key), store)
    assert isinstance(job, InsideJob) and job.record.holder == h.job_id
    assert job.wait(timeout=slack(90)).state is JobState.COMPLETED, job.log()
    assert job.result() == 3  # an attempt's return value, as a job's
    h.release()
