"""What each exit code of `roach` means: one table, which `roach --help`, `roach skill` and docs/cli.md's table all
render (``python -m roach.cli.exit_codes`` prints the docs' table).

The codes themselves are the errors' ``exit_code`` (:mod:`roach.errors`) and the commands' own (a job that did
not complete, a moved run that did not resume); a test keeps every one of them in the table.
"""

from __future__ import annotations

from typing import NamedTuple


class ExitCode(NamedTuple):
    code: int
    short: str  # `roach --help` and the skill
    meaning: str  # docs/cli.md (Markdown)


EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(0, "ok", "success (for `lab status`: the lab is up)"),
    ExitCode(1, "unexpected error", "unexpected error inside roach"),
    ExitCode(
        2,
        "usage error",
        "usage error: unknown option or command, invalid value, a `$ROACH_STORE` that is a directory or a file "
        "other than a roach store (left as it is), a relative path for a cluster directory, `--inside` a job that "
        "is no holder `roach hold` queued, a REST cluster's token file others may read (the fix: `chmod 600`) or "
        "whose token expired, a slurmrestd that offers no data version roach reads, a submission to a metered "
        "cluster that no live grant has room for, `roach grant` where standard input is not a terminal",
    ),
    ExitCode(3, "lab error or lab not up", "lab error, or the lab is not up"),
    ExitCode(
        4,
        "transport error",
        "transport error: a command could not be run (binary missing, connection failed, timeout), slurmrestd "
        "cannot be reached at `rest_url`, or a REST cluster with neither an ssh alias nor `shared_fs` was asked "
        "for a file",
    ),
    ExitCode(
        5,
        "Slurm error",
        "Slurm error: a Slurm command ran and failed, or printed what roach cannot read (through slurmrestd: an "
        "answer that carries Slurm's errors, or a call v0.0.38/v0.0.42 cannot make)",
    ),
    ExitCode(
        6,
        "the job ran and did not complete",
        "the job ran and did not complete (`roach submit --wait`: it ended FAILED, CANCELLED, TIMEOUT, ...; in "
        "Python, `Job.result()`'s `NotCompletedError` and `Sweep.results()`'s `SweepNotCompletedError`)",
    ),
    ExitCode(
        7,
        "something required is missing (a prerequisite, the workspace, a job bundle, a required file)",
        "something required is missing: a job's Python environment that could not be built (the job itself exits "
        "7, `env_failed` in its log, `job.json`'s `failure` and `roach why`), a `roach doctor` prerequisite, a "
        "repository remote the jobs' user cannot read (`submit`, `sweep`), the workspace file or remote root, a "
        "job bundle, a file `scoring/interface.md` requires, a completed run's result file (`Job.result()`'s "
        "`ResultMissingError`), a secrets directory that cannot be read, a job neither squeue nor sacct knows, "
        "the `mcp` extra",
    ),
    ExitCode(
        8,
        "a moved run did not resume at its step",
        "`roach move`: the moved run did not resume at the step it checkpointed at",
    ),
    ExitCode(
        9,
        "not used (a second `roach watch` reads the first's rounds)",
        "not used (a second `roach watch` on one store and cluster is a reader of the first's rounds, never refused)",
    ),
    ExitCode(
        10,
        "a wait ran out of time",
        "a wait ran out of time (`--wait-holder S`; in Python, `Job.wait`/`result`, `Sweep.wait`/`results` and "
        "`Holder.wait_running` with a `timeout`): what it waited for goes on, nothing was cancelled "
        "(`WaitTimeoutError`)",
    ),
)


def help_text() -> str:
    """The codes as `roach --help` lists them: one a line, kept as they are (click's ``\\b``)."""
    return "Exit codes:\n\n\b\n" + "\n".join(f"{c.code:>2}  {c.short}" for c in EXIT_CODES)


def skill_list() -> str:
    """The codes as the skill lists them (Markdown)."""
    return "\n".join(f"- {c.code}: {c.short}" for c in EXIT_CODES)


def markdown() -> str:
    """docs/cli.md's table of exit codes."""
    rows = [f"| {c.code} | {c.meaning} |" for c in EXIT_CODES]
    return "\n".join(["| code | meaning |", "|---|---|", *rows])


if __name__ == "__main__":
    print(markdown())
