"""One poller, every viewer: the watch log in the store, and viewers that read one poller's rounds."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from roach.launch.job import Job
from roach.model.job_state import JobState
from roach.ops.events import EventKind
from roach.records import watch_log
from roach.records.poller.readers import Rank, ReaderMark, live_readers, outranked, readers, readers_dir
from roach.records.results import JOB_NOT_COMPLETED
from roach.records.watch_log import Round
from roach.scheduler import queue_json
from roach.scheduler.parse import parse_squeue
from roach.slurm.clusters.lab import LAB
from roach.watch.serve import serve
from roach.watch.shared import Viewer, follow
from tests.support.watch import T0, kinds, record, sa, sq, watcher

DATA = Path(__file__).parent / "data"


def n_squeue(fake) -> int:
    """The squeue calls of the users' queue so far (what a round costs)."""
    return sum(1 for argv in fake.calls if argv[0] == "squeue" and "--me" in argv)


def test_the_queue_as_json_reads_back_as_squeue_printed_it_on_every_release():
    files = [
        p
        for p in sorted(DATA.rglob("squeue_*.txt"))
        if not any(w in p.name for w in ("stderr", "help", "only", "ended"))
    ]
    releases = {p.parent.name for p in files}
    assert {"22.05", "24.11", "26.05"} <= releases, releases  # every release roach supports, as captured
    n = 0
    for p in files:
        if p.name.startswith("squeue_states"):
            continue
        queue = parse_squeue(p.read_bytes().decode())
        assert queue_json.loads(queue_json.dumps(queue)) == queue, p.name
        n += len(queue)
    assert n > 50


def test_a_rounds_queue_is_encoded_only_where_its_lines_changed():
    queue = parse_squeue((DATA / "squeue_lab_22.05_mixed.txt").read_bytes().decode())
    enc = queue_json.Encoder()
    assert enc.dumps_changed(queue) == queue_json.dumps(queue)
    assert enc.dumps_changed(queue) is None  # the very list the parser gave last round: nothing to write
    moved = [*queue[1:], queue[0]]  # the same lines' records in another order: encoded from what it had
    assert enc.dumps_changed(moved) == queue_json.dumps(moved)


def test_a_round_numbers_its_events_after_the_last_and_keeps_the_queue_it_last_read(store, monkeypatch):
    store.watch_save("lab", {}, {}, round=Round(1.0, 11, [{"k": 1}, {"k": 2}], "[1]"))
    store.watch_save("lab", {}, {}, round=Round(2.0, 12, [], None))  # a quiet round: the queue as it was
    store.watch_save("other", {}, {}, round=Round(2.5, 13, [{"k": 0}], "[]"))
    store.watch_save("lab", {}, {}, round=Round(3.0, 12, [{"k": 3}], None))
    said = store.watch_log("lab")
    assert [(s.seq, s.round, s.data["k"]) for s in said] == [(1, 1, 1), (2, 1, 2), (3, 3, 3)]
    last, seq = store.watch_round("lab")
    assert (last.round, last.at, last.pid, seq) == (3, 3.0, 12, 3) and store.watch_queue("lab") == "[1]"
    assert [s.seq for s in store.watch_log("lab", after=2)] == [3] and store.watch_log("lab", round=2) == []
    monkeypatch.setattr(watch_log, "KEEP_EVENTS", 2)
    store.watch_save("lab", {}, {}, round=Round(4.0, 12, [{"k": 4}], None))
    assert [s.seq for s in store.watch_log("lab")] == [3, 4]  # the oldest go; numbers are never reused


def test_a_second_viewer_shows_the_pollers_rounds_and_takes_them_over_when_it_ends(fake, store, clock):
    store.add(record(11))
    fake.queue = [sq(11, "PENDING", reason="Priority")]
    first = Viewer(watcher(fake, store, clock), monotonic=clock)
    second = Viewer(watcher(fake, store, clock), monotonic=clock)
    assert first.open() == [] and first.polling
    round_one = first.step()
    assert kinds(round_one) == ["heartbeat"] and n_squeue(fake) == 1
    # a viewer that starts mid-run gets the last round at once, with the poller's numbers, and takes no round
    assert [(e.kind, e.seq) for e in second.open()] == [(e.kind, e.seq) for e in round_one] and not second.polling
    assert second.step() == [] and n_squeue(fake) == 1
    clock.tick(10)
    fake.queue = [sq(11)]
    said = first.step()
    assert kinds(said) == ["started"] and n_squeue(fake) == 2
    assert [(e.kind, e.seq) for e in second.step()] == [(e.kind, e.seq) for e in said]  # once, the same numbers
    first.close()  # the poller ends (as a kill would: the kernel drops its flock)
    clock.tick(10)
    fake.queue, fake.acct = [], [sa(11)]
    ended = second.step()
    assert second.polling and n_squeue(fake) == 3 and kinds(ended) == ["finished", "queue_empty"]
    assert ended[0].seq == said[-1].seq + 1


def test_the_poller_that_takes_over_waits_out_the_last_rounds_interval(fake, store, clock):
    fake.queue = [sq(11, "PENDING", reason="Priority")]
    store.add(record(11))
    first = Viewer(watcher(fake, store, clock), monotonic=clock)
    first.open()
    first.step()
    first.close()
    clock.tick(4)  # 6 s of the 10 s interval are left
    second = Viewer(watcher(fake, store, clock), monotonic=clock)
    assert kinds(second.open()) == ["heartbeat"] and second.polling  # the last round's, at once
    assert second.step() == [] and n_squeue(fake) == 1
    assert second.next_wait() == 0.5  # looks again within a tick, rounds when the interval is over
    clock.tick(6)
    second.step()
    assert n_squeue(fake) == 2


