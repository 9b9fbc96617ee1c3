"""What the CLI adds to the job views of :mod:`roach.launch.job_view`: a view's ``--json`` record
(:func:`job_json`) and ``logs -f``'s loop (:func:`follow_log`); how a view is printed is
:mod:`roach.cli.view_text`.
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from roach.cli.jsonout import stamp
from roach.errors import RoachError
from roach.launch.job_view import JobView
from roach.model.job_state import JobState

if TYPE_CHECKING:  # annotations only: loading the views loads no job handle (roach.launch.job)
    from roach.launch.hold.holder import InsideJob
    from roach.launch.job import Job
    from roach.launch.poller import Waiting


def job_json(view: JobView, schema: str = "job", **extra: Any) -> dict[str, Any]:
    """A job's ``--json`` record (``submit``, ``resume``, ``status``, each of ``ls``): the view and ``extra``
    (``cancel``'s outcome under its own schema)."""
    return stamp(schema, {**asdict(view), **extra})


# -- following a log --------------------------------------------------------------------------------------
FOLLOW_POLL_S = 2.0  # `logs -f`: how often the log is read for new lines
STATE_POLL_S = 10.0  # `logs -f`: how often Slurm is asked whether the job ended


def follow_log(
    job: Job | InsideJob, lines: int | None, *, path: str | None = None, sleep=time.sleep, clock=time.monotonic
) -> JobState:
    """Print the log (``path``, default the job's) as it grows until the job ends: read it every
    ``FOLLOW_POLL_S`` (only lines not yet printed, through the cluster's ``tail``), and look for its end in the
    store each time, where the store's poller records it (one this starts where none runs:
    :meth:`~roach.launch.job.Job.waiting`); ask Slurm every ``STATE_POLL_S`` only where no poller can run.
    Returns the final state."""
    w = job.waiting(STATE_POLL_S)
    with w if w is not None else nullcontext():
        return _follow(job, w, lines, path or job.record.log_path, sleep, clock)


def _follow(job: Job | InsideJob, w: Waiting | None, lines: int | None, path: str, sleep, clock) -> JobState:
    transport = job.fs.transport
    done = 0  # complete lines printed (or skipped, with -n)
    first, next_state = True, 0.0
    state = JobState.PENDING
    while True:
        ended = False
        recorded = job.recorded_end()  # checked before the read, so the last read sees the whole log
        if recorded is not None:
            state, ended = recorded, True
        elif clock() >= next_state and not (w is not None and w.watched()):
            state = job.state()
            ended, next_state = state.is_terminal, clock() + STATE_POLL_S
        cmd = ["tail", "-n", f"+{done + 1}", "--", path]
        res = transport.run(cmd)
        if res.returncode != 0 and job.fs.exists(path):
            res = transport.run(cmd)  # the job may have made the log between the read and the check
        if res.returncode != 0 and job.fs.exists(path):
            raise RoachError(
                f"reading {path} failed: {res.stderr.strip()}", hint="check that the submitting user may read the log"
            )
        new = res.stdout.splitlines(keepends=True) if res.returncode == 0 else []
        if new and not ended and not new[-1].endswith("\n"):
            new = new[:-1]  # a line still being written: print it once it is whole
        if first and lines is not None:
            done += max(0, len(new) - lines)
            new = new[-lines:]
        first = False
        sys.stdout.write("".join(new))
        sys.stdout.flush()
        done += len(new)
        if ended:
            click.echo(f"job {job.job_id} ended: {state.value}", err=True)
            return state
        sleep(FOLLOW_POLL_S)
