"""Parsers of slurmparse.py and capabilities.py on real Slurm output.

Files in tests/data named ``*_lab_22.05_*`` were captured on the lab cluster (Slurm 22.05.8) with exactly the
argv roach runs (``squeue_format()``, ``SACCT_FIELDS``, ``sinfo_format()``, US/RS separators), bytes as printed.
The inline strings further down come from other Slurm versions, as published in public repositories (named in
a comment beside each); roach's format differs, so those exercise the scalar parsers only.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from roach.errors import ParseError
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler import fields as F
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.capabilities import Capabilities, RateLimit, from_config, parse_version

DATA = Path(__file__).parent / "data"
WEIRD = "we|ird $(name) x\nline2"  # the lab job name: a pipe, spaces, $() and a newline
YEAR = 365 * 86400  # Slurm gives a running job without a limit 365 days


def data(name: str) -> str:
    return (DATA / name).read_bytes().decode()  # no newline translation: bytes as Slurm printed them


def t(hh_mm_ss: str, day: int = 29) -> datetime:
    return datetime.fromisoformat(f"2026-11-{day}T{hh_mm_ss}")


def queue_row(r: P.QueueRecord) -> tuple:
    return (
        r.job_id,
        r.raw_id,
        r.state.name,
        r.reason_text,
        r.elapsed_s,
        r.time_limit_s,
        r.restart_count,
        r.nodes,
        r.nodelist,
        r.tres.gpus,
    )


def acct_row(r: P.AcctRecord) -> tuple:
    return (
        r.job_id,
        r.raw_id,
        r.state_text,
        r.exit_code,
        r.exit_signal,
        r.elapsed_s,
        r.time_limit_s,
        r.nodes,
        r.nodelist,
        r.tres.gpus,
        r.reason_text,
    )


# -- squeue ------------------------------------------------------------------------------------------
def test_squeue_mixed_queue_every_record():
    recs = P.parse_squeue(data("squeue_lab_22.05_mixed.txt"))
    assert [queue_row(r) for r in recs] == [
        ("63", 63, "PENDING", "QOSMaxGRESPerUser", 0, None, 0, 1, "", 1),
        ("64", 64, "PENDING", "Resources", 0, None, 0, 1, "", 0),
        ("65", 65, "PENDING", "Priority", 0, None, 0, 1, "", 0),
        ("67", 67, "PENDING", "BeginTime", 0, None, 0, 1, "", 0),
        ("68_2", 68, "PENDING", "JobArrayTaskLimit", 0, 300, 0, 1, "", 0),
        ("68_3", 68, "PENDING", "JobArrayTaskLimit", 0, 300, 0, 1, "", 0),
        ("70", 70, "PENDING", "DependencyNeverSatisfied", 0, None, 0, 1, "", 0),
        ("69", 69, "PENDING", "Dependency", 0, None, 0, 1, "", 0),
        ("66", 66, "PENDING", "JobHeldUser", 0, None, 0, 1, "", 0),
        ("61", 61, "RUNNING", "None", 12, YEAR, 0, 1, "n1", 2),
        ("62", 62, "RUNNING", "None", 12, YEAR, 0, 1, "n2", 2),
        ("68_0", 71, "RUNNING", "None", 11, 300, 0, 1, "n1", 0),
        ("68_1", 72, "RUNNING", "None", 11, 300, 0, 1, "n1", 0),
        ("58", 58, "RUNNING", "None", 13, None, 0, 1, "n1", 1),
        ("59", 59, "RUNNING", "None", 13, None, 0, 1, "n2", 0),
        ("57", 57, "RUNNING", "None", 21, 60, 0, 1, "n1", 0),
    ]
    by = {r.job_id: r for r in recs}
    assert by["63"].qos == "high" and by["63"].reason is PendingReason.QOSMaxGRESPerUser
    assert (by["63"].user, by["63"].account, by["63"].partition) == ("roachlab", "lab", "gpu")
    assert by["64"].reason is PendingReason.Resources and by["65"].reason is PendingReason.Priority
    assert by["64"].tres == F.Tres(cpu=8, mem_mb=4000, nodes=1, billing=8)
    assert by["64"].start_time == datetime(2027, 11, 29, 23, 39, 47)  # the scheduler's estimate, a year out
    assert by["67"].start_time == t("00:39:47", day=30)  # --begin=now+1hour
    assert by["66"].reason.is_held and by["70"].reason.never_starts and by["69"].reason.will_clear
    assert by["68_2"].ref == P.JobRef(68, 2) and by["68_2"].reason is PendingReason.JobArrayTaskLimit
    assert by["61"].tres == F.Tres(cpu=1, mem_mb=500, nodes=1, gpus_by_type=(("", 2),), billing=1)
    assert (by["61"].submit_time, by["61"].start_time) == (t("23:39:47"), t("23:39:47"))
    assert by["63"].start_time is None  # N/A


def test_squeue_completing_and_dependency_never_satisfied():
    recs = P.parse_squeue(data("squeue_lab_22.05_completing.txt"))
    assert [queue_row(r) for r in recs] == [
        ("75", 75, "COMPLETING", "None", 0, YEAR, 0, 1, "n1", 0),
        ("69", 69, "PENDING", "DependencyNeverSatisfied", 0, None, 0, 1, "", 0),
    ]
    assert recs[0].state.is_running and not recs[0].state.is_terminal
    assert recs[1].reason is PendingReason.DependencyNeverSatisfied and recs[1].reason.never_starts


def test_squeue_preemption_and_requeue_sequence():
    low, high = "76", "77"
    running = P.parse_squeue(data("squeue_lab_22.05_low_running.txt"))
    assert [queue_row(r) for r in running] == [(low, 76, "RUNNING", "None", 0, None, 0, 1, "n2", 4)]
    assert running[0].qos == "low" and running[0].tres.cpu == 8  # --exclusive took the whole node
    waiting = P.parse_squeue(data("squeue_lab_22.05_preemptor_pending.txt"))
    assert [queue_row(r) for r in waiting] == [
        (high, 77, "PENDING", "Resources", 0, None, 0, 1, "", 1),
        (low, 76, "RUNNING", "None", 0, None, 0, 1, "n2", 4),
    ]
    requeued = P.parse_squeue(data("squeue_lab_22.05_requeued_begintime.txt"))
    assert [queue_row(r) for r in requeued] == [
        (low, 76, "PENDING", "BeginTime", 0, None, 1, 1, "", 1),
        (high, 77, "RUNNING", "None", 0, None, 0, 1, "n2", 4),
    ]
    assert requeued[0].submit_time == t("23:41:07")  # a requeue resets the submit time
    back = P.parse_squeue(data("squeue_lab_22.05_requeued_running.txt"))
    assert [queue_row(r) for r in back] == [(low, 76, "RUNNING", "None", 0, YEAR, 1, 1, "n2", 4)]


def test_squeue_scontrol_requeue_and_requeuehold():
    (rec,) = P.parse_squeue(data("squeue_lab_22.05_requeue_completing.txt"))
    assert queue_row(rec) == ("80", 80, "COMPLETING", "None", 0, None, 1, 1, "n1", 0)
    (rec,) = P.parse_squeue(data("squeue_lab_22.05_requeuehold_completing.txt"))
    assert queue_row(rec) == ("80", 80, "COMPLETING", "job requeued in held state", 0, None, 2, 1, "n1", 0)
    (rec,) = P.parse_squeue(data("squeue_lab_22.05_requeuehold_pending.txt"))
    assert queue_row(rec) == ("80", 80, "PENDING", "job requeued in held state", 0, None, 2, 1, "", 0)
    assert rec.reason is PendingReason.JobRequeuedHeld and rec.reason.is_held
    assert rec.state is JobState.PENDING  # squeue says PENDING, not REQUEUE_HOLD: the reason carries the hold


def test_squeue_two_node_job():
    (rec,) = P.parse_squeue(data("squeue_lab_22.05_two_nodes.txt"))
    assert queue_row(rec) == ("81", 81, "RUNNING", "None", 1, None, 0, 2, "n[1-2]", 2)
    assert rec.tres == F.Tres(cpu=16, mem_mb=8000, nodes=2, gpus_by_type=(("", 2),), billing=16)


def test_squeue_states_all_shows_ended_jobs_with_why_they_ended():
    recs = P.parse_squeue(data("squeue_states_all_lab_22.05_ended.txt"))
    assert [queue_row(r) for r in recs] == [
        ("75", 75, "CANCELLED", "None", 0, YEAR, 0, 1, "n1", 0),
        ("58", 58, "CANCELLED", "None", 23, None, 0, 1, "n1", 1),
        ("76", 76, "CANCELLED", "None", 7, YEAR, 1, 1, "n2", 4),
        ("66", 66, "CANCELLED", "JobHeldUser", 0, None, 0, 1, "", 0),
        ("77", 77, "COMPLETED", "None", 15, None, 0, 1, "n2", 4),
        ("73", 73, "COMPLETED", "None", 0, YEAR, 0, 1, "n1", 0),
        ("68_0", 71, "COMPLETED", "None", 90, 300, 0, 1, "n1", 0),
        ("68_1", 72, "COMPLETED", "None", 90, 300, 0, 1, "n1", 0),
        ("74", 74, "FAILED", "JobLaunchFailure", 0, YEAR, 0, 1, "n1", 0),  # `kill -9 $$` of the batch shell
        ("68_2", 78, "RUNNING", "None", 14, 300, 0, 1, "n1", 0),
        ("68_3", 68, "RUNNING", "None", 14, 300, 0, 1, "n1", 0),  # the last task takes the array's own id
        ("57", 57, "TIMEOUT", "TimeLimit", 89, 60, 0, 1, "n1", 0),
    ]
    assert all(r.state.is_terminal for r in recs if r.job_id not in ("68_2", "68_3"))


# -- sacct -------------------------------------------------------------------------------------------
def test_sacct_allocations_mixed_queue():
    recs = P.parse_sacct(data("sacct_X_lab_22.05_mixed.txt"))
    na = "None assigned"
    assert [acct_row(r) for r in recs] == [
        ("57", "57", "RUNNING", 0, 0, 21, 60, 1, "n1", 0, "None"),
        ("58", "58", "RUNNING", 0, 0, 13, None, 1, "n1", 1, "None"),
        ("59", "59", "RUNNING", 0, 0, 13, None, 1, "n2", 0, "None"),
        ("60", "60", "FAILED", 3, 0, 4, None, 1, "n1", 0, "None"),
        ("61", "61", "RUNNING", 0, 0, 12, YEAR, 1, "n1", 2, "None"),
        ("62", "62", "RUNNING", 0, 0, 12, YEAR, 1, "n2", 2, "None"),
        ("63", "63", "PENDING", 0, 0, 0, None, 1, na, 0, "QOSMaxGRESPerUser"),  # TimelimitRaw=Partition_Limit
        # sacct keeps the reason of the submit: None where squeue already says Resources/Priority
        ("64", "64", "PENDING", 0, 0, 0, None, 1, na, 0, "None"),
        ("65", "65", "PENDING", 0, 0, 0, None, 1, na, 0, "None"),
        ("66", "66", "PENDING", 0, 0, 0, None, 1, na, 0, "JobHeldUser"),
        ("67", "67", "PENDING", 0, 0, 0, None, 1, na, 0, "BeginTime"),
        ("69", "69", "PENDING", 0, 0, 0, None, 1, na, 0, "Dependency"),
        ("70", "70", "PENDING", 0, 0, 0, None, 1, na, 0, "DependencyNeverSatisfied"),
        ("68_0", "71", "RUNNING", 0, 0, 11, 300, 1, "n1", 0, "None"),
        ("68_1", "72", "RUNNING", 0, 0, 11, 300, 1, "n1", 0, "None"),
        ("68_[2-3%2]", "68", "PENDING", 0, 0, 0, 300, 1, na, 0, "JobArrayTaskLimit"),
    ]
    by = {r.job_id: r for r in recs}
    assert by["68_[2-3%2]"].ref == P.JobRef(68, None, "2-3%2")
    assert all(r.step is None for r in recs)
    assert by["57"].end_time is None and by["57"].start_time == t("23:39:38")  # End=Unknown while running
    assert by["63"].start_time is None and by["63"].tres == F.Tres()  # pending: no AllocTRES yet
    assert by["61"].tres == F.Tres(cpu=1, mem_mb=500, nodes=1, gpus_by_type=(("", 2),), billing=1)
    assert by["60"].end_time == t("23:39:50") and by["60"].reason is PendingReason.NONE


def test_sacct_with_steps_mixed_queue():
    recs = P.parse_sacct(data("sacct_steps_lab_22.05_mixed.txt"))
    assert len(recs) == 25
    steps = {r.job_id: r for r in recs if r.step is not None}
    assert sorted(steps) == [
        "57.batch",
        "58.batch",
        "59.0",
        "59.batch",
        "60.batch",
        "61.batch",
        "62.batch",
        "68_0.batch",
        "68_1.batch",
    ]
    srun = steps["59.0"]
    assert (srun.ref, srun.step, srun.raw_id, srun.name) == (P.JobRef(59), "0", "59.0", "sleep")
    assert (srun.state, srun.start_time, srun.nodelist) == (JobState.RUNNING, t("23:39:47"), "n2")
    batch = steps["68_0.batch"]
    assert (batch.ref, batch.step, batch.raw_id, batch.name) == (P.JobRef(68, 0), "batch", "71.batch", "batch")
    # steps carry no user, partition, qos, time limit or reason
    assert (batch.user, batch.partition, batch.qos, batch.time_limit_s, batch.reason_text) == ("", "", "", None, "")
    assert steps["60.batch"].state is JobState.FAILED and steps["60.batch"].exit_code == 3
    assert steps["61.batch"].tres.gpus == 2 and steps["61.batch"].tres.billing == 0


def test_sacct_allocations_of_ended_jobs():
    recs = P.parse_sacct(data("sacct_X_lab_22.05_ended.txt"))
    assert [acct_row(r) for r in recs] == [
        ("57", "57", "TIMEOUT", 0, 0, 89, 60, 1, "n1", 0, "None"),
        ("58", "58", "CANCELLED by 1001", 0, 0, 23, None, 1, "n1", 1, "None"),
        ("60", "60", "FAILED", 3, 0, 4, None, 1, "n1", 0, "None"),
        ("66", "66", "CANCELLED by 1001", 0, 0, 0, None, 1, "None assigned", 0, "JobHeldUser"),
        ("73", "73", "COMPLETED", 0, 0, 0, YEAR, 1, "n1", 0, "None"),
        ("74", "74", "FAILED", 0, 9, 0, YEAR, 1, "n1", 0, "None"),
        ("75", "75", "CANCELLED by 1001", 0, 0, 0, YEAR, 1, "n1", 0, "None"),
        ("77", "77", "COMPLETED", 0, 0, 15, None, 1, "n2", 4, "None"),
        ("76", "76", "CANCELLED by 1001", 0, 0, 7, YEAR, 1, "n2", 4, "BeginTime"),
    ]
    by = {r.job_id: r for r in recs}
    assert [by[j].state for j in ("57", "58", "60", "73", "74")] == [
        JobState.TIMEOUT,
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.COMPLETED,
        JobState.FAILED,
    ]
    assert (by["57"].start_time, by["57"].end_time) == (t("23:39:38"), t("23:41:07"))
    assert (by["66"].start_time, by["66"].end_time) == (None, t("23:40:09"))  # cancelled while held: Start=None
    assert by["73"].state.is_success and not by["74"].state.is_success


def test_sacct_steps_of_ended_jobs_show_the_signal_that_ended_them():
    steps = {r.job_id: r for r in P.parse_sacct(data("sacct_steps_lab_22.05_ended.txt")) if r.step}
    got = {j: (r.state_text, r.exit_code, r.exit_signal, r.elapsed_s) for j, r in steps.items()}
    assert got == {
        "57.batch": ("CANCELLED", 0, 15, 89),  # TIMEOUT: SIGTERM
        "58.batch": ("CANCELLED", 0, 15, 23),  # scancel: SIGTERM
        "60.batch": ("FAILED", 3, 0, 4),
        "73.batch": ("COMPLETED", 0, 0, 0),
        "74.batch": ("CANCELLED", 0, 9, 0),  # kill -9 $$
        "75.batch": ("CANCELLED", 0, 9, 30),  # ignored SIGTERM: SIGKILL after KillWait=30
        "77.batch": ("COMPLETED", 0, 0, 15),
        "76.batch": ("CANCELLED", 0, 15, 7),
    }


def test_sacct_duplicates_show_the_preempted_run_and_the_requeued_one():
    pending = P.parse_sacct(data("sacct_XD_lab_22.05_preempted_then_pending.txt"))
    assert [acct_row(r) for r in pending] == [
        ("76", "76", "PREEMPTED", 0, 0, 35, None, 1, "n2", 4, "None"),
        ("76", "76", "PENDING", 0, 0, 0, None, 1, "None assigned", 0, "BeginTime"),
    ]
    assert pending[0].state.is_terminal and pending[1].state.is_pending
    assert (pending[0].submit_time, pending[1].submit_time) == (t("23:40:31"), t("23:41:07"))
    running = P.parse_sacct(data("sacct_XD_lab_22.05_preempted_then_running.txt"))
    assert [(r.state, r.start_time, r.end_time) for r in running] == [
        (JobState.PREEMPTED, t("23:40:32"), t("23:41:07")),
        (JobState.RUNNING, t("23:41:22"), None),
    ]
    steps = P.parse_sacct(data("sacct_D_steps_lab_22.05_preempted.txt"))
    assert [(r.job_id, r.state_text, r.exit_signal) for r in steps] == [
        ("76", "PREEMPTED", 0),
        ("76.batch", "CANCELLED", 15),
        ("77", "COMPLETED", 0),
        ("77.batch", "COMPLETED", 0),
        ("76", "RUNNING", 0),
        ("76.batch", "RUNNING", 0),
    ]


def test_sacct_duplicates_after_scontrol_requeue():
    recs = P.parse_sacct(data("sacct_XD_lab_22.05_requeued_then_running.txt"))
    assert [(r.state, r.submit_time, r.start_time, r.end_time, r.reason_text) for r in recs] == [
        (JobState.REQUEUED, t("23:41:51"), t("23:41:51"), t("23:41:51"), "None"),
        (JobState.RUNNING, t("23:42:21"), t("23:42:32"), None, "BeginTime"),
    ]
    held = P.parse_sacct(data("sacct_XD_lab_22.05_requeued_twice_held.txt"))
    # after `scontrol requeuehold` both runs read REQUEUED; the held one waiting now has no record of its own
    assert [(r.state, r.end_time) for r in held] == [
        (JobState.REQUEUED, t("23:41:51")),
        (JobState.REQUEUED, t("23:42:32")),
    ]


def test_sacct_record_of_a_job_that_just_started_is_still_incomplete():
    (rec,) = P.parse_sacct(data("sacct_X_lab_22.05_just_started.txt"))
    # slurmdbd had only the start message: a placeholder name, no partition, QOS Unknown, 0 nodes, PENDING
    assert acct_row(rec) == ("76", "76", "PENDING", 0, 0, 0, None, 0, "n2", 0, "None")
    assert (rec.name, rec.partition, rec.qos, rec.tres) == ("allocation", "", "Unknown", F.Tres())


def test_sacct_array_tasks_done_and_two_node_steps():
    recs = P.parse_sacct(data("sacct_X_lab_22.05_array_done.txt"))
    assert [(r.ref, r.raw_id, r.state, r.elapsed_s, r.reason_text) for r in recs] == [
        (P.JobRef(68, 0), "71", JobState.COMPLETED, 90, "None"),
        (P.JobRef(68, 1), "72", JobState.COMPLETED, 90, "None"),
        (P.JobRef(68, 2), "78", JobState.COMPLETED, 90, "JobArrayTaskLimit"),
        (P.JobRef(68, 3), "68", JobState.COMPLETED, 90, "JobArrayTaskLimit"),
    ]
    two = P.parse_sacct(data("sacct_steps_lab_22.05_two_nodes.txt"))
    assert [(r.job_id, r.nodes, r.nodelist, r.tres.gpus, r.tres.cpu) for r in two] == [
        ("81", 2, "n[1-2]", 2, 16),
        ("81.batch", 1, "n1", 1, 8),
        ("81.0", 2, "n[1-2]", 2, 16),
    ]


def test_sacct_timestamps_under_slurm_time_format_relative_are_refused():
    # Captured with SLURM_TIME_FORMAT=relative in the caller's environment: "23:39:38", no date.
    text = data("sacct_X_lab_22.05_SLURM_TIME_FORMAT_relative.txt")
    with pytest.raises(ParseError, match="'23:39:38'"):
        P.parse_sacct(text)


def test_the_name_with_a_newline_survives_squeue_and_sacct():
    for name, parse in [
        ("squeue_lab_22.05_mixed.txt", P.parse_squeue),
        ("squeue_states_all_lab_22.05_ended.txt", P.parse_squeue),
        ("sacct_X_lab_22.05_mixed.txt", P.parse_sacct),
        ("sacct_steps_lab_22.05_mixed.txt", P.parse_sacct),
        ("sacct_X_lab_22.05_array_done.txt", P.parse_sacct),
    ]:
        recs = [r for r in parse(data(name)) if r.ref.job == 68 and getattr(r, "step", None) is None]
        assert recs and {r.name for r in recs} == {WEIRD}, name
    # the record after the name is read whole
    after = P.parse_sacct(data("sacct_steps_lab_22.05_mixed.txt"))
    i = next(i for i, r in enumerate(after) if r.job_id == "68_0")
    assert after[i + 1].job_id == "68_0.batch" and after[i + 1].raw_id == "71.batch"


# -- every state and reason the lab printed is known ---------------------------------------------------
def test_every_state_and_reason_in_the_captures_is_a_known_member():
    seen_states, seen_reasons = set(), set()
    for f in sorted(DATA.glob("*_lab_22.05_*.txt")):
        if "stderr" in f.name or "TIME_FORMAT" in f.name:
            continue
        text = data(f.name)
        if f.name.startswith("squeue"):
            for r in P.parse_squeue(text):  # JobState.parse raises on an unknown state
                seen_states.add(r.state)
                seen_reasons.add((r.reason_text, r.reason))
        elif f.name.startswith("sacct_"):
            for r in P.parse_sacct(text):
                seen_states.add(r.state)
                seen_reasons.add((r.reason_text, r.reason))
        elif f.name.startswith("scontrol_show_job"):
            for s in re.findall(r"JobState=(\S+)", text):
                seen_states.add(JobState.parse(s))
            for s in re.findall(r"Reason=(\S+)", text):
                seen_reasons.add((s, PendingReason.parse(s)))
    assert [text for text, r in seen_reasons if r is PendingReason.UNKNOWN] == []
    assert {r for _, r in seen_reasons} == {
        PendingReason.NONE,
        PendingReason.Priority,
        PendingReason.Resources,
        PendingReason.BeginTime,
        PendingReason.Dependency,
        PendingReason.DependencyNeverSatisfied,
        PendingReason.JobArrayTaskLimit,
        PendingReason.JobHeldUser,
        PendingReason.QOSMaxGRESPerUser,
        PendingReason.JobRequeuedHeld,
        PendingReason.TimeLimit,
        PendingReason.JobLaunchFailure,
    }
    assert seen_states == {
        JobState.PENDING,
        JobState.RUNNING,
        JobState.COMPLETING,
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.PREEMPTED,
        JobState.REQUEUED,
        JobState.OUT_OF_MEMORY,  # the lab with --memory-cgroup
    }


# -- field counts ------------------------------------------------------------------------------------
def test_squeue_record_with_a_missing_field_is_refused_with_the_record():
    record = data("squeue_lab_22.05_low_running.txt").split(P.RS)[0]
    short = P.US.join(record.split(P.US)[:-1])
    with pytest.raises(ParseError) as exc:
        P.parse_squeue(short + P.RS + "\n")
    assert "expected 19 fields, got 18" in str(exc.value) and repr(short) in str(exc.value)


def test_sacct_line_with_an_extra_field_is_refused_with_the_line():
    line = data("sacct_X_lab_22.05_ended.txt").splitlines()[0] + P.US + "extra"
    with pytest.raises(ParseError) as exc:
        P.parse_sacct(line + "\n")
    assert "expected 18 fields, got 19" in str(exc.value) and repr(line) in str(exc.value)


def test_sacct_output_cut_short_is_refused_with_what_was_left():
    line = data("sacct_X_lab_22.05_ended.txt").splitlines()[0]
    cut = P.US.join(line.split(P.US)[:10])
    with pytest.raises(ParseError) as exc:
        P.parse_sacct(cut + "\n")
    assert "incomplete record" in str(exc.value) and repr(cut) in str(exc.value)


def test_sinfo_and_sacctmgr_field_counts_are_checked():
    record = data("sinfo_nodes_lab_22.05_idle.txt").split(P.RS)[0]
    short = P.US.join(record.split(P.US)[:-2])
    with pytest.raises(ParseError, match="expected 8 fields, got 6"):
        PC.parse_sinfo_nodes(short + P.RS)
    with pytest.raises(ParseError) as exc:
        PC.parse_sacctmgr("normal|100|low\n", ("Name", "Priority"))
    assert repr("normal|100|low") in str(exc.value)


# -- sinfo, scontrol, sacctmgr -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,expected",
    [
        ("idle", [("n1", "idle", 0, 8, 4, 0, 0), ("n2", "idle", 0, 8, 4, 0, 0)]),
        ("mixed", [("n1", "mixed", 5, 8, 4, 3, 2500), ("n2", "mixed", 2, 8, 4, 2, 1000)]),
        ("allocated", [("n1", "allocated", 8, 8, 4, 1, 4000), ("n2", "allocated", 8, 8, 4, 1, 4000)]),
    ],
)
def test_sinfo_nodes(name, expected):
    nodes = PC.parse_sinfo_nodes(data(f"sinfo_nodes_lab_22.05_{name}.txt"))
    assert [
        (n.name, n.state, n.cpus_alloc, n.cpus_total, n.gpus_total, n.gpus_used, n.alloc_mem_mb) for n in nodes
    ] == expected
    assert all(n.partitions == ("gpu",) and n.memory_mb == 16000 and n.available for n in nodes)


def test_scontrol_show_job_running_held_requeued_two_nodes():
    run = PC.parse_key_values(data("scontrol_show_job_lab_22.05_running_gpu.txt"))
    assert (run["JobId"], run["JobName"], run["JobState"], run["Reason"]) == ("58", "run n1", "RUNNING", "None")
    assert run["UserId"] == "roachlab(1001)" and run["AllocNode:Sid"] == "localhost:14511"
    assert run["ReqB:S:C:T"] == "0:0:*:*" and run["CPUs/Task"] == "1" and run["Power"] == ""
    assert F.parse_tres(run["TRES"]).gpus == 1 and F.parse_gres_gpus(run["TresPerNode"]) == 1
    assert F.parse_duration(run["TimeLimit"]) is None and F.parse_time(run["EndTime"]) is None
    held = PC.parse_key_values(data("scontrol_show_job_lab_22.05_held.txt"))
    assert (held["JobState"], held["Reason"], held["Priority"]) == ("PENDING", "JobHeldUser", "0")
    rq = PC.parse_key_values(data("scontrol_show_job_lab_22.05_requeue_held.txt"))
    assert (rq["Restarts"], rq["Reason"]) == ("2", "job_requeued_in_held_state")
    assert PendingReason.parse(rq["Reason"]) is PendingReason.JobRequeuedHeld
    two = PC.parse_key_values(data("scontrol_show_job_lab_22.05_two_nodes.txt"))
    assert (two["NodeList"], two["NumNodes"], two["NumCPUs"], two["BatchHost"]) == ("n[1-2]", "2", "16", "n1")
    assert F.parse_tres(two["TRES"]).gpus == 2


def test_scontrol_show_job_of_an_array_lists_each_record():
    text = data("scontrol_show_job_lab_22.05_pending_array.txt")
    records = [PC.parse_key_values(r) for r in re.split(r"\n(?=JobId=)", text.strip())]
    assert [(r["JobId"], r["ArrayTaskId"], r["JobState"], r["Reason"]) for r in records] == [
        ("68", "2-3%2", "PENDING", "JobArrayTaskLimit"),
        ("72", "1", "RUNNING", "None"),
        ("71", "0", "RUNNING", "None"),
    ]
    # whitespace splitting folds the name's newline into a space; the keys after it are intact
    assert records[0]["JobName"] == "we|ird $(name) x line2" and records[0]["UserId"] == "roachlab(1001)"


def test_scontrol_show_partition():
    part = PC.parse_key_values(data("scontrol_show_partition_lab_22.05.txt"))
    assert (part["PartitionName"], part["Nodes"], part["PreemptMode"], part["State"]) == (
        "gpu",
        "n[1-2]",
        "REQUEUE",
        "UP",
    )
    assert F.parse_duration(part["MaxTime"]) is None and part["DefaultTime"] == "NONE"
    assert F.parse_tres(part["TRES"]) == F.Tres(cpu=16, mem_mb=32000, nodes=2, gpus_by_type=(("", 8),), billing=16)


def test_sacctmgr_qos_and_associations():
    qos_fields = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "MaxTRESPU", "MaxWall", "Flags")
    qos = PC.parse_sacctmgr(data("sacctmgr_show_qos_lab_22.05.txt"), qos_fields)
    assert [tuple(q.values()) for q in qos] == [
        ("normal", "100", "low", "cluster", "00:00:00", "", "", ""),
        ("low", "0", "", "requeue", "00:00:20", "", "", ""),
        ("high", "1000", "low", "cluster", "00:00:00", "gres/gpu=4", "", ""),
    ]
    assert F.parse_duration(qos[1]["GraceTime"]) == 20 and F.parse_tres(qos[2]["MaxTRESPU"]).gpus == 4
    assoc_fields = ("Cluster", "Account", "User", "Partition", "QOS", "DefaultQOS")
    mine = PC.parse_sacctmgr(data("sacctmgr_show_assoc_user_lab_22.05.txt"), assoc_fields)
    assert mine == [
        {
            "Cluster": "lab",
            "Account": "lab",
            "User": "roachlab",
            "Partition": "",
            "QOS": "high,low,normal",
            "DefaultQOS": "normal",
        }
    ]
    every = PC.parse_sacctmgr(data("sacctmgr_show_assoc_lab_22.05.txt"), assoc_fields)
    assert [(a["Account"], a["User"]) for a in every] == [
        ("root", ""),
        ("root", "root"),
        ("lab", ""),
        ("lab", "roachlab"),
        ("lab", "root"),
    ]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("57\n", (57, None)),
        ("57;lab\n", (57, "lab")),
        (
            "sbatch: warning: can't honor --ntasks-per-node set to 2 which doesn't match the requested tasks 4\n81\n",
            (81, None),
        ),
    ],
)
def test_parse_sbatch(text, expected):
    assert PC.parse_sbatch(text) == expected


@pytest.mark.parametrize("text", ["", "Submitted batch job 5610208\n"])  # the latter: sbatch without --parsable
def test_parse_sbatch_without_a_bare_id_is_refused(text):
    with pytest.raises(ParseError):
        PC.parse_sbatch(text)


# -- capabilities ------------------------------------------------------------------------------------
def test_show_config_and_capabilities_of_the_lab():
    config = PC.parse_show_config(data("scontrol_show_config_22.05.txt"))
    assert (config["SLURM_VERSION"], config["MinJobAge"], config["SlurmctldParameters"]) == (
        "22.05.8",
        "60 sec",
        "(null)",
    )
    assert config["InteractiveStepOptions"] == "--interactive --preserve-env --pty $SHELL"
    assert config["AuthInfo"] == "socket=/var/lib/roach/lab/munge/munge.socket,cred_expire=10"  # '=' in a value
    assert "Slurmctld(primary) at vm is UP" not in str(config)
    caps = from_config(config, json=True)
    assert caps == Capabilities(
        version=(22, 5, 8),
        cluster_name="lab",
        accounting=True,
        min_job_age_s=60,
        preempt_type="preempt/qos",
        preempt_mode="REQUEUE",
        preempt_send_user_signal=False,
        kill_wait_s=30,
        max_array_size=10001,
        max_job_count=20000,
        json=True,
    )
    assert caps.preemption_requeues and caps.to_json()["version"] == (22, 5, 8)


def test_capabilities_of_a_25_11_config_which_has_preempt_parameters():
    config = PC.parse_show_config(data("scontrol_show_config_25.11.txt"))
    assert config["PreemptParameters"] == "(null)" and config["SLURM_VERSION"] == "25.11.4"
    caps = from_config(config, json=False)
    assert caps.version == (25, 11, 4) and caps.preempt_send_user_signal is False
    assert caps.preempt_type == "(null)" and not caps.preemption_requeues


@pytest.mark.parametrize("version", ["22.05", "25.11"])
@pytest.mark.parametrize(
    "key, value, sends",
    [
        ("PreemptParameters", "send_user_signal", True),  # 23.02+
        ("PreemptParameters", "reclaim_licenses,send_user_signal,min_exempt_priority=100", True),
        ("PreemptParameters", "reclaim_licenses", False),
        (
            "SlurmctldParameters",
            "enable_configless,preempt_send_user_signal",
            True,
        ),  # the old name, an alias since 23.02
        ("SlurmctldParameters", "enable_configless", False),
    ],
)
def test_capabilities_read_either_preemption_signal_setting(version, key, value, sends):
    text = data(f"scontrol_show_config_{version}.txt")
    line = f"{key:<23} = {value}"
    if f"\n{key} " in text:
        text = re.sub(rf"^{key} +=.*$", line, text, flags=re.M)
    else:  # 22.05 prints no PreemptParameters line when it is unset
        text = text.replace("PreemptMode ", f"{line}\nPreemptMode ", 1)
    assert PC.parse_show_config(text)[key] == value
    assert from_config(PC.parse_show_config(text), json=False).preempt_send_user_signal is sends


def test_capabilities_see_preempt_send_user_signal_among_other_parameters():
    text = data("scontrol_show_config_22.05.txt").replace(
        "SlurmctldParameters     = (null)", "SlurmctldParameters     = enable_configless,preempt_send_user_signal"
    )
    assert from_config(PC.parse_show_config(text), json=False).preempt_send_user_signal is True


# nordugrid/arc src/services/a-rex/infoproviders/test/slurmpy.t: `scontrol show config` of Slurm 2.3.2 (excerpt,
# lines verbatim, header and footer included).
CONFIG_2_3_2 = """Configuration data as of 2014-05-21T18:52:38
AccountingStorageType   = accounting_storage/none
ClusterName             = cluster
KillWait                = 30 sec
MaxJobCount             = 10000
MinJobAge               = 300 sec
PreemptMode             = OFF
PreemptType             = preempt/none
SLURM_VERSION           = 2.3.2

