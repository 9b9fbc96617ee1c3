"""Grants in the store: what a metered submission may hold of them, refused past them, and never passed by
several processes at once (real SQLite, real processes; what Slurm spends is tests/test_grants_lab.py's)."""

from __future__ import annotations

import multiprocessing
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from roach.errors import UsageError
from roach.records.grants import GrantBook, GrantRefused, Hold
from roach.records.store import Store


@pytest.fixture
def book(tmp_path: Path) -> GrantBook:
    return GrantBook(Store(tmp_path / "store.sqlite"))


def test_no_grant_refuses_and_says_who_makes_one(book):
    with pytest.raises(GrantRefused) as e:
        book.reserve("marlowe", None, 0.5, "run r-1 (1 GPUs x 0.5 h)")
    assert "no live grant covers it" in e.value.message
    assert "roach grant marlowe --gpu-hours H" in (e.value.hint or "")
    assert e.value.exit_code == 2


def test_three_half_hours_against_one_hour_refuse_the_third(book):
    g = book.make("lab", 1.0, granted_by="owner")
    book.reserve("lab", None, 0.5, "first")
    book.reserve("lab", None, 0.5, "second")
    with pytest.raises(GrantRefused) as e:
        book.reserve("lab", None, 0.5, "third")
    assert f"grant {g.name} on lab (every experiment) has 0.00 of its 1 GPU-hours left" in e.value.message
    assert "third needs 0.50 GPU-hours" in e.value.message
    assert [h.what for u in book.uses("lab") for h in u.holds] == ["first", "second"]


def test_a_grant_for_one_experiment_covers_only_it(book):
    book.make("lab", 1.0, experiment="sweep-a")
    with pytest.raises(GrantRefused):
        book.reserve("lab", "sweep-b", 0.1, "b")
    with pytest.raises(GrantRefused):
        book.reserve("lab", None, 0.1, "none named")
    g, _ = book.reserve("lab", "sweep-a", 0.1, "a")
    assert g.experiment == "sweep-a"


def test_the_experiments_own_grant_is_taken_before_one_for_all(book):
    book.make("lab", 5.0)
    own = book.make("lab", 1.0, experiment="e")
    g, _ = book.reserve("lab", "e", 0.5, "e's run")
    assert g.id == own.id


def test_a_grant_on_another_cluster_covers_nothing_here(book):
    book.make("aws", 10.0)
    with pytest.raises(GrantRefused):
        book.reserve("marlowe", None, 0.1, "x")


def test_a_revoked_grant_covers_nothing_new_and_keeps_what_it_held(book):
    g = book.make("lab", 1.0)
    book.reserve("lab", None, 0.25, "before")
    book.revoke(g.name)
    with pytest.raises(GrantRefused):
        book.reserve("lab", None, 0.25, "after")
    (use,) = book.uses("lab")
    assert use.used == 0.25


def test_an_ended_grant_covers_nothing(book):
    book.make("lab", 1.0, until=datetime.now(UTC) + timedelta(seconds=1))
    g = book.uses("lab")[0].grant
    assert not g.live(datetime.now(UTC) + timedelta(seconds=2))


def test_revoking_an_unknown_grant_is_a_usage_error(book):
    with pytest.raises(UsageError, match="no grant 'g9'"):
        book.revoke("g9")


def test_a_grant_of_no_hours_is_refused(book):
    with pytest.raises(UsageError, match="more than 0"):
        book.make("lab", 0)


def test_a_released_hold_frees_its_hours(book):
    book.make("lab", 1.0)
    _, h = book.reserve("lab", None, 1.0, "undone")
    book.release(h)
    book.reserve("lab", None, 1.0, "again")


def test_the_reservation_of_a_process_that_died_before_queuing_holds_nothing(book):
    book.make("lab", 1.0)
    _, h = book.reserve("lab", None, 1.0, "killed before sbatch")
    gone = subprocess.Popen(["true"])
    gone.wait()
    conn = book.db._db()
    conn.execute("UPDATE grant_holds SET pid=? WHERE id=?", (gone.pid, h.id))
    book.reserve("lab", None, 1.0, "next")
    assert [x.what for u in book.uses("lab") for x in u.holds] == ["next"]


def test_a_hold_that_names_its_jobs_is_kept_whatever_its_process(book):
    book.make("lab", 1.0)
    _, h = book.reserve("lab", None, 1.0, "queued")
    book.attach(h, [4242])
    gone = subprocess.Popen(["true"])
    gone.wait()
    book.db._db().execute("UPDATE grant_holds SET pid=? WHERE id=?", (gone.pid, h.id))
    with pytest.raises(GrantRefused):
        book.reserve("lab", None, 0.1, "next")


def test_a_hold_counts_its_worst_case_until_it_spent_more_and_what_it_spent_once_settled(book):
    book.make("lab", 2.0)
    _, h = book.reserve("lab", None, 0.5, "requeued run")
    book.attach(h, [7])
    book.record_spent({h.id: (0.8, False)})  # requeued: two attempts so far
    assert book.uses("lab")[0].used == 0.8
    book.record_spent({h.id: (0.3, True)})
    assert book.uses("lab")[0].used == 0.3


def test_a_moved_hold_leaves_what_it_spent_with_the_old_grant(book):
    old = book.make("lab", 1.0)
    _, h = book.reserve("lab", None, 1.0, "run")
    book.attach(h, [7])
    book.record_spent({h.id: (1.2, False)})
    new = book.make("lab", 3.0)
    (hold,) = [x for u in book.uses("lab") for x in u.holds if x.id == h.id]
    book.move_hold(hold, new.id)
    uses = {u.grant.id: u for u in book.uses("lab")}
    assert uses[old.id].spent == 1.2
    assert uses[new.id].holds[0].base == 1.2


def _reserve_half(path: str) -> bool:
    try:
        GrantBook(Store(path)).reserve("lab", None, 0.5, "racing")
    except GrantRefused:
        return False
    return True


def test_processes_submitting_at_once_never_pass_a_grant(tmp_path):
    path = str(tmp_path / "store.sqlite")
    GrantBook(Store(path)).make("lab", 2.0)
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        got = pool.map(_reserve_half, [path] * 16)
    assert sum(got) == 4
    assert GrantBook(Store(path)).uses("lab")[0].used == 2.0


def test_a_hold_is_its_own_record(book):
    book.make("lab", 1.0)
    _, h = book.reserve("lab", "e", 0.5, "what")
    assert isinstance(h, Hold)
    assert (h.experiment, h.job_ids, h.held, h.settled) == ("e", None, 0.5, False)
