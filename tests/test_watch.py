"""`roach watch`: the event logic on scripted squeue/sacct/log output with an injected clock, then the real
thing on the lab: a sweep, a constant number of Slurm calls per round, a stalled log, a job that never starts;
and on a private lab of its own (so no other session's jobs change its tier counts): a preemption, a
promotion and --rebalance, a node pin that never clears, and slurmctld/slurmdbd restarting mid-watch."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.ops.events import Event, EventKind, tier_table
from roach.records.bundle import JobJson
from roach.records.job_record import utc_now
from roach.records.results import JOB_NOT_COMPLETED
from roach.records.store import Store
from roach.scheduler.capabilities import RateLimit
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.parse import RS, US
from roach.scheduler.parse_control import parse_dead_nodes
from roach.scheduler.transport import LocalTransport
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.logs import INTEREST, StallRule, parse_look, read_facts
from roach.watch.stalls import OnStall
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.support.cli import roach
from tests.support.labs import SHARED_TMP, private_port_base, suite_layout
from tests.support.submitting import submit_to_lab
from tests.support.watch import T0, TIERED, TRAIN, FakeCluster, FakeLog, kinds, only, record, sa, se, sq, watcher

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_bytes().decode()


# -- unit: the event logic -----------------------------------------------------------------------------------
def test_tier_table_counts_claimed_pending_included_from_a_captured_queue():
    from roach.scheduler.parse import parse_squeue

    rows = {r.name: r for r in tier_table(TIERED.tiers, parse_squeue(data("squeue_lab_22.05_mixed.txt")))}
    assert (rows["high"].running, rows["high"].pending, rows["high"].claimed) == (4, 1, 5)
    assert rows["high"].free == 0 and rows["high"].cap == 4
    assert rows["normal"].cap is None and rows["normal"].free is None
    assert "high 5/4 claimed, 0 free" in rows["high"].text()


def test_the_watchers_parts_own_the_arguments_they_are_built_from(fake, store, clock):
    def promoter(p):
        return 1

    w = watcher(
        fake, store, clock, heartbeat_s=30, job_ids=("7",), rebalance=True, promoter=promoter, probe_window_s=60
    )
    assert (w.adopter.job_ids, w.heartbeat.every_s, w.heartbeat.beating) == (("7",), 30, False)
    assert (w.rebalancer.rebalance, w.rebalancer.promoter, w.rebalancer.probe_window_s) == (True, promoter, 60)
    assert w.adopter.client is w.rebalancer.client is w.heartbeat.client is w.client
    for name in ("heartbeat_s", "job_ids", "rebalance", "promoter", "probe_window_s"):
        with pytest.raises(AttributeError):  # no copy on the watcher that could read or be set apart from its part
            getattr(w, name)
        with pytest.raises(AttributeError):
            setattr(w, name, None)
    fake.queue = []
    w.round()
    assert w.heartbeat.beating


def test_started_and_finished_once_each_then_queue_empty(fake, store, clock):
    store.add(record(11))
    store.add(record(12))
    fake.queue = [sq(11, "PENDING", reason="Priority"), sq(12, "PENDING", reason="Resources")]
    w = watcher(fake, store, clock, heartbeat_s=30)
    seen: list[Event] = []
    first = w.round()
    seen += first
    assert kinds(first) == ["heartbeat"]
    assert "high 0/4 claimed, 4 free" in first[0].line() and "normal 2 claimed" in first[0].line()
    for step in range(6):
        clock.tick(10)
        if step == 1:
            fake.queue = [sq(11), sq(12, "PENDING", reason="Resources")]
        if step == 2:
            fake.queue = [sq(11), sq(12)]
        if step == 3:  # 11 left the queue: not done until sacct says so
            fake.queue = [sq(12)]
        if step == 4:
            fake.acct = [sa(11), sa(12, "FAILED", exit_code="3:0")]
            fake.queue = []
        seen += w.round()
        if w.finished:
            break
    assert [(e.kind.value, e.job_id) for e in seen if e.kind in (EventKind.STARTED, EventKind.FINISHED)] == [
        ("started", "11"),
        ("started", "12"),
        ("finished", "11"),
        ("finished", "12"),
    ]
    fin = {e.job_id: e for e in only(seen, EventKind.FINISHED)}
    assert fin["11"].data["state"] == "COMPLETED" and fin["12"].data["exit_code"] == "3:0"
    assert "FAILED, exit 3:0" in fin["12"].message
    assert seen[-1].kind is EventKind.QUEUE_EMPTY and "all 2 watched jobs ended (1 completed)" in seen[-1].message
    assert w.finished and w.exit_status() == JOB_NOT_COMPLETED
    assert store.get("lab", 11).status == "completed" and store.get("lab", 12).status == "failed"
    assert len(only(seen, EventKind.HEARTBEAT)) == 2  # at 0 s and at 30 s


def test_a_left_job_is_not_finished_until_sacct_says_so(fake, store, clock):
    store.add(record(21))
    fake.queue = [sq(21)]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue = []
    fake.acct = [sa(21, "RUNNING")]  # accounting lags the controller
    clock.tick(10)
    assert not only(w.round(), EventKind.FINISHED) and not w.finished
    fake.acct = []  # nothing at all yet
    clock.tick(10)
    assert not only(w.round(), EventKind.FINISHED) and not w.finished
    fake.acct = [sa(21, "COMPLETED")]
    clock.tick(10)
    assert kinds(w.round()) == ["finished", "queue_empty"]


def _left_with_accounting_at(fake, store, clock, acct: list[str]) -> Watcher:
    """A watcher whose job 21 ran, then left the queue, with sacct answering ``acct`` for it from then on."""
    store.add(record(21))
    fake.queue = [sq(21)]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue, fake.acct = [], acct
    return w


def _ended_asks(fake) -> int:
    return sum(1 for c in fake.calls if c[0] == "squeue" and "all" in c)


def test_an_end_accounting_never_gets_is_read_from_slurmctld_once_it_lags(fake, store, clock):
    """26.05's backup controller never sends accounting: sacct keeps the job RUNNING, slurmctld has its end."""
    w = _left_with_accounting_at(fake, store, clock, [sa(21, "RUNNING")])
    fake.ended = [se(21, "FAILED", status=768)]
    clock.tick(10)
    w.round()  # it left the queue this round
    clock.tick(10)
    assert not only(w.round(), EventKind.FINISHED)  # 10 s after: sacct may still catch up
    assert _ended_asks(fake) == 0
    clock.tick(10)
    (fin,) = only(w.round(), EventKind.FINISHED)
    assert (fin.data["state"], fin.data["exit_code"]) == ("FAILED", "3:0")
    assert _ended_asks(fake) == 1
    assert store.get("lab", 21).status == "failed"


def test_sacct_keeping_up_is_the_end_and_slurmctld_is_not_asked(fake, store, clock):
    w = _left_with_accounting_at(fake, store, clock, [sa(21, "COMPLETED")])
    fake.ended = [se(21, "FAILED", status=768)]  # never read
    clock.tick(10)
    (fin,) = only(w.round(), EventKind.FINISHED)
    assert fin.data["state"] == "COMPLETED"
    assert _ended_asks(fake) == 0


def test_a_job_neither_accounting_nor_slurmctld_ends_is_lost_not_watched_forever(fake, store, clock):
    w = _left_with_accounting_at(fake, store, clock, [sa(21, "RUNNING")])
    seen = []
    for _ in range(62):  # 10 s a round, past the 600 s after which a job is called lost
        clock.tick(10)
        seen += w.round()
    (lost,) = only(seen, EventKind.LOST)
    assert "no end for it (it says RUNNING)" in lost.message
    assert not only(seen, EventKind.FINISHED)


