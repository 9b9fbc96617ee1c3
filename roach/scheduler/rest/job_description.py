"""A batch script and sbatch's options as the job description slurmrestd takes (``POST .../job/submit``).

slurmrestd reads no ``#SBATCH`` line: the script's directives (those before its first command, as sbatch reads
them) and the options given are turned into the description's fields here. An option this table lacks is
refused with the list of those it has, before anything is sent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roach.errors import UsageError
from roach.scheduler.fields import parse_duration, parse_memory_mb

# the environment a job submitted over REST starts with (sbatch would pass the caller's; slurmrestd has none)
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"


def _minutes(text: str) -> int:
    seconds = parse_duration(text)
    if seconds is None:
        raise UsageError(f"--time={text} cannot be sent over REST", hint="give a finite time, e.g. --time=1:00:00")
    return max(1, math.ceil(seconds / 60))


def _node_counts(text: str) -> list[int]:
    """``--nodes=N`` or ``N-M`` as slurmrestd's [minimum, maximum]."""
    lo, _, hi = text.partition("-")
    return [int(lo), int(hi or lo)]


# option -> (field, how its value is read)
_VALUED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "job-name": ("name", str),
    "output": ("standard_output", str),
    "error": ("standard_error", str),
    "open-mode": ("open_mode", str),
    "signal": ("signal", str),
    "nodes": ("nodes", _node_counts),
    "ntasks": ("tasks", int),
    "ntasks-per-node": ("tasks_per_node", int),
    "cpus-per-task": ("cpus_per_task", int),
    "time": ("time_limit", _minutes),
    "gres": ("gres", str),
    "gpus-per-node": ("gpus_per_node", str),
    "mem": ("memory_per_node", parse_memory_mb),
    "account": ("account", str),
    "partition": ("partition", str),
    "qos": ("qos", str),
    "constraint": ("constraints", str),
    "reservation": ("reservation", str),
    "array": ("array", str),
    "dependency": ("dependency", str),
    "chdir": ("current_working_directory", str),
}
_FLAGS: dict[str, tuple[str, bool]] = {
    "hold": ("hold", True),
    "requeue": ("requeue", True),
    "no-requeue": ("requeue", False),
    "parsable": ("", True),  # how sbatch prints its answer: nothing to send
}


def directives(script: str) -> list[str]:
    """The options of the script's ``#SBATCH`` lines, up to its first command (sbatch reads no further)."""
    out = []
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        s = line.strip()
        if not s or (s.startswith("#") and not s.startswith("#SBATCH")):
            continue
        if not s.startswith("#SBATCH"):
            break
        out.extend(s.removeprefix("#SBATCH").split("#", 1)[0].split())
    return out


def job_description(options: Sequence[str], script: str, *, cwd: str = "/tmp") -> dict[str, Any]:
    """The ``job`` of a submission in data version v0.0.38: the script's directives, then ``options`` (which win, as
    on sbatch's line)."""
    # the user's login environment on the node (sbatch --get-user-env; v0.0.38 reads a number here): HOME, USER and
    # the rest sbatch would have passed from the caller's shell
    job: dict[str, Any] = {
        "environment": {"PATH": JOB_PATH},
        "current_working_directory": cwd,
        "get_user_environment": 1,
    }
    for opt in [*directives(script), *options]:
        name, sep, value = opt.removeprefix("--").partition("=")
        if not opt.startswith("--"):
            raise UsageError(
                f"sbatch option {opt!r} cannot be sent over REST", hint="give options in their --long=form"
            )
        if name in _FLAGS and not sep:
            key, flag = _FLAGS[name]
            if key:
                job[key] = flag
        elif name in _VALUED and sep:
            key, read = _VALUED[name]
            try:
                job[key] = read(value)
            except ValueError:
                raise UsageError(
                    f"cannot read {opt!r} for slurmrestd", hint=f"see `sbatch --help` for --{name}"
                ) from None
        else:
            known = sorted([*(f"--{k}=" for k in _VALUED), *(f"--{k}" for k in _FLAGS)])
            raise UsageError(
                f"sbatch option {opt!r} has no field in slurmrestd's job description that roach fills",
                hint=f"over REST roach sends: {', '.join(known)}",
            )
    return job


def job_description_v42(
    options: Sequence[str], script: str, environment: Mapping[str, str], *, cwd: str = "/tmp"
) -> dict[str, Any]:
    """The ``job`` of a submission in data version v0.0.42 (Slurm 24.11, 26.05): v0.0.38's fields in their later
    shapes. v0.0.42 loads no login environment on the node: ``environment`` is the job's (HOME, USER, PATH)."""
    job = job_description(options, script, cwd=cwd)
    del job["get_user_environment"]
    job["environment"] = [f"{k}={v}" for k, v in {"PATH": JOB_PATH, **environment}.items()]
    if "nodes" in job:
        lo, hi = job["nodes"]
        job["nodes"] = str(lo) if lo == hi else f"{lo}-{hi}"
    for key in ("time_limit", "memory_per_node"):
        if key in job:
            job[key] = _set(job[key])
    if "open_mode" in job:
        job["open_mode"] = [job["open_mode"].upper()]
    if "signal" in job:
        spec = job.pop("signal")
        batch = spec.startswith("B:")
        name, _, lead = spec.removeprefix("B:").partition("@")
        job["kill_warning_signal"] = name
        job["kill_warning_delay"] = _set(int(lead or 60))  # sbatch's default lead: 60 s
        if batch:
            job["kill_warning_flags"] = ["BATCH_JOB"]
    tres = [f"gres/{g}" for g in job.pop("gres", "").split(",") if g]
    if "gpus_per_node" in job:
        tres.append(f"gres/gpu:{job.pop('gpus_per_node')}")
    if tres:
        job["tres_per_node"] = ",".join(tres)
    return job


def _set(number: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": number}
