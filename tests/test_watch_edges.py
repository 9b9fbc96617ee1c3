"""`roach watch`, more of what it says and does: final states written into each job's job.json (one command
a round, with real sh and awk), reservations that move or vanish, holders' held time and idle holders in the
heartbeat, and one watcher per store and cluster (real processes holding the lock). The fakes are
tests/support/watch.py's; a holder's heartbeat and the lock are also checked on the lab."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from roach.lab.config import LAB_USER
from roach.launch.hold.holder import HOLD_TARGET
from roach.launch.hold.start import hold
from roach.model.ids import RecordKind
from roach.ops.events import EventKind
from roach.ops.explain import PendingContext, explain
from roach.records.bundle import JobJson, final_job_json
from roach.records.error_line import LOG_TAIL_BYTES
from roach.records.job_json_end import Final, record_finals
from roach.records.poller.lock import lock_path
from roach.records.store import Store
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.parse import RS, US, QueueRecord, parse_sacct, parse_squeue
from roach.scheduler.transport import LocalTransport
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch import resv as resv_module
from roach.watch import watcher as watcher_module
from roach.watch.jobs import Ctx, new_watch, on_queue, settled
from roach.watch.resv import Reservation, parse_queue, parse_reservations, queue_format
from roach.watch.watcher import Watcher
from tests.conftest import slack
from tests.support.cli import roach
from tests.support.watch import T0, TIERED, FakeLog, kinds, only, poller_elsewhere, record, sa, sq, watcher

REPO = Path(__file__).parent.parent
AT = "2026-11-30T00:00:00Z"
PENDING_REASONS = ("Priority", "Resources", "JobHeldUser", "QOSMaxGRESPerUser", "ReqNodeNotAvail", "BeginTime")
QOS = ("normal", "high", "low")


# -- final states into job.json ----------------------------------------------------------------------------
def _job_json(job_id: str, path: Path) -> JobJson:
    base = JobJson(
        job_id=job_id,
        script=str(path.parent / "job.sh"),
        description='say "hi" \\ $(x) `id`\nline 2 ü',
        submitted_at_utc="2026-11-29T23:39:47Z",
        cluster="lab",
        run_id=f"r-{job_id}",
        commit="c" * 40,
        resources={"status": "nested, not touched", "qos": "low", "extra": ['--x="y"']},
        name='n "q" \\',
        target="pkg.m:f",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(base.to_json())
    return base


def test_final_states_rewrite_only_the_four_final_keys_of_many_job_json_in_one_command(tmp_path):
    d = tmp_path / "lo gs'$(touch pwned)" / "bundles"
    a, b = d / "41" / "job.json", d / "42" / "job.json"
    base_a, base_b = _job_json("41", a), _job_json("42", b)
    bad = d / "43" / "job.json"
    bad.parent.mkdir()
    bad.write_text('{"job_id": "43"}\n')
    (acct_a,) = parse_sacct(sa(41, "CANCELLED by 1001", exit_code="0:15"))
    (acct_b,) = parse_sacct(sa(42, "COMPLETED"))
    transport = MockTransport(inner=LocalTransport())
    out = record_finals(
        transport,
        [
            Final.of(str(a), acct_a, AT),
            Final.of(str(b), acct_b, AT),
            Final.of(str(d / "44" / "job.json"), acct_b, AT),
            Final.of(str(bad), acct_b, AT),
        ],
    )
    assert len(transport.calls) == 1 and not (Path.cwd() / "pwned").exists()
    assert out.outcomes == {
        str(a): "written",
        str(b): "written",
        str(d / "44" / "job.json"): "missing",
        str(bad): "not roach's job.json",
    }
    # byte for byte what Job.wait() writes, through JobJson
    assert a.read_text() == final_job_json(base_a, acct_a, AT).to_json()
    assert b.read_text() == final_job_json(base_b, acct_b, AT).to_json()
    got = JobJson.from_json(a.read_text())
    assert (got.status, got.slurm_state, got.exit_code) == ("cancelled", "CANCELLED by 1001", "0:15")
    assert got.resources["status"] == "nested, not touched" and got.description == base_a.description
    assert bad.read_text() == '{"job_id": "43"}\n'  # not roach's: left as it was
    assert sorted(p.name for p in d.rglob("*") if p.is_file()) == ["job.json"] * 3  # no temp file left


def test_the_same_command_reads_the_tail_of_a_failed_jobs_log(tmp_path):
    d = tmp_path / "lo gs'$(touch pwned)"
    a = d / "bundles" / "51" / "job.json"
    _job_json("51", a)
    log = d / "51.out"
    log.write_text("x" * 40000 + "\nfatal: detected dubious ownership in repository at '/srv/r.git'\n")
    (acct,) = parse_sacct(sa(51, "FAILED", exit_code="128:0"))
    got = record_finals(LocalTransport(), [replace(Final.of(str(a), acct, AT), log=str(log))])
    assert got.tails[str(a)].endswith("fatal: detected dubious ownership in repository at '/srv/r.git'\n")


def test_the_tail_read_with_an_end_is_its_logs_last_bytes_only(tmp_path):
    a = tmp_path / "bundles" / "52" / "job.json"
    _job_json("52", a)
    log = tmp_path / "52.out"
    log.write_text("x" * 40000 + "\nend\n")
    (acct,) = parse_sacct(sa(52, "FAILED", exit_code="1:0"))
    got = record_finals(LocalTransport(), [replace(Final.of(str(a), acct, AT), log=str(log))])
    assert len(got.tails[str(a)]) == LOG_TAIL_BYTES


def test_a_missing_log_sends_no_tail(tmp_path):
    a = tmp_path / "bundles" / "53" / "job.json"
    _job_json("53", a)
    (acct,) = parse_sacct(sa(53, "FAILED", exit_code="1:0"))
    got = record_finals(LocalTransport(), [replace(Final.of(str(a), acct, AT), log=str(tmp_path / "gone.out"))])
    assert got.tails == {}


GIT_FAILED = [  # a job whose clone failed: the lines git printed into its log (Debian 12's git 2.39)
    "fatal: detected dubious ownership in repository at '/srv/git/work.git'",
    "To add an exception for this directory, call:",
    "",
    "\tgit config --global --add safe.directory /srv/git/work.git",
    "fatal: Could not read from remote repository.",
    "",
    "Please make sure you have the correct access rights",
    "and the repository exists.",
]


def _failed_round(fake, store, clock):
    """A job that fails (its clone refused) between two rounds: the second round's events."""
    store.add(record(48))
    fake.queue = [sq(48)]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue = []
    fake.acct = [sa(48, "FAILED", exit_code="128:0")]
    fake.logs[record(48).log_path] = FakeLog(500, clock.t, GIT_FAILED)
    clock.tick(10)
    return [e for e in w.round() if e.kind is EventKind.FINISHED]