def test_outage_reported_once_retried_with_backoff_and_no_job_marked_ended(fake, store, clock):
    store.add(record(31))
    fake.queue = [sq(31)]
    w = watcher(fake, store, clock, heartbeat_s=1e9)
    w.round()
    fake.down["squeue"] = data("squeue_lab_22.05_controller_down.stderr.txt")
    seen = []
    delays = []
    for _ in range(3):
        clock.tick(w.next_delay())
        seen += w.round()
        delays.append(w.next_delay())
    assert kinds(seen) == ["outage"]
    assert "slurmctld unreachable" in seen[0].message and "Unable to contact slurm controller" in seen[0].message
    assert delays == [20.0, 40.0, 80.0]
    # Back, with an empty queue and slurmdbd down: still nothing ends.
    del fake.down["squeue"]
    fake.queue = []
    fake.down["sacct"] = data("sacct_lab_22.05_slurmdbd_down.stderr.txt")
    clock.tick(w.next_delay())
    back = w.round()
    assert kinds(back) == ["recovered", "outage"] and "slurmdbd unreachable" in back[1].message
    clock.tick(10)
    assert w.round() == [] and not w.finished
    del fake.down["sacct"]
    fake.acct = [sa(31, "COMPLETED")]
    clock.tick(10)
    assert kinds(w.round()) == ["recovered", "finished", "queue_empty"]
    assert w.next_delay() == 10.0
    w.rate_limit = RateLimit(bucket_size=10, refill_rate=1, refill_period_s=5)  # 3 RPCs refill in 15 s
    assert w.next_delay() == 15.0


def test_requeue_detected_by_restart_count_elapsed_and_state(fake, store, clock):
    store.add(record(41, qos="low"))
    store.add(record(42))
    fake.queue = [sq(41, qos="low", elapsed="2:00"), sq(42, elapsed="1:00")]
    w = watcher(fake, store, clock)
    w.round()
    # 41 preempted back to the queue; 42 requeued and already running again (elapsed went backwards)
    fake.queue = [sq(41, "PENDING", qos="low", reason="BeginTime", restarts=1), sq(42, elapsed="0:03", restarts=1)]
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["preempted", "requeued", "started"]
    assert ev[0].job_id == "41" and "tier low" in ev[0].message and "restart count 0 -> 1" in ev[0].message
    assert "elapsed went backwards (60s -> 3s)" in ev[1].message and "started again" in ev[2].message
    clock.tick(10)
    assert w.round() == []  # the same requeue is not said twice
    fake.queue = [sq(41, qos="low", restarts=1), sq(42, elapsed="0:13", restarts=1)]
    clock.tick(10)
    assert kinds(w.round()) == ["started"]
    fake.queue = [sq(41, "PENDING", qos="low", reason="BeginTime", restarts=2), sq(42, elapsed="0:23", restarts=1)]
    clock.tick(10)
    again = w.round()
    assert kinds(again) == ["preempted"] and "preempted 2 times on tier low: a placement to change" in again[0].message


def test_a_requeue_seen_while_the_job_completes_is_one_event(fake, store, clock):
    """Preempted, the job shows COMPLETING with its restart count already raised, then PENDING, then RUNNING:
    one requeue, said once (it was said twice: by the count while completing, then by COMPLETING -> PENDING)."""
    store.add(record(43, qos="low"))
    fake.queue = [sq(43, qos="low", elapsed="2:00")]
    w = watcher(fake, store, clock)
    w.round()
    seen = []
    for state, reason, restarts in (
        ("COMPLETING", "None", 1),
        ("PENDING", "BeginTime", 1),
        ("RUNNING", "None", 1),
    ):
        fake.queue = [sq(43, state, qos="low", reason=reason, restarts=restarts, elapsed="0:00")]
        clock.tick(10)
        seen += w.round()
    assert kinds(seen) == ["preempted", "started"], [e.message for e in seen]
    assert "restart count 0 -> 1" in seen[0].message and "preempted 2 times" not in seen[0].message


def test_captured_requeued_run_after_running(fake, store, clock):
    """The lab's own capture of a low job requeued by preemption and running again (restart count 1)."""
    fake.queue = [sq(76, qos="low", gpus=4, elapsed="0:40", nodelist="n2")]
    w = watcher(fake, store, clock, job_ids=("76",))
    w.round()
    fake.queue = [data("squeue_lab_22.05_requeued_running.txt")]
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["preempted", "started"]
    assert "elapsed went backwards (40s -> 0s)" in ev[0].message and "restart count 0 -> 1" in ev[0].message


def test_never_starts_said_once_on_the_second_sighting_and_pinned_nodes_asked_once(fake, store, clock):
    store.add(record(51))
    store.add(record(52))
    fake.queue = [
        sq(51, "PENDING", reason="ReqNodeNotAvail, UnavailableNodes:n2"),
        sq(52, "PENDING", reason="JobHeldUser"),
    ]
    fake.req_nodes = {"51": "n2"}
    w = watcher(fake, store, clock)
    assert not only(w.round(), EventKind.NEVER_STARTS)  # a held job may be mid-submission: wait a round
    clock.tick(10)
    never = only(w.round(), EventKind.NEVER_STARTS)
    assert [e.job_id for e in never] == ["51", "52"]
    assert "pinned to n2" in never[0].message and never[0].data["outlook"] == "never"
    assert "scontrol release 52" in never[1].message
    clock.tick(10)
    assert not only(w.round(), EventKind.NEVER_STARTS)
    asked = [c for c in fake.calls if c[0] == "squeue" and "ReqNodes" in " ".join(c)]
    assert len(asked) == 1


def test_promotion_when_a_capped_tier_has_room_and_only_then(fake, store, clock):
    store.add(record(61, qos="low"))
    fake.queue = [sq(61, "PENDING", qos="low", reason="Resources"), sq(900, qos="high", gpus=4)]
    w = watcher(fake, store, clock)
    w.round()
    clock.tick(10)
    assert not only(w.round(), EventKind.PROMOTION)  # high is full: 4/4 claimed
    fake.queue = [sq(61, "PENDING", qos="low", reason="Resources"), sq(900, qos="high", gpus=3)]
    clock.tick(10)
    promo = only(w.round(), EventKind.PROMOTION)
    assert len(promo) == 1 and promo[0].data["to_tier"] == "high" and promo[0].data["room"] == 1
    assert "roach promote run61 --to high" in promo[0].message and "high 3/4 claimed, 1 free" in promo[0].line()
    clock.tick(10)
    assert not only(w.round(), EventKind.PROMOTION)  # said once while it stays true


def test_a_run_moved_outside_the_watch_ends_as_its_latest_job(fake, store, clock):
    store.add(record(31, "run31"))  # moved by `roach move` from another shell: cancelled, continued as job 32
    store.add(record(32, "run31"))
    store.add(record(33))
    fake.queue = []
    fake.acct = [sa(31, "CANCELLED", exit_code="0:15"), sa(32), sa(33)]
    w = watcher(fake, store, clock)
    seen = w.round()
    assert seen[-1].kind is EventKind.QUEUE_EMPTY
    assert "all 3 watched jobs ended (3 completed); 2 runs, 2 completed" in seen[-1].message
    assert w.exit_status() == 0


def test_rebalance_promotes_through_the_promoter_and_follows_the_new_job(fake, store, clock):
    store.add(record(71, qos="low"))
    fake.queue = [sq(71, "PENDING", qos="low", reason="Priority")]
    made = []

    def promoter(p):
        made.append(p)
        store.add(record(72, "run71", qos="high"))
        fake.queue = [sq(71, "PENDING", qos="low", reason="JobHeldUser"), sq(72, "PENDING", qos="high")]
        return 72

    fake.starts_at = "2027-01-15T08:00:00"  # the probe: it would start now, preempting nobody
    w = watcher(fake, store, clock, rebalance=True, promoter=promoter)
    w.round()
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["promoted"] and ev[0].data["new_job_id"] == 72 and "now job 72" in ev[0].message
    assert "it starts without preempting a run of yours" in ev[0].message
    assert [(p.key, p.to_tier) for p in made] == [("71", "high")]
    fake.queue = [sq(72, qos="high")]
    fake.acct = [sa(71, "CANCELLED", exit_code="0:15", qos="low", started=False)]
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["finished", "started"] and "(continued as job 72)" in ev[0].message
    assert ev[1].job_id == "72" and ev[1].data["tier"] == "high"
    assert len(made) == 1 and w.exit_status() == 0


def test_rebalance_does_not_preempt_the_users_own_run_for_an_unknown_gain(fake, store, clock):
    store.add(record(73, qos="low"))
    store.add(record(74, qos="low"))
    fake.queue = [sq(73, "PENDING", qos="low", reason="Resources"), sq(74, qos="low")]
    fake.starts_at, fake.preempts = "2027-01-15T08:00:00", "74"  # it starts now only by preempting run74's job
    made = []
    w = watcher(fake, store, clock, rebalance=True, promoter=lambda p: made.append(p) or 75)
    w.round()
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["not_promoted"]
    assert ev[0].data["preempts"] == ["74"]
    assert "it would preempt your run 74" in ev[0].message
    assert made == []
    clock.tick(10)
    assert not only(w.round(), EventKind.NOT_PROMOTED)  # said once while it stays so


