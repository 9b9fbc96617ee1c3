"""A failed job's cause, read from its log: the line that says it, not the lines that only echo it."""

from __future__ import annotations

from pathlib import Path

from roach.records.error_line import MAX_CHARS, error_line, git_error_line

DATA = Path(__file__).parent / "data"

# git 2.39's output (Debian 12) when the user cloning does not own the remote, as a job's log holds it
GIT_REFUSED = """roach: n1: removing half-made clone /home/roachlab/roach_clones/work-abc
fatal: detected dubious ownership in repository at '/srv/git/work.git'
To add an exception for this directory, call:

\tgit config --global --add safe.directory /srv/git/work.git
fatal: Could not read from remote repository.

Please make sure you have the correct access rights
and the repository exists.
"""

ENV_FAILED = """roach: n2: `uv sync --frozen` exited 1 building the uv environment of abc in /c
  x Hash mismatch for `six==1.17.0`
roach: env_failed: n2: `uv sync --frozen` exited 1 building the uv environment of abc in /c; its output is above.
roach: env_failed: the job's uv environment could not be built; no rank started (exit 7)
"""


def test_a_rank_that_raised_is_named_with_its_exception():
    log = (DATA / "log_lab_22.05_rank1_raised_2x2.txt").read_text()
    assert error_line(log) == "roach rank 1: pkg.jobs:boom failed: ValueError: rank 1 exploded on purpose"


def test_a_refused_clone_is_gits_cause_not_its_generic_follow_up():
    assert error_line(GIT_REFUSED) == "fatal: detected dubious ownership in repository at '/srv/git/work.git'"


def test_an_environment_that_failed_is_what_failed_not_the_closing_line():
    assert error_line(ENV_FAILED).startswith("roach: env_failed: n2: `uv sync --frozen` exited 1")


def test_an_unlabelled_traceback_is_its_exception_line():
    log = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nModuleNotFoundError: No module named 'pkg'\n"
    assert error_line(log) == "ModuleNotFoundError: No module named 'pkg'"


def test_an_oom_kill_is_slurmstepds_line():
    log = "0: step 3\nslurmstepd: error: Detected 1 oom_kill event in StepId=12.batch. Some of the step tasks have been OOM Killed.\n"
    assert error_line(log).startswith("slurmstepd: error: Detected 1 oom_kill event")


def test_slurmstepds_cancelled_banner_is_no_cause():
    assert error_line("slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-12-01T10:49:24 ***\n") is None


def test_a_log_of_a_wall_clock_stop_says_no_cause():
    assert error_line((DATA / "log_lab_22.05_wall_clock.txt").read_text()) is None


def test_a_very_long_line_is_cut():
    assert len(error_line("fatal: " + "x" * 5000)) == MAX_CHARS


def test_git_error_line_of_stderr_is_the_cause_first():
    assert git_error_line(GIT_REFUSED) == "fatal: detected dubious ownership in repository at '/srv/git/work.git'"