def test_a_failed_jobs_finished_event_carries_its_error_line(fake, store, clock):
    (done,) = _failed_round(fake, store, clock)
    assert done.data["error_line"] == GIT_FAILED[0]


def test_a_failed_jobs_finished_line_says_its_error_line(fake, store, clock):
    (done,) = _failed_round(fake, store, clock)
    assert done.message.endswith(f"ran 5s: {GIT_FAILED[0]}")


def test_a_failed_jobs_error_line_is_in_the_store(fake, store, clock):
    _failed_round(fake, store, clock)
    assert store.get("lab", 48).error_line == GIT_FAILED[0]


def test_jobs_ending_in_one_round_get_their_job_json_in_one_command(fake, store, clock):
    for j in (45, 46, 47):
        store.add(record(j))
    fake.queue = [sq(45), sq(46), sq(47)]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue = [sq(47)]
    fake.acct = [sa(45), sa(46, "FAILED", exit_code="2:0")]
    clock.tick(10)
    before = len(fake.calls)
    assert kinds(w.round()) == ["finished", "finished"]
    writes = [c for c in fake.calls[before:] if c[0] == "sh" and "recorded_at_utc" in c[4]]
    assert len(writes) == 1
    assert fake.finals == {
        "/logs/bundles/45/job.json": ["completed", "COMPLETED", "0:0", store.get("lab", 45).recorded_at],
        "/logs/bundles/46/job.json": ["failed", "FAILED", "2:0", store.get("lab", 46).recorded_at],
    }
    clock.tick(10)
    before = len(fake.calls)
    w.round()  # nothing ended: no write
    assert not [c for c in fake.calls[before:] if c[0] == "sh" and "recorded_at_utc" in c[4]]


