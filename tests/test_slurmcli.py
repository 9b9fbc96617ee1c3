"""SlurmClient's own logic over a MockTransport, LocalTransport on real processes, one check on the lab.

The MockTransport (roach.scheduler.mock_transport) replays the answers a test gives it; the stderr it returns is
what real Slurm 22.05 printed on the lab (tests/data/*.stderr.txt, the controller made unreachable by pointing
a copy of slurm.conf at a closed port) or Slurm's own wording where the lab cannot produce it (a socket timeout).
"""

from __future__ import annotations

import os
import pwd
import uuid
from pathlib import Path

import pytest

from roach.errors import SlurmError, SlurmTransientError, TransportError
from roach.lab.config import LAB_USER
from roach.model.job_state import JobState
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.mock_transport import MockTransport, UnexpectedCommand
from roach.scheduler.parse import in_array
from roach.scheduler.queue_states import parse_squeue_states
from roach.scheduler.transport import LocalTransport, Result, Transport
from tests.conftest import wait_until
from tests.support.slurm import client

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_bytes().decode()


CONTROLLER_DOWN = data("squeue_lab_22.05_controller_down.stderr.txt")  # slurm_load_jobs error: Unable to contact ...
SOCKET_TIMEOUT = "slurm_load_jobs error: Socket timed out on send/recv operation\n"
DBD_DOWN = data("sacct_lab_22.05_slurmdbd_down.stderr.txt")
INVALID_QOS = data("sbatch_lab_22.05_invalid_qos.stderr.txt")
INVALID_ID = data("squeue_lab_22.05_unknown_id.stderr.txt")


def test_the_mock_transport_is_a_transport_that_records_and_answers_as_the_real_one_does():
    t = MockTransport({"squeue": "out\n", ("scontrol", "release"): (1, "", INVALID_ID), "scontrol": (0, "", "")})
    assert isinstance(t, Transport)
    assert t.run(["squeue", "--me"]) == Result(("squeue", "--me"), 0, "out\n", "")
    assert t.run(["scontrol", "release", 7], input="x") == Result(("scontrol", "release", "7"), 1, "", INVALID_ID)
    assert t.run(("scontrol", "hold", "7")).ok  # the longest prefix wins; a shorter one answers the rest
    assert [(c.argv, c.input) for c in t.calls] == [
        (("squeue", "--me"), None),
        (("scontrol", "release", "7"), "x"),
        (("scontrol", "hold", "7"), None),
    ]
    with pytest.raises(UnexpectedCommand, match="sacct"):
        t.run(["sacct"])
    with pytest.raises(TransportError, match="empty command"):
        t.run([])
    real = MockTransport({"false": (0, "overridden", "")}, inner=LocalTransport())
    assert real.run(["false"]).stdout == "overridden" and real.run(["sh", "-c", "echo hi"]).stdout == "hi\n"
    assert real.commands() == ["false", "sh"]
    gone = MockTransport(lambda argv, input: TransportError("ssh: connect to host login: refused", list(argv)))
    with pytest.raises(TransportError, match="refused"):
        gone.run(["squeue"])
    replay = MockTransport.replay([(0, "a", ""), "b"])
    assert [replay.run(["x"]).stdout, replay.run(["y"]).stdout] == ["a", "b"]
    with pytest.raises(UnexpectedCommand, match="no answer left"):
        replay.run(["z"])


# -- retries -----------------------------------------------------------------------------------------
def test_transient_errors_are_retried_with_doubling_backoff():
    slurm, tr, sleeps = client(
        (1, "", CONTROLLER_DOWN),
        (1, "", SOCKET_TIMEOUT),
        (0, data("squeue_lab_22.05_two_nodes.txt"), ""),
        backoff_s=0.5,
    )
    recs = slurm.squeue()
    assert [r.job_id for r in recs] == ["81"]
    assert sleeps == [0.5, 1.0]
    assert len(tr.calls) == 3 and len(set(tr.argvs)) == 1  # the same command each time


