"""`roach submit/status/logs/cancel/ls`: argument parsing and log following on fakes, then the real thing
on the lab cluster, submitting as the lab's user from a real git repository with a bare remote."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from roach.cli import args as cli_args
from roach.cli import jobs as cli_jobs
from roach.cli import views as cli_views
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.records.poller.lock import polled
from roach.records.store import Store
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.transport import LocalTransport
from tests.conftest import private_store, wait_until
from tests.support.lab_repo import LabRepo, git, invoke, repo  # noqa: F401  (repo: a fixture)


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    """Every test of this module records into its own store, never the user's."""
    yield from private_store("roach-cli-jobs-store-")


# -- no lab needed ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e-3", 1e-3),
        ("200", 200),
        ('["a","b"]', ["a", "b"]),
        ("foo", "foo"),
        ("true", True),
        ('{"k": 1}', {"k": 1}),
        ("", ""),
        ("a=b", "a=b"),
        ("1e-3x", "1e-3x"),
    ],
)
def test_arg_values_are_json_when_they_parse(text, value):
    got = cli_args.parse_arg_value(text)
    assert got == value and type(got) is type(value)


def _submit(*extra: str):
    return invoke("submit", "pkg.train:train", "--cluster", "lab", "--resources", "GPU1", *extra)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--arg", "lr"], "KEY=VALUE"),
        (["--arg", "=1"], "KEY=VALUE"),
        (["--arg", "not-a-name=1"], "not a keyword argument name"),
        (["--arg", "lr=1", "--arg", "lr=2"], "given twice"),
        (["--args-json", "[1, 2]"], "JSON object"),
        (["--args-json", "{oops"], "not JSON"),
        (["--args-json", '{"lr": 1}', "--arg", "lr=2"], "also given in --args-json"),
        (["--env", "NOEQUALS"], "NAME=VALUE"),
        (["--wait-holder", "5"], "(--wait-holder) needs inside= (--inside)"),
        (["--inside", "412", "--wait-holder", "-1"], "not in the range x>=0"),
    ],
)
def test_malformed_arguments_are_usage_errors(extra, says):
    r = _submit(*extra)
    assert r.exit_code == 2, r.output
    assert says in r.stderr


def test_unknown_cluster_lists_the_known_ones():
    r = invoke("submit", "pkg.train:train", "--cluster", "nosuch", "--resources", "GPU1")
    assert r.exit_code == 2, r.output
    assert "unknown cluster 'nosuch'" in r.stderr and "known clusters: " in r.stderr and "lab" in r.stderr
    r = invoke("ls", "--cluster", "nosuch")
    assert r.exit_code == 2 and "known clusters" in r.stderr


def test_unknown_preset_lists_the_valid_ones():
    r = invoke("submit", "pkg.train:train", "--cluster", "lab", "--resources", "GPU3")
    assert r.exit_code == 2, r.output
    assert "no preset 'GPU3'" in r.stderr
    assert "valid presets: CPU, GPU1, GPU2, GPU4, NODES2_GPU2" in r.stderr


def test_a_preset_in_the_wrong_case_gets_the_one_meant():
    r = invoke("submit", "pkg.train:train", "--cluster", "lab", "--resources", "gpu1")
    assert r.exit_code == 2, r.output
    assert "hint: did you mean 'GPU1'? valid presets: CPU, GPU1, GPU2, GPU4, NODES2_GPU2" in r.stderr


def test_unknown_ref_is_a_usage_error_naming_ls():
    for cmd in ("status", "logs", "cancel"):
        r = invoke(cmd, "no-such-run")
        assert r.exit_code == 2, (cmd, r.output)
        assert "no job id or run id 'no-such-run'" in r.stderr and "roach ls" in r.stderr


