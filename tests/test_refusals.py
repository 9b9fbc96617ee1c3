"""Refusals end with the exit code docs/cli.md gives them, never 1 (kept for bugs): every command is swept with
$ROACH_STORE at a file that is no store, and the refusals of submit that once ended with 1 are tried on the lab."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from roach.cli.app import cli
from tests.conftest import private_store
from tests.support.lab_repo import LabRepo, repo  # noqa: F401  (repo: a fixture)

# What the sweep leaves out: `lab` starts and stops labs, `mcp` serves stdin, `skill` only prints.
NOT_SWEPT = {"lab", "mcp", "skill"}
NOT_A_STORE = "not a roach store"


def _commands() -> list[list[str]]:
    """Each command (each subcommand of a group) with its required arguments given a name nothing has."""
    ctx = click.Context(cli)
    found = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if name in NOT_SWEPT or cmd is None:
            continue
        subs = [([name], cmd)]
        if isinstance(cmd, click.Group):
            subs = [([name, s], c) for s in cmd.list_commands(ctx) if (c := cmd.get_command(ctx, s)) is not None]
        for argv, c in subs:
            needed = [p for p in c.params if isinstance(p, click.Argument) and p.required]
            found.append(argv + ["no-such-thing"] * len(needed))
    return found


@pytest.fixture(params=["another file", "a directory"])
def no_store(request, tmp_path, monkeypatch) -> Iterator[Path]:
    """$ROACH_STORE at something that is not a roach store; the working directory an empty one."""
    if request.param == "a directory":
        path = tmp_path / "store-dir"
        path.mkdir()
    else:
        path = tmp_path / "store.sqlite"
        path.write_text("my notes, not a database\n")
    monkeypatch.setenv("ROACH_STORE", str(path))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield path


def _digest(path: Path) -> str:
    return "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_no_refusal_of_any_command_ends_with_exit_1(argv, no_store):
    before = _digest(no_store)
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code != 1, (r.output, r.exception)
    if NOT_A_STORE in r.stderr:
        assert r.exit_code == 2, r.stderr
        assert f"roach: error: {no_store} is {NOT_A_STORE}" in r.stderr
    assert _digest(no_store) == before
    assert not list(no_store.parent.glob(f"{no_store.name}-*"))  # no -wal or -shm beside it


def test_a_file_that_is_no_store_is_named_and_kept(no_store):
    r = CliRunner().invoke(cli, ["ls"])
    kind = "a directory" if no_store.is_dir() else "another file"
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"roach: error: {no_store} is {NOT_A_STORE} (it is {kind})",
        "  hint: point $ROACH_STORE at a roach store or at a file that does not exist yet; this one is left as it is",
    ]


# -- on the lab ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_path() -> Iterator[Path]:
    yield from private_store("roach-refusals-store-")


@pytest.mark.lab
def test_a_secrets_dir_the_cluster_cannot_read_is_missing_exit_7(repo: LabRepo, store_path):  # noqa: F811
    r = repo.submit("pkg.train:train", "--arg", "lr=1", "--secrets-dir", "/nonexistent/secrets")
    assert r.exit_code == 7, r.output
    assert "secrets_dir /nonexistent/secrets cannot be read on the cluster" in r.stderr
    assert not repo.submitted


@pytest.mark.lab
def test_inside_a_job_that_no_holder_is_a_usage_error_exit_2(repo: LabRepo, store_path):  # noqa: F811
    r = repo.submit("pkg.train:train", "--arg", "lr=1", "--inside", "999999")
    assert r.exit_code == 2, r.output
    assert "holder 999999 on lab is neither in squeue nor in sacct" in r.stderr
    assert "`roach ls` lists them" in r.stderr
    assert not repo.submitted
