"""The GPU-hour ledger from recorded output: the lab sweep of tests/test_report_lab.py (4 runs, each preempted once
at a known step; tests/data/INDEX.md), and `roach report`'s refusals."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from roach.cli.report import print_report
from roach.cli.report_plot import plot
from roach.errors import ParseError, UsageError
from roach.model.ids import RecordKind
from roach.model.job_state import JobState
from roach.model.tiers import Tier
from roach.ops.attempt_log import INTEREST, LogStop, read_attempts
from roach.ops.ledger import Job, Slot, Span, run_ledger, slots_of
from roach.ops.report import Report, Scope, merged, read_logs, report, report_json
from roach.records.store import Store
from roach.scheduler.accounting import Allocation, parse_allocations
from roach.scheduler.transport import LocalTransport
from tests.support.schemas import validate_output
from tests.support.watch import record

DATA = Path(__file__).parent / "data"
SACCT = DATA / "ledger_sacct_XD_lab_22.05_sweep_preempted.txt"
LOGS = [DATA / f"log_lab_22.05_ledger_sweep_run{i}.txt" for i in range(4)]
FORCED = [0, 7, 0, 11]  # the steps each run's preemption made it do again (tests/test_report_lab.py's GRID)
LAB_TZ = UTC  # the lab's clock, in which sacct printed its times
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def _allocations() -> list[Allocation]:
    return parse_allocations(SACCT.read_text())


def _raw_fields() -> list[list[str]]:
    return [ln.split("\x1f") for ln in SACCT.read_text().splitlines() if ln.strip()]


def test_the_ledger_sacct_gives_one_allocation_per_attempt_with_its_eligible_time():
    allocs = _allocations()
    assert len(allocs) == 8 and sorted({str(a.ref) for a in allocs}) == [f"{allocs[0].ref.job}_{i}" for i in range(4)]
    for task in range(4):
        first, second = [a for a in allocs if a.ref.task == task]
        assert first.record.state is JobState.REQUEUED and second.record.state is JobState.COMPLETED
        assert first.gpus == second.gpus == 1 and first.record.nodelist and first.started
        assert first.record.raw_id == second.record.raw_id  # a requeued task keeps its own job id
    for a, f in zip(allocs, _raw_fields(), strict=True):
        eligible, start = datetime.fromisoformat(f[-1]), datetime.fromisoformat(f[12])
        assert a.eligible == eligible and a.pending_s(NOW.replace(tzinfo=None)) == (start - eligible).total_seconds()
        assert a.gpu_seconds == int(f[9])  # 1 GPU x ElapsedRaw


def test_sacct_without_the_eligible_field_is_refused_not_misread():
    with pytest.raises(ParseError, match="expected 19 fields"):
        parse_allocations((DATA / "22.05" / "sacct_XD_preempted_then_running.txt").read_text())


def test_each_attempt_of_a_log_is_read_with_where_it_started_and_stopped():
    for log, forced in zip(LOGS, FORCED, strict=True):
        attempts = read_attempts(log.read_text().splitlines())
        (j1, r1), (j2, r2) = sorted(attempts)
        first, second = attempts[(j1, r1)], attempts[(j2, r2)]
        assert (r1, r2) == (0, 1) and j1 == j2
        assert first.stop is LogStop.PREEMPTED and first.start_step == 0
        assert second.stop is LogStop.FINISHED and second.end_step == 24 and second.total == 24
        assert second.start_step == (0 if forced else first.end_step)
        assert forced in (0, first.end_step)


def _ledgers():
    allocs = _allocations()
    out = []
    for task, log in enumerate(LOGS):
        facts = read_attempts(log.read_text().splitlines())
        mine = [a for a in allocs if a.ref.task == task]
        job = Job(f"{allocs[0].ref.job}_{task}", slots_of(mine, LAB_TZ, NOW), facts)
        out.append(run_ledger(f"run-{task}", "lab", [job], lambda p, q: q))
    return out


def test_the_ledger_counts_what_each_preemption_forced_and_sums_sacct():
    ledgers = _ledgers()
    assert [r.recomputed_steps for r in ledgers] == FORCED
    assert all(r.preemptions == 1 and r.useful_steps == 24 and r.failures == {} for r in ledgers)
    sacct_gpu_s = sum(int(f[9]) for f in _raw_fields())  # every attempt had 1 GPU
    assert sum(r.allocated_gpu_h for r in ledgers) == pytest.approx(sacct_gpu_s / 3600)
    for r, forced in zip(ledgers, FORCED, strict=True):
        parts = r.useful_gpu_h + r.recomputed_gpu_h + r.idle_gpu_h
        assert parts == pytest.approx(r.allocated_gpu_h) and (r.recomputed_gpu_h > 0) == bool(forced)
        assert set(r.pending_s_by_tier) == {"low"}
    assert sum(r.pending_s_by_tier["low"] for r in ledgers) == 2 * 13  # runs 1 and 3 waited out their BeginTime
    fields = _raw_fields()
    for r in ledgers:  # each second attempt: requeued from the first's End to its own Eligible
        task = int(r.attempts[0].job.split("_")[1])
        first, second = [f for f in fields if f[0].endswith(f"_{task}")]
        gap = (datetime.fromisoformat(second[-1]) - datetime.fromisoformat(first[13])).total_seconds()
        assert (r.attempts[0].requeue_s, r.attempts[1].requeue_s) == (0, gap) and gap >= 11


def test_the_report_json_is_what_its_schema_says_and_the_picture_is_a_png(tmp_path):
    rep = Report("sweep-x", Scope.SWEEP, tuple(_ledgers()), NOW.timestamp())
    data = {"schema": "roach.report/1", **report_json(rep)}
    validate_output("report", data)
    assert data["total"]["recomputed_steps"] == sum(FORCED) and data["total"]["attempts"] == 8
    plot(rep, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unknown_name_is_refused_with_the_experiments_sweeps_and_runs_there(tmp_path, monkeypatch):
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        store.add(replace(record(7, "sw-1"), task=1, kind=RecordKind.TASK))
        store.set_experiment("lab", 7, "exp-a")
        with pytest.raises(UsageError) as err:
            report("nope", store=store)
        before = store.all_jobs()
    assert "no run, sweep or experiment 'nope'" in err.value.message
    assert "exp-a" in (err.value.hint or "") and "sw" in (err.value.hint or "") and "sw-1" in (err.value.hint or "")
    monkeypatch.setenv("ROACH_STORE", str(path))
    out = CliRunner().invoke(cli, ["report", "nope", "--json", "--plot", str(tmp_path / "r.png")])
    assert out.exit_code == 2 and "exp-a" in out.output, out.output
    assert not (tmp_path / "r.png").exists()
    with Store(path) as store:
        assert store.all_jobs() == before


def test_plot_without_matplotlib_exits_7_before_anything_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "-packages" not in p])
    out = CliRunner().invoke(cli, ["report", "nope", "--plot", str(tmp_path / "r.png")])
    assert out.exit_code == 7 and "roach[plot]" in out.output, out.output
    assert list(tmp_path.iterdir()) == []  # no store made, no picture


def test_plot_to_a_missing_directory_or_not_a_png_exits_2(tmp_path, monkeypatch):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    for bad in (tmp_path / "no" / "r.png", tmp_path / "r.jpg"):
        out = CliRunner().invoke(cli, ["report", "nope", "--plot", str(bad)])
        assert out.exit_code == 2 and str(bad) in out.output, out.output
    assert list(tmp_path.iterdir()) == []


def test_a_tier_is_named_from_the_clusters_tiers():
    tiers = (Tier("high", qos="high"), Tier("low", qos="low"))
    allocs = _allocations()
    led = run_ledger(
        "r",
        "lab",
        [Job("x", slots_of(allocs[:1], LAB_TZ, NOW))],
        lambda p, q: next(t.name for t in tiers if t.qos == q),
    )
    assert led.attempts[0].tier == "low" and led.attempts[0].start_step is None  # no log: no steps, all idle
    assert led.idle_gpu_h == pytest.approx(led.allocated_gpu_h)
    assert json.dumps(report_json(replace(Report("r", Scope.RUN, (led,), 0.0))))


def _span(state: JobState, start: float, elapsed: int, gpus: int = 4) -> Span:
    return Span(state, "n1", gpus, "gpu", "low", start, start, start + elapsed, elapsed, 0.0)


def test_a_wall_clock_stop_and_a_node_failure_are_read_from_real_logs():
    """Logs of the lab (bench 7's faults): a USR1 at the wall clock, then a node that died without a line."""
    wall = read_attempts((DATA / "log_lab_22.05_wall_clock.txt").read_text().splitlines())
    first, second = wall[(4360, 0)], wall[(4360, 1)]
    assert first.stop is LogStop.WALL_CLOCK and first.end_step == 7 and second.start_step == 7
    assert second.stop is LogStop.FINISHED and second.end_step == 40 == second.total
    t0 = first.points[0][0] - 1
    jobs = [
        Job(
            "4360",
            [
                Slot(_span(JobState.REQUEUED, t0, 3), 0, (4360, 0)),
                Slot(_span(JobState.COMPLETED, t0 + 17, 7), 1, (4360, 1)),
            ],
            wall,
        )
    ]
    led = run_ledger("r", "lab", jobs, lambda p, q: q)
    assert (led.wall_clock_stops, led.preemptions, led.failures, led.recomputed_steps) == (1, 0, {}, 0)
    assert led.useful_steps == 40

    died = read_attempts((DATA / "log_lab_22.05_node_failure.txt").read_text().splitlines())
    first, second = died[(4355, 0)], died[(4355, 1)]
    assert first.stop is LogStop.NONE and first.end_step == 10  # its last checkpoint: no line says where it died
    assert second.start_step == 12 and first.nodes == "n1" and second.nodes == "n2"
    t0 = first.points[0][0]
    jobs = [
        Job(
            "4355",
            [
                Slot(_span(JobState.NODE_FAIL, t0, 2), 0, (4355, 0)),
                Slot(_span(JobState.COMPLETED, t0 + 13, 6), 1, (4355, 1)),
            ],
            died,
        )
    ]
    led = run_ledger("r", "lab", jobs, lambda p, q: q)
    assert led.failures == {"NODE_FAIL": 1} and led.preemptions == 0 and led.recomputed_steps == 0


def test_the_text_report_has_a_row_per_run_its_attempts_and_the_totals(capsys):
    print_report(Report("sweep-x", Scope.SWEEP, tuple(_ledgers()), NOW.timestamp()))
    text = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.startswith(("run-", "total"))}
    assert [rows[f"run-{i}"][6] for i in range(4)] == [str(f) for f in FORCED]  # recomputed steps
    assert rows["total"][1:3] == ["8", f"{sum(r.allocated_gpu_h for r in _ledgers()):.3f}"]
    assert "11011_1 #1 low on n1: COMPLETED (finished), 1 GPU, steps 0-24, requeued 11s, queued 13s" in text