def test_rebalance_promotes_over_another_users_job(fake, store, clock):
    store.add(record(76, qos="low"))
    fake.queue = [sq(76, "PENDING", qos="low", reason="Resources")]
    fake.starts_at, fake.preempts = "2027-01-15T08:00:00", "9001"  # not a job of the user's
    w = watcher(fake, store, clock, rebalance=True, promoter=lambda p: 77)
    w.round()
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["promoted"]
    assert ev[0].data["preempts"] == []


def test_rebalance_moves_a_run_behind_its_own_cap_to_a_tier_that_starts_it_now(fake, store, clock):
    store.add(record(91, qos="high"))
    store.add(record(92, qos="high"))
    fake.queue = [sq(91, qos="high", gpus=4), sq(92, "PENDING", qos="high", reason="QOSMaxGRESPerUser")]
    fake.starts_at = "2027-01-15T08:00:00"  # the probe: a start now
    made = []
    w = watcher(fake, store, clock, rebalance=True, promoter=lambda p: made.append(p) or 93)
    w.round()
    clock.tick(10)
    ev = only(w.round(), EventKind.PROMOTED)
    assert [(p.key, p.from_tier, p.to_tier) for p in made] == [("92", "high", "normal")]
    assert "from high to normal" in ev[0].message


def test_a_run_behind_its_own_cap_stays_where_no_tier_below_starts_it_now(fake, store, clock):
    store.add(record(94, qos="high"))
    store.add(record(95, qos="high"))
    fake.queue = [sq(94, qos="high", gpus=4), sq(95, "PENDING", qos="high", reason="QOSMaxGRESPerUser")]
    fake.starts_at = "2027-01-15T09:00:00"  # an hour away
    made = []
    w = watcher(fake, store, clock, rebalance=True, promoter=lambda p: made.append(p) or 96)
    w.round()
    clock.tick(10)
    assert not only(w.round(), EventKind.PROMOTED)
    assert made == []


def test_start_probe_gates_promotions_and_runs_at_most_once_per_tier(fake, store, clock):
    store.add(record(66, qos="low"))
    store.add(record(67, qos="low"))
    store.add(record(68, qos="high"))
    fake.queue = [
        sq(66, "PENDING", qos="low", reason="Resources"),
        sq(67, "PENDING", qos="low", reason="Resources"),
        sq(68, qos="high", gpus=4),
    ]
    fake.logs["/logs/run68_68.out"] = FakeLog(1, T0, [])  # the look brings the cluster's clock: 08:00:00
    fake.starts_at = "2027-01-15T09:00:00"  # an hour away: no slot now
    w = watcher(fake, store, clock, probe_window_s=120)
    w.round()
    clock.tick(10)
    assert not only(w.round(), EventKind.PROMOTION)
    probes = [c for c in fake.calls if c[0] == "sbatch"]
    assert len(probes) == 1 and "--test-only" in probes[0] and "--qos=normal" in probes[0]  # one for the tier
    fake.starts_at = "2027-01-15T08:01:00"
    clock.tick(10)
    promo = only(w.round(), EventKind.PROMOTION)
    assert [(e.job_id, e.data["to_tier"], e.data["room"]) for e in promo] == [("66", "normal", None)]  # one a round
    assert "has a start now" in promo[0].message


def test_stalled_when_the_log_stops_longer_than_its_usual_gap(fake, store, clock):
    store.add(record(81))
    log = "/logs/run81_81.out"
    fake.queue = [sq(81)]
    lines = [f"0: 2027-01-15T07:59:{s:02d}Z roach rank 0: step {s // 2}/100" for s in range(0, 20, 2)]
    fake.logs[log] = FakeLog(100, T0, lines)
    fake.remote_now = T0
    w = watcher(fake, store, clock, stall=StallRule(factor=3, min_s=5))
    w.round()
    fake.logs[log] = FakeLog(120, T0 + 2, lines + ["0: 2027-01-15T07:59:20Z roach rank 0: step 10/100"])
    fake.remote_now = T0 + 3
    clock.tick(3)
    assert not only(w.round(), EventKind.STALLED)
    fake.remote_now = T0 + 6  # silent 4 s: usual gap 2 s, limit max(3 x 2, 5) = 6 s
    clock.tick(3)
    assert not only(w.round(), EventKind.STALLED)
    fake.remote_now = T0 + 9
    clock.tick(3)
    stalled = only(w.round(), EventKind.STALLED)
    assert len(stalled) == 1 and "not moved for 7s" in stalled[0].message and "usual gap 2s" in stalled[0].message
    assert 'last line: "0: 2027-01-15T07:59:20Z roach rank 0: step 10/100"' in stalled[0].message
    fake.remote_now = T0 + 30
    clock.tick(3)
    assert not only(w.round(), EventKind.STALLED)  # said once per stall


def _stalling(fake, store, clock, key: int, lines: list[str], **kw) -> Watcher:
    """A watcher of run ``key`` whose log has ``lines`` and then stops moving: its next round finds it stalled."""
    store.add(record(key))
    log = f"/logs/run{key}_{key}.out"
    fake.queue = [sq(key)]
    fake.logs[log] = FakeLog(100, T0, lines)
    fake.remote_now = T0
    w = watcher(fake, store, clock, stall=StallRule(factor=3, min_s=5), **kw)
    w.round()
    fake.logs[log] = FakeLog(120, T0 + 2, [*lines, "0: 2027-01-15T07:59:20Z roach rank 0: step 10/100"])
    fake.remote_now = T0 + 3
    clock.tick(3)
    w.round()
    fake.remote_now = T0 + 9  # silent 7 s: over the limit, max(3 x 2 s, 5 s)
    clock.tick(3)
    return w


STEPS_LINES = [f"0: 2027-01-15T07:59:{s:02d}Z roach rank 0: step {s // 2}/100" for s in range(0, 20, 2)]
CHECKPOINTED = [*STEPS_LINES, "0: 2027-01-15T07:59:18Z roach rank 0: checkpoint at step 8: /runs/run82/resume.pt"]


def requeues(fake) -> list[list[str]]:
    return [c for c in fake.calls if c[:2] == ["scontrol", "requeue"]]


def test_on_stall_requeue_requeues_a_stalled_run_that_checkpoints_once(fake, store, clock):
    w = _stalling(fake, store, clock, 82, CHECKPOINTED, on_stall=OnStall.REQUEUE)
    said = w.round()
    assert kinds(said) == ["stalled", "stall_requeued"]
    assert requeues(fake) == [["scontrol", "requeue", "82"]]
    assert said[1].data["checkpoint_step"] == 8
    assert "resumes from its last checkpoint, step 8" in said[1].message
    fake.remote_now = T0 + 30
    clock.tick(3)
    assert kinds(w.round()) == []  # the same stall: said and requeued once
    assert len(requeues(fake)) == 1


def test_on_stall_requeue_marks_the_run_first_so_its_rank_0_counts_no_preemption(fake, store, clock):
    w = _stalling(fake, store, clock, 82, CHECKPOINTED, on_stall=OnStall.REQUEUE)
    w.round()
    assert list(fake.written) == ["/runs/run82/.roach/requeued-by-watch.0"]


def test_on_stall_say_requeues_nothing(fake, store, clock):
    w = _stalling(fake, store, clock, 82, CHECKPOINTED, on_stall=OnStall.SAY)
    assert kinds(w.round()) == ["stalled"]
    assert requeues(fake) == []


def test_on_stall_requeue_leaves_a_run_without_a_checkpoint_and_says_why(fake, store, clock):
    w = _stalling(fake, store, clock, 83, STEPS_LINES, on_stall=OnStall.REQUEUE)
    (stalled,) = only(w.round(), EventKind.STALLED)
    assert requeues(fake) == []
    assert "not requeued: its log shows no checkpoint to resume from" in stalled.message


def test_on_stall_requeue_never_touches_a_job_not_in_the_store(fake, store, clock):
    w = _stalling(fake, store, clock, 84, CHECKPOINTED, on_stall=OnStall.REQUEUE)
    store.delete("lab", 84)  # watched until now, and no longer a run of the store (cleaned up meanwhile)
    (stalled,) = only(w.round(), EventKind.STALLED)
    assert requeues(fake) == []
    assert "not requeued: not a run of roach's store" in stalled.message


