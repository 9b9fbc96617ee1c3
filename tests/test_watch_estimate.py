"""The watch's start estimates: a `pending` line when a watched job starts to pend (and when its likely start
moves), the estimates kept for `roach top`, and one read of the cluster's queue only while a job pends on a reason
that clears."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from roach.scheduler.parse import RS, US
from roach.watch.logs import read_facts
from roach.watch.screen import build_frame
from tests.support.watch import T0, TIERED, Clock, FakeCluster, kinds, record, sq, watcher

DATA = Path(__file__).parent / "data"
SINFO = (
    f"n1{US}mixed{US}4/4/0/8{US}gpu:4{US}gpu:4{US}gpu*{US}16000{US}2000{RS}\n"
    f"n2{US}mixed{US}4/4/0/8{US}gpu:4{US}gpu:4{US}gpu*{US}16000{US}2000{RS}\n"
)


@dataclass
class QueueFake(FakeCluster):
    """The fake cluster, which also answers the cluster's queue with priorities and sinfo."""

    priority: dict[str, int] = field(default_factory=dict)

    def answer(self, command, input):
        argv = list(command)
        if argv[0] == "sinfo":
            return 0, SINFO, ""
        if argv[0] == "squeue" and "PriorityLong:" in " ".join(argv):
            out = "".join(q.replace(RS, US + str(self.priority.get(q.split(US)[1], 100)) + RS) for q in self.queue)
            return 0, out, ""
        return super().answer(command, input)


def limited(line: str, limit: str = "5:00") -> str:
    return line.replace("UNLIMITED", limit)


def both_nodes_full_and_11_pending() -> list[str]:
    """Jobs 10 and 12 hold n1's and n2's 4 GPUs (5-minute limits, 1 and 2 minutes in); job 11 waits for 2."""
    return [
        limited(sq(10, "RUNNING", gpus=4, nodelist="n1", elapsed="1:00")),
        limited(sq(12, "RUNNING", gpus=4, nodelist="n2", elapsed="2:00")),
        limited(sq(11, "PENDING", reason="Resources", gpus=2)),
    ]


def cluster_queue_calls(fake: FakeCluster) -> int:
    return sum(1 for c in fake.calls if c[0] == "squeue" and "PriorityLong:" in " ".join(c))


def test_a_pending_line_says_when_a_watched_job_starts_and_top_shows_it(tmp_path):
    from roach.records.store import Store

    store = Store(tmp_path / "s.sqlite")
    clock = Clock()
    fake = QueueFake()
    for j in (10, 11, 12):
        store.add(record(j))
    fake.queue = both_nodes_full_and_11_pending()
    w = watcher(fake, store, clock)
    assert "pending" not in kinds(w.round()) and cluster_queue_calls(fake) == 0  # it may start at once
    first = w.round()
    said = [e for e in first if e.kind.value == "pending"]
    assert "pending" in kinds(first) and len(said) == 1 and said[0].job_id == "11"
    est = said[0].data["estimate"]
    assert est["likely_in_s"] == 181.0  # job 12 reaches its 5:00 limit in 3 minutes, then 1 s to start
    assert "starts likely in 3m01s" in said[0].message and "basis:" in said[0].message
    assert cluster_queue_calls(fake) == 1
    saved, meta = store.watch_load("lab")
    frame = build_frame("lab", TIERED.tiers, T0, saved, meta, w.queue)
    row = frame.row("11")
    assert row is not None and row.estimate is not None and row.to_json()["estimate"]["likely_in_s"] == 181.0

    clock.tick(10)
    assert "pending" not in kinds(w.round())  # the same start, 10 s nearer: nothing new to say
    assert cluster_queue_calls(fake) == 2  # one read a round while it pends

    clock.tick(10)
    fake.queue = [
        limited(sq(10, "RUNNING", gpus=4, nodelist="n1", elapsed="1:20")),
        limited(sq(11, "RUNNING", gpus=2, nodelist="n2", elapsed="0:01")),
    ]
    w.round()
    assert cluster_queue_calls(fake) == 2  # nothing pends: no read
    assert w.saved.load().views["11"].start_said is None


def test_a_held_job_costs_no_read_of_the_cluster_queue(tmp_path):
    from roach.records.store import Store

    store = Store(tmp_path / "s.sqlite")
    fake = QueueFake(queue=[sq(11, "PENDING", reason="JobHeldUser")])
    store.add(record(11))
    w = watcher(fake, store, Clock())
    events = w.round() + w.round()
    assert "pending" not in kinds(events)
    assert cluster_queue_calls(fake) == 0 and not any(c[0] == "sinfo" for c in fake.calls)


def test_a_job_that_asks_for_a_reservation_is_said_to_start_when_it_does(tmp_path):
    from roach.records.store import Store

    store = Store(tmp_path / "s.sqlite")
    store.add(record(11))
    fake = QueueFake(queue=[limited(sq(11, "PENDING", reason="Reservation", gpus=1))])
    fake.resv_of = {"11": "maint"}
    fake.reservations = {"maint": "2027-01-15T08:10:00"}  # T0 + 10 minutes, on n1
    w = watcher(fake, store, Clock())
    w.round()
    (said,) = [e for e in w.round() if e.kind.value == "pending"]
    assert said.data["estimate"]["likely_in_s"] == 601.0 and "reservation maint" in said.data["estimate"]["basis"]


def test_slurms_line_of_a_cancelled_job_step_is_no_progress_of_the_run():
    """A run's pace is read from its progress lines: slurmstepd's `*** STEP 4360.0 ... CANCELLED` line, which a
    requeue prints, names the job step, not a step of the run."""
    lines = (DATA / "log_lab_22.05_wall_clock.txt").read_text().splitlines()[:14]
    assert "*** STEP 4360.0 ON n1 CANCELLED" in lines[-1]
    facts = read_facts(lines)
    assert (facts.step, facts.steps_total) == (6, 40) and facts.progress_points[-1][1] == 6


def test_estimates_that_take_long_are_kept_until_as_old_as_ten_times_their_cost(tmp_path, monkeypatch):
    """Beside thousands of other users' jobs an estimate takes seconds of CPU: the watch makes it again only once
    the last one is 10x as old as it took (its share of the watch's time at most 10%), keeping the last one between,
    at once for a job that pends without one."""
    from roach.records.store import Store
    from roach.watch import starts

    cpu = iter(x * 3.0 for x in range(100))  # each estimate "takes" 3 s of CPU
    monkeypatch.setattr(starts, "time", SimpleNamespace(process_time=lambda: next(cpu)), raising=False)
    store = Store(tmp_path / "s.sqlite")
    clock = Clock()
    fake = QueueFake()
    for j in (10, 11, 12, 13):
        store.add(record(j))
    fake.queue = both_nodes_full_and_11_pending()
    w = watcher(fake, store, clock)
    w.round()
    w.round()
    assert cluster_queue_calls(fake) == 1
    clock.tick(10)
    w.round()
    assert cluster_queue_calls(fake) == 1  # 10 s after one that took 3 s: kept
    _, meta = store.watch_load("lab")
    assert meta["estimates"]["11"]["likely_in_s"] == 171.0  # the kept estimate, 10 s nearer
    fake.queue.append(limited(sq(13, "PENDING", reason="Resources", gpus=2)))
    clock.tick(10)
    w.round()
    w.round()  # job 13 pends a second round: it has no estimate, so one is made now
    assert cluster_queue_calls(fake) == 2
    clock.tick(30)
    w.round()
    assert cluster_queue_calls(fake) == 3  # 30 s after one that took 3 s: made again