@dataclass
class FakeJob:
    """What follow_log uses of a Job: a log that grows a chunk per read (``tail`` through a MockTransport), a state,
    a clock."""

    chunks: list[str]
    end_after_s: float
    now: float = 0.0
    reads: int = 0
    state_calls: int = 0
    job_id: int = 7
    record: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(log_path="/logs/r_7.out"))
    transport: MockTransport = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.transport = MockTransport(self.tail)

    @property
    def fs(self):
        return SimpleNamespace(transport=self.transport, exists=lambda p: self.reads > 1)

    def tail(self, argv: tuple[str, ...], input: str | bytes | None) -> tuple[int, str, str]:
        assert argv[:2] == ("tail", "-n") and argv[-1] == "/logs/r_7.out"
        self.reads += 1
        if self.reads == 1:
            return 1, "", "tail: cannot open: No such file or directory"
        text = "".join(self.chunks[: self.reads - 1])
        start = int(argv[2].lstrip("+")) - 1
        return 0, "".join(text.splitlines(keepends=True)[start:]), ""

    def state(self) -> JobState:
        self.state_calls += 1
        return JobState.COMPLETED if self.now >= self.end_after_s else JobState.RUNNING

    watched: bool = False  # a watch polls and records the end: the store has it from end_after_s on

    def waiting(self, interval_s: float) -> FakeWaiting:
        return FakeWaiting(self)

    def recorded_end(self) -> JobState | None:
        return JobState.COMPLETED if self.watched and self.now >= self.end_after_s else None

    def sleep(self, s: float) -> None:
        self.now += s


@dataclass
class FakeWaiting:
    job: FakeJob

    def watched(self) -> bool:
        return self.job.watched

    def __enter__(self) -> FakeWaiting:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_follow_prints_each_whole_line_once_and_asks_slurm_rarely(capsys):
    chunks = ["a\nb", "", "\nc\n", "d\ne\n", "", "f\n", "partial"] + [""] * 20
    job = FakeJob(chunks, end_after_s=30)
    assert cli_views.follow_log(job, None, sleep=job.sleep, clock=lambda: job.now) is JobState.COMPLETED
    out = capsys.readouterr()
    assert out.out == "a\nb\nc\nd\ne\nf\npartial"  # the last, unfinished line is printed once the job ended
    assert "job 7 ended: COMPLETED" in out.err
    assert job.reads == 16  # one read every 2 s: at 0, 2, ..., 30 s, the last after Slurm said it ended
    assert job.state_calls == 4  # Slurm asked at 0, 10, 20, 30 s only


def test_follow_beside_a_watch_reads_the_end_it_records_and_never_asks_slurm(capsys):
    job = FakeJob(["a\n", "b\n"] + [""] * 20, end_after_s=10, watched=True)
    assert cli_views.follow_log(job, None, sleep=job.sleep, clock=lambda: job.now) is JobState.COMPLETED
    assert capsys.readouterr().out == "a\nb\n" and job.state_calls == 0


class LateLogJob(FakeJob):
    """The job makes its log between the first ``tail`` (which fails) and the check whether it exists."""

    @property
    def fs(self):
        return SimpleNamespace(transport=self.transport, exists=lambda p: self.reads >= 1)


def test_follow_reads_again_when_the_log_appears_between_the_read_and_the_check(capsys):
    job = LateLogJob(["a\n", "b\n"] + [""] * 10, end_after_s=10)
    assert cli_views.follow_log(job, None, sleep=job.sleep, clock=lambda: job.now) is JobState.COMPLETED
    assert capsys.readouterr().out == "a\nb\n"


def test_follow_with_lines_starts_from_the_last_n(capsys):
    job = FakeJob(["a\nb\nc\nd\n", "e\n"] + [""] * 5, end_after_s=10)
    job.reads = 1  # the log exists from the first read
    cli_views.follow_log(job, 2, sleep=job.sleep, clock=lambda: job.now)
    assert capsys.readouterr().out == "c\nd\ne\n"


# -- on the lab -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def done(repo: LabRepo) -> dict:
    """The train job, submitted with --wait: its JSON."""
    r = repo.submit("pkg.train:train", "--arg", "lr=0.5", "--arg", "steps=4", "--wait", preset="GPU1")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.lab
def test_submit_wait_json_completes(done):
    assert done["state"] == "COMPLETED" and done["status"] == "completed" and done["exit_code"] == "0:0"
    assert isinstance(done["job_id"], int) and done["run_id"].startswith("train-")
    assert done["log"].endswith(f"/logs/{done['run_id']}_{done['job_id']}.out")


@pytest.mark.lab
def test_logs_show_what_the_function_logged(done):
    r = invoke("logs", done["run_id"], "--run-as", LAB_USER)
    assert r.exit_code == 0, r.output
    assert "lr=0.5 steps=4" in r.stdout and "finished" in r.stdout
    r = invoke("logs", str(done["job_id"]), "-n", "1", "--run-as", LAB_USER)
    assert r.exit_code == 0 and r.stdout.count("\n") == 1 and "finished" in r.stdout