def test_transient_errors_are_bounded_then_raised_with_command_code_and_stderr():
    slurm, tr, sleeps = client(*[(1, "", CONTROLLER_DOWN)] * 3, retries=2, backoff_s=1.0)
    with pytest.raises(SlurmTransientError) as exc:
        slurm.squeue(user="roachlab")
    err = exc.value
    assert len(tr.calls) == 3 and sleeps == [1.0, 2.0]
    assert err.argv == tr.argvs[0] and err.argv[0] == "squeue"
    assert err.returncode == 1 and err.stderr == CONTROLLER_DOWN
    assert "squeue failed (exit 1): slurm_load_jobs error: Unable to contact slurm controller" in str(err)
    assert "roach lab status" in err.hint


def test_sacct_retries_while_slurmdbd_is_unreachable():
    slurm, tr, sleeps = client((1, "", DBD_DOWN), (0, data("sacct_X_lab_22.05_ended.txt"), ""))
    recs = slurm.sacct([57, 58])
    assert [r.job_id for r in recs][:2] == ["57", "58"] and sleeps == [1.0] and len(tr.calls) == 2


def test_no_retries_means_one_attempt():
    slurm, tr, sleeps = client((1, "", SOCKET_TIMEOUT), retries=0)
    with pytest.raises(SlurmTransientError):
        slurm.nodes()
    assert len(tr.calls) == 1 and sleeps == []


def test_a_non_transient_error_is_raised_at_once():
    stderr = data("sacct_lab_22.05_invalid_time.stderr.txt")  # Invalid time specification (pos=0): garbage
    slurm, tr, sleeps = client((1, "", stderr))
    with pytest.raises(SlurmError) as exc:
        slurm.sacct(user="roachlab", since="garbage")
    assert type(exc.value) is SlurmError and len(tr.calls) == 1 and sleeps == []
    assert exc.value.stderr == stderr and exc.value.hint is None
    assert str(exc.value) == "sacct failed (exit 1): Invalid time specification (pos=0): garbage"


@pytest.mark.parametrize(
    "stderr_file,hint_word",
    [
        ("sbatch_lab_22.05_invalid_qos.stderr.txt", "sacctmgr"),
        ("sbatch_lab_22.05_invalid_account.stderr.txt", "sacctmgr show assoc"),
        ("sbatch_lab_22.05_invalid_partition.stderr.txt", "sinfo -s"),
        ("sbatch_lab_22.05_too_many_gpus.stderr.txt", "ask for less per node"),
    ],
)
def test_sbatch_rejections_raise_slurm_error_with_what_to_do(stderr_file, hint_word):
    stderr = data(stderr_file)
    slurm, tr, sleeps = client((1, "", stderr))
    with pytest.raises(SlurmError) as exc:
        slurm.sbatch(["--qos=nosuch"], "#!/bin/bash\ntrue\n")
    err = exc.value
    assert type(err) is SlurmError and len(tr.calls) == 1 and sleeps == []
    assert err.stderr == stderr and err.returncode == 1 and err.argv[:2] == ("sbatch", "--parsable")
    assert hint_word in err.hint
    assert str(err).splitlines()[0] == f"sbatch failed (exit 1): {stderr.strip().splitlines()[-1]}"


# -- writes are never retried --------------------------------------------------------------------------
def test_sbatch_is_not_retried_even_when_the_error_is_transient():
    slurm, tr, sleeps = client((1, "", data("sbatch_lab_22.05_controller_down.stderr.txt")))
    with pytest.raises(SlurmTransientError):
        slurm.sbatch([], "#!/bin/bash\ntrue\n")
    assert len(tr.calls) == 1 and sleeps == []


def test_scancel_is_not_retried_even_when_the_error_is_transient():
    stderr = data("scancel_lab_22.05_controller_down.stderr.txt")
    slurm, tr, sleeps = client((8, "", stderr))  # scancel exits 8 here, not 1
    with pytest.raises(SlurmTransientError) as exc:
        slurm.scancel([1])
    assert len(tr.calls) == 1 and sleeps == [] and exc.value.returncode == 8