def test_a_job_that_ran_and_ended_between_two_rounds_has_its_log_read_once(fake, store, clock):
    # seen pending, then gone: its whole run fell between two rounds, and only its log says what happened on a node
    store.add(record(49))
    fake.queue = [sq(49, "PENDING", reason="Resources")]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue = []
    fake.acct = [sa(49)]
    line = "roach: node_failed: n2: no space left on device cloning c into /tmp/x; no rank started"
    fake.logs[record(49).log_path] = FakeLog(500, clock.t, [line])
    clock.tick(10)
    (said,) = only(w.round(), EventKind.NODE_FAILED)
    assert said.data["error"] == line.removeprefix("roach: ")


def test_an_ended_jobs_log_is_not_read_again_in_later_rounds(fake, store, clock):
    store.add(record(49))
    fake.queue = [sq(49, "PENDING", reason="Resources")]
    w = watcher(fake, store, clock)
    w.round()
    fake.queue = []  # gone, and sacct has no end yet: the watch asks again next round
    fake.logs[record(49).log_path] = FakeLog(500, clock.t, ["roach: attempt 1 of run r: job 49 on n1"])
    clock.tick(10)
    w.round()
    clock.tick(10)
    before = len(fake.calls)
    w.round()
    assert not [c for c in fake.calls[before:] if record(49).log_path in c]


# -- reservations ------------------------------------------------------------------------------------------
SHOW_RESV = (
    "ReservationName=r1 StartTime=2026-11-30T02:10:57 EndTime=2026-11-30T02:15:57 Duration=00:05:00 Nodes=n1 "
    "NodeCnt=1 CoreCnt=8 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=8 Users=roachlab "
    "Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a "
    "MaxStartDelay=(null)\n"
)  # scontrol show reservation -o, Slurm 22.05.8


def test_reservations_and_the_queue_with_them_are_read_from_slurms_output():
    assert parse_reservations(SHOW_RESV) == {
        "r1": Reservation("r1", "2026-11-30T02:10:57", "2026-11-30T02:15:57", "INACTIVE", "n1")
    }
    assert parse_reservations("No reservations in the system\n") == {}
    assert queue_format().endswith(f"StartTime:{US},Reservation:{RS}")
    text = sq(5, "PENDING", reason="Reservation").replace(RS, f"{US}r1{RS}") + sq(6).replace(RS, f"{US}(null){RS}")
    recs, resv = parse_queue(text)
    assert [str(r.ref) for r in recs] == ["5", "6"] and resv == {"5": "r1"}
    with pytest.raises(Exception, match="expected 19 fields"):
        parse_queue(sq(5))  # without the reservation field: one field short