@pytest.mark.lab
def test_status_by_job_id_and_run_id(done):
    r = invoke("status", str(done["job_id"]), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["run_id"], got["state"], got["exit_code"]) == (done["run_id"], "COMPLETED", "0:0")
    r = invoke("status", done["run_id"], "--cluster", "lab", "--run-as", LAB_USER)
    assert r.exit_code == 0 and f"job {done['job_id']} (run {done['run_id']}) on lab: COMPLETED" in r.stdout


@pytest.mark.lab
def test_ls_lists_the_run_with_its_final_state(done):
    r = invoke("ls", "--json", "--run-as", LAB_USER)
    assert r.exit_code == 0, r.output
    rows = {row["run_id"]: row for row in json.loads(r.stdout)}
    assert rows[done["run_id"]]["state"] == "COMPLETED" and rows[done["run_id"]]["job_id"] == done["job_id"]
    r = invoke("ls", "--cluster", "lab", "--run-as", LAB_USER)
    assert r.exit_code == 0
    line = next(ln for ln in r.stdout.splitlines() if done["run_id"] in ln)
    assert str(done["job_id"]) in line and "COMPLETED" in line and done["log"] in line


@pytest.mark.lab
def test_ls_makes_one_squeue_and_at_most_one_sacct(repo, user_slurm, monkeypatch, store_path):
    wait_until("the poller of the module's earlier waits to end", lambda: not polled(store_path, "lab"), timeout=60)
    runs = []
    for lr in ("0.25", "0.125"):  # two jobs that end without anyone waiting on them: not final in the store
        r = repo.submit("pkg.train:train", "--arg", f"lr={lr}")
        assert r.exit_code == 0, r.output
        runs.append(json.loads(r.stdout))
    ids = [j["job_id"] for j in runs]
    wait_until(
        "both jobs to leave the queue",
        lambda: not [q for q in user_slurm.squeue(job_ids=ids) if q.state.is_active],
        timeout=120,
    )
    # slurmdbd records an end a moment after the queue lets the job go (until then ls shows no state)
    wait_until(
        "accounting to record both ends",
        lambda: len([a for a in user_slurm.sacct(ids) if a.step is None and a.state.is_terminal]) == 2,
        timeout=60,
    )

    calls: list[str] = []
    real_run = LocalTransport.run

    def counting(self, argv, **kw):
        calls.append(argv[0])
        return real_run(self, argv, **kw)

    monkeypatch.setattr(LocalTransport, "run", counting)
    r = invoke("ls", "--json", "--run-as", LAB_USER)
    assert r.exit_code == 0, r.output
    rows = {row["job_id"]: row for row in json.loads(r.stdout)}
    assert all(rows[i]["state"] == "COMPLETED" for i in ids), rows
    assert calls == ["squeue", "sacct", "sh"], calls  # sh: both ends into their job.json, one command
    with Store(store_path) as store:  # ls recorded the final states it learned, in the store and job.json
        for i in ids:
            rec = store.get("lab", i)
            assert rec.status == "completed" and rec.job_json_at is not None
            assert json.loads((Path(rec.bundle_dir) / "job.json").read_text())["status"] == "completed"

    calls.clear()
    r = invoke("ls", "--json", "--run-as", LAB_USER)
    assert calls.count("squeue") == 1 and calls.count("sacct") <= 1 and "sh" not in calls, calls
    assert all(row["state"] == "COMPLETED" for row in json.loads(r.stdout) if row["job_id"] in ids)


@pytest.mark.lab
def test_failed_job_with_wait_exits_6(repo):
    r = repo.submit("pkg.train:boom", "--wait")
    assert r.exit_code == cli_jobs.JOB_NOT_COMPLETED == 6, r.output
    got = json.loads(r.stdout)
    assert got["state"] == "FAILED" and got["status"] == "failed"
    r = invoke("logs", got["run_id"], "--run-as", LAB_USER)
    assert "ValueError: boom" in r.stdout