def test_a_run_that_stalls_again_before_a_new_checkpoint_is_not_requeued_again(fake, store, clock):
    w = _stalling(fake, store, clock, 85, CHECKPOINTED, on_stall=OnStall.REQUEUE)
    w.round()
    log = "/logs/run85_85.out"
    again = [
        *CHECKPOINTED,
        "0: 2027-01-15T08:00:30Z roach rank 0: resumed at step 8",
        "0: 2027-01-15T08:00:30Z roach rank 0: step 8/100",
    ]
    fake.logs[log] = FakeLog(200, T0 + 40, again)  # the next attempt moved the log, then stopped again
    fake.remote_now = T0 + 41
    clock.tick(3)
    w.round()
    fake.remote_now = T0 + 300  # over 3 x the 70 s gap the requeue put between its progress lines
    clock.tick(3)
    (stalled,) = only(w.round(), EventKind.STALLED)
    assert len(requeues(fake)) == 1
    assert "stalled again before a checkpoint past step 8" in stalled.message


def test_a_stalled_attempt_that_has_not_stepped_yet_is_not_requeued(fake, store, clock):
    store.add(record(90))
    log = "/logs/run90_90.out"
    fake.queue = [sq(90)]
    fake.logs[log] = FakeLog(100, T0, CHECKPOINTED)
    w = watcher(fake, store, clock, stall=StallRule(factor=3, min_s=5), on_stall=OnStall.REQUEUE)
    w.round()
    starting = ["roach: attempt 2 of run run90: job 90 on n1 (restart count 1) at 2027-01-15T07:59:20Z"]
    fake.logs[log] = FakeLog(150, T0 + 2, [*CHECKPOINTED, *starting])  # a new attempt: imports, rendezvous, ...
    fake.remote_now = T0 + 3
    clock.tick(3)
    w.round()
    fake.remote_now = T0 + 9
    clock.tick(3)
    (stalled,) = only(w.round(), EventKind.STALLED)
    assert requeues(fake) == []
    assert "not requeued: its current attempt has not logged a step yet" in stalled.message


def test_a_refused_requeue_is_said_with_slurms_error(fake, store, clock):
    fake.requeue_refused = data("scontrol_requeue_lab_22.05_invalid_id.stderr.txt")
    w = _stalling(fake, store, clock, 86, CHECKPOINTED, on_stall=OnStall.REQUEUE)
    (failed,) = only(w.round(), EventKind.STALL_REQUEUE_FAILED)
    assert "Invalid job id specified" in failed.data["error"]


HELD = "launch failed requeued held"  # squeue's reason for a job Slurm held after its launch failed


def _releases(fake) -> list[list[str]]:
    return [c for c in fake.calls if c[:2] == ["scontrol", "release"]]


def test_a_run_held_after_its_launch_failed_is_released_once_per_attempt(fake, store, clock):
    """A controller that failed over as it started the job launched it twice; Slurm drained the node and held it."""
    store.add(record(87))
    fake.queue = [sq(87, "PENDING", reason=HELD, restarts=1)]
    w = watcher(fake, store, clock, on_stall=OnStall.REQUEUE)
    (released,) = only(w.round(), EventKind.HELD_RELEASED)
    assert _releases(fake) == [["scontrol", "release", "87"]]
    assert (released.data["reason"], released.data["restart_count"]) == ("LaunchFailedRequeuedHeld", 1)
    clock.tick(10)
    w.round()  # still held, the same attempt: not released again
    assert len(_releases(fake)) == 1
    fake.queue = [sq(87, "PENDING", reason=HELD, restarts=2)]  # its next attempt's launch failed too
    clock.tick(10)
    assert only(w.round(), EventKind.HELD_RELEASED)
    assert len(_releases(fake)) == 2


def test_a_held_run_is_released_only_with_on_stall_requeue(fake, store, clock):
    store.add(record(88))
    fake.queue = [sq(88, "PENDING", reason=HELD, restarts=1)]
    w = watcher(fake, store, clock)
    assert not only(w.round(), EventKind.HELD_RELEASED)
    assert _releases(fake) == []


def test_a_held_job_not_of_the_store_and_a_users_hold_are_left_alone(fake, store, clock):
    store.add(record(89))
    fake.queue = [sq(89, "PENDING", reason="JobHeldUser"), sq(91, "PENDING", reason=HELD, restarts=1)]
    w = watcher(fake, store, clock, on_stall=OnStall.REQUEUE, job_ids=("91",))  # 91: followed by --job
    w.round()
    assert _releases(fake) == []


def test_a_refused_release_is_said_with_slurms_error(fake, store, clock):
    fake.release_refused = data("22.05/scontrol_release_invalid_id.stderr.txt")
    store.add(record(92))
    fake.queue = [sq(92, "PENDING", reason=HELD, restarts=1)]
    w = watcher(fake, store, clock, on_stall=OnStall.REQUEUE)
    (failed,) = only(w.round(), EventKind.HELD_RELEASE_FAILED)
    assert "Invalid job id specified" in failed.data["error"]


def test_on_stall_takes_say_or_requeue_and_refuses_anything_else():
    r = roach("watch", "--cluster", "lab", "--on-stall", "kill")
    assert r.exit_code == 2
    assert "'kill' is not one of 'say', 'requeue'" in r.output


def test_sinfo_dead_lists_each_node_marked_not_responding():
    assert parse_dead_nodes(data("sinfo_dead_lab_22.05_mixed.txt")) == ["n2"]  # a running job's node: mixed*
    assert parse_dead_nodes(data("sinfo_dead_lab_22.05_idle.txt")) == ["n2"]


def test_a_node_whose_state_has_no_star_is_not_read_as_not_responding():
    # every node's line in the same format (sinfo without --dead): n1 idle, n2 idle*
    assert parse_dead_nodes(data("sinfo_nodes_state_lab_22.05_one_not_responding.txt")) == ["n2"]


def test_a_running_jobs_node_that_stops_responding_is_said_once(fake, store, clock):
    store.add(record(87))
    store.add(record(88))
    fake.queue = [sq(87, nodelist="n[1-2]"), sq(88, nodelist="n1")]
    fake.dead = data("sinfo_dead_lab_22.05_mixed.txt")
    w = watcher(fake, store, clock)
    assert not only(w.round(), EventKind.NODE_NOT_RESPONDING)  # running for a minute first
    clock.tick(60)
    said = only(w.round(), EventKind.NODE_NOT_RESPONDING)
    assert [e.job_id for e in said] == ["87"]
    assert said[0].data["not_responding"] == ["n2"]
    assert "runs on n2, which Slurm marks not responding" in said[0].message
    clock.tick(60)
    assert not only(w.round(), EventKind.NODE_NOT_RESPONDING)


def dead_looks(fake) -> int:
    return sum(1 for c in fake.calls if c[:2] == ["sinfo", "--dead"])


def test_the_nodes_are_asked_only_once_watched_jobs_ran_a_minute_and_then_once_a_minute(fake, store, clock):
    store.add(record(89))
    fake.queue = [sq(89, "PENDING", reason="Priority")]
    w = watcher(fake, store, clock)
    w.round()
    assert dead_looks(fake) == 0
    fake.queue = [sq(89)]
    clock.tick(10)
    w.round()
    assert dead_looks(fake) == 0  # a job that runs less than a minute costs no look
    clock.tick(60)
    w.round()
    assert dead_looks(fake) == 1
    clock.tick(10)
    w.round()
    assert dead_looks(fake) == 1
    clock.tick(60)
    w.round()
    assert dead_looks(fake) == 2


def test_resumed_and_from_the_top_lines_from_the_log(fake, store, clock):
    store.add(record(91))
    log = "/logs/run91_91.out"
    fake.queue = [sq(91)]
    attempt1 = [
        "roach: attempt 1 of run run91: job 91 on n1 (restart count 0)",
        "0: 2027-01-15T07:59:00Z roach rank 0: fresh start: no resume.pt in /runs/run91",
        "0: 2027-01-15T07:59:01Z roach rank 0: step 0/100",
    ]
    fake.logs[log] = FakeLog(10, T0, attempt1)
    w = watcher(fake, store, clock)
    assert not only(w.round(), EventKind.RESUMED)
    fake.logs[log] = FakeLog(
        20,
        T0 + 5,
        attempt1
        + [
            "0: 2027-01-15T07:59:05Z roach rank 0: preempted at step 7 (checkpointed, TERM): requeueing job 91",
            "roach: attempt 2 of run run91: job 91 on n2 (restart count 1)",
            "0: 2027-01-15T07:59:20Z roach rank 0: resumed at step 7 (checkpoint of job 91; restart count 1)",
        ],
    )
    fake.queue = [sq(91, elapsed="0:01", restarts=1)]
    clock.tick(10)
    ev = w.round()
    assert kinds(ev) == ["resumed", "preempted", "started"]
    assert "resumed at step 7 (attempt 2)" in ev[0].message
    assert ev[1].kind is EventKind.PREEMPTED  # the log says preempted, though normal is not preemptible
    assert ev[1].data["step"] == 7  # the step its stop line names, not its last progress line's (step 0)
    assert "preempted at step 7 on tier" in ev[1].message
    fake.logs[log] = FakeLog(
        30,
        T0 + 15,
        fake.logs[log].lines
        + [
            "roach: attempt 3 of run run91: job 91 on n2 (restart count 2)",
            "0: 2027-01-15T07:59:40Z roach rank 0: restart count 2 and no resume.pt: this attempt starts from the top",
        ],
    )
    fake.queue = [sq(91, elapsed="0:01", restarts=2)]
    clock.tick(10)
    assert "from_the_top" in kinds(w.round())


