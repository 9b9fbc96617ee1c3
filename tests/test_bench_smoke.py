"""The benchmark harness's pure parts: the RPC statistics parser and the tables it renders.

No Slurm and no timing here: the benchmarks themselves run with `make bench` and never pass or fail on
a number.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from bench import rpcstats
from bench.__main__ import parse_args
from bench.b13_score import inside, score, tables
from bench.report import Section
from bench.stats import Row, Summary, comparison_table, paired_ratios, render_ratio
from roach.scheduler.parse_control import NodeRecord

SDIAG = """\
*******************************************************
sdiag output at Mon Nov 30 00:26:39 2026 (1795998399)
Data since      Mon Nov 30 00:00:00 2026 (1795996800)
*******************************************************
Server thread count:  3
Agent queue size:     0

Jobs submitted: 1751
Jobs started:   200

Main schedule statistics (microseconds):
\tLast cycle:   10
\tMax cycle:    1269

Remote Procedure Call statistics by message type
\tREQUEST_PARTITION_INFO                  ( 2009) count:2842   ave_time:187    total_time:532455
\tREQUEST_FED_INFO                        ( 2049) count:2171   ave_time:194    total_time:421335
\tREQUEST_JOB_USER_INFO                   ( 2039) count:224    ave_time:275    total_time:61627

Remote Procedure Call statistics by user
\troachlab        (    1001) count:9154   ave_time:292    total_time:2678072
\troot            (       0) count:1839   ave_time:361    total_time:665318
\troachbench      (    1002) count:6      ave_time:250    total_time:1500

Pending RPC statistics
\tREQUEST_TERMINATE_JOB                   ( 6011) count:1
"""

DBD = """\
*******************************************************************
sacctmgr show stats output at Mon Nov 30 00:26:49 2026 (1795998409)
Data since                    Sun Nov 29 23:28:06 2026 (1795994886)
All statistics are in microseconds
*******************************************************************

Internal DBD rollup last ran Mon Nov 30 00:00:00 2026 (1795996800)
\tLast cycle:   5304

Remote Procedure Call statistics by message type
\tDBD_STEP_START           ( 1442) count:779    ave_time:1885   total_time:1468947
\tDBD_GET_JOBS_COND        ( 1444) count:351    ave_time:1373   total_time:482113