@pytest.mark.parametrize(
    "call,argv",
    [
        (lambda s: s.requeue(80), ("scontrol", "requeue", "80")),
        (lambda s: s.requeue(80, hold=True), ("scontrol", "requeuehold", "80")),
        (lambda s: s.release(80), ("scontrol", "release", "80")),
        (lambda s: s.hold(80), ("scontrol", "hold", "80")),
    ],
)
def test_scontrol_writes_run_once(call, argv):
    slurm, tr, sleeps = client((1, "", SOCKET_TIMEOUT))
    with pytest.raises(SlurmTransientError):
        call(slurm)
    assert tr.argvs == [argv] and sleeps == []


def test_scontrol_write_on_an_unknown_job_names_sacct():
    slurm, tr, _ = client((1, "", data("scontrol_requeue_lab_22.05_invalid_id.stderr.txt")))
    with pytest.raises(SlurmError) as exc:
        slurm.requeue(999999)
    assert "sacct" in exc.value.hint


# -- what each call runs -------------------------------------------------------------------------------
def test_sbatch_sends_the_script_on_stdin_and_returns_the_id():
    slurm, tr, _ = client((0, "81\n", ""))
    script = "#!/bin/bash\necho 'it''s' \"$(hostname)\"\n"
    assert slurm.sbatch(["--job-name=a b", "--gres=gpu:1"], script) == 81
    assert [(c.argv, c.input) for c in tr.calls] == [
        (("sbatch", "--parsable", "--job-name=a b", "--gres=gpu:1"), script)
    ]


def test_squeue_argv_always_has_noheader_and_the_format():
    fmt = P.squeue_format()
    slurm, tr, _ = client(*[(0, "", "")] * 4)
    slurm.squeue()
    slurm.squeue(user="roachlab")
    slurm.squeue(all_users=True)
    slurm.squeue(job_ids=[68, "81"])
    base = ("squeue", "--noheader", "--array", "-O", fmt)
    assert tr.argvs == [(*base, "--me"), (*base, "--user", "roachlab"), base, (*base, "--jobs", "68,81")]
    assert fmt.count(P.US) == 18 and fmt.endswith(f"StartTime:{P.RS}")


def test_squeue_on_ids_that_all_left_the_controller_returns_nothing():
    slurm, tr, sleeps = client((1, "", INVALID_ID))
    assert slurm.squeue(job_ids=[999999]) == []
    assert len(tr.calls) == 1 and sleeps == []


def test_squeue_on_ids_with_another_error_raises():
    slurm, _, _ = client((1, "", "slurm_load_jobs error: Access/permission denied\n"))
    with pytest.raises(SlurmError) as exc:
        slurm.squeue(job_ids=[5])
    assert "your own jobs" in exc.value.hint


def test_squeue_on_ids_retries_an_unreachable_controller():
    slurm, tr, sleeps = client((1, "", CONTROLLER_DOWN), (0, data("squeue_lab_22.05_two_nodes.txt"), ""))
    assert [r.job_id for r in slurm.squeue(job_ids=[81])] == ["81"]
    assert len(tr.calls) == 2 and sleeps == [1.0]


def test_show_job_retries_an_unreachable_controller():
    slurm, tr, sleeps = client((1, "", CONTROLLER_DOWN), (0, data("scontrol_show_job_lab_22.05_held.txt"), ""))
    assert slurm.show_job(66)["JobState"] == "PENDING"
    assert sleeps == [1.0]


def test_sacct_argv_with_ids_adds_a_start_time():
    slurm, tr, _ = client(*[(0, "", "")] * 4)
    slurm.sacct([57, 58])
    slurm.sacct([57], since="2026-11-29T00:00:00", duplicates=True, allocations_only=False)
    slurm.sacct(user="roachlab")
    slurm.sacct(user="roachlab", since="now-1hours")
    base = ("sacct", "--noheader", "--parsable2", f"--delimiter={P.US}", f"--format={','.join(P.SACCT_FIELDS)}")
    assert tr.argvs == [
        (*base, "--jobs", "57,58", "--allocations", "--starttime", "1970-01-01"),
        (*base, "--jobs", "57", "--duplicates", "--starttime", "2026-11-29T00:00:00"),
        (*base, "--allocations", "--user", "roachlab"),
        (*base, "--allocations", "--user", "roachlab", "--starttime", "now-1hours"),
    ]


