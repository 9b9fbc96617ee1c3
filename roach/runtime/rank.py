"""What a rank does: ``python -m roach.slurm.run <spec.json>`` (roach/slurm/run.py) calls :func:`main`, one
process per GPU.

Loads the spec, sets the torch.distributed environment from Slurm's, loads secrets into the
environment (never into a file), imports the function from the clone, calls it, and has rank 0 write
the result atomically. Any exception prints its traceback and exits non-zero, so ``srun
--kill-on-bad-exit`` stops the other ranks and the job ends FAILED.
"""

from __future__ import annotations

import errno
import importlib
import inspect
import json
import os
import pickle
import signal
import socket
import stat
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roach._fs import atomic_write
from roach.model.run_spec import RunSpec, SpecError
from roach.runtime import attempts, rendezvous
from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run, RunInterrupted
from roach.runtime.fence import EXIT_SUPERSEDED, Fence, Superseded
from roach.runtime.signals import SignalHandler


def expand(path: str) -> str:
    """``~`` is the home of the user the job runs as, here on the node."""
    return os.path.expanduser(path) if path.startswith("~") else path


def rank_env(env: dict[str, str]) -> dict[str, str]:
    """torch.distributed's variables from Slurm's, for ``init_process_group()`` with no arguments.

    MASTER_ADDR and MASTER_PORT come from the batch script (first node of the allocation, a port free
    there when the attempt started); in a one-node job rank 0 picks the port (:mod:`roach.runtime.rendezvous`).
    Each rank sees only the GPU of its local rank.
    """
    local_rank = int(env.get("SLURM_LOCALID", "0"))
    ntasks = int(env.get("SLURM_NTASKS", "1"))
    nnodes = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", "1")))
    out = {
        "RANK": env.get("SLURM_PROCID", "0"),
        "WORLD_SIZE": str(ntasks),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(ntasks // max(nnodes, 1)),
        "NODE_RANK": env.get("SLURM_NODEID", "0"),
    }
    devices = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if len(devices) == int(out["LOCAL_WORLD_SIZE"]) and local_rank < len(devices):
        out["CUDA_VISIBLE_DEVICES"] = devices[local_rank]
    return out


def read_secrets(secrets_dir: str | None) -> dict[str, str]:
    """One environment variable per file in ``secrets_dir`` (name = file name); refuse loose modes."""
    if not secrets_dir:
        return {}
    d = Path(expand(secrets_dir))
    if not d.is_dir():
        raise SpecError(f"secrets_dir {d} does not exist on {socket.gethostname()}")
    out = {}
    for f in sorted(d.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        mode = f.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SpecError(f"secrets file {f} is readable by others (mode {oct(mode & 0o777)}): chmod 600 {f}")
        if not f.name.replace("_", "A").isalnum() or f.name[0].isdigit():
            raise SpecError(f"secrets file name {f.name!r} is not an environment variable name")
        out[f.name] = f.read_text().rstrip("\n")
    return out


def load_function(target: str):
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise SpecError(f"{target} is not callable")
    return fn


def wants_run(fn) -> bool:
    """Does the function's first parameter ask for the Run context (named ``run`` or annotated Run)?"""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    p = params[0]
    return (
        p.name == "run"
        or p.annotation is Run
        or getattr(p.annotation, "__name__", None) == "Run"
        or p.annotation == "Run"
    )


def write_result(run_dir: Path, value: Any, check: Callable[[str], None] | None = None) -> Path:
    """``result.json`` (``result.pkl`` for what JSON cannot hold); ``check(what)`` may refuse the write."""
    try:
        text = json.dumps(value) + "\n"
    except (TypeError, ValueError):
        return atomic_write(run_dir / "result.pkl", pickle.dumps(value), check=_named(check, "result.pkl"))
    return atomic_write(run_dir / "result.json", text, check=_named(check, "result.json"))


def _named(check: Callable[[str], None] | None, what: str) -> Callable[[], None] | None:
    return None if check is None else lambda: check(what)


def _take_port(run: Run, attempt: str) -> None:
    """A one-node job's MASTER_PORT: rank 0 picks and says it; another rank reads what rank 0 said."""
    port = rendezvous.rank0_port(run.rank, run.world_size, run.job_id, run.run_dir, attempt, run.node)
    os.environ["MASTER_PORT"] = str(port)


def _on_signal(run: Run, sig: signal.Signals) -> None:
    """Log the signal. A function that has not yet used resume/steps/checkpoint is stopped at once on TERM:
    it has nothing to save, and holding on would only delay the job that preempts it. The checkpoint signal
    is kept for the function's next step boundary (it may arrive before the function first asks)."""
    run.log("caught_signal %s at step %d", sig.name.removeprefix("SIG"), run.step)
    if not run.consulted and sig == signal.SIGTERM:
        raise RunInterrupted(sig, run.step, False)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m roach.slurm.run SPEC.json", file=sys.stderr)
        return 2
    spec = RunSpec.from_json(Path(argv[0]).read_text())
    if spec.sweep is not None:
        spec = spec.task(int(os.environ["SLURM_ARRAY_TASK_ID"]))
    env = rank_env(dict(os.environ))
    os.environ.update(env)
    os.environ.update(spec.job_env)
    rank = int(env["RANK"])
    run_dir = Path(expand(spec.run_dir))
    run = Run(
        run_id=spec.run_id,
        job_id=int(os.environ.get("SLURM_JOB_ID", "0")),
        rank=rank,
        world_size=int(env["WORLD_SIZE"]),
        local_rank=int(env["LOCAL_RANK"]),
        local_world_size=int(env["LOCAL_WORLD_SIZE"]),
        node=os.environ.get("SLURMD_NODENAME", socket.gethostname()),
        run_dir=run_dir,
        restart_count=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
        cluster=spec.cluster,
        checkpoint_every=spec.checkpoint_every,
        checkpoint_every_s=spec.checkpoint_every_s,
    )
    # Installed first thing: a signal that arrives while the function imports is not lost.
    run.signals = SignalHandler.for_names([spec.checkpoint_signal, "TERM"], on_catch=lambda sig: _on_signal(run, sig))
    run.signals.install()
    attempt = attempts.attempt_key()
    done = attempts.completed_before(run_dir, attempt)
    if done is not None:
        if rank == 0:
            run.log(
                "run %s already completed (%s); not running it again. Submit a new run id to start over.",
                spec.run_id,
                done,
            )
        return 0
    run.fence = Fence(run_dir, attempt)  # rank 0 reads it; the others stop when rank 0 says it is taken over
    if rank == 0:  # this attempt is the run's current one from here: an older one still running writes nothing more
        run.fence.claim(run.job_id, run.node)
    # A resumed rank reads its checkpoint in a thread of its own, from when this thread has imported the function on,
    # while the function forms its process group: run.resume() finds it read.
    run.prefetch = ckpt.Prefetch.start(run.resume_path)
    try:
        # The batch script starts the ranks with these signals blocked (node.sh roach_block_signals): one
        # that came while Python started is pending, and reaches the handler now (a TERM: RunInterrupted).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, run.signals.signals)
        os.environ.update(read_secrets(spec.secrets_dir))
        if rendezvous.by_rank0(os.environ) and rank == 0:  # said first thing: the others read it once imported
            _take_port(run, attempt)
        clone = os.environ.get("ROACH_CLONE_DIR", "")
        for sub in reversed(spec.python_path):  # a src/ layout is importable from its src
            sys.path.insert(0, os.path.join(clone, sub))
        run_dir.mkdir(parents=True, exist_ok=True)  # (the batch script starts the ranks elsewhere: no mkdir there)
        os.chdir(run_dir)  # the function's working directory, from its module's first line on
        fn = load_function(spec.target)
        if run.prefetch is not None:
            run.prefetch.release()  # this thread's imports are made: the read (and what it imports) may begin
        if rendezvous.by_rank0(os.environ) and rank != 0:  # rank 0 said it while this rank imported the function
            _take_port(run, attempt)
        if rank == 0:
            run.log(
                "starting %s in run %s on %s (world size %d, restart count %d)",
                spec.target,
                spec.run_id,
                run.node,
                run.world_size,
                run.restart_count,
            )
            if run.restart_count > 0 and not run.resume_path.exists():
                run.log("restart count %d and no resume.pt: this attempt starts from the top", run.restart_count)
        elif run.local_rank == 0:  # one line for each other node: where its ranks run and whom they reach
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            run.log("on %s: %d of the %d ranks, rank 0 at %s", run.node, run.local_world_size, run.world_size, where)
        result = fn(run, **spec.args) if wants_run(fn) else fn(**spec.args)
    except RunInterrupted as stop:
        return attempts.leave(run, stop, spec)
    except Superseded as gone:
        run.log("%s", gone.line(spec.run_id, run.step))
        return EXIT_SUPERSEDED
    except rendezvous.RendezvousError as exc:
        print(f"roach rank {rank}: {exc}", file=sys.stderr, flush=True)
        return 1
    except BaseException as exc:  # noqa: BLE001 - every failure must end the rank non-zero with its traceback
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            result = None
        elif line := disk_full_line(exc):
            print(f"roach rank {rank}: {line}", file=sys.stderr, flush=True)
            return 1
        else:
            sys.stdout.flush()
            traceback.print_exc()
            print(f"roach rank {rank}: {spec.target} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
    if rank == 0:
        try:
            path = write_result(run_dir, result, run.check_fence)
            attempts.mark_done(run_dir, run.job_id, attempt, run.check_fence)
        except Superseded as gone:
            run.log("%s", gone.line(spec.run_id, run.step))
            return EXIT_SUPERSEDED
        run.log("finished; result in %s", path)
    return 0


_DISK_CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
}


def disk_full_line(exc: BaseException) -> str | None:
    """The one line that says a write failed for want of room (or a read-only file system): the node, the cause, the
    path; None for any other failure. The file it replaced atomically is kept whole (roach/_fs.py)."""
    cause = _DISK_CAUSES.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None
    if cause is None:
        return None
    path = getattr(exc, "filename", None) or "a file"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return f"{node}: {cause} writing {path}; this attempt ends (a checkpoint it replaced is kept)"


def ignore_late_signals() -> None:
    """The rank's work is over: a signal now (the wall clock's USR1 a second late) must not kill it while
    Python shuts down, which restores the default action of handlers it installed (but keeps SIG_IGN)."""
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def entry(argv: list[str]) -> int:
    """The rank's whole life: :func:`main`, then no late signal can kill it while Python shuts down."""
    code = main(argv)
    ignore_late_signals()
    return code
