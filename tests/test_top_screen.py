"""`roach top` without a cluster: a run's pace and ETA from its own step times, the frame a watch round leaves
(rows, outlooks, ends), the lines that fit any terminal, the keys, and the same Slurm calls as a watch round.
The fakes are tests/support/watch.py's; the screen itself is driven in tmux on the lab in tests/test_top.py."""

from __future__ import annotations

from datetime import UTC, datetime

from roach.cli.jsonout import stamp
from roach.cli.terminal import parse_keys
from roach.cli.top import Top
from roach.cli.top_view import CUT, Mode, screen_lines
from roach.model.tiers import Tier
from roach.ops.events import TierRow
from roach.scheduler.parse import parse_squeue
from roach.watch.logs import read_facts
from roach.watch.progress import add_points
from roach.watch.screen import Frame, build_frame, pace, short_progress
from roach.watch.shared import Viewer
from roach.watch.watcher import Watcher
from tests.support.schemas import validate_output
from tests.support.watch import T0, FakeLog, record, sa, sq, watcher


def top_of(w: Watcher, clock) -> Top:
    """A `roach top` over ``w``, its rounds due by the test's clock."""
    return Top(Viewer(w, monotonic=clock), ".")


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def step_line(t: float, step: int, total: int | None = 100) -> str:
    """A progress line as a run's `run.steps()` writes it."""
    return f"{utc(t)} roach rank 0: step {step}" + (f"/{total}" if total else "")


# -- pace -------------------------------------------------------------------------------------------------------
def test_pace_is_steps_per_minute_over_the_recent_points_and_eta_the_steps_left_at_it():
    p = pace([[T0, 10], [T0 + 10, 20], [T0 + 20, 30]], 30, 100)
    assert p.steps_per_min == 60.0 and p.eta_s == 70.0
    assert pace([[T0, 10], [T0 + 20, 30]], 30, None).eta_s is None  # no total: no ETA, still a pace
    assert pace([[T0, 10]], 10, 100) == pace([], None, None)  # one point is no pace
    assert pace([[T0, 10], [T0 + 10, 10]], 10, 100).steps_per_min is None  # no step done: not zero, unknown


def test_points_begin_afresh_when_a_new_attempt_goes_back_to_its_checkpoint():
    pts = add_points([], [[T0, 10], [T0 + 10, 20], [T0 + 20, 30]])
    assert add_points(pts, [[T0 + 20, 30]]) == pts  # the same line seen again adds nothing
    resumed = add_points(pts, [[T0 + 100, 20], [T0 + 110, 25]])
    assert resumed == [[T0 + 100, 20], [T0 + 110, 25]]
    assert pace(resumed, 25, 100).steps_per_min == 30.0  # the new attempt's pace, not the old one's
    assert len(add_points([], [[T0 + i, i] for i in range(50)])) == 20


def test_the_log_facts_carry_each_timed_progress_line_with_its_step():
    lines = [step_line(T0, 10), "roach: attempt 1 of run r", step_line(T0 + 10, 20), "2027 step 5 untimed"]
    facts = read_facts(lines)
    assert facts.progress_points == ((T0, 10), (T0 + 10, 20))
    assert short_progress(step_line(T0, 40)) == "step 40/100"
    assert short_progress("step 3 of mine") == "step 3 of mine"


# -- the frame of a round ------------------------------------------------------------------------------------------
def test_a_round_gives_rows_with_pace_outlook_and_then_the_end(fake, store, clock):
    store.add(record(11, gpus=1))
    store.add(record(12, qos="high", gpus=8))
    store.add(record(13, qos="normal"))
    log = "/logs/run11_11.out"
    fake.logs[log] = FakeLog(100, T0, [step_line(T0 - 40 + 10 * i, 10 * (i + 1)) for i in range(4)])
    fake.queue = [
        sq(11, nodelist="n2"),
        sq(12, "PENDING", reason="QOSMaxGRESPerUser", qos="high", gpus=8, nodelist=""),
        sq(13, "PENDING", reason="Priority", nodelist=""),
    ]
    w = watcher(fake, store, clock)
    top = top_of(w, clock)
    top.refresh()
    f = top.frame
    assert f is not None and [r.key for r in f.rows] == ["11", "12", "13"]
    run, big, prio = f.rows
    assert (run.state, run.nodes, run.tier, short_progress(run.progress)) == ("RUNNING", "n2", "normal", "step 40/100")
    assert run.pace.steps_per_min == 60.0 and run.pace.eta_s == 60.0
    assert big.outlook == "never" and "asks for 8 GPUs" in big.explanation.detail
    assert prio.outlook == "clears" and prio.reason == "Priority"
    assert {t.name: (t.claimed, t.free) for t in f.tiers}["high"] == (8, 0)
    # 11 ends: its row says so, the others stay where they were
    fake.queue = fake.queue[1:]
    fake.acct = [sa(11, "FAILED", exit_code="3:0")]
    clock.tick(10)
    top.refresh()
    assert [r.key for r in top.frame.rows] == ["11", "12", "13"]
    ended = top.frame.row("11")
    assert ended.done and ended.state == "FAILED" and ended.exit_code == "3:0" and ended.nodes == ""
    validate_output("top", stamp("top", top.frame.to_json()))  # a pending, a running and an ended row
    lines = [ln.plain for ln in screen_lines(top.frame, top.view, 80, 24)]
    assert any(ln.startswith(">11 ") and "FAILED" in ln and "exit 3:0" in ln for ln in lines), lines
    assert any("12 " in ln and "NEVER: QOSMaxGRES" in ln for ln in lines), lines


