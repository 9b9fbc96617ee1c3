"""The fault suite's training function (copied into the suite's git repo as pkg/faults.py).

Every rank appends ``(run_id, attempt, rank, step)`` to ``<run_dir>/ledger.jsonl`` when a step is done, and
one ``start`` record when an attempt begins (where it resumed). tests/faults/ledger.py checks the file.
"""

import json
import os
import signal
import time


def _append(run, **record):
    line = (json.dumps({"run_id": run.run_id, "attempt": _attempt(run), "rank": run.rank, **record}) + "\n").encode()
    # One write of one short line with O_APPEND: whole and in order, whichever rank writes it.
    fd = os.open(os.path.join(str(run.run_dir), "ledger.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _attempt(run):
    return f"{os.environ.get('SLURM_JOB_ID', '0')}.{run.restart_count}"


def _library_handlers(received):
    """What a library that takes the signals for itself does (NCCL may): its own handlers, which do not chain."""

    def handler(signum, frame):
        received.append(signum)

    signal.signal(signal.SIGUSR1, handler)
    signal.signal(signal.SIGTERM, handler)


def train(
    run,
    steps=20,
    step_s=0.2,
    fast_from_restart=None,
    fast_s=0.01,
    dist=False,
    replace_handlers=False,
    hang_rank=None,
    hang_at=None,
    fail_at=None,
    until_term_at=None,
    hog_at=None,
    hog_mb=0,
):
    """``steps`` steps of ``step_s`` (``fast_s`` from restart count ``fast_from_restart`` on).

    ``dist``: a gloo process group, so the ranks agree on the step boundary where they stop.
    ``replace_handlers``: after start-up, a library replaces roach's USR1/TERM handlers.
    ``hang_rank``/``hang_at``: in an attempt from the top, that rank ignores TERM and hangs at that step (never returns).
    ``fail_at``: the function raises at that step (a crash).
    ``until_term_at``: that step lasts until the rank receives a TERM (a step longer than what is left of the limit).
    ``hog_at``/``hog_mb``: at that step the rank fills ``hog_mb`` MiB of memory (every page written) and keeps it.
    """
    if dist:
        import torch.distributed as td

        td.init_process_group("gloo")
    state = run.resume(default={"next": 0})
    _append(run, start=run.start_step)
    received = []
    if replace_handlers:
        _library_handlers(received)
    slow = fast_from_restart is None or run.restart_count < fast_from_restart
    for step in run.steps(run.start_step, steps):
        if hang_rank == run.rank and hang_at == step and run.start_step == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            run.log("hanging at step %d, ignoring TERM", step)
            while True:
                time.sleep(1)
        if step == hog_at:
            hogged = b"x" * (hog_mb << 20)  # a local: held to the end of the run
            run.log("holding %d MiB", len(hogged) >> 20)
        if step == fail_at:
            raise RuntimeError(f"the fault suite's crash at step {step}")
        while step == until_term_at and signal.SIGTERM not in run.signals.received:
            time.sleep(0.2)
        time.sleep(step_s if slow else fast_s)
        state["next"] = step + 1
        _append(run, step=step)
        if run.should_checkpoint():
            run.checkpoint(state)
    if received:
        run.log("the library's handlers saw %s", received)
    if dist:
        td.destroy_process_group()
    return {"steps": steps, "rank": run.rank}
