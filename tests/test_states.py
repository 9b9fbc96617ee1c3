"""JobState and PendingReason: parsing what squeue/sacct print, and the meaning of each value."""

from __future__ import annotations

import pytest

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.states import PendingReason

# squeue's %t codes as its man page lists them (plus RC from 20.11).
COMPACT = {
    "PD": JobState.PENDING,
    "R": JobState.RUNNING,
    "S": JobState.SUSPENDED,
    "CD": JobState.COMPLETED,
    "CA": JobState.CANCELLED,
    "F": JobState.FAILED,
    "TO": JobState.TIMEOUT,
    "NF": JobState.NODE_FAIL,
    "PR": JobState.PREEMPTED,
    "BF": JobState.BOOT_FAIL,
    "DL": JobState.DEADLINE,
    "OOM": JobState.OUT_OF_MEMORY,
    "CG": JobState.COMPLETING,
    "SO": JobState.STAGE_OUT,
    "CF": JobState.CONFIGURING,
    "RS": JobState.RESIZING,
    "RQ": JobState.REQUEUED,
    "RF": JobState.REQUEUE_FED,
    "RH": JobState.REQUEUE_HOLD,
    "SE": JobState.SPECIAL_EXIT,
    "ST": JobState.STOPPED,
    "RV": JobState.REVOKED,
    "RD": JobState.RESV_DEL_HOLD,
    "SI": JobState.SIGNALING,
    "RC": JobState.REQUEUED_CRON,
}

ALL_STATE_NAMES = (
    "BOOT_FAIL CANCELLED COMPLETED COMPLETING CONFIGURING DEADLINE FAILED NODE_FAIL OUT_OF_MEMORY PENDING "
    "PREEMPTED RUNNING RESV_DEL_HOLD REQUEUE_FED REQUEUE_HOLD REQUEUED RESIZING REVOKED SIGNALING SPECIAL_EXIT "
    "STAGE_OUT STOPPED SUSPENDED TIMEOUT POWER_UP_NODE LAUNCH_FAILED UPDATE_DB RECONFIG_FAIL EXPEDITING "
    "REQUEUED_CRON"
).split()


def test_every_slurm_state_is_a_member_whose_value_is_its_name():
    assert sorted(m.value for m in JobState) == sorted(ALL_STATE_NAMES)
    assert all(m.name == m.value for m in JobState)


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.name)
def test_state_parses_from_long_name_compact_code_and_any_case(state):
    assert JobState.parse(state.value) is state
    assert JobState.parse(state.compact) is state
    assert JobState.parse(state.value.lower()) is state


@pytest.mark.parametrize("code,state", COMPACT.items())
def test_compact_codes_match_squeue(code, state):
    assert state.compact == code
    assert JobState.parse(code) is state


def test_states_without_a_compact_code_use_their_long_name():
    assert JobState.UPDATE_DB.compact == "UPDATE_DB"
    assert JobState.EXPEDITING.compact == "EXPEDITING"


@pytest.mark.parametrize(
    "text,state",
    [
        ("CANCELLED by 1001", JobState.CANCELLED),
        ("CANCELLED by 0", JobState.CANCELLED),
        ("CANCELLED\tby 7", JobState.CANCELLED),
        ("CANCELLED+", JobState.CANCELLED),
        ("CANCELLED by 10+", JobState.CANCELLED),
        ("  COMPLETED \n", JobState.COMPLETED),
        ("RUNNING+", JobState.RUNNING),
        ("OUT_OF_ME+", JobState.OUT_OF_MEMORY),  # sacct's default 10-wide column
        ("REQUEUE_H+", JobState.REQUEUE_HOLD),
        ("REQUEUE_F+", JobState.REQUEUE_FED),
        ("RESV_DEL_+", JobState.RESV_DEL_HOLD),
        ("SPECIAL_E+", JobState.SPECIAL_EXIT),
        (" R ", JobState.RUNNING),
    ],
)
def test_sacct_and_squeue_decorations(text, state):
    assert JobState.parse(text) is state


@pytest.mark.parametrize("text", ["BOGUS", "", "   ", "?", "+", "RUNNING LATE", "CANCELLED by", "RE+", "PENDINGX"])
def test_unknown_state_raises_with_the_text_and_the_valid_names(text):
    with pytest.raises(ParseError) as info:
        JobState.parse(text)
    msg = info.value.message
    assert repr(text) in msg
    assert "BOOT_FAIL" in msg and "OUT_OF_MEMORY" in msg and "UPDATE_DB" in msg


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.name)
def test_each_state_is_exactly_one_of_pending_running_terminal(state):
    assert [state.is_pending, state.is_running, state.is_terminal].count(True) == 1
    assert state.is_active is not state.is_terminal
    assert state.is_success is (state is JobState.COMPLETED)
    if state.is_held:
        assert state.is_pending