def test_one_command_reads_every_logs_lines_of_interest_and_the_clocks_offset(tmp_path):
    logs = [str(p) for p in LOGS] + [str(tmp_path / "not-there.out")]
    tz, texts = read_logs(LocalTransport(env={"TZ": "Europe/Paris"}), logs)
    assert tz.utcoffset(None).total_seconds() in (3600, 7200) and texts[-1] == ""
    for path, text in zip(LOGS, texts, strict=False):
        kept = text.splitlines()
        assert kept == [ln for ln in path.read_text().splitlines() if re.search(INTEREST, ln)]
        assert read_attempts(kept) == read_attempts(path.read_text().splitlines())
        assert not [ln for ln in kept if "waiting in step" in ln]  # the function's own lines stay on the cluster


def test_a_run_read_on_two_clusters_is_one_ledger_of_every_attempt():
    first, second = _ledgers()[:2]
    both = merged(first, replace(second, run_id=first.run_id, cluster="ilc", steps_total=None))
    assert both.cluster == "lab,ilc" and both.attempts == first.attempts + second.attempts
    assert both.steps_total == 24 and both.allocated_gpu_h == first.allocated_gpu_h + second.allocated_gpu_h
    assert merged(both, replace(first, cluster="lab")).cluster == "lab,ilc"