def test_scancel_with_no_ids_runs_nothing():
    slurm, tr, _ = client()
    slurm.scancel([])
    slurm.scancel(iter(()))
    assert tr.calls == []


def test_scancel_argv_names_exactly_the_ids():
    slurm, tr, _ = client((0, "", ""), (0, "", ""))
    slurm.scancel([68, "69"])
    slurm.scancel([76], signal="USR1", batch=True)
    assert tr.argvs == [("scancel", "68", "69"), ("scancel", "--signal=USR1", "--batch", "76")]


def test_show_job_reads_the_record_or_none_when_gone():
    slurm, tr, _ = client((0, data("scontrol_show_job_lab_22.05_running_gpu.txt"), ""), (1, "", INVALID_ID))
    job = slurm.show_job(58)
    assert (job["JobId"], job["JobState"], job["TresPerNode"]) == ("58", "RUNNING", "gres:gpu:1")
    assert slurm.show_job(999999) is None
    assert tr.argvs == [("scontrol", "show", "job", "-o", "58"), ("scontrol", "show", "job", "-o", "999999")]


def test_show_job_of_a_name_with_a_newline_keeps_the_whole_record():
    slurm, _, _ = client((0, data("scontrol_show_job_lab_22.05_pending_array.txt"), ""))
    job = slurm.show_job(68)
    assert (job["JobState"], job["Reason"], job["ArrayTaskId"]) == ("PENDING", "JobArrayTaskLimit", "2-3%2")


def test_reads_parse_the_captured_outputs():
    slurm, tr, _ = client(
        (0, data("sinfo_nodes_lab_22.05_mixed.txt"), ""),
        (0, data("scontrol_show_partition_lab_22.05.txt"), ""),
        (0, data("sacctmgr_show_qos_lab_22.05.txt"), ""),
        (0, data("sacctmgr_show_assoc_user_lab_22.05.txt"), ""),
    )
    assert [(n.name, n.gpus_used) for n in slurm.nodes()] == [("n1", 3), ("n2", 2)]
    assert [p["PartitionName"] for p in slurm.partitions()] == ["gpu"]
    assert {q["Name"]: q["MaxTRESPU"] for q in slurm.qos()} == {"normal": "", "low": "", "high": "gres/gpu=4"}
    assert slurm.associations("roachlab")[0]["QOS"] == "high,low,normal"
    assert tr.argvs == [
        ("sinfo", "--Node", "--noheader", "-O", PC.sinfo_format()),
        ("scontrol", "show", "partition", "-o"),
        (
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "qos",
            "format=Name,Priority,Preempt,PreemptMode,GraceTime,MaxTRESPU,MaxWall,Flags",
        ),
        (
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "format=Cluster,Account,User,Partition,QOS,DefaultQOS",
            "user=roachlab",
        ),
    ]


def test_capabilities_are_probed_once_then_cached():
    config, helptext = data("scontrol_show_config_22.05.txt"), data("squeue_help_22.05.txt")
    slurm, tr, _ = client((0, config, ""), (0, helptext, ""), (0, config, ""), (1, "", "squeue: invalid option\n"))
    caps = slurm.capabilities()
    assert caps.version == (22, 5, 8) and caps.json is True and caps.min_job_age_s == 60
    assert caps.only_job_state is False  # 22.05's squeue --help does not list it
    assert slurm.capabilities() is caps and len(tr.calls) == 2
    assert tr.argvs == [("scontrol", "show", "config"), ("squeue", "--help")]
    again = slurm.capabilities(refresh=True)
    assert again.json is False and again.version == (22, 5, 8)  # --help failing means no --json