def test_a_reservation_that_moves_then_vanishes_is_said_once_each(fake, store, clock):
    store.add(record(81))
    store.add(record(82))
    fake.queue = [sq(81, "PENDING", reason="Reservation"), sq(82, "PENDING", reason="Priority")]
    fake.resv_of = {"81": "maint"}
    fake.reservations = {"maint": "2027-01-15T10:00:00"}
    w = watcher(fake, store, clock)

    def look():
        clock.tick(10)
        before = len(fake.calls)
        ev = only(w.round(), EventKind.RESERVATION)
        return ev, len([c for c in fake.calls[before:] if c[:3] == ["scontrol", "show", "reservation"]])

    assert look() == ([], 1) and look() == ([], 1)  # a baseline, then no change: nothing said, one call a round
    fake.reservations = {"maint": "2027-01-15T12:00:00"}
    (moved,), _ = look()
    assert moved.job_id == "81" and moved.data["change"] == "moved" and moved.data["reservation"] == "maint"
    assert "its reservation maint moved: it starts at 2027-01-15T12:00:00 (was 2027-01-15T10:00:00)" in moved.message
    assert look() == ([], 1)
    # it ended: Slurm deletes it, and the job pending on it loses it and waits held
    fake.reservations, fake.resv_of = {}, {}
    fake.queue = [sq(81, "RESV_DEL_HOLD", reason="Reservation maint was deleted"), sq(82, "PENDING", reason="Priority")]
    (gone,), _ = look()
    assert gone.data["change"] == "vanished" and "reservation maint, which no longer exists" in gone.message
    assert "`scontrol update JobId=81 Reservation=`" in gone.message
    assert look() == ([], 0)  # said once; no job asks for a reservation any more: no call
    fake.queue = [sq(82)]
    assert look() == ([], 0)


def test_a_failed_reservation_look_is_not_read_as_vanished(fake, store, clock):
    store.add(record(83))
    fake.queue = [sq(83, "PENDING", reason="Reservation")]
    fake.resv_of = {"83": "maint"}
    fake.reservations = {"maint": "2027-01-15T10:00:00"}
    w = watcher(fake, store, clock)
    w.round()
    fake.down["scontrol"] = "scontrol: error: Unable to contact slurm controller (connect failure)"
    clock.tick(10)
    assert not only(w.round(), EventKind.RESERVATION)


# -- holders in the heartbeat --------------------------------------------------------------------------------
def _step(*fields: str) -> str:
    return US.join(fields) + RS + "\n"


def test_heartbeat_shows_holders_held_time_and_flags_an_idle_one(fake, store, clock):
    store.add(replace(record(90, "hold-dbg"), target=HOLD_TARGET, holder=90, name="dbg", kind=RecordKind.HOLDER))
    store.add(
        replace(record(90, "r-in", log_root="/logs"), holder=90, attempt=1, kind=RecordKind.ATTEMPT)
    )  # not a Slurm job
    store.add(record(91))
    fake.queue = [sq(90, elapsed="12:03", name="dbg", gpus=2), sq(91)]
    fake.steps = [_step("90.batch", "batch", "1", "12:03", "RUNNING", "n1")]
    w = watcher(fake, store, clock, heartbeat_s=30)

    def round_():
        before = len(fake.calls)
        beats = only(w.round(), EventKind.HEARTBEAT)
        return beats, len([c for c in fake.calls[before:] if "--steps" in c])

    (beat,), asked = round_()
    assert asked == 1 and beat.data["watching"] == 2  # the holder and job 91; the attempt is the holder's
    assert beat.data["holders"] == [
        {"job_id": "90", "run_id": "hold-dbg", "name": "dbg", "held_s": 723, "time_limit_s": None, "idle": True}
    ]
    assert "holder 90 (dbg) held 12m03s: IDLE: charged, no attempt runs" in beat.line()
    assert not [c for c in fake.calls if c[0] == "sacct"]  # the attempt's id is never asked of Slurm
    clock.tick(10)
    assert round_() == ([], 0)  # no heartbeat due: no squeue -s
    fake.queue = [sq(90, elapsed="12:33", name="dbg", gpus=2), sq(91)]
    fake.steps.append(_step("90.3", "roach-ranks:1", "2", "0:20", "RUNNING", "n1"))
    clock.tick(20)
    (beat,), asked = round_()
    assert asked == 1 and beat.data["holders"][0]["idle"] is False and beat.data["holders"][0]["held_s"] == 753
    assert "holder 90 (dbg) held 12m33s: an attempt runs" in beat.line()
    assert json.loads(json.dumps(beat.to_json()))["holders"][0]["idle"] is False