@pytest.mark.lab
def test_cancel_a_running_job(repo, user_slurm):
    r = repo.submit("pkg.train:sleepy", "--arg", "seconds=300")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    wait_until(
        "the sleepy job to run",
        lambda: (
            json.loads(invoke("status", job["run_id"], "--run-as", LAB_USER, "--json").stdout)["state"] == "RUNNING"
        ),
    )
    r = invoke("cancel", job["run_id"], "--run-as", LAB_USER, "--json")
    assert r.exit_code == 0, r.output
    said = json.loads(r.stdout)
    assert said["cancelled"] is True and said["ended"] == "CANCELLED"  # it waited for the end it caused
    jj = json.loads((Path(job["log"]).parent / "bundles" / str(job["job_id"]) / "job.json").read_text())
    assert jj["status"] == "cancelled" and jj["slurm_state"].startswith("CANCELLED") and jj["recorded_at_utc"]
    final = wait_until(
        "the job to be CANCELLED",
        lambda: (
            (s := json.loads(invoke("status", str(job["job_id"]), "--run-as", LAB_USER, "--json").stdout))["state"]
            == "CANCELLED"
            and s
        ),
    )
    assert final["status"] == "cancelled"
    r = invoke("cancel", job["run_id"], "--run-as", LAB_USER)  # again: nothing left to cancel
    assert r.exit_code == 0 and "already ended (CANCELLED)" in r.stdout


@pytest.mark.lab
def test_cancel_refuses_a_job_roach_did_not_submit(user_slurm, jobs):
    other = user_slurm.sbatch(["--output=/dev/null"], "#!/bin/bash\nsleep 120\n")
    jobs.append(other)
    r = invoke("cancel", str(other), "--run-as", LAB_USER)
    assert r.exit_code == 2 and "no job id or run id" in r.stderr
    assert [q for q in user_slurm.squeue(job_ids=[other]) if q.state.is_active]  # untouched


@pytest.mark.lab
def test_logs_follow_prints_lines_as_they_come_then_exits(repo, monkeypatch):
    monkeypatch.setattr(cli_views, "STATE_POLL_S", 3.0)
    r = repo.submit("pkg.train:chatty", "--arg", "n=4")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    r = invoke("logs", job["run_id"], "-f", "--run-as", LAB_USER)
    assert r.exit_code == 0, r.output
    ticks = [ln for ln in r.stdout.splitlines() if "tick" in ln]
    assert [t.rsplit(" ", 1)[-1] for t in ticks] == ["0", "1", "2", "3"]
    assert f"job {job['job_id']} ended: COMPLETED" in r.stderr


@pytest.mark.lab
def test_resume_resubmits_the_run_with_its_id_and_a_completed_run_does_not_run_again(done, repo):
    r = invoke("resume", done["run_id"], "--repo-root", str(repo.work), "--run-as", LAB_USER, "--wait", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    repo.submitted.append(got["job_id"])
    assert got["run_id"] == done["run_id"] and got["job_id"] != done["job_id"] and got["state"] == "COMPLETED"
    log = invoke("logs", str(got["job_id"]), "--run-as", LAB_USER).stdout
    assert "already completed" in log and "lr=0.5" not in log
    r = invoke("resume", "no-such-run", "--repo-root", str(repo.work))
    assert r.exit_code == 2 and "no record of run no-such-run" in r.output
    # the repository moved on: the run continues at its new HEAD, and the text says so
    (repo.work / "NOTES.md").write_text("a later commit\n")
    git(repo.work, "add", "NOTES.md")
    git(repo.work, "commit", "-qm", "notes")
    git(repo.work, "push", "-q", "--receive-pack=git -c safe.directory=* receive-pack", "origin", "main")
    head = subprocess.run(
        ["git", "-C", str(repo.work), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    r = invoke(
        "resume", done["run_id"], "--repo-root", str(repo.work), "--run-as", LAB_USER, "--python-env", "venv", "--wait"
    )
    assert r.exit_code == 0, r.output
    assert f"code: commit {head[:12]}, the repository's HEAD; its last job ran {got['commit'][:12]}" in r.stdout
    assert got["commit"] == done["commit"] != head
    with Store() as store:
        bundle = Path(store.latest_for_run(done["run_id"]).bundle_dir)
    assert json.loads((bundle / "job.json").read_text())["python_env"]["source"] == "asked"  # --python-env, not HEAD's
