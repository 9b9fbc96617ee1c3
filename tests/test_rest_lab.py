"""The REST client against the lab's own slurmrestd (`roach lab up --rest`): writes act, reads equal the commands'."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from roach.errors import SlurmError, TransportError
from roach.fleet.cluster import Cluster
from roach.lab import login, up
from roach.lab.conf_files import rest_url
from roach.lab.config import LAB_USER, LabConfig
from roach.lab.overview import env_lines
from roach.launch.lost import sbatch_held
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.ops.report import report
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import in_array
from roach.scheduler.rest.client import REQUEUE_PATH, RestClient
from roach.scheduler.rest.request import Answer, DataVersion, RestApi
from roach.scheduler.rest.token import TokenSource
from roach.scheduler.ssh import SSHTransport
from roach.scheduler.transport import LocalTransport, Result
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.watcher import Watcher
from roach.workspace.doctor import doctor
from tests.conftest import slack, wait_until
from tests.support.packages import PKG as SUBMIT_PKG
from tests.support.submitting import submit_to_lab
from tests.support.watch import TRAIN, kinds

pytestmark = pytest.mark.lab
PKG = {**SUBMIT_PKG, "pkg/train.py": TRAIN}  # what the repo fixture commits

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=rest-lab\n#SBATCH --output=/dev/null\n#SBATCH --time=0:05:00\nsleep 300\n"


@dataclasses.dataclass
class Counting:
    """A transport that counts the commands it runs (the token command's runs)."""

    inner: LocalTransport
    runs: int = 0

    def run(self, argv: Sequence[str], *, input=None, timeout=None) -> Result:
        self.runs += 1
        return self.inner.run(argv, input=input, timeout=timeout)


@pytest.fixture(scope="module")
def rest_lab(lab: LabConfig) -> Iterator[LabConfig]:
    cfg = up(log=lambda *_: None, state_dir=str(lab.state), rest=True)
    yield cfg
    up(log=lambda *_: None, state_dir=str(lab.state), rest=False)


def _api(cfg: LabConfig, lifespan: int = 600) -> tuple[RestApi, Counting]:
    runs = Counting(LocalTransport(env=cfg.env(), user=LAB_USER))
    token = TokenSource(LAB_USER, ("scontrol", "token", f"lifespan={lifespan}"), transport=runs)
    return RestApi(rest_url(cfg), token), runs


@pytest.fixture
def rest(rest_lab: LabConfig) -> RestClient:
    return RestClient(LocalTransport(env=rest_lab.env(), user=LAB_USER), api=_api(rest_lab)[0])


def test_lab_env_names_the_rest_url(rest_lab: LabConfig) -> None:
    assert any(rest_url(rest_lab) in line and line.startswith("#") for line in env_lines(str(rest_lab.state)))


def test_held_submission_release_and_cancel_through_rest(rest: RestClient, user_slurm: SlurmClient) -> None:
    job = rest.sbatch(["--hold"], SCRIPT)
    try:
        [held] = user_slurm.squeue(job_ids=[job])
        assert held.reason is PendingReason.JobHeldUser and held.name == "rest-lab" and held.time_limit_s == 300
        assert rest.squeue(job_ids=[job]) == [dataclasses.replace(held, elapsed_s=0)]
        rest.release(job)
        wait_until(
            "the released job to run", lambda: [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING]
        )
        [running] = rest.squeue(job_ids=[job])
        assert running.state is JobState.RUNNING and running.nodelist
        rest.scancel([job], signal="CONT")  # a signal the job takes without ending
        assert [r.state.is_running for r in user_slurm.squeue(job_ids=[job])] == [True]  # 26.05: SIGNALING a moment
        wait_until(
            "the signalled job to run on",
            lambda: [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING],
        )
    finally:
        rest.scancel([job])
    wait_until("the cancelled job to leave the queue", lambda: not user_slurm.squeue(job_ids=[job]))
    wait_until("its accounting through REST", lambda: [a.state for a in rest.sacct([job])] == [JobState.CANCELLED])
    assert [(a.job_id, a.state) for a in rest.sacct([job])] == [(a.job_id, a.state) for a in user_slurm.sacct([job])]


def test_partitions_through_rest_say_what_scontrol_says(rest: RestClient, user_slurm: SlurmClient) -> None:
    keys = ("PartitionName", "MaxTime", "DefaultTime", "GraceTime", "PriorityTier", "Nodes", "State", "TRES")
    if rest.rest.versions()[0] is DataVersion.V0_0_38:  # later versions do not say which partition is the default
        keys += ("Default",)
    assert [{k: p[k] for k in keys} for p in rest.partitions()] == [
        {k: p[k] for k in keys} for p in user_slurm.partitions()
    ]


def test_qos_through_rest_are_sacctmgrs(rest: RestClient, user_slurm: SlurmClient) -> None:
    assert rest.qos() == user_slurm.qos()


def test_an_unknown_job_is_refused_as_scancel_refuses_it(rest: RestClient) -> None:
    with pytest.raises(SlurmError) as err:
        rest.scancel([999999])
    assert "Invalid job id" in err.value.stderr and err.value.exit_code == 5


def test_a_token_about_to_expire_is_renewed_before_the_request(rest_lab: LabConfig) -> None:
    api, runs = _api(rest_lab, lifespan=120)
    client = RestClient(LocalTransport(), api=api)
    client.squeue()
    assert runs.runs == 1
    client.squeue()
    assert runs.runs == 1  # the token is kept while it lasts
    api.clock = lambda: time.time() + 90  # 30 s left: under RENEW_BEFORE_S
    client.squeue()
    assert runs.runs == 2


def _forged(user: str) -> str:
    """A JWT of the right form for ``user``, unexpired, signed with no key slurmctld has."""
    claims = base64.urlsafe_b64encode(json.dumps({"exp": int(time.time()) + 3600, "sun": user}).encode())
    return f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{claims.decode().rstrip('=')}.c2lnbmVkLWJ5LW5vYm9keQ"


def test_a_refused_token_is_renewed_once_where_a_command_makes_them(rest_lab: LabConfig, shared_tmp: Path) -> None:
    marker = shared_tmp / "made-one"
    program = f'if [ -e "$0" ]; then scontrol token lifespan=600; else : > "$0"; echo SLURM_JWT={_forged(LAB_USER)}; fi'
    runs = Counting(LocalTransport(env=rest_lab.env(), user=LAB_USER))
    token = TokenSource(LAB_USER, ("sh", "-c", program, str(marker)), transport=runs)
    client = RestClient(LocalTransport(), api=RestApi(rest_url(rest_lab), token))
    client.squeue()  # the forged token is refused, the command makes a real one, the read goes through
    assert runs.runs == 2


def test_a_refused_token_file_says_how_to_write_a_fresh_one(rest_lab: LabConfig, tmp_path: Path) -> None:
    f = tmp_path / "jwt"
    f.write_text(f"SLURM_JWT={_forged(LAB_USER)}\n")
    f.chmod(0o600)
    client = RestClient(LocalTransport(), retries=0, api=RestApi(rest_url(rest_lab), TokenSource(LAB_USER, file=f)))
    with pytest.raises(SlurmError) as err:
        client.squeue()
    assert "scontrol token" in (err.value.hint or "") and _forged(LAB_USER) not in str(err.value)


def test_an_unreachable_rest_url_is_a_transport_error_after_the_retries(rest_lab: LabConfig) -> None:
    api, _ = _api(rest_lab)
    closed = dataclasses.replace(api, url=rest_url(rest_lab).rsplit(":", 1)[0] + ":9")
    slept: list[float] = []
    client = RestClient(LocalTransport(), api=closed, sleep=slept.append)
    with pytest.raises(TransportError) as err:
        client.squeue()
    assert "cannot reach slurmrestd" in err.value.message and err.value.exit_code == 4
    assert len(slept) == client.retries


def _answers(client: RestClient) -> list[tuple[str, dict, Answer]]:
    """Each request the client sends from here on: (its path, its query, slurmrestd's answer)."""
    seen: list[tuple[str, dict, Answer]] = []
    send = client.rest.request

    def kept(method, path, **kw):
        answer = send(method, path, **kw)
        seen.append((path, dict(kw.get("query") or {}), answer))
        return answer

    client.rest.request = kept  # type: ignore[method-assign]
    return seen


def test_show_job_through_rest_says_what_scontrol_says(rest: RestClient, user_slurm: SlurmClient) -> None:
    job = user_slurm.sbatch(["--hold", "--nodelist=n1", "--output=/dev/null", "--job-name=rest-show"], SCRIPT)
    try:
        shown, truth = rest.show_job(job), user_slurm.show_job(job)
        assert shown and truth and shown["ReqNodeList"] == "n1" and shown["JobState"] == "PENDING"
        assert shown == {k: truth[k] for k in shown}
    finally:
        user_slurm.scancel([job])
    assert rest.show_job(999999) is None


def test_requeue_through_rest_where_slurmrestd_offers_it(rest: RestClient, user_slurm: SlurmClient) -> None:
    job = user_slurm.sbatch(["--output=/dev/null", "--job-name=rest-requeue", "--requeue"], SCRIPT)
    try:
        wait_until("the job to run", lambda: [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING])
        if not rest.rest.offers(REQUEUE_PATH):
            with pytest.raises(SlurmError) as err:
                rest.requeue(job, hold=True)
            assert "v0.0.45" in err.value.stderr and "ssh" in (err.value.hint or "")
            assert [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING]
            return
        rest.requeue(job, hold=True)

        def requeued_held() -> bool:
            [r] = user_slurm.squeue(job_ids=[job])
            return r.state is JobState.PENDING and r.restart_count == 1 and "held" in r.reason_text

        wait_until("the job requeued and held", requeued_held)
        with pytest.raises(SlurmError) as pending:
            rest.requeue(job)  # a pending job cannot be requeued: slurmctld's refusal, as scontrol's
        assert "pending" in pending.value.stderr.lower()
    finally:
        user_slurm.scancel([job])


def test_a_signal_to_the_batch_step_only_through_rest(rest: RestClient, user_slurm: SlurmClient) -> None:
    script = "#!/bin/bash\ntrap 'exit 3' USR1\nsleep 300 &\nwait\n"
    job = user_slurm.sbatch(["--output=/dev/null", "--job-name=rest-batch"], script)
    try:
        wait_until("the job to run", lambda: [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING])
        if rest.rest.versions()[0] is DataVersion.V0_0_38:
            with pytest.raises(SlurmError) as err:
                rest.scancel([job], signal="USR1", batch=True)
            assert "v0.0.38" in err.value.stderr and "ssh" in (err.value.hint or "")
            return
        rest.scancel([job], signal="USR1", batch=True)  # the batch shell traps it and exits 3
        wait_until("the job to end", lambda: not user_slurm.squeue(job_ids=[job]))
        wait_until("its end in accounting", lambda: [a.exit_code for a in user_slurm.sacct([job])] == [3])
    finally:
        user_slurm.scancel([job])


def test_accounting_through_rest_asks_slurmdbd_for_the_given_ids_only(rest: RestClient, user_slurm: SlurmClient):
    script = "#!/bin/bash\ntrue\n"
    jobs = [user_slurm.sbatch(["--output=/dev/null", f"--job-name=rest-acct-{i}"], script) for i in range(3)]
    ended = lambda: [a.state for a in user_slurm.sacct(jobs)] == [JobState.COMPLETED] * 3  # noqa: E731
    wait_until("all three in accounting", ended)
    seen = _answers(rest)
    asked = [*jobs[:2], 999999]  # two of them, and one slurmdbd never saw
    got = sorted((a.job_id, a.state) for a in rest.sacct(asked))
    assert got == [(str(j), JobState.COMPLETED) for j in jobs[:2]]
    [(query, answer)] = [(q, a) for path, q, a in seen if "/slurmdb/" in path]
    assert sorted(j["job_id"] for j in answer.body["jobs"]) == jobs[:2], query


def test_job_states_through_rest_ask_for_the_given_jobs_only(rest: RestClient) -> None:
    if rest.rest.versions()[0] is DataVersion.V0_0_38:
        pytest.skip("v0.0.38 has no jobs/state")
    single, other = rest.sbatch(["--hold"], SCRIPT), rest.sbatch(["--hold"], SCRIPT)
    array = rest.sbatch(["--hold", "--array=0-2"], SCRIPT)
    try:
        seen = _answers(rest)
        light = rest.job_states([single, f"{array}_1", 999999])
        assert sorted(map(str, (r.ref for r in light))) == sorted([str(single), f"{array}_1"])
        assert all(r.state is JobState.PENDING for r in light)
        [(path, query, answer)] = seen
        assert path.endswith("/jobs/state"), path
        assert {j["job_id"] for j in answer.body["jobs"]} == {str(single), *(f"{array}_{t}" for t in range(3))}
    finally:
        rest.scancel([single, other, array])


def test_an_unchanged_queue_is_not_sent_again(rest: RestClient, user_slurm: SlurmClient) -> None:
    if rest.rest.versions()[0] is DataVersion.V0_0_38:
        pytest.skip("v0.0.38 does not say when slurmctld's job list last changed")
    job = rest.sbatch(["--hold"], SCRIPT)
    try:
        first = rest.squeue(job_ids=[job])
        seen = _answers(rest)

        def unchanged() -> bool:  # another job of the lab's may change between two reads: read again
            seen.clear()
            return rest.squeue(job_ids=[job]) == first and seen[0][2].body.get("jobs") == []

        wait_until("a read of the unchanged queue answered with no job", unchanged)
        assert "update_time" in seen[0][1] and [r.job_id for r in first] == [str(job)]
        rest.release(job)  # a change: the next read is the whole list again
        wait_until(
            "the released job to run", lambda: [r.state for r in rest.squeue(job_ids=[job])] == [JobState.RUNNING]
        )
    finally:
        rest.scancel([job])


# the header every JWT `scontrol token` makes begins with: {"alg":"HS256","typ":"JWT"}
JWT_HEAD = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"


def _rest_lab_cluster(cfg: LabConfig, **changes) -> Cluster:
    """The lab reached through its slurmrestd as its user; its files on this machine (shared)."""
    rest = {"rest_url": rest_url(cfg), "token_command": ("scontrol", "token", "lifespan=600"), "shared_fs": True}
    return LAB.with_(run_as=LAB_USER, **{**rest, **changes})


def _no_token_in(*roots) -> None:
    for root in roots:
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert JWT_HEAD.encode() not in path.read_bytes(), f"a JWT in {path}"


@pytest.mark.usefixtures("rest_lab")
def test_submit_wait_and_cancel_through_rest_write_no_token(rest_lab, repo, store, roots) -> None:
    cluster = _rest_lab_cluster(rest_lab)
    job = submit_to_lab(repo, store, roots, "pkg.jobs:hello", args={"who": "rest"}, cluster=cluster)
    rec = job.wait(timeout=slack(120))
    assert rec.state is JobState.COMPLETED, job.log()
    assert job.status().status == "completed" and "hello rest from n" in job.log()
    long = submit_to_lab(repo, store, roots, "pkg.jobs:boom", cluster=cluster, name="rest-cancel")
    wait_until("the job to run", lambda: long.status().status == "running", slack(60))
    long.cancel()
    assert long.wait(timeout=slack(60)).state is JobState.CANCELLED
    _no_token_in(Path(roots["log_root"]).parent, store.path.parent)


def test_doctor_checks_token_url_versions_and_a_held_submission(rest_lab: LabConfig) -> None:
    checks = {c.name: c for c in doctor(_rest_lab_cluster(rest_lab))}
    assert list(checks) == ["rest-token", "rest-url", "rest-versions", "rest-submit", "files"]
    assert all(c.ok for c in checks.values()), checks
    assert (
        any(v.value in checks["rest-versions"].detail for v in DataVersion) and LAB_USER in checks["rest-token"].detail
    )
    assert JWT_HEAD not in str(checks)


def test_doctor_stops_at_an_unreachable_url_and_a_file_others_may_read(rest_lab: LabConfig, tmp_path) -> None:
    closed = doctor(_rest_lab_cluster(rest_lab, rest_url=rest_url(rest_lab).rsplit(":", 1)[0] + ":9"))
    assert [(c.name, c.ok) for c in closed] == [("rest-token", True), ("rest-url", False)]
    assert "cannot reach slurmrestd" in closed[-1].detail
    token = tmp_path / "token"
    token.write_text("SLURM_JWT=a.b.c\n")
    token.chmod(0o644)
    loose = doctor(_rest_lab_cluster(rest_lab, token_command=(), token_file=str(token)))
    assert [(c.name, c.ok) for c in loose] == [("rest-token", False)]
    assert loose[0].hint == f"chmod 600 {token}"


def test_a_submission_to_a_rest_cluster_without_files_is_refused_and_queues_nothing(
    rest_lab, repo, store, roots, user_slurm: SlurmClient
) -> None:
    before = {r.job_id for r in user_slurm.squeue()}
    with pytest.raises(TransportError) as err:
        submit_to_lab(repo, store, roots, "pkg.jobs:hello", cluster=_rest_lab_cluster(rest_lab, shared_fs=False))
    assert err.value.exit_code == 4 and "docs/rest.md" in (err.value.hint or "")
    assert {r.job_id for r in user_slurm.squeue()} == before and not store.unfinished("lab")


def test_a_cluster_with_neither_ssh_nor_a_shared_file_system_refuses_files(rest_lab: LabConfig) -> None:
    client = _rest_lab_cluster(rest_lab, shared_fs=False).client()
    with pytest.raises(TransportError) as err:
        client.transport.run(["mkdir", "-p", "/tmp/x"])
    assert "shared_fs" in (err.value.hint or "") and "docs/rest.md" in (err.value.hint or "")


def test_watch_rounds_through_rest_are_a_fixed_few_requests(rest_lab, repo, store, roots) -> None:
    cluster = _rest_lab_cluster(rest_lab)
    args = {"steps": 15, "step_s": 0.3}
    job = submit_to_lab(repo, store, roots, "pkg.train:train", args, resources=GPU1, cluster=cluster)
    client = cluster.client()
    assert isinstance(client, RestClient)
    requests: list[str] = []
    send = client.rest.request

    def counted(method, path, **kw):
        requests.append(f"{method} {path}")
        return send(method, path, **kw)

    client.rest.request = counted  # type: ignore[method-assign]
    w = Watcher(cluster, client, store, interval_s=1.0, heartbeat_s=1e9)
    rounds: list[tuple[list[str], list[str]]] = []
    deadline = time.monotonic() + slack(120)
    try:
        while not w.finished:
            assert time.monotonic() < deadline, rounds
            before = len(requests)
            said = w.round()
            rounds.append((requests[before:], kinds(said)))
            time.sleep(1.0)
    finally:
        if not w.finished:
            job.cancel()
    said = [k for _, ks in rounds for k in ks]
    assert said.count("started") == 1 and said.count("finished") == 1 and said[-1] == "queue_empty", rounds
    # after the first round (which also reads the release: capabilities), a round is one GET of the queue; from
    # the round that no longer sees the run in the queue until accounting has its end, one GET of accounting more
    queue = [r[0] for r, _ in rounds[1:]]
    assert all(q.endswith("/jobs") and "/slurm/" in q for q in queue), rounds
    more = [r[1:] for r, _ in rounds[1:] if len(r) > 1]
    assert more and all(len(m) == 1 and "/slurmdb/" in m[0] for m in more), rounds
    [ending] = [r for r, ks in rounds if "finished" in ks]
    assert len(ending) == 2 and "/slurmdb/" in ending[1], rounds
    assert len(more) <= 3, rounds  # accounting records an end within a round or two
    assert store.get("lab", job.job_id).status == "completed"
    _no_token_in(Path(roots["log_root"]).parent, store.path.parent)


# -- the client's lab tests (tests/test_slurmcli.py), through each way in ------------------------------------
@pytest.fixture(params=["local", "ssh", "rest"])
def way(request: pytest.FixtureRequest, rest_lab: LabConfig) -> SlurmClient:
    """The lab's user's client: Slurm's commands here, over SSH to the login host, or through slurmrestd."""
    if request.param == "local":
        return SlurmClient(LocalTransport(env=rest_lab.env(), user=LAB_USER))
    if request.param == "ssh":
        if not rest_lab.hosts:
            pytest.skip("the single-host lab has no login host")
        return SlurmClient(SSHTransport(login.alias(rest_lab), env=rest_lab.env()))
    return RestClient(LocalTransport(env=rest_lab.env(), user=LAB_USER), api=_api(rest_lab)[0])


def test_an_invalid_qos_is_a_slurm_error_with_its_hint_and_submits_nothing(way: SlurmClient) -> None:
    name = f"roach-invalid-qos-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SlurmError) as exc:
        way.sbatch(["--qos=nosuch", f"--job-name={name}", "--output=/dev/null"], "#!/bin/bash\ntrue\n")
    assert type(exc.value) is SlurmError and "Invalid qos specification" in exc.value.stderr
    assert "sacctmgr" in (exc.value.hint or "")
    assert [r for r in way.squeue(user=LAB_USER) if r.name == name] == []


def test_job_states_and_the_queue_agree_on_held_jobs_and_an_array(way: SlurmClient) -> None:
    opts = ["--hold", "--output=/dev/null", f"--job-name=roach-states-{uuid.uuid4().hex[:8]}"]
    single = way.sbatch(opts, "#!/bin/bash\ntrue\n")
    array = way.sbatch([*opts, "--array=0-2"], "#!/bin/bash\ntrue\n")
    try:
        light = way.job_states([single, array, f"{array}_1", 999999])
        full = way.squeue(job_ids=[single, array])
        assert {r.ref.job for r in light} == {single, array} and all(r.state is JobState.PENDING for r in light)
        assert {r.ref.job for r in full} == {single, array}
        assert any(r.ref.job == array and (r.ref.task == 1 or in_array(r.ref.tasks, 1)) for r in light)
    finally:
        way.scancel([single, array])
    assert way.job_states([999999]) == []


def test_a_lost_submit_answer_through_rest_is_found_and_cancelled(rest_lab: LabConfig, store, shared_tmp: Path) -> None:
    """slurmrestd queued the held job, its answer never came back: the sweep finds the job and cancels it."""
    cluster = _rest_lab_cluster(rest_lab)
    client = cluster.client()
    assert isinstance(client, RestClient)
    send = client.rest.request

    def lost(method, path, **kw):
        answer = send(method, path, **kw)
        if method == "POST":
            raise TransportError("cannot reach slurmrestd: timed out", (f"{method} {path}",))
        return answer

    client.rest.request = lost  # type: ignore[method-assign]
    prefix = f"{shared_tmp}/lost-"
    script = f"#!/bin/bash\n#SBATCH --job-name=rest-lost\n#SBATCH --output={prefix}%j.out\nsleep 60\n"
    with pytest.raises(TransportError) as err:
        sbatch_held(client, store, cluster, script, prefix)
    assert "was cancelled: nothing is left" in err.value.message
    assert not [r for r in client.squeue() if r.name == "rest-lost" and r.state.is_active]


@pytest.mark.usefixtures("rest_lab")
def test_report_through_rest_reads_the_attempts_sacct_lists(rest_lab, repo, store, roots, tmp_path, monkeypatch):
    job = submit_to_lab(
        repo, store, roots, "pkg.jobs:hello", args={"who": "ledger"}, cluster=_rest_lab_cluster(rest_lab)
    )
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED, job.log()
    commands_client = SlurmClient(LocalTransport(env=rest_lab.env(), user=LAB_USER))
    wait_until(  # slurmdbd records the attempt's eligible time a moment after the job's end
        "accounting to record the attempt whole",
        lambda: [a.eligible is not None for a in commands_client.allocations([job.job_id])] == [True],
        timeout=slack(30),
    )
    toml = tmp_path / "clusters.toml"  # the store names the cluster; clusters.toml says to reach it through REST
    toml.write_text(
        f"[clusters.lab]\nrest_url = '{rest_url(rest_lab)}'\n"
        "token_command = ['scontrol', 'token', 'lifespan=600']\nshared_fs = true\n"
    )
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    commands: list[str] = []
    real_run = SlurmClient.run
    monkeypatch.setattr(
        SlurmClient, "run", lambda self, argv, **kw: commands.append(argv[0]) or real_run(self, argv, **kw)
    )
    rep = report(job.run_id, store=store, run_as=LAB_USER)
    monkeypatch.undo()
    assert commands == []  # no Slurm command: slurmdbd's jobs over HTTP
    ((attempt,),) = [r.attempts for r in rep.runs]
    (truth,) = commands_client.allocations([job.job_id])
    assert (attempt.gpus, attempt.elapsed_s, attempt.state) == (truth.gpus, truth.record.elapsed_s, truth.record.state)
    assert attempt.start == truth.record.start_time.astimezone().timestamp() and attempt.nodes == truth.record.nodelist
    assert attempt.pending_s == (truth.record.start_time - truth.eligible).total_seconds()
