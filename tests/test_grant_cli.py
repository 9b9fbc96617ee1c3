"""`roach grant` as a person and as a program run it: made and revoked only at a real pseudo-terminal where the
person types the cluster's name; refused (exit 2) with standard input a pipe, as an agent's or a script's is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roach.records.grants import GrantBook
from roach.records.store import Store
from tests.support.schemas import validate_output
from tests.support.terminal import at_terminal


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    toml = tmp_path / "clusters.toml"
    toml.write_text("[clusters.lab]\nmetered = true\n")
    return {**os.environ, "ROACH_CLUSTERS_TOML": str(toml), "ROACH_STORE": str(tmp_path / "store.sqlite")}


def _store(env: dict[str, str]) -> GrantBook:
    return GrantBook(Store(env["ROACH_STORE"]))


def piped(args: list[str], env: dict[str, str], stdin: str = "lab\n") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roach", *args], input=stdin, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_grant_typed_at_a_terminal_is_made(env):
    code, shown = at_terminal(["grant", "lab", "--gpu-hours", "2", "--note", "paper deadline"], env, "lab")
    assert code == 0, shown
    assert "granted g1: 2 GPU-hours on lab for every experiment" in shown
    (use,) = _store(env).uses("lab")
    assert (use.grant.gpu_hours, use.grant.note) == (2.0, "paper deadline")


def test_a_grant_with_stdin_not_a_terminal_is_refused_with_exit_2(env):
    r = piped(["grant", "lab", "--gpu-hours", "2"], env)
    assert r.returncode == 2, r.stderr
    assert "a grant is the budget owner's to make, at a terminal" in r.stderr
    assert _store(env).uses() == []


def test_the_wrong_name_typed_makes_nothing(env):
    code, shown = at_terminal(["grant", "lab", "--gpu-hours", "2"], env, "yes")
    assert code == 2, shown
    assert "'yes' is not 'lab': nothing was done" in shown
    assert _store(env).uses() == []


def test_a_cluster_that_is_not_metered_needs_no_grant(env):
    code, shown = at_terminal(["grant", "ilc", "--gpu-hours", "2"], env, "ilc")
    assert code == 2, shown
    assert "cluster ilc is not metered: it needs no grant" in shown


def test_a_bad_until_is_refused_before_the_question(env):
    r = piped(["grant", "lab", "--gpu-hours", "2", "--until", "tomorrow"], env)
    assert r.returncode == 2
    assert "--until 'tomorrow' is neither a date or time nor a span" in r.stderr


def test_revoking_needs_the_terminal_too_and_the_list_says_it(env):
    g = _store(env).make("lab", 1.0, granted_by="owner")
    r = piped(["grant", "--revoke", g.name], env)
    assert r.returncode == 2
    code, shown = at_terminal(["grant", "--revoke", g.name], env, "lab")
    assert code == 0, shown
    listed = json.loads(piped(["grant", "--list", "--json"], env).stdout)
    assert [(x["id"], x["live"], x["schema"]) for x in listed] == [(g.name, False, "roach.grant/1")]


def test_the_list_shows_what_each_grant_holds_and_has_left(env):
    book = _store(env)
    book.make("lab", 1.0, experiment="e", granted_by="owner")
    book.reserve("lab", "e", 0.25, "a run")
    (row,) = json.loads(piped(["grant", "--list", "--json"], env).stdout)
    assert (row["held"], row["left"], row["experiment"]) == (0.25, 0.75, "e")


def test_what_grant_prints_with_json_is_its_schema(env):
    code, shown = at_terminal(["grant", "lab", "--gpu-hours", "2", "--until", "7d", "--json"], env, "lab")
    assert code == 0, shown
    validate_output("grant", json.loads(shown[shown.index("{") :]))
    validate_output("grant --list", json.loads(piped(["grant", "--list", "--json"], env).stdout))