def test_a_requeue_after_the_run_finished_is_not_a_preemption(fake, store, clock):
    """Slurm 24.11 requeues once more the run that follows a preemption with a grace time, when it ends, and
    accounts it PREEMPTED: the log says the run finished, so the watch says a requeue."""
    store.add(record(92))
    log = "/logs/run92_92.out"
    fake.queue = [sq(92, qos="low", restarts=1)]
    lines = [
        "roach: attempt 2 of run run92: job 92 on n1 (restart count 1)",
        "0: 2027-01-15T07:59:20Z roach rank 0: resumed at step 7 (checkpoint of job 92; restart count 1)",
        "0: 2027-01-15T07:59:21Z roach rank 0: step 99/100",
    ]
    fake.logs[log] = FakeLog(10, T0, lines)
    w = watcher(fake, store, clock)
    w.round()
    done = "0: 2027-01-15T07:59:22Z roach rank 0: finished; result in /runs/run92/result.json"
    fake.logs[log] = FakeLog(20, T0 + 5, [*lines, done])
    fake.queue = [sq(92, "PENDING", reason="BeginTime", qos="low", restarts=2)]
    clock.tick(10)
    ev = w.round()
    assert only(ev, EventKind.PREEMPTED) == []
    assert [e.kind for e in ev if e.kind is EventKind.REQUEUED] == [EventKind.REQUEUED]
    assert "after its run finished" in only(ev, EventKind.REQUEUED)[0].message


def test_the_finished_line_of_a_preempted_runs_last_attempt_is_read_over_its_preemption():
    lines = (DATA / "log_lab_22.05_ledger_sweep_run1.txt").read_text().splitlines()
    kept = [line for line in lines if re.search(INTEREST, line, re.IGNORECASE)][-16:]  # what the look keeps
    facts = read_facts(kept)
    assert facts.finished
    assert not facts.preempted


def test_call_count_per_round_is_constant_in_the_number_of_jobs(store, clock):
    def count(n: int) -> list[int]:
        fake = FakeCluster()
        with Store(Path(tempfile.mkdtemp()) / "s.sqlite") as s:
            for i in range(n):
                s.add(record(1000 + i))
            fake.queue = [sq(1000 + i) for i in range(n)]
            for i in range(n):
                fake.logs[f"/logs/run{1000 + i}_{1000 + i}.out"] = FakeLog(10, T0, ["step 1"])
            w = watcher(fake, s, clock)
            per = []
            for r in range(3):
                before = len(fake.calls)
                if r == 2:  # half of them left the queue and ended
                    fake.queue = fake.queue[: n // 2]
                    fake.acct = [sa(1000 + i) for i in range(n)]
                w.round()
                per.append(len(fake.calls) - before)
        return per

    # squeue + one look at every log (+ one sacct, and one command writing every ended job's job.json); which nodes
    # do not respond is asked only once the jobs have run for nodes_every_s
    assert count(6) == count(300) == [2, 2, 4]


def test_disk_threshold_lines_on_crossing_and_back(fake, store, clock):
    store.add(record(95))
    fake.queue = [sq(95)]
    fake.logs["/logs/run95_95.out"] = FakeLog(10, T0, [])
    w = watcher(fake, store, clock, log_dir_max_bytes=500, disk_every_s=0)
    ev = only(w.round(), EventKind.DISK)  # the fake says 1000 B used, 50% free
    assert len(ev) == 1 and "/logs holds 1000 B, over 500 B" in ev[0].message
    clock.tick(10)
    assert not only(w.round(), EventKind.DISK)
    w.log_dir_max_bytes = 5000
    clock.tick(10)
    ev = only(w.round(), EventKind.DISK)
    assert len(ev) == 1 and "back under" in ev[0].message


def test_state_is_kept_in_the_store_between_watcher_processes(fake, store, clock):
    store.add(record(96))
    fake.queue = [sq(96)]
    assert "started" in kinds(watcher(fake, store, clock).round())
    clock.tick(10)
    again = watcher(fake, store, clock, heartbeat_s=5)  # a new process compares with the saved round
    assert kinds(again.round()) == ["heartbeat"]
    views, meta = store.watch_load("lab")
    assert views["96"]["state"] == "RUNNING" and "started" in views["96"]["reported"]


def test_a_round_writes_only_the_views_that_changed(fake, store, clock, monkeypatch):
    store.add_many([record(i) for i in range(200, 250)])
    fake.queue = [sq(i, "PENDING", reason="Priority") for i in range(200, 250)]
    written: list[list[str]] = []
    real = Store.watch_save

    def counting(self, cluster, jobs, meta, forget=(), round=None):
        written.append(sorted(jobs))
        return real(self, cluster, jobs, meta, forget, round)

    monkeypatch.setattr(Store, "watch_save", counting)
    w = watcher(fake, store, clock)
    for _ in range(4):  # new, then pending once and twice (what promotion waits for): every view changes
        w.round()
        clock.tick(10)
    assert [len(j) for j in written] == [50, 50, 0, 0]  # then nothing changes: only the round is logged
    version = store.version()
    w.round()
    assert store.version() == (version[0], version[1] + 1) and written[-1] == []  # one commit: the round's log
    assert store.watch_round("lab")[0].round == 5
    fake.queue[7] = sq(207)  # one starts: that one view is written, and a new process sees it
    w.round()
    assert written[-1] == ["207"]
    assert store.watch_load("lab")[0]["207"]["state"] == "RUNNING"
    clock.tick(10)
    assert "started" not in kinds(watcher(fake, store, clock).round())


def test_a_round_starts_from_the_last_rounds_state_until_anything_else_writes_the_store(fake, store, clock):
    """Reading and parsing every saved view is most of a long queue's round: it is skipped while the store
    holds exactly what the last round saved, and done again after any other write, this process's or not."""
    store.add_many([record(31), record(32)])
    fake.queue = [sq(31, "PENDING", reason="Priority"), sq(32, "PENDING", reason="Priority")]
    loads: list[str] = []
    real_load, real_unfinished = store.watch_load, store.unfinished
    store.watch_load = lambda c: loads.append("views") or real_load(c)
    store.unfinished = lambda c: loads.append("records") or real_unfinished(c)
    w = watcher(fake, store, clock)

    def look() -> tuple[list[str], list[Event]]:
        loads.clear()
        clock.tick(10)
        said = w.round()
        return list(loads), said

    look()
    look()  # the first round also made the watch tables: this one is where the store holds only rounds' writes
    assert look()[0] == []
    assert real_load("lab")[0] == {k: v.to_json() for k, v in w.saved.memo.views.items()}  # what a new watcher reads
    fake.queue[0] = sq(31)  # it starts: its view changes, and the round's own save keeps the memo
    read, said = look()
    assert read == [] and [(e.kind.value, e.job_id) for e in said] == [("started", "31")]
    store.add(record(33))  # this process submits: the next round reads the store and adopts the new job
    fake.queue.append(sq(33))
    read, said = look()
    assert read == ["views", "records"] and ("started", "33") in [(e.kind.value, e.job_id) for e in said]
    assert look()[0] == []
    with Store(store.path) as other:  # another process records 32's end (`roach ls` does)
        other.update_final("lab", 32, "cancelled", "CANCELLED by 0", "0:15", utc_now())
    fake.queue = [sq(31), sq(33)]
    read, said = look()
    assert read == ["views", "records"] and "32" not in {r for r in w.saved.memo.records}
    fake.queue, fake.acct = [sq(33)], [sa(31)]  # 31 ends: its final state is the round's own write
    read, said = look()
    assert read == [] and ("finished", "31") in [(e.kind.value, e.job_id) for e in said]
    assert "31" not in w.saved.memo.records and store.get("lab", 31).status == "completed"
    assert look()[0] == []


def test_nothing_to_watch_is_an_empty_queue_at_once(fake, store, clock):
    w = watcher(fake, store, clock)
    assert kinds(w.round()) == ["heartbeat", "queue_empty"] and w.finished and w.exit_status() == 0


def test_given_array_id_is_watched_task_by_task(fake, store, clock):
    fake.queue = [sq(500, "PENDING", reason="JobHeldUser", task=i, gpus=0) for i in range(3)]
    w = watcher(fake, store, clock, job_ids=("500",))
    w.round()
    fake.queue = []
    fake.acct = [sa("500_[0-2]", "CANCELLED", exit_code="0:0")]
    clock.tick(10)
    ev = w.round()
    assert [e.job_id for e in only(ev, EventKind.FINISHED)] == ["500_0", "500_1", "500_2"]
    assert ev[-1].kind is EventKind.QUEUE_EMPTY


def test_look_output_and_log_facts():
    out = (
        f"T{US}1800000000{US}2027-01-15T08:00:00{RS}D{US}/l{US}42{US}1000 250{RS}"
        f"F{US}/l/a b'$(x).out{US}12 1799999990{US}roach: attempt 1 of run r\nstep 3/10\n{RS}M{US}/l/missing{RS}"
    )
    look = parse_look(out)
    assert look.now == 1800000000 and look.disks["/l"].free_fraction == 0.25
    assert look.logs["/l/a b'$(x).out"].size == 12 and not look.logs["/l/missing"].exists
    facts = read_facts(
        [
            "roach: attempt 2 of run r",
            "0: 2027-01-15T07:59:00Z roach rank 0: resumed at step 40",
            "0: 2027-01-15T07:59:01Z roach rank 0: step 40/120",
            "0: 2027-01-15T07:59:02Z roach rank 0: caught_signal TERM at step 41",
        ]
    )
    assert (facts.attempt, facts.resumed_at, facts.step, facts.steps_total, facts.checkpoints) == (2, 40, 40, 120, True)
    assert facts.progress.endswith("step 40/120")


def test_the_look_is_one_command_and_takes_hostile_paths(tmp_path):
    from roach.watch import logs as watch_logs

    d = tmp_path / "lo gs'$(touch pwned)"
    d.mkdir()
    log = d / 'run "x"\n_1.out'
    log.write_text("roach: attempt 1 of run r\nnoise\n0: 2027-01-15T07:59:01Z roach rank 0: step 3/9\n\x1e junk \x1f\n")
    transport = MockTransport(inner=LocalTransport())
    seen = watch_logs.look(transport, [str(log), str(d / "missing.out")], [str(d)])
    assert len(transport.calls) == 1 and not (Path.cwd() / "pwned").exists()
    got = seen.logs[str(log)]
    assert got.exists and got.size == log.stat().st_size and int(got.mtime) == int(log.stat().st_mtime)
    assert got.lines == ("roach: attempt 1 of run r", "0: 2027-01-15T07:59:01Z roach rank 0: step 3/9")
    assert not seen.logs[str(d / "missing.out")].exists
    assert seen.disks[str(d)].used > 0 and seen.disks[str(d)].fs_free > 0 and abs(seen.now - time.time()) < 5


def test_cli_json_and_exec_with_a_hostile_path(tmp_path, monkeypatch):
    from roach.cli import watch as cli_watch

    out = tmp_path / "we'ird $(dir) x"
    out.mkdir()
    script = out / "hook.py"
    script.write_text(
        "import os, sys\nopen(sys.argv[1], 'a').write(os.environ['ROACH_EVENT'] + ' ' + sys.stdin.read())\n"
    )
    sink = out / "events log.txt"
    import shlex

    emit = cli_watch._emitter(
        True, shlex.split(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(sink))}")
    )
    ev = Event(EventKind.STARTED, T0, "lab", "job 1 started", "1", "r1", data={"tier": "high"})
    emit(ev)
    kind, payload = sink.read_text().split(" ", 1)
    assert kind == "started" and json.loads(payload)["tier"] == "high" and json.loads(payload)["event"] == "started"


