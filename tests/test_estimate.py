"""The start estimate (roach/ops/estimate/starts.py) on the cluster's queue as Slurm 22.05 printed it on the lab
(tests/data/estimate/: `squeue -O <roach's fields>,PriorityLong` of benchmark 13's workload), and on records in the
same shape with one thing changed: a run's pace, a preemptible job, a per-user cap, a hold, a reservation."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from roach.model.tiers import Tier
from roach.ops.estimate.reads import note_ended, paces_of
from roach.ops.estimate.starts import (
    END_S,
    LAG_S,
    LATE_S,
    LATE_WAIT,
    PREEMPT_S,
    Inputs,
    Pace,
    Reservation,
    estimate_queue,
)
from roach.scheduler.cluster_queue import parse_cluster_queue, queue_argv
from roach.scheduler.parse import RS, US
from roach.scheduler.parse_control import NodeRecord

DATA = Path(__file__).parent / "data" / "estimate"
TIERS = (Tier("high", qos="high", gpu_cap=4), Tier("low", qos="low", preemptible=True))
NODES = [NodeRecord(n, "mixed", 0, 8, 4, 0, ("gpu",), 16000, 0) for n in ("n1", "n2")]
# the moment the recorded queue was read (its jobs' times are the lab's local time, as squeue printed them)
NOW = 1796480750.0803888


def recorded():
    return parse_cluster_queue((DATA / "cluster_queue_22.05.txt").read_text())


def line(job, state="PENDING", *, qos="normal", gpus=1, nodes="", elapsed="0:00", limit="5:00", reason="Priority",
         prio=10000, user="roachbench", submit="2026-12-05T14:25:00", start="N/A") -> str:  # fmt: skip
    """One record as the recorded queue prints it."""
    tres = f"cpu={gpus},mem={500 * gpus}M,node=1,billing={gpus},gres/gpu={gpus}"
    fields = [str(job), str(job), str(job), "N/A", f"est-{job}", user, "lab", "gpu", qos, state, reason, elapsed]
    fields += [limit, "0", "1", nodes, tres, submit, start, str(prio)]
    return US.join(fields) + RS + "\n"


def est(text: str, **kw):
    inp = Inputs(parse_cluster_queue(text), NODES, TIERS, **kw)
    return estimate_queue(inp, NOW)


def test_the_cluster_queue_is_read_with_each_jobs_priority_in_squeues_order():
    q = recorded()
    assert [x.record.job_id for x in q][:3] == ["1035", "1033", "1030"]
    assert {x.record.qos: x.priority for x in q} == {"normal": 10000, "low": 1, "high": 100000}
    assert queue_argv({"gpu"})[-2:] == ["--partition", "gpu"] and "--me" not in queue_argv()


def test_with_time_limits_only_the_first_in_line_starts_when_a_running_job_reaches_its_limit():
    # n1 holds 1024 (2 GPUs, 26 s of 4:00) and 1025 (2 GPUs, 6 s of 8:00); n2 holds 1031 (4 GPUs, 13 s of 5:00)
    got = estimate_queue(Inputs(recorded(), NODES, TIERS), NOW)
    first = got["1026"]  # normal, 2 GPUs, next in line (Resources)
    assert first.likely == pytest.approx(NOW + (240 - 26) + LAG_S)
    assert first.latest == pytest.approx(NOW + (240 - 26) + 2 * LAG_S)
    assert first.ahead == 0
    assert "0 pending ahead of it and 3 running in the cluster's queue" in first.basis
    # every normal job comes before every low one, whatever their ids
    assert all(got[j].ahead < got["1013"].ahead for j in ("1026", "1030", "1033", "1035"))
    assert got["1036"].likely >= got["1035"].likely


def test_a_run_at_its_step_pace_frees_its_gpus_early():
    pace = Pace(step=80, steps_total=100, at=NOW - 1, per_s=1.0)  # 20 steps left at 1 step/s, the last 1 s ago
    got = estimate_queue(Inputs(recorded(), NODES, TIERS, paces={"1024": pace}), NOW)
    first = got["1026"]
    assert first.likely == pytest.approx(NOW + 19 + END_S + LAG_S)
    assert first.earliest == pytest.approx(NOW + (19 + END_S) * 0.8)
    assert first.latest == pytest.approx(NOW + (240 - 26) + 2 * LAG_S)  # the run may still stall to its limit
    assert "1 at their runs' step pace" in first.basis


def test_ended_jobs_lengths_stand_in_for_jobs_of_unknown_length():
    got = estimate_queue(Inputs(recorded(), NODES, TIERS, durations=(30.0, 40.0, 50.0)), NOW)
    # 1024 ran 26 s: the median of the ended jobs that ran longer (40 s) says 14 s more; 1025 (6 s) 34 s more
    assert got["1026"].likely == pytest.approx(NOW + 14 + LAG_S)
    assert got["1026"].earliest == pytest.approx(NOW)  # a job of unknown length may end now
    assert "median of 3 ended jobs" in got["1026"].basis


def test_the_latest_start_is_the_likely_wait_taken_twice_and_a_minute_where_time_limits_are_looser():
    """1026's likely start is 15 s away (the ended jobs' lengths); the running jobs' time limits would put it at 216 s.
    Beside the crowd such limits were 11.5x the runs, and that bound held 99% of starts in an interval 8.6x the wait."""
    got = estimate_queue(Inputs(recorded(), NODES, TIERS, durations=(30.0, 40.0, 50.0)), NOW)["1026"]
    assert got.latest == pytest.approx(NOW + LATE_WAIT * (14 + LAG_S) + LATE_S)


def test_the_latest_start_is_never_past_the_time_limits_play():
    got = estimate_queue(Inputs(recorded(), NODES, TIERS), NOW)["1026"]  # likely 215 s away: twice that is past it
    assert got.latest == pytest.approx(NOW + (240 - 26) + 2 * LAG_S)


def test_a_job_on_a_tier_that_is_not_preemptible_takes_what_preemptible_jobs_hold():
    text = line(1, "RUNNING", qos="low", gpus=4, nodes="n1", elapsed="0:10", limit="8:00", prio=1)
    text += line(2, "RUNNING", qos="normal", gpus=4, nodes="n2", elapsed="0:10", limit="8:00")
    text += line(3, qos="normal", gpus=2, reason="Resources")
    text += line(4, qos="low", gpus=2, prio=1)
    got = est(text)
    assert got["3"].likely == pytest.approx(NOW + PREEMPT_S + LAG_S)
    assert "preempting preemptible tiers" in got["3"].basis
    assert got["4"].likely == pytest.approx(NOW + 470 + LAG_S)  # low waits for a node to free up


def test_a_capped_tier_waits_for_the_users_own_running_jobs_there_even_with_a_node_free():
    text = line(1, "RUNNING", qos="high", gpus=4, nodes="n1", elapsed="1:00", limit="3:00", prio=100000)
    text += line(2, qos="high", gpus=2, reason="QOSMaxGRESPerUser", prio=100000)
    got = est(text)
    assert got["2"].likely == pytest.approx(NOW + 120 + LAG_S)  # n2 is free, the cap of 4 GPUs is not
    assert "tier high's cap of 4 GPUs" in got["2"].basis
    other = est(text.replace("roachbench", "someone", 1))  # another user's job holds no part of this user's cap
    assert other["2"].likely == pytest.approx(NOW + LAG_S)


def test_a_held_job_gets_no_estimate_and_holds_nothing_up():
    text = line(1, reason="JobHeldUser") + line(2)
    got = est(text)
    assert got["1"].likely is None and "will not start as it is" in got["1"].basis
    assert got["2"].likely == pytest.approx(NOW + LAG_S)


def test_a_job_that_asks_for_a_reservation_starts_in_it_and_others_stay_off_its_nodes():
    text = line(1, gpus=4) + line(2, gpus=4) + line(3, gpus=4)
    resv = Reservation("maint", NOW + 300, NOW + 900, ("n2",))
    got = est(text, reservations=(resv,), resv_of={"3": "maint"})
    assert got["1"].likely == pytest.approx(NOW + LAG_S)  # n1
    assert got["2"].likely == pytest.approx(NOW + 300 + LAG_S)  # n1 after job 1's 5:00; n2 is reserved then
    assert got["3"].likely == pytest.approx(NOW + 300 + LAG_S)  # n2, when its reservation starts
    assert "reservation maint" in got["3"].basis


def test_begin_time_holds_a_requeued_job_until_then():
    begin = datetime.fromtimestamp(NOW + 11).isoformat(timespec="seconds")
    got = est(line(1, reason="BeginTime", start=begin))
    assert got["1"].likely == pytest.approx(int(NOW + 11) + LAG_S, abs=1)


def test_the_watch_keeps_the_paces_of_its_views_and_the_lengths_of_jobs_it_saw_end():
    views = {"7": {"points": [[NOW - 10, 10], [NOW, 20]], "step": 20, "steps_total": 40}, "8": {"points": []}}
    views["9"] = {"points": [[NOW - 10, 10], [NOW, 20]], "step": 1007, "steps_total": 40}  # not a step of its run
    assert paces_of(views) == {"7": Pace(20, 40, NOW, 1.0)}
    q = recorded()
    ended, running = note_ended([], {"999": [NOW - 4, 30], "998": [NOW - 3600, 30]}, [x.record for x in q], NOW)
    assert ended == [32.0] and set(running) == {"1024", "1025", "1031"}  # 998's last look says too little


def test_the_line_says_when_and_on_what():
    got = estimate_queue(Inputs(recorded(), NODES, TIERS), NOW)["1026"]
    text = got.line(NOW)
    assert text.startswith("likely in 3m35s (now to in 3m36s); basis: ")
    data = got.to_json(NOW)
    assert data["likely_in_s"] == pytest.approx(215.0) and data["ahead"] == 0


def test_at_the_earliest_a_job_may_start_in_a_hole_before_the_jobs_ahead_of_it():
    text = line(1, "RUNNING", gpus=4, nodes="n1", elapsed="0:10", limit="8:00")
    text += line(2, "RUNNING", gpus=4, nodes="n2", elapsed="0:10", limit="8:00")
    text += line(3, gpus=4, reason="Resources", submit="2026-12-05T14:25:00")
    text += line(4, gpus=1, submit="2026-12-05T14:26:00")
    paces = {"1": Pace(0, 100, NOW, 1.0), "2": Pace(0, 200, NOW, 1.0)}
    got = est(text, paces=paces)
    assert got["3"].earliest == pytest.approx(NOW + (100 + END_S) * 0.8)
    assert got["4"].earliest == got["3"].earliest  # Slurm's backfill may start it there first
    assert got["4"].likely == pytest.approx(NOW + 200 + END_S + LAG_S)  # in order, it waits for n2


def test_the_likely_start_replays_slurms_passes_which_plan_with_time_limits():
    text = line(1, "RUNNING", gpus=4, nodes="n1", elapsed="0:10", limit="8:00")
    text += line(2, "RUNNING", gpus=2, nodes="n2", elapsed="0:10", limit="4:00")
    text += line(3, gpus=4, limit="5:00", reason="Resources", submit="2026-12-05T14:25:00")
    text += line(4, gpus=2, limit="8:00", submit="2026-12-05T14:26:00")
    paces = {"1": Pace(0, 20, NOW, 1.0), "2": Pace(0, 150, NOW, 1.0)}
    inp = Inputs(parse_cluster_queue(text), NODES, TIERS, paces=paces)
    # Slurm plans job 3 on n2 when job 2 reaches its limit (230 s), so job 4 may not take n2's 2 free GPUs for its
    # 8 minutes now; once job 1 ends (22 s), job 3 takes n1 and job 4 starts on n2
    assert estimate_queue(inp, NOW)["4"].likely == pytest.approx(NOW + 20 + END_S + LAG_S)
    assert estimate_queue(inp, NOW, replayed=False)["4"].likely == pytest.approx(NOW + LAG_S)
    assert estimate_queue(inp, NOW, only=["3"]).keys() == {"3"}


def test_a_crowded_queue_is_estimated_as_before_the_replay_skipped_what_cannot_fit():
    """A queue recorded beside Helios played at 5000x on a lab of 4 nodes of 4 GPUs (159 jobs, 145 pending ahead of
    the user's 8 tasks at QOS low): the estimates are those the replay gave when it asked every node at every end
    of the plan (recorded then), now that it asks a node again only once what kept it full has ended."""
    import json

    from roach.scheduler.parse_control import parse_sinfo_nodes

    crowd = json.loads((DATA / "crowd_22.05.json").read_text())
    queue = parse_cluster_queue((DATA / "cluster_queue_crowd_22.05.txt").read_text())
    nodes = parse_sinfo_nodes((DATA / "sinfo_nodes_crowd_22.05.txt").read_text())
    got = estimate_queue(Inputs(queue, nodes, TIERS), crowd["now"], only=crowd["mine"])
    for key, (earliest, likely, latest, basis, ahead) in crowd["estimates"].items():
        e = got[key]
        assert (e.earliest, e.likely, e.latest, e.basis, e.ahead) == (earliest, likely, latest, basis, ahead), key


def test_a_node_the_backfill_planned_for_a_pending_job_is_a_node_that_runs_jobs():
    """sinfo of a crowded 24.11 lab: two nodes idle but `planned` (held by backfill for a pending job), the rest
    `mixed-`. Each is a node the plan may place jobs on."""
    from roach.scheduler.parse_control import parse_sinfo_nodes

    nodes = {n.name: n for n in parse_sinfo_nodes((DATA / "sinfo_nodes_planned_24.11.txt").read_text())}
    assert (nodes["n5"].state, nodes["n5"].available) == ("planned", True)


def test_a_capped_job_waits_for_the_users_own_jobs_on_a_planned_node_not_for_ever():
    """Beside Helios on a 16 x 4 lab (bench 13, recorded): the user's 4-GPU job on `high` waits on its cap; the user's
    two high jobs hold 3 GPUs of n16, a node sinfo said `planned`, and end within their limits (327 s at most). The
    latest start is then, not when the crowd's jobs elsewhere reach their limits (993 s, with n16 read as down)."""
    import json

    from roach.scheduler.parse_control import NodeRecord as Node

    rec = json.loads((DATA / "crowd_planned_22.05.json").read_text())
    nodes = [Node(**{**n, "partitions": tuple(n["partitions"])}) for n in rec["nodes"]]
    inp = Inputs(parse_cluster_queue(rec["queue"]), nodes, (Tier("high", qos="high", gpu_cap=4),))
    est = estimate_queue(inp, rec["now"], only=["11191"])["11191"]
    assert est.latest - rec["now"] <= 327 + 2 * LAG_S