Slurmctld(primary/backup) at test-machine/(NULL) are UP/DOWN
"""

# hpcugent/vsc-administration test/slurm_scontrol.py: Slurm 20.11.6 (excerpt, with the cgroup section header).
CONFIG_20_11_6 = """Configuration data as of 2022-04-27T10:07:02
AccountingStorageEnforce = associations
ClusterName             = mycluster
SLURM_VERSION           = 20.11.6
UnkillableStepTimeout   = 120 sec

Cgroup Support Configuration:
AllowedRAMSpace         = 100.0%
"""


def test_capabilities_of_older_slurm_versions():
    old = from_config(PC.parse_show_config(CONFIG_2_3_2), json=False)
    assert old == Capabilities(
        version=(2, 3, 2),
        cluster_name="cluster",
        accounting=False,
        min_job_age_s=300,
        preempt_type="preempt/none",
        preempt_mode="OFF",
        preempt_send_user_signal=False,
        kill_wait_s=30,
        max_array_size=1001,
        max_job_count=10000,
        json=False,
    )
    assert not old.preemption_requeues
    config = PC.parse_show_config(CONFIG_20_11_6)
    assert config["AllowedRAMSpace"] == "100.0%" and "Cgroup Support Configuration:" not in config
    assert from_config(config, json=False).version == (20, 11, 6)


def test_show_config_without_a_version_is_refused():
    with pytest.raises(ParseError, match="SLURM_VERSION"):
        PC.parse_show_config("slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n")


@pytest.mark.parametrize(
    "text,expected",
    [("22.05.8", (22, 5, 8)), ("2.3.2", (2, 3, 2)), ("25.11", (25, 11, 0)), ("slurm-wlm 22.05.8", None)],
)
def test_parse_version(text, expected):
    if expected is None:
        with pytest.raises(ParseError):
            parse_version(text)
    else:
        assert parse_version(text) == expected


# -- scalar parsers on other Slurm versions -------------------------------------------------------------
@pytest.mark.parametrize(
    "text,seconds",
    [
        # lab 22.05 (squeue TimeUsed/TimeLimit)
        ("0:00", 0),
        ("1:29", 89),
        ("5:00", 300),
        ("1:30", 90),
        ("365-00:00:00", YEAR),
        ("UNLIMITED", None),
        # OSC/ood_core spec/fixtures/output/slurm/null_submit_time.txt (squeue TIME, TIME_LIMIT, TIME_LEFT)
        ("3:52:31", 13951),
        ("35:16", 2116),
        ("7:15:21", 26121),
        ("4-00:00:00", 345600),
        ("3-20:07:29", 331649),
        ("20:00:00", 72000),
        ("INVALID", None),  # TIME_LEFT of a job past its limit (TIMEOUT)
        # gc3pie/gc3pie gc3libs/backends/tests/test_slurm.py (sacct Elapsed and TotalCPU, Slurm 2.6 to 16.05)
        ("01:21:47", 4907),
        ("05:05.002", 305),
        ("58:10.420", 3490),
        ("00:00:00", 0),
        # nordugrid/arc src/services/a-rex/infoproviders/test/slurmpy.t (Slurm 2.3.2; the test expects 83 and 360)
        ("1:23", 83),
        ("6:00", 360),
        # nulls
        ("N/A", None),
        ("", None),
        ("(null)", None),
        ("Unknown", None),
        ("NONE", None),
        ("INFINITE", None),
    ],
)
def test_parse_duration(text, seconds):
    assert F.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "4 Sep 11:18"])
def test_parse_duration_refuses_what_is_not_a_duration(text):
    with pytest.raises(ParseError):
        F.parse_duration(text)


@pytest.mark.parametrize(
    "text,seconds",
    [("525600", YEAR), ("5", 300), ("1", 60), ("Partition_Limit", None), ("UNLIMITED", None), ("", None)],
)
def test_parse_minutes(text, seconds):
    assert F.parse_minutes(text) == seconds


def test_parse_time():
    assert F.parse_time("2026-11-29T23:39:38") == t("23:39:38")
    assert [F.parse_time(s) for s in ("Unknown", "None", "N/A", "", "(null)")] == [None] * 5
    # gc3pie test_slurm.py, sacct under SLURM_TIME_FORMAT=relative at CSCS: refused, never guessed
    with pytest.raises(ParseError, match="4 Sep 11:18"):
        F.parse_time("4 Sep 11:18")


@pytest.mark.parametrize(
    "text,expected",
    [
        # lab 22.05: squeue tres-alloc, then sacct AllocTRES (sorted by name)
        ("cpu=8,mem=4000M,node=1,billing=8,gres/gpu=4", F.Tres(8, 4000, 1, (("", 4),), 8)),
        ("billing=8,cpu=8,gres/gpu=4,mem=4000M,node=1", F.Tres(8, 4000, 1, (("", 4),), 8)),
        # OSC/ood_core spec/fixtures/output/slurm/squeue_gpu_types.txt: typed count next to the untyped total
        (
            "cpu=17,mem=64G,node=1,billing=17,gres/gpu=1,gres/gpu:a100=1",
            F.Tres(17, 65536, 1, (("", 1), ("a100", 1)), 17),
        ),
        ("cpu=21,mem=84567M,node=1,billing=21,gres/gpu=2", F.Tres(21, 84567, 1, (("", 2),), 21)),
        # OSC/ood_core spec/fixtures/output/slurm/owens_partitions.txt (partition TRES, excerpt of the items)
        (
            "cpu=23000,mem=120391880M,node=810,billing=23000,gres/gpfs:ess=810,gres/gpu=154,gres/gpu:p100=154,"
            "license/abaqus@osc=350",
            F.Tres(23000, 120391880, 810, (("", 154), ("p100", 154)), 23000),
        ),
        ("(null)", F.Tres()),
        ("", F.Tres()),
    ],
)
def test_parse_tres(text, expected):
    assert F.parse_tres(text) == expected


def test_tres_gpus_never_adds_the_untyped_total_to_the_typed_counts():
    assert F.parse_tres("cpu=17,mem=64G,node=1,billing=17,gres/gpu=1,gres/gpu:a100=1").gpus == 1
    assert F.parse_tres("gres/gpu=154,gres/gpu:p100=154").gpus == 154
    # where only typed counts are listed (AccountingStorageTRES naming types alone), they add up
    assert F.parse_tres("cpu=4,gres/gpu:a100=2,gres/gpu:h100=4").gpus == 6


@pytest.mark.parametrize(
    "text,mb",
    [
        ("500M", 500),
        ("64G", 65536),
        ("84567M", 84567),
        ("1T", 1048576),
        ("1612088K", 1574),
        ("72.50M", 72),
        ("4000Mc", 4000),
    ],
)
def test_parse_memory_mb(text, mb):
    assert F.parse_memory_mb(text) == mb


# OSC/ood_core spec/fixtures/output/slurm/sinfo_gres.txt (OSC Ascend/Cardinal, `sinfo -O ...,Gres,GresUsed`):
OSC_GRES_2 = (
    "gpu:a100:2(S:2,7),nsight:no_consume:1,pfsdir:scratch:no_consume:1,gpfs:scratch:no_consume:1,"
    "gpfs:ess:no_consume:1,vis:no_consume:1,overlay:apps:no_consume:1,overlay:apps_src:no_consume:1,"
    "bind:apps:no_consume:1,bind:apps_src:no_consume:1"
)
OSC_USED_0 = (
    "gpu:a100:0(IDX:N/A),nsight:0,pfsdir:scratch:0,gpfs:scratch:0,gpfs:ess:0,vis:0,overlay:apps:0,"
    "overlay:apps_src:0,bind:apps:0,bind:apps_src:0"
)


@pytest.mark.parametrize(
    "text,gpus",
    [
        (OSC_GRES_2, 2),
        (OSC_USED_0, 0),
        ("gpu:a100:3(S:2,4,7),nsight:no_consume:1,pfsdir:scratch:no_consume:1", 3),
        ("gpu:a100:4(S:0-3),nsight:no_consume:1", 4),
        ("gpu:a100:2(IDX:0,2),nsight:0,pfsdir:scratch:0", 2),
        ("gpu:a100:4(IDX:0-3),pfsdir:scratch:0,gpfs:scratch:0", 4),
        ("pfsdir:scratch:no_consume:1,gpfs:scratch:no_consume:1,gpfs:ess:no_consume:1", 0),
        # the same forms untyped, as `gpu:2(IDX:0-1)`, and the lab's fake GPUs (no index)
        ("gpu:2(IDX:0-1)", 2),
        ("gpu:a100:2(S:0-1)", 2),
        ("gpu:4", 4),
        ("gpu:3", 3),
        ("gpu:0", 0),
        # OSC/ood_core squeue_gpu_types.txt TRES_PER_NODE, lab scontrol TresPerNode, sacctmgr MaxTRESPU
        ("gres/gpu:a100:1", 1),
        ("gres:gpu:1", 1),
        ("gres/gpu=4", 4),
        ("(null)", 0),
        ("N/A", 0),
        ("", 0),
    ],
)
def test_parse_gres_gpus(text, gpus):
    assert F.parse_gres_gpus(text) == gpus


@pytest.mark.parametrize(
    "text,ref",
    [
        # facebookincubator/submitit submitit/slurm/test_slurm.py (sacct JobID of arrays)
        ("20956421_[2-4%25]", P.JobRef(20956421, None, "2-4%25")),
        ("20956421_0", P.JobRef(20956421, 0)),
        ("20_[2-7,12-17,22%56]", P.JobRef(20, None, "2-7,12-17,22%56")),
        ("12_[2,4-12]", P.JobRef(12, None, "2,4-12")),
        ("5610980", P.JobRef(5610980)),
        # lab 22.05
        ("68_[2-3%2]", P.JobRef(68, None, "2-3%2")),
        ("68_3", P.JobRef(68, 3)),
        (" 57 ", P.JobRef(57)),
    ],
)
def test_jobref_parse_and_str(text, ref):
    assert P.JobRef.parse(text) == ref
    assert P.JobRef.parse(str(ref)) == ref


@pytest.mark.parametrize("text", ["5610980.ext+", "abc", "", "12_"])
def test_jobref_refuses_what_is_not_a_job_id(text):
    with pytest.raises(ParseError):
        P.JobRef.parse(text)


@pytest.mark.parametrize(
    "text,state",
    [
        ("CANCELLED by 1000", JobState.CANCELLED),  # gc3pie test_slurm.py
        ("CANCELLED by 1001", JobState.CANCELLED),  # lab
        ("NODE_FAIL", JobState.NODE_FAIL),  # gc3pie test_slurm.py
        ("TIMEOUT", JobState.TIMEOUT),
        ("TO", JobState.TIMEOUT),
        ("R", JobState.RUNNING),  # OSC null_submit_time.txt
        ("CD", JobState.COMPLETED),  # OSC non_utf8_job_name.txt
        ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
        ("OUT_OF_ME+", JobState.OUT_OF_MEMORY),
        ("CANCELLED+", JobState.CANCELLED),  # sacct without -P cuts at 10
        ("PREEMPTED", JobState.PREEMPTED),
        ("REQUEUED", JobState.REQUEUED),
        ("COMPLETING", JobState.COMPLETING),
    ],
)
def test_job_state_parse(text, state):
    assert JobState.parse(text) is state


def test_job_state_refuses_an_unknown_state():
    # facebookincubator/submitit test_slurm.py carries "RUNING" (sic) in its sample: not a Slurm state
    with pytest.raises(ParseError, match="RUNING"):
        JobState.parse("RUNING")


@pytest.mark.parametrize(
    "text,reason",
    [
        ("Resources", PendingReason.Resources),
        ("(Resources)", PendingReason.Resources),  # squeue %R wraps it
        ("Priority", PendingReason.Priority),
        ("QOSMaxGRESPerUser", PendingReason.QOSMaxGRESPerUser),
        ("TimeLimit", PendingReason.TimeLimit),  # OSC null_submit_time.txt, on a TIMEOUT job
        ("NonZeroExitCode", PendingReason.NonZeroExitCode),  # lab `squeue -t all` of an exit 3
        ("job requeued in held state", PendingReason.JobRequeuedHeld),
        ("job_requeued_in_held_state", PendingReason.JobRequeuedHeld),  # scontrol's spelling of the same
        ("None", PendingReason.NONE),
        ("(null)", PendingReason.NONE),
        ("", PendingReason.NONE),
        ("SomeReasonOfSlurm99", PendingReason.UNKNOWN),
    ],
)
def test_pending_reason_parse(text, reason):
    assert PendingReason.parse(text) is reason


@pytest.mark.parametrize(
    "text,pair",
    [
        ("0:0", (0, 0)),
        ("3:0", (3, 0)),
        ("0:9", (0, 9)),
        ("0:15", (0, 15)),  # lab
        ("1:0", (1, 0)),
        ("0:1", (0, 1)),  # gc3pie test_slurm.py (FAILED; TIMEOUT on Slurm 14.11)
        ("0:125", (0, 125)),  # OUT_OF_MEMORY
    ],
)
def test_parse_exit_code(text, pair):
    assert F.parse_exit_code(text) == pair


def test_parse_exit_code_of_a_step_lost_with_its_node():
    # gc3pie/gc3pie gc3libs/backends/tests/test_slurm.py sacct_done_node_fail: "{jobid}.0|-2:0|CANCELLED by 1000|..."
    assert F.parse_exit_code("-2:0") == (-2, 0)


@pytest.mark.parametrize("text", ["", "0", "a:b"])
def test_parse_exit_code_refuses_garbage(text):
    with pytest.raises(ParseError):
        F.parse_exit_code(text)


def test_parse_key_values_of_other_versions():
    # hpcugent/vsc-administration test/slurm_scontrol.py: `scontrol show partition --oneliner` (Slurm 20.11)
    line = (
        "PartitionName=mypart AllowGroups=gabc,wheel AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
        "QoS=N/A DefaultTime=01:00:00 DisableRootJobs=YES ExclusiveUser=NO GraceTime=0 Hidden=NO "
        "MaxNodes=UNLIMITED MaxTime=3-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=node1,node2 "
        "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE "
        "PreemptMode=OFF State=UP TotalCPUs=32 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) "
        "DefMemPerCPU=800 MaxMemPerNode=3200 TRESBillingWeights=CPU=1,Mem=1.33G"
    )
    kv = PC.parse_key_values(line)
    assert len(kv) == 33
    assert (kv["MaxTime"], kv["TRESBillingWeights"], kv["JobDefaults"]) == ("3-00:00:00", "CPU=1,Mem=1.33G", "(null)")
    assert F.parse_duration(kv["MaxTime"]) == 3 * 86400 and F.parse_duration(kv["DefaultTime"]) == 3600
    # nordugrid/arc slurmpy.t: `scontrol show node --oneliner` of Slurm 2.3.2
    node = PC.parse_key_values(
        "NodeName=test-machine Arch=i686 CoresPerSocket=1 CPUAlloc=0 CPUErr=0 CPUTot=1 "
        "Features=(null) Gres=(null) NodeAddr=test-machine State=IDLE Reason=(null)"
    )
    assert (node["CPUTot"], node["State"], F.parse_gres_gpus(node["Gres"])) == ("1", "IDLE", 0)


def test_parse_key_values_refuses_text_that_does_not_start_with_a_key():
    with pytest.raises(ParseError):
        PC.parse_key_values("No jobs in the system")


@pytest.mark.parametrize("version", ["22.05", "25.11"])
def test_capabilities_read_the_rpc_rate_limit(version):
    text = data(f"scontrol_show_config_{version}.txt")
    assert from_config(PC.parse_show_config(text), json=False).rate_limit is None
    on = re.sub(
        r"^SlurmctldParameters +=.*$", "SlurmctldParameters     = enable_configless,rl_enable", text, flags=re.M
    )
    caps = from_config(PC.parse_show_config(on), json=False)
    assert caps.rate_limit == RateLimit(bucket_size=30, refill_rate=2, refill_period_s=1)  # Slurm's defaults
    assert caps.min_round_interval_s(3) == 1.5
    tuned = re.sub(
        r"^SlurmctldParameters +=.*$",
        "SlurmctldParameters     = rl_enable,rl_bucket_size=50,rl_refill_rate=1,rl_refill_period=5,rl_log_freq=0",
        text,
        flags=re.M,
    )
    caps = from_config(PC.parse_show_config(tuned), json=False)
    assert caps.rate_limit == RateLimit(bucket_size=50, refill_rate=1, refill_period_s=5)
    assert caps.min_round_interval_s(3) == 15.0