# -- on the lab ---------------------------------------------------------------------------------------------
CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits
_submit = partial(submit_to_lab, resources=GPU1.replace(time="00:05:00"))


def _run(w: Watcher, events: list[Event], timeout: float) -> int:
    """Watcher.run with a deadline: rounds every interval until the queue is empty."""
    deadline = time.monotonic() + slack(timeout)
    while not w.finished:
        assert time.monotonic() < deadline, [e.line() for e in events]
        events += w.round()
        if not w.finished:
            time.sleep(w.next_delay())
    return w.exit_status()


def _cancel_all(store, client):
    ids = [r.job_id for r in store.recent(1000)]
    if ids:
        client.scancel(ids)


@pytest.mark.lab
def test_sweep_of_six_started_finished_once_heartbeat_and_exit(lab, repo, store, roots, user_slurm):
    jobs = [
        _submit(repo, store, roots, "pkg.train:train", {"steps": 5 + i, "step_s": 0.2}, name=f"sweep{i}")
        for i in range(6)
    ]
    events: list[Event] = []
    w = Watcher(CLUSTER, CLUSTER.client(), store, interval_s=1.0, heartbeat_s=3.0)
    try:
        status = _run(w, events, timeout=120)
    finally:
        _cancel_all(store, user_slurm)
    ids = {str(j.job_id) for j in jobs}
    started = [e.job_id for e in events if e.kind is EventKind.STARTED]
    finished = [e.job_id for e in events if e.kind is EventKind.FINISHED]
    assert sorted(started) == sorted(ids) and sorted(finished) == sorted(ids), [e.line() for e in events]
    assert all(e.data["state"] == "COMPLETED" for e in events if e.kind is EventKind.FINISHED)
    beats = [e for e in events if e.kind is EventKind.HEARTBEAT]
    assert beats and all("high " in e.line() and "/4 claimed" in e.line() and "low " in e.line() for e in beats)
    assert events[-1].kind is EventKind.QUEUE_EMPTY and status == 0 and w.finished
    assert all(store.get("lab", int(j)).status == "completed" for j in ids)
    # and each one's job.json on the cluster, as Job.wait() writes it
    assert [JobJson.from_json(Path(j.paths.job_json).read_text()).status for j in jobs] == ["completed"] * 6


@pytest.mark.slow
@pytest.mark.lab
def test_slurm_calls_per_round_are_the_same_for_6_and_300_jobs(lab, user_slurm, jobs, store):
    held = ["--hold", "--time=1", "--output=/dev/null", "--job-name=watch-count"]
    six = [user_slurm.sbatch(held, "#!/bin/bash\ntrue\n") for _ in range(6)]
    jobs += six
    transport = MockTransport(inner=CLUSTER.transport())
    client = SlurmClient(transport)

    def per_round(ids):
        w = Watcher(CLUSTER, client, store, job_ids=tuple(str(i) for i in ids), heartbeat_s=1e9)
        counts = []
        for _ in range(2):
            before = len(transport.calls)
            w.round()
            counts.append(len(transport.calls) - before)
        return counts, w

    few, w6 = per_round(six)
    array = user_slurm.sbatch([*held, "--array=0-299"], "#!/bin/bash\ntrue\n")
    jobs.append(array)
    wait_until(
        "300 array tasks in the queue", lambda: len([q for q in user_slurm.squeue(job_ids=[array])]) == 300, timeout=30
    )
    store.watch_reset("lab")
    many, w300 = per_round([*six, array])
    assert few == many == [1, 1], (few, many)  # one squeue a round, whatever the number of jobs
    user_slurm.scancel([*six, array])
    wait_until("the jobs to leave the queue", lambda: not user_slurm.squeue(job_ids=[*six, array]), timeout=60)
    ev: list[Event] = []
    deadline = time.monotonic() + slack(60)
    while not w300.finished and time.monotonic() < deadline:  # slurmdbd records the cancellations a bit later
        before = len(transport.calls)
        ev += w300.round()
        assert len(transport.calls) - before == 2  # squeue, and one sacct for all that left
        time.sleep(1)
    assert len(only(ev, EventKind.FINISHED)) == 306 and ev[-1].kind is EventKind.QUEUE_EMPTY