def test_top_makes_the_same_slurm_calls_as_a_watch_round(fake, store, clock):
    for i in range(6):
        store.add(record(20 + i))
    fake.queue = [sq(20 + i) for i in range(6)]
    w = watcher(fake, store, clock)
    w.round()
    clock.tick(10)
    before = len(fake.calls)
    w.round()
    watch_calls = fake.calls[before:]
    clock.tick(10)
    before = len(fake.calls)
    top_of(w, clock).refresh()
    assert [c[0] for c in fake.calls[before:]] == [c[0] for c in watch_calls] == ["squeue", "sh"]


def test_a_job_preempted_shows_its_restart_and_a_stall_is_marked(fake, store, clock):
    store.add(record(31, qos="low"))
    log = "/logs/run31_31.out"
    fake.logs[log] = FakeLog(100, T0, [step_line(T0 - 5, 10)])
    fake.queue = [sq(31, qos="low")]
    w = watcher(fake, store, clock)
    top = top_of(w, clock)
    top.refresh()
    fake.queue = [sq(31, "PENDING", reason="BeginTime", qos="low", restarts=1, nodelist="")]
    clock.tick(10)
    top.refresh()
    r = top.frame.row("31")
    assert (r.state, r.restarts, r.preemptions, r.tier) == ("PENDING", 1, 1, "low")
    line = next(ln.plain for ln in screen_lines(top.frame, top.view, 80, 24) if ln.plain.startswith(">31"))
    assert " 1/1 " in line and "clears: BeginTime" in line
    # back running, then silent far past its usual gap: stalled
    fake.queue = [sq(31, qos="low", restarts=1)]
    clock.tick(10)
    top.refresh()
    fake.remote_now = T0 + 2000
    clock.tick(10)
    top.refresh()
    assert top.frame.row("31").stalled
    assert any("STALLED" in ln.plain for ln in screen_lines(top.frame, top.view, 80, 24))


# -- the lines ----------------------------------------------------------------------------------------------------
def _frame(n: int) -> Frame:
    saved = {
        f"500_{i}": {
            "key": f"500_{i}",
            "job_id": 500 + i,
            "run_id": f"a-very-long-sweep-name-20261201-2130-ab12-{i}",
            "state": "RUNNING",
            "in_queue": True,
            "tier": "low",
            "progress": step_line(T0, i, 100) + " loss=0.123456789 and a long tail " * 3,
            "step": i,
            "steps_total": 100,
            "points": [[T0 - 60, 0], [T0, i]],
            "first_seen": T0,
        }
        for i in range(n)
    }
    tiers = [TierRow("high", 4, 0, 0, 0).to_json(), TierRow("low", None, n, n, 0, True).to_json()]
    queue = [q for i in range(n) for q in parse_squeue(sq(500, task=i, qos="low"))]
    tier_defs = (Tier("high", qos="high", gpu_cap=4), Tier("low", qos="low", preemptible=True))
    return build_frame("lab", tier_defs, T0, saved, {"tiers": tiers}, queue)