@pytest.mark.lab
def test_watch_heartbeat_on_the_lab_flags_an_idle_holder(lab, tmp_path, shared_tmp):
    cluster = LAB.with_(run_as=LAB_USER)
    with Store(tmp_path / "store.sqlite") as store:
        h = hold(GPU1, cluster=cluster, name="idle-watch", time="5", log_root=str(shared_tmp / "holders"), store=store)
        try:
            h.wait_running(timeout=slack(60))
            w = Watcher(cluster, cluster.client(), store, heartbeat_s=1e9)
            (beat,) = only(w.round(), EventKind.HEARTBEAT)
        finally:
            h.release()
    (row,) = beat.data["holders"]
    assert row["job_id"] == str(h.job_id) and row["idle"] is True and row["held_s"] >= 0
    assert row["time_limit_s"] == 300 and f"holder {h.job_id} (idle-watch) held" in beat.message
    assert "IDLE: charged, no attempt runs" in beat.message


# -- one poller per store and cluster, any number of viewers ----------------------------------------------------
def _said(r) -> list[dict]:
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.lab
def test_a_second_watch_reads_the_pollers_last_round_and_a_dead_pollers_lock_is_taken_over(lab, tmp_path, monkeypatch):
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("ROACH_STORE", str(store))
    watch = ("watch", "--cluster", "lab", "--run-as", LAB_USER, "--once", "--json")
    first = _said(roach(*watch))  # no viewer polls: this one takes a round
    assert [(e["event"], e["seq"]) for e in first] == [("heartbeat", 1), ("queue_empty", 2)]
    with poller_elsewhere(store) as poller:
        assert _said(roach(*watch)) == first  # a reader: the poller's last round, never refused, no round of its own
        with Store(store) as s:
            assert s.watch_round("lab")[0].round == 1
        assert _said(roach(*watch, "--since", "1")) == first[1:]
    assert lock_path(store, "lab").read_text().strip() == str(poller.pid)  # left behind by a dead process
    taken = _said(roach(*watch))  # the lock is free again: this viewer takes the next round
    assert [e["seq"] for e in taken] == [3] and taken[0]["event"] == "queue_empty"


def test_a_job_that_started_and_ended_between_two_rounds_gets_its_started_line_then_finished():
    from roach.watch.ends import on_accounting
    from roach.watch.jobs import Ctx, JobWatch

    ctx = Ctx("lab", LAB.tiers, 100.0, lambda rec: None)
    quick = JobWatch("90_3", 90, run_id="sw-3", state="PENDING", in_queue=False, left_at=99.0)
    (rec,) = parse_sacct(sa("90_3", "COMPLETED"))
    events = on_accounting(quick, rec, ctx, lost_after_s=600)
    assert [e.kind for e in events] == [EventKind.STARTED, EventKind.FINISHED]
    assert "started on n1 (seen once it had ended)" in events[0].message and quick.reported == ["started"]
    # one that never started (cancelled while pending) only finishes, and a started one is not said twice
    never = JobWatch("91", 91, state="PENDING", in_queue=False, left_at=99.0)
    (rec,) = parse_sacct(sa(91, "CANCELLED", started=False))
    assert [e.kind for e in on_accounting(never, rec, ctx, lost_after_s=600)] == [EventKind.FINISHED]
    seen = JobWatch("92", 92, state="RUNNING", in_queue=False, left_at=99.0, reported=["started"])
    (rec,) = parse_sacct(sa(92))
    assert [e.kind for e in on_accounting(seen, rec, ctx, lost_after_s=600)] == [EventKind.FINISHED]