@pytest.mark.lab
def test_a_run_whose_log_stops_is_reported_stalled(lab, repo, store, roots, user_slurm):
    job = _submit(repo, store, roots, "pkg.train:train", {"steps": 100, "step_s": 0.3, "hang_at": 12}, name="hangs")
    w = Watcher(
        CLUSTER, CLUSTER.client(), store, interval_s=1.0, heartbeat_s=1e9, stall=StallRule(factor=3.0, min_s=4.0)
    )
    events: list[Event] = []
    try:
        wait_until(
            "a stalled line",
            lambda: [e for e in (events.extend(w.round()) or events) if e.kind is EventKind.STALLED],
            timeout=60,
            every=1.0,
        )
    finally:
        job.cancel()
    stalled = only(events, EventKind.STALLED)
    assert len(stalled) == 1 and stalled[0].job_id == str(job.job_id)
    assert "step 1" in stalled[0].message and "usual gap" in stalled[0].message
    assert "started" in kinds(events) and "finished" not in kinds(events)


@pytest.mark.lab
def test_a_job_bigger_than_its_tier_cap_is_reported_never_starting(lab, user_slurm, jobs, store):
    big = user_slurm.sbatch(
        [
            "--qos=high",
            "--nodelist=n1",
            "--ntasks=2",
            "--gpus-per-task=4",
            "--time=1",
            "--output=/dev/null",
            "--job-name=never-big",
        ],
        "#!/bin/bash\nsleep 30\n",
    )
    jobs.append(big)
    w = Watcher(CLUSTER, CLUSTER.client(), store, job_ids=(str(big),), heartbeat_s=1e9)
    events: list[Event] = []
    wait_until(
        "a never-starts line",
        lambda: [e for e in (events.extend(w.round()) or events) if e.kind is EventKind.NEVER_STARTS],
        timeout=30,
        every=1.0,
    )
    (never,) = only(events, EventKind.NEVER_STARTS)
    assert never.data["reason"] == "QOSMaxGRESPerUser" and "asks for 8 GPUs" in never.message


@pytest.mark.lab
def test_roach_watch_cli_once_json_and_an_empty_queue(lab, user_slurm, jobs, tmp_path, monkeypatch):
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "cli-store.sqlite"))
    held = user_slurm.sbatch(["--hold", "--time=1", "--output=/dev/null", "--job-name=cli-held"], "#!/bin/bash\ntrue\n")
    jobs.append(held)
    run = roach("watch", "--cluster", "lab", "--run-as", LAB_USER, "--job", str(held), "--once", "--json")
    assert run.exit_code == 0, run.output
    lines = [json.loads(ln) for ln in run.output.splitlines()]
    assert [ln["event"] for ln in lines] == ["heartbeat"] and {t["tier"] for t in lines[0]["tiers"]} == {"high", "low"}
    user_slurm.scancel([held])
    wait_until(
        "the held job to be accounted", lambda: [a for a in user_slurm.sacct([held]) if a.state.is_terminal], timeout=30
    )
    run = roach("watch", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "0.5", "--job", str(held))
    assert run.exit_code == JOB_NOT_COMPLETED, run.output  # it ended CANCELLED
    assert "finished" in run.output and "CANCELLED" in run.output and "queue empty" in run.output
    run = roach("watch", "--cluster", "lab", "--run-as", LAB_USER, "--once")
    assert run.exit_code == 0 and "queue empty: no job to watch" in run.output
    bad = roach("watch", "--job", "12x")
    assert bad.exit_code == 2 and "not a Slurm job id" in bad.output


# -- on a private lab: tier counts no other session changes, and daemons this test may restart -----------------
PRIVATE_PORT_BASE = private_port_base(1)


