"""Real traces read as other people's load (`roach lab load`): each format, the jobs it plays and how."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.lab.trace import Lab, TraceError, TraceFormat, detect, plan_load, read_trace

TRACES = Path(__file__).parent / "data" / "traces"
LAB = Lab(nodes=2, gpus_per_node=4)
BIG = Lab(nodes=64, gpus_per_node=16)  # where every job of an excerpt is played (none sampled out)


def test_each_excerpt_is_detected_by_its_name_and_header():
    got = {p.name: detect(p) for p in sorted(TRACES.iterdir())}
    assert got == {
        "alibaba-classes.csv": TraceFormat.ALIBABA,
        "alibaba-head60.csv": TraceFormat.ALIBABA,
        "helios-crowd.csv": TraceFormat.GPU_CSV,
        "helios-head40.csv": TraceFormat.GPU_CSV,
        "kth-sp2-head40.swf": TraceFormat.SWF,
        "philly-head40.csv": TraceFormat.GPU_CSV,
    }


def test_helios_skips_its_cpu_jobs():
    jobs = read_trace(TRACES / "helios-head40.csv")
    assert len(jobs) == 40 - 5  # five of the first 40 ask for no GPU


def test_helios_submission_times_add_up_the_intervals():
    jobs = read_trace(TRACES / "helios-head40.csv")
    assert (jobs[0].line, jobs[0].submit_s, jobs[1].submit_s) == (2, 0.0, 94.0)


def test_philly_keeps_a_jobs_gpus_and_nodes():
    second = read_trace(TRACES / "philly-head40.csv")[1]
    assert (second.gpus, second.nodes, second.run_s) == (8, 4, 14405.0)


def test_swf_reads_processors_run_and_requested_time():
    first = read_trace(TRACES / "kth-sp2-head40.swf")[0]
    assert (first.line, first.gpus, first.run_s, first.requested_s, first.user) == (25, 4, 3477.0, 53940.0, "12")


def test_alibaba_skips_pods_never_scheduled():
    lines = {j.line for j in read_trace(TRACES / "alibaba-classes.csv")}
    assert lines == {5, 6, 7, 8, 9}


def test_alibaba_skips_cpu_pods():
    assert all(j.gpus > 0 for j in read_trace(TRACES / "alibaba-head60.csv"))


def test_alibaba_classes_pick_the_qos():
    plan = plan_load(read_trace(TRACES / "alibaba-classes.csv"), BIG, load=4)
    assert sorted({(p.line, p.qos) for p in plan}) == [
        (5, "low"), (6, "low"), (7, "low"), (8, "high"), (9, "high"),
    ]  # fmt: skip


def test_a_bad_line_is_refused_with_its_number(tmp_path):
    bad = tmp_path / "t.csv"
    text = (TRACES / "helios-head40.csv").read_text().splitlines()
    text[7] = text[7].replace(",Pass", ",Pass,extra")
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(TraceError, match=r"t\.csv line 8: 10 fields, the header names 9"):
        read_trace(bad)


def test_a_bad_swf_number_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "t.swf"
    text = (TRACES / "kth-sp2-head40.swf").read_text().replace("  599850 ", "  5998x0 ", 1)
    bad.write_text(text)
    with pytest.raises(TraceError, match=r"t\.swf line 25: submit time '5998x0' is not a number"):
        read_trace(bad)


def test_an_unknown_file_names_the_formats(tmp_path):
    other = tmp_path / "x.csv"
    other.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(Exception, match="not a trace roach reads"):
        detect(other)


def test_speed_divides_the_times():
    jobs = read_trace(TRACES / "helios-head40.csv")
    plan = plan_load(jobs, BIG, speed=10, load=4)
    assert (plan[1].at_s, plan[1].run_s) == (9.4, 8.7)


def test_a_run_under_a_second_plays_one_second():
    plan = plan_load(read_trace(TRACES / "helios-head40.csv"), BIG, speed=1000, load=4)
    assert min(p.run_s for p in plan) == 1.0


def test_a_job_larger_than_the_lab_is_not_played():
    plan = plan_load(read_trace(TRACES / "philly-head40.csv"), LAB, load=4)
    assert max(p.gpus for p in plan) <= LAB.gpus


def test_a_job_that_fits_the_lab_keeps_its_gpus_and_nodes():
    (second,) = [p for p in plan_load(read_trace(TRACES / "philly-head40.csv"), BIG, load=4) if p.line == 3]
    assert (second.nodes, second.gpus_per_node) == (4, 2)


def test_a_time_limit_is_twice_the_run_in_whole_minutes_without_a_requested_time():
    plan = plan_load(read_trace(TRACES / "helios-head40.csv"), BIG, speed=1, load=4)
    assert plan[0].time_min == 3  # run 84 s: 168 s, up to 3 minutes


def test_a_time_limit_is_the_requested_time_where_the_trace_has_one():
    plan = plan_load(read_trace(TRACES / "kth-sp2-head40.swf"), BIG, speed=60, load=4)
    assert plan[0].time_min == 15  # 53,940 s at 60x: 899 s


def test_the_same_seed_plays_the_same_jobs():
    jobs = read_trace(TRACES / "helios-head40.csv")
    assert plan_load(jobs, LAB, load=0.1, seed=3) == plan_load(jobs, LAB, load=0.1, seed=3)


def test_a_lower_load_plays_fewer_jobs():
    jobs = read_trace(TRACES / "helios-head40.csv")
    assert len(plan_load(jobs, LAB, load=0.05, seed=1)) < len(plan_load(jobs, LAB, load=4, seed=1))


def test_a_job_that_ended_before_the_offset_is_not_played():
    jobs = read_trace(TRACES / "helios-head40.csv")
    offset = jobs[10].submit_s
    gone = [j.line for j in jobs if j.submit_s + j.run_s <= offset]
    assert not {p.line for p in plan_load(jobs, BIG, offset_s=offset, load=4)} & set(gone)


def test_a_job_running_at_the_offset_starts_at_once_with_what_is_left():
    jobs = read_trace(TRACES / "helios-head40.csv")
    first = jobs[0]  # submitted at 0, runs 84 s
    (played,) = [p for p in plan_load(jobs, BIG, offset_s=10, load=4) if p.line == first.line]
    assert (played.at_s, played.run_s) == (0.0, first.run_s - 10)


def test_a_job_submitted_after_the_offset_comes_that_much_later():
    jobs = read_trace(TRACES / "helios-head40.csv")
    (played,) = [p for p in plan_load(jobs, BIG, offset_s=10, load=4) if p.line == jobs[5].line]
    assert played.at_s == jobs[5].submit_s - 10


def test_the_traces_users_are_spread_over_the_loads():
    plan = plan_load(read_trace(TRACES / "philly-head40.csv"), BIG, load=4, users=3)
    assert {p.user for p in plan} == {0, 1, 2}