def test_a_task_missing_from_sacct_never_takes_the_state_of_a_task_listed_under_the_bare_array_id():
    from roach.watch.ends import match_acct

    # just after an array ended, slurmdbd may list its last task under the bare id before its task id,
    # and not list a failed task at all yet: that task must wait for the next round, not be COMPLETED
    found = parse_sacct(sa("2301", "COMPLETED") + sa("2301_0", "COMPLETED"))
    got = match_acct(["2301_0", "2301_5"], found)
    assert sorted(got) == ["2301_0"]
    # an array cancelled before any task started: the bare id's record is every task's fate
    found = parse_sacct(sa("2401", "CANCELLED", started=False))
    assert match_acct(["2401_3"], found)["2401_3"].state.value == "CANCELLED"


# -- a settled job is not looked at again while squeue prints the same line for it ------------------------------
def _queued(**kw) -> QueueRecord:
    return parse_squeue(sq(7, **kw))[0]


SETTLING = [
    *(_queued(state="PENDING", reason=r, qos=q, gpus=g) for r in PENDING_REASONS for q in QOS for g in (1, 8)),
    *(
        _queued(state=s, elapsed=e, restarts=n)
        for s in ("RUNNING", "COMPLETING")
        for e in ("0:10", "0:20")
        for n in (0, 1)
    ),
    _queued(state="REQUEUE_HOLD", reason="JobHeldUser", restarts=1),
    _queued(state="SUSPENDED", qos="low"),
    _queued(state="PENDING", reason="Priority", name=""),
]


@pytest.mark.parametrize("req_nodes", [None, "", "n1"])
def test_settled_says_exactly_when_on_queue_would_change_nothing_and_say_nothing(req_nodes):
    """jobs.settled mirrors on_queue: whatever line came before, a job it calls settled on a line is left as
    it is, with no event, by on_queue on that line; and a line that stays the same settles in a few rounds."""
    tiers = TIERED.tiers
    for before in SETTLING:
        for now in SETTLING:
            w = new_watch("7", before, T0, run_id="r7")
            w.req_nodes = req_nodes
            ctx = Ctx("lab", tiers, T0, lambda rec, w=w: explain(rec, PendingContext([rec], tiers, w.req_nodes)))
            on_queue(w, before, ctx, first=True)
            for _ in range(4):
                view, said = w.to_json(), settled(w, now, tiers)
                events = on_queue(w, now, ctx, first=False)
                if said:
                    assert (events, w.to_json()) == ([], view), (before, now)
            assert settled(w, now, tiers), (before, now, w)


def test_a_round_looks_again_only_at_the_jobs_whose_squeue_line_changed(fake, store, clock, monkeypatch):
    """A long queue's jobs mostly print the same line round after round: once a job's view settled on its
    line, a round neither reads that line again nor looks at the job, until the line changes."""
    store.add_many([record(i) for i in range(300, 340)])
    fake.queue = [sq(i, "PENDING", reason="Priority") for i in range(300, 340)]
    looked: list[str] = []
    read: list[str] = []
    real_on_queue, real_parse = watcher_module.on_queue, resv_module.parse_queue
    monkeypatch.setattr(
        watcher_module, "on_queue", lambda w, q, ctx, first: looked.append(w.key) or real_on_queue(w, q, ctx, first)
    )
    monkeypatch.setattr(resv_module, "parse_queue", lambda text: read.append(text) or real_parse(text))
    w = watcher(fake, store, clock)
    for _ in range(2):  # new (pending once), then pending twice (what promotion waits for): settled
        w.round()
        clock.tick(10)
    assert len(looked) == 2 * 40 and len(read) == 1  # the same text each round: read once
    looked.clear()
    assert kinds(w.round()) == [] and looked == []
    fake.queue[3] = sq(303)  # one starts
    clock.tick(10)
    assert "started" in kinds(w.round()) and looked == ["303"] and len(read) == 2
    clock.tick(10)
    assert "started" not in kinds(w.round()) and looked == ["303", "303"]  # a running job's log is looked at
    assert store.watch_load("lab")[0]["303"]["state"] == "RUNNING"