@pytest.fixture(scope="module")
def private(lab):  # through the lab fixture: the lab marker holds for private labs too
    """A second lab, this module's own, removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    from roach.lab import lab as lablib

    state = Path(tempfile.mkdtemp(prefix="roach-watch-lab-", dir=SHARED_TMP))
    os.chmod(state, 0o755)  # the lab user's commands read its slurm.conf
    try:  # a start that fails part-way has started some daemons (mariadbd holds its port): stop them too
        yield lablib.up(str(state), log=lambda *_: None, port_base=PRIVATE_PORT_BASE, layout=suite_layout())
    finally:
        lablib.down(str(state), log=lambda *_: None)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def plab(private):
    """The private lab as a roach cluster driven as the lab user, its root client, and a cleanup list."""
    env = private.env()
    cluster = LAB.with_(run_as=LAB_USER, env_factory=lambda: env)
    root = SlurmClient(LocalTransport(env=env))
    mine = SlurmClient(LocalTransport(env=env, user=LAB_USER))
    ids: list[int] = []
    yield cluster, root, mine, ids
    everything = [q.raw_id for q in root.squeue(all_users=True)]
    root.scancel(everything)
    wait_until("the private lab's queue to empty", lambda: not root.squeue(all_users=True), timeout=60)


def _rounds_until(w: Watcher, events: list[Event], what: str, pred, timeout: float = 60.0, every: float = 1.0):
    deadline = time.monotonic() + slack(timeout)
    while time.monotonic() < deadline:
        new = w.round()
        events.extend(new)
        hit = [e for e in new if pred(e)]
        if hit:
            return hit
        time.sleep(every)
    pytest.fail(f"no {what} within {timeout:.0f}s: {[e.line() for e in events]}")


def _view(store: Store, key) -> dict:
    return store.watch_load("lab")[0].get(str(key), {})


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.xdist_group("watch-private-lab")  # one private lab, at its fixed ports
def test_preemption_is_reported_in_the_round_after_it_happens(plab, repo, store, roots):
    cluster, root, _, _ = plab
    job = _submit(
        repo,
        store,
        roots,
        "pkg.train:train",
        {"steps": 400, "step_s": 0.2},
        cluster=cluster,
        name="preemptible",
        resources=GPU1.replace(qos="low", time="00:05:00", extra=("--nodelist=n1",)),
    )
    w = Watcher(cluster, cluster.client(), store, interval_s=1.0, heartbeat_s=1e9)
    events: list[Event] = []
    _rounds_until(w, events, "the run to start", lambda e: e.kind is EventKind.STARTED)
    wait_until("progress", lambda: "step 20" in job.log(), timeout=30)
    w.round()
    root.sbatch(
        ["--qos=high", "--nodelist=n1", "--gres=gpu:4", "--time=1", "--output=/dev/null"], "#!/bin/bash\nsleep 5\n"
    )
    deadline = time.monotonic() + slack(60)
    while time.monotonic() < deadline:
        new = w.round()
        events += new
        view = _view(store, job.job_id)
        back = view.get("restart_count", 0) > 0 or view.get("state") == "PENDING"
        if back and view.get("state") != "COMPLETING":
            break  # the first round that sees the job back in the queue, out of COMPLETING ...
        time.sleep(1.0)
    preempted = only(new, EventKind.PREEMPTED)  # ... says so in that very round
    assert len(preempted) == 1, [e.line() for e in events]
    assert "tier low" in preempted[0].message and preempted[0].job_id == str(job.job_id)
    assert not only(events, EventKind.FINISHED)


@pytest.mark.lab
@pytest.mark.xdist_group("watch-private-lab")  # one private lab, at its fixed ports
def test_promotion_line_within_a_round_then_rebalance_moves_it_to_high(plab, repo, store, roots):
    from roach.ops.rebalance import promote

    cluster, root, mine, _ = plab
    opts = ["--time=5", "--output=/dev/null"]
    high = [
        mine.sbatch(["--qos=high", "--gres=gpu:2", "--nodelist=n1", *opts], "#!/bin/bash\nsleep 300\n")
        for _ in range(2)
    ]
    # under srun, so that preemption's TERM ends it at once instead of after the low tier's grace time
    mine.sbatch(["--qos=low", "--gres=gpu:4", "--nodelist=n2", *opts], "#!/bin/bash\nsrun sleep 300\n")
    wait_until("the fillers to run", lambda: len([q for q in mine.squeue() if q.state.is_running]) == 3, timeout=60)
    job = _submit(
        repo,
        store,
        roots,
        "pkg.train:train",
        {"steps": 50, "step_s": 0.2},
        cluster=cluster,
        name="wants-high",
        resources=GPU1.replace(qos="low", time="00:05:00", extra=("--nodelist=n2",)),
    )
    w = Watcher(cluster, cluster.client(), store, interval_s=1.0, heartbeat_s=1e9)
    events: list[Event] = []
    for _ in range(3):
        events += w.round()
        time.sleep(1.0)
    assert not only(events, EventKind.PROMOTION), [e.line() for e in events]  # high is full: 4/4
    assert _view(store, job.job_id)["state"] == "PENDING"
    mine.scancel([high[0]])
    wait_until(
        "the high job to leave the queue",
        lambda: not [q for q in mine.squeue(job_ids=[high[0]]) if q.state.is_active],
        timeout=30,
    )
    promo = only(w.round(), EventKind.PROMOTION)
    assert len(promo) == 1 and promo[0].job_id == str(job.job_id), [e.line() for e in events]
    assert promo[0].data["to_tier"] == "high" and promo[0].data["room"] == 2
    assert "high 2/4 claimed, 2 free" in promo[0].line()

    def promoter(p):
        # as `roach watch --rebalance` promotes: the round weighed the move (the filler it preempts is no run)
        return promote(p.key, p.to_tier, cluster=cluster, store=store, repo_root=repo.work, preempt_own=True).job_id

    w.rebalancer.rebalance, w.rebalancer.promoter = True, promoter
    moved = only(w.round(), EventKind.PROMOTED)
    assert len(moved) == 1, [e.line() for e in events]
    new_id = moved[0].data["new_job_id"]
    started = _rounds_until(
        w,
        events,
        "the promoted job to start",
        lambda e: e.kind is EventKind.STARTED and e.job_id == str(new_id),
        timeout=90,
    )
    assert started[0].data["tier"] == "high"
    assert store.get("lab", new_id).run_id == job.run_id
    fin = [e for e in events if e.kind is EventKind.FINISHED and e.job_id == str(job.job_id)] or _rounds_until(
        w,
        events,
        "the old job's end",
        lambda e: e.kind is EventKind.FINISHED and e.job_id == str(job.job_id),
        timeout=30,
    )
    assert fin[0].data["state"] == "CANCELLED" and f"continued as job {new_id}" in fin[0].message


@pytest.mark.lab
@pytest.mark.xdist_group("watch-private-lab")  # one private lab, at its fixed ports
def test_a_job_pinned_to_a_drained_node_never_starts(plab, store):
    cluster, root, mine, _ = plab
    root.run(["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=roach-watch-test"], retry=False)
    try:
        pinned = mine.sbatch(["--nodelist=n2", "--time=1", "--output=/dev/null"], "#!/bin/bash\ntrue\n")
        w = Watcher(cluster, cluster.client(), store, job_ids=(str(pinned),), heartbeat_s=1e9)
        events: list[Event] = []
        (never,) = _rounds_until(
            w, events, "a never-starts line", lambda e: e.kind is EventKind.NEVER_STARTS, timeout=30
        )
    finally:
        root.run(["scontrol", "update", "NodeName=n2", "State=RESUME"], retry=False)
    assert never.data["reason"] == "ReqNodeNotAvail" and "pinned to n2" in never.message
    assert "resubmit without --nodelist" in never.message


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.xdist_group("watch-private-lab")  # one private lab, at its fixed ports
def test_a_reservation_that_moves_then_vanishes_is_said_once_each(plab, store):
    cluster, root, mine, _ = plab
    resv = "roach-watch-resv"
    root.run(
        [
            "scontrol",
            "create",
            "reservation",
            f"ReservationName={resv}",
            "StartTime=now+3600",
            "Duration=10",
            "Nodes=n1",
            f"Users={LAB_USER}",
        ],
        retry=False,
    )
    job = None
    try:
        # held, so that it cannot start in the reservation when it begins
        job = mine.sbatch(["--hold", f"--reservation={resv}", "--time=1", "--output=/dev/null"], "#!/bin/bash\ntrue\n")
        w = Watcher(cluster, cluster.client(), store, job_ids=(str(job),), interval_s=1.0, heartbeat_s=1e9)
        events: list[Event] = []
        for _ in range(2):
            events += w.round()
        assert not only(events, EventKind.RESERVATION), [e.line() for e in events]
        was = _view(store, job)["resv_start"]
        root.run(["scontrol", "update", f"ReservationName={resv}", "StartTime=now+7200"], retry=False)
        new = w.round()
        events += new
        (moved,) = only(new, EventKind.RESERVATION)
        assert moved.data["change"] == "moved" and moved.data["was_start"] == was and moved.job_id == str(job)
        assert f"its reservation {resv} moved: it starts at {moved.data['start']} (was {was})" in moved.message
        events += w.round()
        # it starts now and ends 2 s later (a round may see that move too); Slurm then deletes it, and the job
        # pending on it loses it (RESV_DEL_HOLD)
        root.run(["scontrol", "update", f"ReservationName={resv}", "StartTime=now", "EndTime=now+2"], retry=False)
        (gone,) = _rounds_until(
            w,
            events,
            "the vanished line",
            lambda e: e.kind is EventKind.RESERVATION and e.data["change"] == "vanished",
            timeout=60,
        )
        assert f"reservation {resv}, which no longer exists" in gone.message and gone.job_id == str(job)
        for _ in range(2):
            events += w.round()
        said = only(events, EventKind.RESERVATION)
        assert [e.data["change"] for e in said][-1] == "vanished" and len(said) <= 3, [e.line() for e in said]
        starts = [e.data["start"] for e in said if e.data["change"] == "moved"]
        assert len(set(starts)) == len(starts)  # each move said once
        assert [q.state.value for q in mine.squeue(job_ids=[job])] == ["RESV_DEL_HOLD"]
    finally:
        if job is not None:
            mine.scancel([job])
        root.run(["scontrol", "delete", f"ReservationName={resv}"], retry=False, ok_codes=(0, 1))


@pytest.mark.slow
@pytest.mark.lab
@pytest.mark.xdist_group("watch-private-lab")  # one private lab, at its fixed ports
def test_slurmctld_and_slurmdbd_restart_mid_watch(plab, private, store):
    import subprocess

    from roach.lab import lab as lablib

    cluster, root, mine, _ = plab
    env = {**os.environ, **private.env()}
    daemons = {d.name: d for d in lablib.daemons(private)}
    long = mine.sbatch(["--time=2", "--output=/dev/null"], "#!/bin/bash\nsleep 90\n")
    short = mine.sbatch(["--time=2", "--output=/dev/null"], "#!/bin/bash\nsleep 5\n")
    client = SlurmClient(CLUSTER.with_(env_factory=lambda: private.env()).transport(), retries=0)
    w = Watcher(cluster, client, store, job_ids=(str(long), str(short)), interval_s=1.0, heartbeat_s=1e9)
    events: list[Event] = []
    wait_until("both to run", lambda: len([q for q in mine.squeue() if q.state.is_running]) == 2, timeout=30)
    events += w.round()
    daemons["slurmdbd"].stop()
    daemons["slurmctld"].stop()
    stopped = time.monotonic()
    try:
        outage = []
        for _ in range(2):  # each takes squeue's own ~4 s of trying
            outage += w.round()
        assert kinds(outage) == ["outage"] and "slurmctld unreachable" in outage[0].message
        assert w.next_delay() > w.interval_s  # backing off
        time.sleep(max(0.0, 6 - (time.monotonic() - stopped)))  # the short job ends while the controller is away
        daemons["slurmctld"].start(
            ready=lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True).returncode == 0
        )
        wait_until(
            "the short job to leave the queue",
            lambda: not [q for q in mine.squeue(job_ids=[short]) if q.state.is_active],
            timeout=60,
        )
        back = w.round()
        events += outage + back
        assert "recovered" in kinds(back) and "slurmdbd unreachable" in " ".join(e.message for e in back)
        assert not only(back, EventKind.FINISHED)
    finally:
        daemons["slurmdbd"].start(
            ready=lambda: (
                subprocess.run(["sacctmgr", "-n", "show", "cluster"], env=env, capture_output=True).returncode == 0
            )
        )
        daemons["slurmctld"].start(
            ready=lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True).returncode == 0
        )
    fin = _rounds_until(w, events, "the short job's end", lambda e: e.kind is EventKind.FINISHED, timeout=60)
    assert [e.job_id for e in fin] == [str(short)] and fin[0].data["state"] == "COMPLETED"
    assert len(only(events, EventKind.OUTAGE)) == 2  # slurmctld once, slurmdbd once
    assert not [e for e in events if e.kind is EventKind.FINISHED and e.job_id == str(long)]
    assert [q.state.value for q in mine.squeue(job_ids=[long])] == ["RUNNING"]