Remote Procedure Call statistics by user
\troot                (         0) count:3325   ave_time:1960   total_time:6517283
\troachlab            (      1001) count:1718   ave_time:684    total_time:1175924
"""


def _bump(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_sdiag_sections_by_type_and_by_user():
    s = rpcstats.parse(SDIAG)
    assert s.since == 1795996800
    assert s.by_type == {"REQUEST_PARTITION_INFO": 2842, "REQUEST_FED_INFO": 2171, "REQUEST_JOB_USER_INFO": 224}
    assert s.by_user == {"roachlab": 9154, "root": 1839, "roachbench": 6}
    assert s.time_by_user["roachbench"] == 1500
    assert "REQUEST_TERMINATE_JOB" not in s.by_type  # pending RPCs are not counts of served ones


def test_sacctmgr_stats_parse_the_same_way():
    s = rpcstats.parse(DBD)
    assert s.since == 1795994886
    assert s.by_type["DBD_GET_JOBS_COND"] == 351
    assert s.user("roachlab") == 1718 and s.user("nobody") == 0


def test_difference_of_two_snapshots():
    after = _bump(
        _bump(SDIAG, "count:6      ave_time:250    total_time:1500", "count:9 ave_time:250 total_time:2400"),
        "count:224    ave_time:275",
        "count:227    ave_time:275",
    )
    d = rpcstats.parse(after).minus(rpcstats.parse(SDIAG))
    assert d.by_user == {"roachbench": 3}
    assert d.by_type == {"REQUEST_JOB_USER_INFO": 3}
    assert d.time_by_user == {"roachbench": 900}


@pytest.mark.parametrize("change", ["since", "counter"])
def test_a_reset_between_snapshots_is_refused(change):
    if change == "since":
        after = _bump(SDIAG, "(1795996800)", "(1796083200)")
    else:
        after = _bump(SDIAG, "count:2842", "count:12")
    with pytest.raises(rpcstats.StatsReset):
        rpcstats.parse(after).minus(rpcstats.parse(SDIAG))


@pytest.mark.parametrize("text", ["", "sdiag: error: Unable to contact slurm controller\n"])
def test_output_without_rpc_sections_is_an_error(text):
    with pytest.raises(rpcstats.StatsError, match="Remote Procedure Call"):
        rpcstats.parse(text)


def test_a_garbled_entry_names_the_line():
    bad = SDIAG.replace("\tREQUEST_FED_INFO                        ( 2049) count:2171", "\tREQUEST_FED_INFO oops")
    with pytest.raises(rpcstats.StatsError, match="REQUEST_FED_INFO oops"):
        rpcstats.parse(bad)


def test_summary_median_min_max():
    s = Summary.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)
    assert s.render("s") == "2.50 s (1–10)"
    assert Summary.of([4, 4]).render() == "4"
    with pytest.raises(ValueError):
        Summary.of([])


def test_ratios_are_paired_by_repetition():
    assert paired_ratios([10, 20, 30], [1, 2, 5]) == [10, 10, 6]
    assert paired_ratios([3, 0], [0, 0]) == [math.inf]  # 0/0 says nothing; x/0 is infinitely more
    assert render_ratio([10, 10, 6]) == "10× (6×–10×)"
    assert render_ratio([math.inf, math.inf]) == "∞ (roach: 0)"
    assert render_ratio([]) == "–"


def test_comparison_table():
    rows = [
        Row("RPCs per round", {"roach": [3, 3], "loop": [30, 33]}),
        Row("wall", {"roach": [0.5, 1.5], "loop": [2.0, 3.0]}, "s"),
        Row("only a baseline", {"roach": [], "loop": [1, 1]}),
    ]
    table = comparison_table(rows, ["roach", "loop"])
    lines = table.splitlines()
    assert lines[0] == "|  | roach | loop | loop / roach |"
    assert lines[1] == "| --- | --- | --- | --- |"
    assert lines[2] == "| RPCs per round | 3 | 31.5 (30–33) | 10.5× (10×–11×) |"
    assert lines[3] == "| wall | 1 s (0.5–1.50) | 2.50 s (2–3) | 3× (2×–4×) |"
    assert lines[4] == "| only a baseline | – | 1 | – |"


def test_section_renders_its_sizes_and_plot():
    sec = Section(
        2,
        "Controller load",
        "| a |\n",
        {"sizes": "10,50", "reps": 2},
        smoke=True,
        plot="load.png",
        when="2026-11-30 00:00 UTC",
    )
    text = sec.render()
    assert text.startswith("## 2. Controller load\n")
    assert "**smoke sizes**" in text and "sizes=10,50, reps=2" in text
    assert text.rstrip().endswith("![Controller load](load.png)")


def test_a_section_keeps_what_a_person_wrote_about_it(tmp_path):
    """A run rewrites a section from its figures; the reading someone wrote beside them lives in notes/<n>.md, and
    every rendering of the section carries it (a paragraph typed into results.md was lost at the next run)."""
    (tmp_path / "4.md").write_text("Measured on an idle machine: the per-run cost is flat.\n")
    four = Section(4, "Sweep submission", "| the table |\n", plot="sweep.png", when="t1").render(notes=tmp_path)
    assert four.index("| the table |") < four.index("Measured on an idle machine") < four.index("![Sweep")
    assert "idle machine" not in Section(5, "Preemption loss", "| p |\n", when="t1").render(notes=tmp_path)


def test_command_line_defaults_and_smoke():
    full = parse_args([])
    assert full.sizes == [10, 100, 1000] and full.scale_sizes == [100, 1000, 10000]
    assert full.preempt_modes == ["term", "user-signal"] and full.reps is None
    assert (full.sweep_runs, full.sweep_big_runs, full.sweep_max_array_size) == (1000, 10000, 1001)
    smoke = parse_args(["--smoke", "--sizes=5", "--only", "2,6"])
    assert smoke.sizes == [5] and smoke.scale_sizes == [100, 1000] and smoke.reps == 2
    assert smoke.only == [2, 6] and smoke.preempt_modes == ["as-is"]
    assert (smoke.sweep_runs, smoke.sweep_big_runs, smoke.sweep_max_array_size) == (10, 30, 11)  # 3 arrays
    assert parse_args(["--smoke", "--sweep-big-runs=0"]).sweep_big_runs == 0
    assert (full.viewers, full.viewer_tasks, smoke.viewers, smoke.viewer_tasks) == ([1, 5, 20], 1000, [1, 5], 100)
    assert (full.rest_sizes, smoke.rest_sizes) == ([1000, 10000], [100])
    assert (full.estimate_jobs, smoke.estimate_jobs) == (200, 30)
    assert (full.restart_sizes, full.restart_big_reps, smoke.restart_sizes) == ([100, 1000], 1, [100])
    assert (full.crowd_runs, smoke.crowd_runs, full.crowd_warmup, smoke.crowd_warmup) == (48, 12, 120.0, 30.0)
    with pytest.raises(SystemExit):
        parse_args(["--only", "15"])  # benchmarks 1-14 exist
    with pytest.raises(SystemExit):
        parse_args(["--preempt-modes", "sometimes"])


def test_the_fault_suite_row_reads_pytests_junit_xml(tmp_path):
    from bench.b7_faults import read_junit, table

    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.faults.test_requeue" name="test_a"/>'
        '<testcase classname="tests.faults.test_requeue" name="test_b"><failure message="x"/></testcase>'
        '<testcase classname="tests.faults.test_prolog" name="test_c"><skipped message="s"/></testcase>'
        '<testcase classname="tests.faults.test_prolog" name="test_d"><error message="e"/></testcase>'
        "</testsuite></testsuites>"
    )
    out = read_junit(xml, 61.0)
    assert (out.passed, out.failed, out.skipped) == (1, ["test_requeue::test_b", "test_prolog::test_d"], 1)
    assert out.cell == "1 of 3 tests passed, 1 skipped: **failed** `test_requeue::test_b`, `test_prolog::test_d`"
    rows = {"24.11.5": {"cell": "3 of 3 tests passed", "seconds": 600}, "22.05.8": {"cell": out.cell, "seconds": 61}}
    text = table(rows)
    assert text.splitlines()[0] == "| Slurm | fault scenarios passed, ledger intact | wall time |"
    assert text.splitlines()[2].startswith("| 22.05.8 |") and text.splitlines()[3].startswith("| 24.11.5 | 3 of 3")


def test_the_hung_ranks_timings_are_read_from_its_tests_junit_properties(tmp_path):
    from bench.b7_faults import HUNG_RANK, hung_rank, hung_rank_text

    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        f'<testcase classname="tests.faults.test_hung_rank" name="{HUNG_RANK}"><properties>'
        '<property name="stop_to_requeue_s" value="21.4"/><property name="stop_to_resumed_s" value="38.0"/>'
        '<property name="stall_limit_s" value="5.0"/></properties></testcase>'
        "</testsuite></testsuites>"
    )
    assert hung_rank(xml) == {"stop_to_requeue_s": 21.4, "stop_to_resumed_s": 38.0, "stall_limit_s": 5.0}
    assert "21 s from the stop to the watch's requeue, 38 s to the resumed step" in hung_rank_text(hung_rank(xml))


def test_a_hung_rank_test_that_failed_gives_no_timings(tmp_path):
    from bench.b7_faults import HUNG_RANK, hung_rank

    xml = tmp_path / "junit.xml"
    xml.write_text(
        f'<testsuites><testsuite><testcase classname="c" name="{HUNG_RANK}"><properties>'
        '<property name="stop_to_requeue_s" value="21.4"/></properties><failure message="x"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert hung_rank(xml) == {}


def test_a_run_of_one_benchmark_keeps_the_figures_results_md_holds_for_the_others(tmp_path):
    """The saved sections live in the clone that ran them (bench/out); results.md is what a fresh clone has. A
    run of `--only 4` there must keep sections 5 and 8 and their summary rows, not write them "not measured"."""
    from bench.report import write_results

    old = [
        Section(4, "Sweep submission", "old four", summary=[_row("sweep wall", "9 s")], when="t0"),
        Section(5, "Preemption loss", "the preemption tables", when="t0"),
        Section(8, "The store at scale", "the store table", summary=[_row("ls", "553 ms")], when="t0"),
    ]
    titles = {4: ("Sweep submission", "x"), 5: ("Preemption loss", "x"), 7: ("Fault suite", "x"), 8: ("Store", "x")}
    path = tmp_path / "results.md"
    write_results(path, old, titles, "22.05.8")
    new = Section(4, "Sweep submission", "new four", summary=[_row("sweep wall", "1 s")], when="t1")
    write_results(path, [new], titles, "22.05.8")
    text = path.read_text()
    assert "new four" in text and "old four" not in text
    assert "the preemption tables" in text and "the store table" in text
    assert text.count("_Not measured:") == 1  # only 7, which was never measured
    summary = text.split("## 4.")[0]
    assert "| sweep wall (§4) | 1 s |" in summary and "9 s" not in summary
    assert "| ls (§8) | 553 ms |" in summary
    assert summary.index("(§4)") < summary.index("(§8)")


def _row(figure: str, roach: str) -> dict:
    return {"figure": figure, "roach": roach, "baseline": "b", "ratio": "r", "target": "t", "holds": False}


def test_the_process_clock_reads_perfs_fork_lines():
    """``perf script --ns -F time,trace`` as perf 6.1 printed it here for sched:sched_process_fork; a pid forked
    twice (pids are reused) keeps both times, and a line that is no fork is left out."""
    from bench.execclock import parse

    seen = parse(
        "24101.089102506: comm=bash pid=19562 child_comm=bash child_pid=19564\n"
        "24101.090000001: comm=slurmstepd pid=31469 child_comm=slurmstepd child_pid=31486\n"
        "24109.500000000: comm=bash pid=19562 child_comm=bash child_pid=19564\n"
        "Warning: some events lost\n"
    )
    assert seen.forked == {19564: [24101.089102506, 24109.5], 31486: [24101.090000001]}
    assert seen.started(19564, before=24105.0) == 24101.089102506
    assert seen.started(31486, before=24100.0) is None


def test_a_summary_figure_without_a_target_of_its_own_holds_nothing_and_names_the_figure_that_covers_it():
    """issue 18's table names figures that its targets cover only as part of a larger one: such a row shows its
    ratio but neither a target nor a yes/no of its own (a "yes" there would claim a target nobody set)."""
    from bench.report import summary_table
    from bench.stats import target_row

    part = target_row(
        "script -> python", [0.020, 0.019], [0.021, 0.018], "submitit", "ms", scale=1000, part_of="start-up"
    )
    whole = target_row("start-up", [0.06, 0.07], [0.12, 0.11], "submitit", "ms", max_ratio=1.0, scale=1000)
    assert part["holds"] is None and part["target"] == "none of its own: a part of start-up"
    assert whole["holds"] is True and whole["target"] == "<= 1x submitit"
    table = summary_table([Section(1, "Submit latency", "body", summary=[part, whole])])
    assert (
        "| script -> python (§1) | 19.5 ms | 19.5 ms (submitit) | 1.00x | none of its own: a part of start-up | – |"
        in table
    )
    assert "| start-up (§1) | 65 ms | 115 ms (submitit) | 0.57x | <= 1x submitit | yes |" in table


def test_the_estimates_are_scored_against_the_next_start_beside_slurms():
    """Benchmark 13's scoring on the lab's recorded cluster queue (tests/data/estimate/): one moment, two jobs that
    started later, one of them inside roach's interval, Slurm's answer beside each."""
    queue = (Path(__file__).parent / "data" / "estimate" / "cluster_queue_22.05.txt").read_text()
    t = 1796480750.0
    nodes = [NodeRecord(n, "mixed", 0, 8, 4, 0, ("gpu",), 16000, 0).__dict__ for n in ("n1", "n2")]
    tiers = [{"name": "high", "qos": "high", "gpu_cap": 4}, {"name": "low", "qos": "low", "preemptible": True}]
    lines = [
        {"nodes": nodes, "tiers": tiers},
        {"t": t, "t_round": t - 1, "queue": queue, "start": "1026|2026-12-05T14:50:00\n1035|N/A\n", "views": {}},
    ]
    starts = {"1026": [t - 100, t + 200.0], "1035": [t + 900.0]}  # 1026's attempt before the moment does not count
    scored = {s.job: s for s in score(lines, starts)}
    assert set(scored) == {"1026", "1035"}
    assert scored["1026"].real == 200.0 and scored["1026"].slurm is not None and scored["1035"].slurm is None
    assert inside(scored["1026"]) and not inside(scored["1035"])  # 1035's latest is before 900 s
    body, summary, params = tables(list(scored.values()))
    assert (
        params == {"estimates": 2}
        and "| real start inside roach's interval [earliest, latest], to sacct's 1 s | 50% |" in body
    )
    assert [r["holds"] for r in summary][1] is False


def test_the_crowds_run_lengths_are_heavy_tailed_and_the_same_for_every_method():
    from bench.b14_crowd import lengths

    first = lengths(200, seed=1)
    assert first == lengths(200, seed=1)
    assert min(first) == 10
    assert max(first) > 5 * statistics.median(first)  # a tail: the longest runs are many times the median


def test_the_estimates_summary_holds_the_intervals_width_against_four_times_the_wait():
    from bench.b13_score import Scored, tables

    # two estimates: real waits 100 s and 300 s (median 200 s); widths 500 s and 1100 s (median 800 s = 4x)
    scored = [Scored(0.0, "1", "low", 100.0, 90.0, 0.0, 500.0, 80.0, 90.0),
              Scored(0.0, "2", "low", 300.0, 310.0, 100.0, 1200.0, 280.0, 310.0)]  # fmt: skip
    _, summary, _ = tables(scored)
    (row,) = [r for r in summary if "width" in r["figure"]]
    assert (row["roach"], row["baseline"], row["holds"]) == ("800.0 s", "200.0 s (the real wait)", True)


def test_an_unknown_crowd_method_is_refused_naming_the_valid_ones():
    from bench.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--crowd-methods", "roach,nope"])
    assert parse_args(["--crowd-methods", "roach-low"]).crowd_methods == "roach-low"


def test_a_crowd_method_stopped_at_its_deadline_counts_each_run_not_completed_as_ending_then():
    from bench.b14_crowd import _completion

    ends = {"r0": {"end": 110.0, "state": "COMPLETED"}, "r1": {"end": 150.0, "state": "CANCELLED"}}
    got = _completion(ends, 100.0, 3, censored_s=1800.0)  # r2 never started: no allocation, no end
    assert got == {"makespan_s": 1800.0, "mean_completion_s": (10.0 + 1800.0 + 1800.0) / 3, "completed": 1}


def test_the_timed_views_say_their_cpu_beside_their_wall_time():
    from bench.b14_crowd import _views_text

    text = _views_text({"ls": [0.2, 0.3, 0.25], "ls cpu": [0.09, 0.1, 0.11]})
    assert "`roach ls`: median 250 ms, most 300 ms (3 looks; CPU median 100 ms)" in text


@pytest.mark.parametrize(("looks", "holds"), [([0.12, 0.139, 0.4], True), ([0.14, 0.151, 0.16], False)])
def test_the_summary_holds_ls_beside_the_crowd_to_150_ms(looks, holds):
    from bench.b14_crowd import ls_row

    assert ls_row(looks)["holds"] is holds


def test_a_timed_process_gives_its_own_cpu_not_the_benchs(tmp_path, monkeypatch):
    import os
    import sys

    from bench import b14_crowd

    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
    monkeypatch.setattr(
        b14_crowd, "_roach_argv", lambda lab, store, *a: ([sys.executable, "-c", spin], dict(os.environ))
    )
    wall, cpu = b14_crowd._timed_roach(None, tmp_path / "store", "ls")
    assert 0.2 <= cpu < 0.5


def test_a_crowd_methods_figures_are_kept_where_bench_out_does_not_exist_yet(tmp_path, monkeypatch):
    """A fresh clone has no bench/out: the roach method ran 12 minutes on 26.05 and then lost its figures."""
    import json

    from bench import b14_crowd, labenv

    monkeypatch.setattr(labenv, "OUT", tmp_path / "out")
    b14_crowd.keep("roach", {"makespan_s": 600.0, "completed": 48}, log=lambda *_: None)
    assert json.loads((tmp_path / "out" / "b14-roach.json").read_text())["completed"] == 48


def _crowd_lab(tmp_path):
    from bench.labenv import Lab
    from roach.lab.config import LabConfig

    return Lab(LabConfig(state_dir=str(tmp_path / "lab"), port_base=16817, nodes=16))


def test_side_by_side_each_method_gets_a_lab_of_its_own_ports_and_state(tmp_path):
    from bench.b14_labs import SideBySide, _plan

    plan = _plan(_crowd_lab(tmp_path), SideBySide(), ["roach", "static-low", "submitit"], None, log=print)
    assert len({ml.port_base for ml in plan}) == 3
    assert len({ml.state for ml in plan}) == 3
    assert min(ml.port_base for ml in plan) >= 16817 + 1000
    assert tmp_path / "lab-crowd-static-low" in {ml.state for ml in plan}


def test_side_by_side_leaves_out_slurm_native_where_slurm_refuses_a_qos_list_and_no_release_lab_is_named(tmp_path):
    from bench.b14_labs import SideBySide, _plan

    said: list[str] = []
    plan = _plan(_crowd_lab(tmp_path), SideBySide(), ["roach", "slurm-native"], "refused", log=said.append)
    assert [ml.method for ml in plan] == ["roach"]
    assert "--crowd-native-slurm" in said[0]


def test_side_by_side_runs_slurm_native_on_the_named_release_lab(tmp_path):
    from bench.b14_labs import SideBySide, _plan

    how = SideBySide("26.05", str(tmp_path / "rel"))
    (native,) = _plan(_crowd_lab(tmp_path), how, ["slurm-native"], "refused", log=print)
    assert native.release is not None
    assert native.release.state == tmp_path / "rel"


def test_a_native_release_without_side_by_side_is_refused():
    from bench.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--crowd-native-slurm", "26.05"])
    assert parse_args(["--crowd-labs", "--crowd-native-slurm", "26.05"]).crowd_native_slurm == "26.05"


def test_one_method_of_the_crowd_refuses_an_unknown_method():
    from bench.b14_method import parse_args

    with pytest.raises(SystemExit):
        parse_args(["nope", "--out", "x", "--trace", "t", "--offset", "0", "--speed", "1", "--seed", "1",
                    "--warmup", "1", "--runs", "1"])  # fmt: skip