def test_state_partitions():
    pending = {s for s in JobState if s.is_pending}
    running = {s for s in JobState if s.is_running}
    terminal = {s for s in JobState if s.is_terminal}
    assert pending == {
        JobState.PENDING,
        JobState.REQUEUED,
        JobState.REQUEUE_HOLD,
        JobState.REQUEUE_FED,
        JobState.RESV_DEL_HOLD,
        JobState.SPECIAL_EXIT,
        JobState.REQUEUED_CRON,
        JobState.RECONFIG_FAIL,
    }
    assert running == {
        JobState.RUNNING,
        JobState.COMPLETING,
        JobState.CONFIGURING,
        JobState.POWER_UP_NODE,
        JobState.SIGNALING,
        JobState.STAGE_OUT,
        JobState.RESIZING,
        JobState.SUSPENDED,
        JobState.STOPPED,
        JobState.EXPEDITING,
        JobState.UPDATE_DB,
    }
    assert terminal == {
        JobState.BOOT_FAIL,
        JobState.CANCELLED,
        JobState.COMPLETED,
        JobState.DEADLINE,
        JobState.FAILED,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
        JobState.PREEMPTED,
        JobState.TIMEOUT,
        JobState.REVOKED,
        JobState.LAUNCH_FAILED,
    }
    assert {s for s in JobState if s.is_held} == {JobState.REQUEUE_HOLD, JobState.SPECIAL_EXIT, JobState.RESV_DEL_HOLD}


# -- PendingReason ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,reason",
    [
        ("None", PendingReason.NONE),
        ("Priority", PendingReason.Priority),
        ("Resources", PendingReason.Resources),
        ("BeginTime", PendingReason.BeginTime),
        ("QOSMaxGRESPerUser", PendingReason.QOSMaxGRESPerUser),
        ("JobArrayTaskLimit", PendingReason.JobArrayTaskLimit),
        ("ReqNodeNotAvail, UnavailableNodes:n[1-2]", PendingReason.ReqNodeNotAvail),
        ("ReqNodeNotAvail, May be reserved for other job", PendingReason.ReqNodeNotAvail),
        ("ReqNodeNotAvail, Reserved for maintenance", PendingReason.ReqNodeNotAvail),
        ("(ReqNodeNotAvail, UnavailableNodes:n1)", PendingReason.ReqNodeNotAvail),
        ("(Resources)", PendingReason.Resources),
        ("( Priority )", PendingReason.Priority),
        ("(null)", PendingReason.NONE),
        ("Priority, detail a newer Slurm appends", PendingReason.Priority),
        ("JobHeldUser: by alice", PendingReason.JobHeldUser),
        ("", PendingReason.NONE),
        ("  ", PendingReason.NONE),
        ("()", PendingReason.NONE),
        ("(None)", PendingReason.NONE),
        ("resources", PendingReason.Resources),
        ("launch failed requeued held", PendingReason.LaunchFailedRequeuedHeld),
        ("launch_failed_requeued_held", PendingReason.LaunchFailedRequeuedHeld),
        ("job requeued in held state", PendingReason.JobRequeuedHeld),
        (
            "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
            PendingReason.NodesDownDrained,
        ),
        (
            "Nodes required for job are DOWN, DRAINED, REBOOTING or reserved for jobs in higher priority partitions",
            PendingReason.NodesDownDrained,
        ),
        ("Job is at or exceeds QOS normal's group max TRES(cpu) minutes of 60 with 61", PendingReason.TimeLimit),
    ],
)
def test_reason_parsing(text, reason):
    assert PendingReason.parse(text) is reason


@pytest.mark.parametrize(
    "text",
    [
        "SomeReasonFromSlurm30",
        "InvalidReason",
        "42",
        "Reservation foo, which this job was running under, has ended",
        "?",
    ],
)
def test_unknown_reason_is_unknown_not_an_error(text):
    assert PendingReason.parse(text) is PendingReason.UNKNOWN


@pytest.mark.parametrize("reason", list(PendingReason), ids=lambda r: r.name)
def test_every_reason_parses_from_its_own_text(reason):
    assert PendingReason.parse(reason.value) is reason
    assert PendingReason.parse(f"({reason.value})") is reason