def _probed(version: str) -> tuple[int, str, str]:
    return (0, data(f"{version}/scontrol_show_config.txt"), "")


def _help(version: str) -> tuple[int, str, str]:
    return (0, data(f"{version}/squeue_help.txt"), "")


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_job_states_use_only_job_state_where_squeue_lists_it(version):
    states = data(f"{version}/squeue_only_job_state_array.txt")
    job = parse_squeue_states(states)[0].ref.job
    slurm, tr, _ = client(_probed(version), _help(version), (0, states, ""), (0, states, ""))
    got = slurm.job_states([job])
    assert slurm.capabilities().only_job_state is True
    assert tr.argvs[2] == ("squeue", "--noheader", "--only-job-state", "--jobs", str(job))
    assert sorted((str(r.ref), r.state.name) for r in got) == [
        (f"{job}_0", "RUNNING"),
        (f"{job}_1", "RUNNING"),
        (f"{job}_[2-3]", "PENDING"),
    ]
    slurm.job_states([job, "13_1"])
    assert tr.argvs[3][-1] == f"{job},13_1" and len(tr.calls) == 4  # probed once


def test_job_states_without_only_job_state_run_the_full_squeue():
    slurm, tr, _ = client(_probed("22.05"), _help("22.05"), (0, data("22.05/squeue_two_nodes.txt"), ""))
    got = slurm.job_states([81])
    assert tr.argvs[2] == ("squeue", "--noheader", "--array", "-O", P.squeue_format(), "--jobs", "81")
    assert [r.state.name for r in got] == ["RUNNING"]


def test_job_states_fall_back_to_the_full_squeue_when_the_light_one_fails():
    # its error names no cause; the full squeue then says what is wrong (and is retried if transient)
    down = data("24.11/squeue_only_job_state_controller_down.stderr.txt")
    slurm, tr, sleeps = client(
        _probed("24.11"),
        _help("24.11"),
        (1, "", down),
        (1, "", CONTROLLER_DOWN),
        (0, data("24.11/squeue_two_nodes.txt"), ""),
    )
    got = slurm.job_states([5])
    assert [a[2] for a in tr.argvs[2:]] == ["--only-job-state", "--array", "--array"] and sleeps == [1.0]
    assert [r.state.name for r in got] == ["RUNNING"]


def test_job_states_of_no_ids_run_nothing():
    slurm, tr, _ = client()
    assert slurm.job_states([]) == [] and tr.calls == []


# -- LocalTransport on real processes ----------------------------------------------------------------
def test_a_missing_binary_is_a_transport_error():
    with pytest.raises(TransportError) as exc:
        LocalTransport().run(["roach-no-such-command-7f3a", "x"])
    assert exc.value.argv == ("roach-no-such-command-7f3a", "x")
    assert "command not found" in str(exc.value) and "slurm-client" in exc.value.hint
    assert isinstance(exc.value.__cause__, FileNotFoundError)


def test_a_timeout_is_a_transport_error():
    with pytest.raises(TransportError, match="timed out") as exc:
        LocalTransport(default_timeout=0.3).run(["sleep", "5"])
    assert exc.value.argv == ("sleep", "5")
    with pytest.raises(TransportError, match="timed out"):
        LocalTransport().run(["sleep", "5"], timeout=0.3)


def test_an_empty_command_is_a_transport_error():
    with pytest.raises(TransportError, match="empty command"):
        LocalTransport().run([])


def test_a_failing_command_is_a_result_not_an_exception():
    res = LocalTransport().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.returncode, res.stdout, res.stderr, res.ok) == (3, "out\n", "err\n", False)


def test_input_goes_to_stdin_and_without_input_stdin_is_empty():
    assert LocalTransport().run(["cat"], input="a\nb $(x)\n").stdout == "a\nb $(x)\n"
    assert LocalTransport().run(["cat"]).stdout == ""  # not the test runner's stdin