def test_a_finished_attempt_slurm_accounts_preempted_is_not_counted_as_a_preemption():
    """Slurm 24.11 requeues once more, and accounts PREEMPTED, the run that follows a preemption with a grace
    time: where the log says that attempt finished, the ledger counts no preemption."""
    ledger = _ledgers()[1]
    last = ledger.attempts[-1]
    assert last.stop is LogStop.FINISHED
    again = replace(ledger, attempts=(*ledger.attempts[:-1], replace(last, state=JobState.PREEMPTED)))
    assert again.preemptions == ledger.preemptions


def test_a_preemption_slurm_accounts_requeued_is_logged_and_counted_as_a_preemption():
    """22.05 accounts a QOS preemption it requeued at once REQUEUED (each first attempt here): rank 0, finding the
    job requeued and asking sacct why, must still log the stop as a preemption, or the ledger counts none."""
    from roach.runtime.attempts import cause_words

    first = _allocations()[0]
    assert first.record.state is JobState.REQUEUED
    kind, said, counted = cause_words(first.record.state)
    assert (kind, counted) == ("preempted", "preemption")
    lines = [
        "roach: attempt 1 of run r: job 11012 on n1 (restart count 0) at 2026-12-05T12:07:55Z",
        "0: 2026-12-05T12:07:56Z roach rank 0: step 6/24",
        f"0: 2026-12-05T12:08:09Z roach rank 0: {said} at step 7 (checkpointed, TERM): Slurm requeued job 11012 "
        f"already (restart count 1; {counted} 1)",
    ]
    assert read_attempts(lines)[(11012, 0)].stop is LogStop.PREEMPTED