@pytest.mark.parametrize(
    "name",
    [
        # One from each era and family, to catch a table that lost rows.
        "AssocGrpJobsLimit",
        "QOSGrpJobsLimit",
        "MaxGRESRunMinsPerUser",
        "NvidiaImexChannels",
        "MpiPortsBusy",
        "BlockMaxError",
        "FrontEndDown",
        "PowerReserved",
        "ReservationInvalid",
        "RaisedSignal",
        "Constraints",
        "QOSMinCpuNotSatisfied",
        "AssocMaxWallDurationPerJobLimit",
        "QOSGrpMemoryRunMinutes",
        "MaxSubmitJobsPerAccount",
        "DependencyNeverSatisfied",
        "PartitionTimeLimit",
        "InvalidAccount",
        "InvalidQOS",
        "JobHeldUser",
        "JobHeldAdmin",
    ],
)
def test_reasons_across_versions_exist_under_slurms_name(name):
    assert PendingReason[name].value == name


def test_reason_count_covers_slurm_tables():
    # 221 distinct texts in Slurm 20.11..25.11 + QOSMaxBBMinutesPerJob (documented) + 5 state_desc texts + UNKNOWN.
    assert len(PendingReason) == 228


@pytest.mark.parametrize("reason", list(PendingReason), ids=lambda r: r.name)
def test_reason_properties_are_consistent(reason):
    assert not (reason.will_clear and reason.never_starts)
    assert bool(reason.hint) is reason.never_starts
    if reason.is_held:
        assert reason.never_starts
    if reason.hint:
        assert reason.hint.endswith(".") and "\n" not in reason.hint


def test_reasons_that_clear_by_themselves():
    clear = {r for r in PendingReason if r.will_clear}
    for r in (
        PendingReason.NONE,
        PendingReason.Priority,
        PendingReason.Resources,
        PendingReason.BeginTime,
        PendingReason.Dependency,
        PendingReason.Reservation,
        PendingReason.JobArrayTaskLimit,
        PendingReason.QOSMaxGRESPerUser,
        PendingReason.QOSGrpGRES,
        PendingReason.AssocGrpGRES,
        PendingReason.AssocMaxJobsLimit,
        PendingReason.QOSMaxJobsPerUserLimit,
        PendingReason.MaxJobsPerAccount,
        PendingReason.QOSGrpCPURunMinutesLimit,
        PendingReason.MaxCpuRunMinsPerUser,
    ):
        assert r in clear, r


def test_reasons_that_never_start():
    never = {r for r in PendingReason if r.never_starts}
    for r in (
        PendingReason.DependencyNeverSatisfied,
        PendingReason.BadConstraints,
        PendingReason.PartitionTimeLimit,
        PendingReason.PartitionNodeLimit,
        PendingReason.InvalidAccount,
        PendingReason.InvalidQOS,
        PendingReason.QOSMaxWallDurationPerJobLimit,
        PendingReason.QOSMinGRES,
        PendingReason.QOSMaxGRESPerJob,
        PendingReason.AssocMaxCpuPerJobLimit,
        PendingReason.JobHeldUser,
        PendingReason.JobHeldAdmin,
        PendingReason.LaunchFailedRequeuedHeld,
        PendingReason.ReservationDeleted,
    ):
        assert r in never, r
    assert "scontrol release" in PendingReason.JobHeldUser.hint
    assert "--time" in PendingReason.PartitionTimeLimit.hint
    assert PendingReason.JobHeldUser.is_held and not PendingReason.InvalidQOS.is_held


def test_reasons_that_neither_clear_nor_fail_for_sure():
    # Wait on the cluster or on usage decay: an admin may be needed, but the job itself is fine.
    for r in (
        PendingReason.ReqNodeNotAvail,
        PendingReason.PartitionDown,
        PendingReason.NodesDownDrained,
        PendingReason.QOSGrpCPUMinutesLimit,
        PendingReason.AssocGrpGRESMinutes,
        PendingReason.UNKNOWN,
        PendingReason.NonZeroExitCode,
    ):
        assert not r.will_clear and not r.never_starts and r.hint == "", r


def test_is_limit():
    limits = {r for r in PendingReason if r.is_limit}
    assert {
        PendingReason.QOSMaxGRESPerUser,
        PendingReason.AssocGrpGRES,
        PendingReason.PartitionTimeLimit,
        PendingReason.PartitionNodeLimit,
        PendingReason.MaxJobsPerAccount,
        PendingReason.QOSMinNode,
        PendingReason.MaxMemPerLimit,
        PendingReason.QOSUsageThreshold,
    } <= limits
    assert not limits & {
        PendingReason.NONE,
        PendingReason.Priority,
        PendingReason.Resources,
        PendingReason.Dependency,
        PendingReason.JobHeldUser,
        PendingReason.InvalidQOS,
        PendingReason.UNKNOWN,
        PendingReason.JobArrayTaskLimit,
    }
    assert all(r.is_limit for r in PendingReason if r.name.startswith(("QOSGrp", "QOSMax", "AssocGrp", "AssocMax")))