def test_hostile_arguments_reach_the_program_verbatim_and_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    args = [
        "it's",
        '"quoted"',
        f"$(touch {marker})",
        f"`touch {marker}`",
        "a b  c",
        "line1\nline2",
        f"; touch {marker}",
        "&& id",
        "*",
        "$HOME",
        "|",
        "-n",
    ]
    res = LocalTransport().run(["printf", r"%s\n", *args])
    assert res.ok and res.stdout == "".join(f"{a}\n" for a in args)
    assert not marker.exists()


def test_env_is_added_to_the_environment():
    res = LocalTransport(env={"ROACH_PROBE": "a b;$(c)"}).run(["printenv", "ROACH_PROBE"])
    assert res.stdout == "a b;$(c)\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="runuser needs root")
def test_user_runs_as_that_user_and_keeps_the_env():
    try:
        pwd.getpwnam("roachlab")
    except KeyError:
        pytest.skip("the lab user does not exist here")
    tr = LocalTransport(env={"ROACH_PROBE": "kept it"}, user="roachlab")
    assert tr.run(["id", "-un"]).stdout == "roachlab\n"
    res = tr.run(["printenv", "ROACH_PROBE"])
    assert res.stdout == "kept it\n" and res.argv[:4] == ("runuser", "-u", "roachlab", "--")


# -- on the lab ----------------------------------------------------------------------------------------
@pytest.mark.lab
def test_lab_invalid_qos_is_a_slurm_error_and_submits_nothing(user_slurm):

    name = f"roach-invalid-qos-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SlurmError) as exc:
        user_slurm.sbatch(["--qos=nosuch", f"--job-name={name}", "--output=/dev/null"], "#!/bin/bash\ntrue\n")
    err = exc.value
    assert type(err) is SlurmError and err.returncode == 1
    assert "Invalid qos specification" in err.stderr and "sacctmgr" in err.hint
    assert [r for r in user_slurm.squeue(user=LAB_USER) if r.name == name] == []
    assert [r for r in user_slurm.sacct(user=LAB_USER, since="now-1hours") if r.name == name] == []


@pytest.mark.lab
def test_lab_sacct_ignores_the_callers_time_format(user_slurm, jobs, monkeypatch):
    """A job of its own first: on a fresh lab (a worker's, in CI) sacct has no other."""
    jobs.append(user_slurm.sbatch(["--output=/dev/null", "--job-name=roach-time-format"], "#!/bin/bash\ntrue\n"))
    wait_until("slurmdbd to record the job", lambda: user_slurm.sacct(user=LAB_USER, since="2020-01-01"), timeout=30)
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    recs = user_slurm.sacct(user=LAB_USER, since="2020-01-01")
    assert recs and all(r.submit_time is not None for r in recs)


@pytest.mark.lab
def test_lab_job_states_agree_with_the_full_squeue(user_slurm):
    """The light status round (squeue --only-job-state where this Slurm lists it) sees what squeue sees."""
    helptext = user_slurm.run(["squeue", "--help"]).stdout
    assert user_slurm.capabilities().only_job_state is ("--only-job-state" in helptext)
    opts = ["--hold", "--output=/dev/null", f"--job-name=roach-states-{uuid.uuid4().hex[:8]}"]
    single = user_slurm.sbatch(opts, "#!/bin/bash\ntrue\n")
    array = user_slurm.sbatch([*opts, "--array=0-2"], "#!/bin/bash\ntrue\n")
    try:
        light = user_slurm.job_states([single, array, f"{array}_1", 999999])
        full = user_slurm.squeue(job_ids=[single, array])
        assert {r.ref.job for r in light} == {single, array} and all(r.state is JobState.PENDING for r in light)
        assert {r.ref.job for r in full} == {single, array}
        # the task asked for by name is there, alone or inside a pending range
        assert any(r.ref.job == array and (r.ref.task == 1 or in_array(r.ref.tasks, 1)) for r in light)
    finally:
        user_slurm.scancel([single, array])
    assert user_slurm.job_states([999999]) == []  # an id not in the queue is simply not listed