def test_a_preempted_attempt_sacct_keeps_with_no_start_is_counted_from_the_runs_log():
    """22.05 under load may keep a preempted array task's first allocation as REQUEUED with Start ``Unknown`` and
    0 s elapsed (seen on the lab: tasks 0-2 of a preempted 4-task sweep, whose next attempts resumed past step 0).
    The run's log says that attempt ran and was preempted: the ledger counts it from there."""
    fields = _raw_fields()
    for f in fields:
        if f[7] == "REQUEUED":
            f[9], f[12], f[15] = "0", "Unknown", "None assigned"  # ElapsedRaw, Start, NodeList
    allocs = parse_allocations("\n".join("\x1f".join(f) for f in fields) + "\n")
    requeued = [a for a in allocs if a.record.state is JobState.REQUEUED]
    assert not any(a.started for a in requeued)
    for task, log in enumerate(LOGS):
        mine = [a for a in allocs if a.ref.task == task]
        job = Job(
            f"{allocs[0].ref.job}_{task}", slots_of(mine, LAB_TZ, NOW), read_attempts(log.read_text().splitlines())
        )
        ledger = run_ledger(f"run-{task}", "lab", [job], lambda p, q: q)
        assert ledger.preemptions == 1, task
        assert ledger.recomputed_steps == FORCED[task], task
        assert ledger.attempts[0].stop is LogStop.PREEMPTED, task
        assert ledger.attempts[0].nodes == "n1", task  # where the log says it ran