def test_every_frame_fits_its_terminal_80x24_and_others():
    frame = _frame(40)
    for width, height in [(80, 24), (60, 15), (132, 50), (20, 3)]:
        top = Top(None, ".", frame=frame)  # type: ignore[arg-type]
        top.view.selected = "500_30"
        lines = screen_lines(frame, top.view, width, height)
        assert len(lines) <= height and all(len(ln) <= width for ln in lines), (width, height)
        if height >= 10:
            plain = [ln.plain for ln in lines]
            assert any(ln.startswith(">500_30") for ln in plain), plain  # the selection is on the screen
            assert any("rows " in ln and "of 40" in ln for ln in plain) == (height < 45)  # what is off the screen
            assert any(CUT in ln for ln in plain)  # long cells are cut, never wrapped
    first = Top(None, ".", frame=frame)  # type: ignore[arg-type]
    first.view.selected = "500_0"
    sel = next(ln.plain for ln in screen_lines(frame, first.view, 80, 24) if ln.plain.startswith(">500_0"))
    assert "-0 " in sel  # a sweep's long run id keeps its end: the run's index


def test_keys_select_explain_and_ask_before_promoting(fake, store, clock):
    store.add(record(41, qos="low"))
    store.add(record(42))
    fake.queue = [sq(41, "PENDING", reason="Priority", qos="low", nodelist=""), sq(42)]
    top = top_of(watcher(fake, store, clock), clock)
    top.refresh()
    assert top.view.selected == "41"
    top.key("w")
    assert top.view.mode is Mode.WHY and any("outlook: clears by itself" in ln for ln in top.view.why_lines)
    top.key("esc")
    top.key("p")  # no tier has room for it yet (not pending two rounds): said, nothing asked
    assert top.view.mode is Mode.TABLE and "no promotion for job 41 now" in top.view.message
    clock.tick(10)
    top.refresh()  # pending a second round, and high has room: the watch's plan proposes high
    assert top.frame.row("41").promotion == "high"
    top.key("p")
    assert top.view.mode is Mode.CONFIRM and top.view.question.startswith("promote job 41 from low to high? [y/N]")
    top.key("n")
    assert top.view.mode is Mode.TABLE and top.view.message == "not promoted"
    top.key("down")
    assert top.view.selected == "42"
    top.key("w")
    assert top.view.mode is Mode.TABLE and "is RUNNING: it is not pending" in top.view.message
    top.key("down")  # the last row stays selected
    assert top.view.selected == "42"
    top.key("q")
    assert top.quit


def test_keys_from_the_terminals_bytes():
    assert parse_keys("\x1b[A\x1b[Bq") == ["up", "down", "q"]
    assert parse_keys("\x1bOA\x1b") == ["up", "esc"]
    assert parse_keys("\x1b[5~l") == ["l"]  # an unknown sequence (PgUp) is skipped whole


def test_an_outage_is_said_at_the_top_and_the_last_rows_stay(fake, store, clock):
    store.add(record(51))
    fake.queue = [sq(51)]
    top = top_of(watcher(fake, store, clock), clock)
    top.refresh()
    fake.down["squeue"] = "squeue: error: Unable to contact slurm controller (connect failure)"
    clock.tick(130)
    top.refresh()
    assert top.frame.outages and top.frame.outages[0].startswith("slurmctld unreachable for 0s: squeue failed (exit 1)")
    clock.tick(130)
    top.refresh()
    lines = [ln.plain for ln in screen_lines(top.frame, top.view, 80, 24)]
    assert lines[1].startswith("slurmctld unreachable for 2m10s") and len(lines) == 24
    assert top.frame.row("51").state == "RUNNING"  # an outage never reads as "it ended"


def test_a_moved_rows_note_holds_the_new_job_id_whole_at_80_columns():
    from dataclasses import replace

    from roach.cli.top_view import Columns, job_line

    frame = _frame(1)
    row = replace(frame.rows[0], superseded_by=12345678, done=True)
    line = job_line(row, Columns.fit(80), selected=False).plain
    assert len(line) <= 80 and line.rstrip().endswith("moved to 12345678"), line


def test_a_pending_rows_note_says_its_outlook_promotion_and_likely_start_before_the_reason():
    from dataclasses import replace

    from roach.cli.top_view import Columns, job_line, note_of
    from roach.ops.explain import explain

    frame = _frame(1)
    (q,) = parse_squeue(sq(77, "PENDING", reason="Priority", qos="low", nodelist=""))
    estimate = {"likely_in_s": 190.0, "earliest_in_s": 0.0, "latest_in_s": 600.0, "basis": "b"}
    row = replace(frame.rows[0], state="PENDING", explanation=explain(q), estimate=estimate, promotion="high")
    assert note_of(row)[0] == "clears p->high ~3m: Priority"
    assert "clears p->high ~3" in job_line(row, Columns.fit(80), selected=False).plain  # 18 cells at 80 columns
    alone = replace(row, promotion=None)
    assert "clears ~3m: Prior" in job_line(alone, Columns.fit(80), selected=False).plain
    assert row.to_json()["estimate"] == estimate