def test_follow_ends_on_the_pollers_queue_empty_with_the_watch_status(fake, store, clock):
    store.add(record(11))
    fake.queue, fake.acct = [], [sa(11, "FAILED", exit_code="1:0")]
    poller = Viewer(watcher(fake, store, clock), monotonic=clock)
    shown: list = []
    assert follow(poller, shown.append) == JOB_NOT_COMPLETED
    assert [e.kind for e in shown][-1] is EventKind.QUEUE_EMPTY
    poller.close()
    # a later viewer shows the last round's end at once, but only a round after its start ends it
    later = Viewer(watcher(fake, store, clock), monotonic=clock)
    later.lock.try_acquire()  # another viewer polls: this one only reads
    reader = Viewer(watcher(fake, store, clock), monotonic=clock)
    assert [e.kind for e in reader.open()][-1] is EventKind.QUEUE_EMPTY
    assert reader.step() == []
    assert follow(reader, shown.append, once=True) == JOB_NOT_COMPLETED  # --once: the last round's events
    assert follow(reader, shown.append, once=True, since=10_000) == JOB_NOT_COMPLETED  # a stale seq: all kept


def test_a_waits_recorded_end_reads_sacct_s_words_as_their_state(store):
    for job_id, words, state in (
        (21, "OUT_OF_MEMORY (step 0; the job FAILED)", JobState.OUT_OF_MEMORY),
        (22, "CANCELLED by 0", JobState.CANCELLED),
        (23, "COMPLETED", JobState.COMPLETED),
    ):
        store.add(dataclasses.replace(record(job_id), status="failed", slurm_state=words, recorded_at="2026"))
        assert Job(LAB, record(job_id), store).recorded_end() is state, words
    store.add(record(24))
    assert Job(LAB, record(24), store).recorded_end() is None  # no end recorded: nothing to read


def test_a_poller_hands_its_rounds_to_a_reader_that_would_do_more(fake, store, clock):
    store.add(record(11))
    fake.queue = [sq(11, "PENDING", reason="Priority")]
    top = Viewer(watcher(fake, store, clock), monotonic=clock, rank=Rank.TOP)
    assert top.open() == [] and top.polling
    top.step()
    watch = Viewer(watcher(fake, store, clock), monotonic=clock, rank=Rank.WATCH)
    watch.open()
    assert not watch.polling  # the top holds the lock until its next tick
    top.step()
    assert not top.polling and n_squeue(fake) == 1  # handed over, no round taken on the way
    watch.step()
    assert watch.polling and n_squeue(fake) == 1  # the next round is due an interval after the top's
    clock.tick(10)
    watch.step()
    top.step()
    assert n_squeue(fake) == 2 and not top.polling  # the top never takes the lock back while the watch reads
    peer = Viewer(watcher(fake, store, clock), monotonic=clock, rank=Rank.WATCH)
    peer.open()
    watch.step()
    assert watch.polling and not peer.polling  # an equal takes nothing
    watch.close()
    peer.step()
    assert peer.polling  # the watch gone, the other watch takes the rounds before the top
    for v in (top, peer):
        v.close()


def test_a_reader_killed_at_any_moment_is_no_reader(store):
    script = "import sys, time\nfrom pathlib import Path\nfrom roach.records.poller.readers import Rank, ReaderMark\n"
    script += "ReaderMark(Path(sys.argv[1]), 'lab', Rank.WAITER)\nprint('marked', flush=True)\ntime.sleep(60)\n"
    p = subprocess.Popen([sys.executable, "-c", script, str(store.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "marked\n"
        (them,) = live_readers(store.path, "lab")
        assert (them.pid, them.rank) == (p.pid, Rank.WAITER)
        with ReaderMark(store.path, "lab", Rank.WATCH) as mine:
            assert readers(store.path, "lab") == 2 and readers(store.path, "lab", but=mine) == 1
            assert not outranked(store.path, "lab", mine)
        p.kill()
        p.wait()
        assert readers(store.path, "lab") == 0
        assert not [f for f in readers_dir(store.path, "lab").iterdir() if not f.name.startswith(".")]  # removed
    finally:
        p.kill()


def _serve_a_waiter_that_leaves_25_s_in(fake, store, clock, linger_s: float) -> None:
    store.add(record(11))
    fake.queue = [sq(11, "PENDING", reason="Priority")]
    w = watcher(fake, store, clock)
    waiter = ReaderMark(store.path, "lab", Rank.WAITER)

    def sleep(s: float) -> None:
        clock.tick(s)
        if clock() - T0 >= 25:
            waiter.close()  # the wait ends 25 s in

    w.sleep = sleep
    with Viewer(w, monotonic=clock, rank=Rank.SERVER) as v:
        serve(v, linger_s=linger_s)


def test_a_serving_poller_rounds_while_a_waiter_reads_and_ends_a_linger_after_the_last(fake, store, clock):
    _serve_a_waiter_that_leaves_25_s_in(fake, store, clock, linger_s=12)
    assert clock() - T0 == 37.0  # 25 s of the wait, then the linger
    assert n_squeue(fake) == 4  # rounds at 0, 10, 20 and 30 s: the interval's, no more
    with Viewer(watcher(fake, store, clock), monotonic=clock, rank=Rank.SERVER) as v:
        with Viewer(watcher(fake, store, clock), monotonic=clock, rank=Rank.WATCH):
            serve(v, linger_s=12)  # a watch is there: it polls, and the server leaves at once
    assert n_squeue(fake) == 4


def test_a_serving_poller_with_no_linger_ends_at_the_first_look_that_finds_no_reader(fake, store, clock):
    _serve_a_waiter_that_leaves_25_s_in(fake, store, clock, linger_s=0)
    assert (clock() - T0, n_squeue(fake)) == (25.0, 3)  # the first look with no reader ends it: no round after
