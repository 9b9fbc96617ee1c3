"""A user's sbatch script, read and checked before ``roach sbatch`` submits it (pure: text in, text out).

sbatch reads ``#SBATCH`` lines from the top of a script until the first line that is neither blank nor a
comment; roach reads the same header, the same way (each line split like a command line, so one line may
carry several options). It then checks that the script asks for what a shared cluster needs (account,
partition, time, memory, CPUs, and GPUs where the script uses them), and adds what roach itself needs:
logs written into the job's bundle, and on request the lines a preemptible partition wants. The user's
file is never changed: the amended text is what gets submitted, and every added line is reported.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from roach.errors import UsageError

ARTIFACTS_DIR = "dsi-slurm-artifacts"
OUTPUT = f"{ARTIFACTS_DIR}/%j/slurm_%j.out"
ERROR = f"{ARTIFACTS_DIR}/%j/slurm_%j.err"
ARRAY_OUTPUT = f"{ARTIFACTS_DIR}/%A/slurm_%A_%a.out"
ARRAY_ERROR = f"{ARTIFACTS_DIR}/%A/slurm_%A_%a.err"
PREEMPT_SIGNAL = "B:USR1@300"  # the batch shell gets USR1 five minutes before the end: time to checkpoint
ADDED_MARK = "# roach sbatch added the lines below (the script file itself is unchanged)"

# Every option roach looks at: spelling -> what it is. Short options take their value attached or next.
_OPTIONS: dict[str, str] = {
    "-A": "account",
    "--account": "account",
    "-p": "partition",
    "--partition": "partition",
    "-t": "time",
    "--time": "time",
    "--mem": "memory",
    "--mem-per-cpu": "memory",
    "--mem-per-gpu": "memory",
    "-c": "cpus",
    "--cpus-per-task": "cpus",
    "--cpus-per-gpu": "cpus",
    "-n": "cpus",
    "--ntasks": "cpus",
    "--ntasks-per-node": "cpus",
    "--mincpus": "cpus",
    "-G": "gpus",
    "--gpus": "gpus",
    "--gpus-per-node": "gpus",
    "--gpus-per-task": "gpus",
    "--gpus-per-socket": "gpus",
    "--gres": "gres",
    "-o": "output",
    "--output": "output",
    "-e": "error",
    "--error": "error",
    "-a": "array",
    "--array": "array",
    "-J": "job-name",
    "--job-name": "job-name",
    "--requeue": "requeue",
    "--no-requeue": "no-requeue",
    "--signal": "signal",
}
_FLAGS = {"--requeue", "--no-requeue"}  # take no value
_SHORT_WITH_VALUE = {k for k in _OPTIONS if len(k) == 2}

# What a script must ask for, the options that ask for it, and an example line for the error message.
REQUIREMENTS: dict[str, tuple[str, str]] = {
    "account": ("--account (-A)", "#SBATCH --account=<your account>"),
    "partition": ("--partition (-p)", "#SBATCH --partition=general"),
    "time": ("--time (-t)", "#SBATCH --time=01:00:00"),
    "memory": ("--mem, --mem-per-cpu or --mem-per-gpu", "#SBATCH --mem=16G"),
    "cpus": ("--cpus-per-task (-c), --cpus-per-gpu, --ntasks (-n) or --ntasks-per-node", "#SBATCH --cpus-per-task=4"),
    "gpus": ("--gres=gpu:N, --gpus (-G), --gpus-per-node or --gpus-per-task", "#SBATCH --gres=gpu:1"),
}
CHECKABLE = tuple(REQUIREMENTS)

# A body line that uses a GPU: then the script must ask for one.
_USES_GPU = re.compile(r"\bcuda\b|nvidia-smi|CUDA_VISIBLE_DEVICES|\bgpus?\b|torch\.cuda|--device[= ]+cuda", re.I)


@dataclass(frozen=True)
class Directive:
    """One option of a ``#SBATCH`` line: what it is (``time``), its spelling, its value, its line (1-based)."""

    key: str
    option: str
    value: str | None
    line: int


@dataclass(frozen=True)
class PreparedScript:
    """A script ready to submit: the amended text, the lines added, and what was checked."""

    path: str  # relative to the workspace
    text: str  # what is submitted
    added: tuple[str, ...]  # the #SBATCH lines roach added, in order
    notes: tuple[str, ...]  # warnings about the script (not errors)
    directives: tuple[Directive, ...]
    array: str | None  # the --array value, if the script is an array
    job_name: str | None  # the script's own --job-name, if any

    @property
    def is_array(self) -> bool:
        return self.array is not None


class ScriptRefused(UsageError):
    """The script does not ask for what the cluster needs; ``missing`` lists what (keys of REQUIREMENTS)."""

    def __init__(self, message: str, missing: tuple[str, ...], hint: str | None = None):
        super().__init__(message, hint)
        self.missing = missing


def _header_end(lines: list[str]) -> int:
    """Index of the first line sbatch stops reading directives at (a line that is not blank or a comment)."""
    for i, line in enumerate(lines[1:], start=1):
        s = line.strip()
        if s and not s.startswith("#"):
            return i
    return len(lines)


def _split(rest: str, line_no: int) -> list[str]:
    try:
        return shlex.split(rest, comments=True)
    except ValueError as exc:
        raise UsageError(
            f"line {line_no}: cannot read the #SBATCH line ({exc}): {rest!r}", hint="check its quotes"
        ) from None


def read_directives(text: str) -> tuple[list[Directive], list[str]]:
    """The options of the script's ``#SBATCH`` header, and notes on lines sbatch would ignore."""
    lines = text.splitlines()
    end = _header_end(lines)
    found: list[Directive] = []
    notes: list[str] = []
    for i, line in enumerate(lines):
        m = re.match(r"^#SBATCH\s+(.*)$", line)
        if not m:
            if re.match(r"^\s*#\s*SBATCH\b", line) and i < end:
                notes.append(f"line {i + 1}: {line.strip()!r} is not read by sbatch (it must start with '#SBATCH ')")
            continue
        if i >= end:
            notes.append(f"line {i + 1}: {line.strip()!r} comes after the first command; sbatch ignores it")
            continue
        tokens = _split(m[1], i + 1)
        j = 0
        while j < len(tokens):
            tok = tokens[j]
            j += 1
            opt, value = tok, None
            if tok.startswith("--"):
                opt, eq, v = tok.partition("=")
                if eq:
                    value = v
                elif opt not in _FLAGS and j < len(tokens) and not tokens[j].startswith("-"):
                    value = tokens[j]
                    j += 1
            elif tok.startswith("-") and len(tok) >= 2:
                opt = tok[:2]
                if len(tok) > 2:
                    value = tok[2:].lstrip("=")
                elif opt in _SHORT_WITH_VALUE and j < len(tokens):
                    value = tokens[j]
                    j += 1
            key = _OPTIONS.get(opt)
            if key == "gres":
                key = "gpus" if value and any(part.split(":")[0] == "gpu" for part in value.split(",")) else "gres"
            if key is not None:
                found.append(Directive(key, opt, value, i + 1))
    return found, notes


def uses_gpu(text: str) -> int | None:
    """The first line (1-based) of the script's body that mentions a GPU, or None."""
    lines = text.splitlines()
    for i in range(_header_end(lines), len(lines)):
        line = lines[i].split("#", 1)[0] if not lines[i].lstrip().startswith("#") else ""
        if _USES_GPU.search(line):
            return i + 1
    return None


def prepare_script(
    text: str, path: str, *, preemptible: bool = False, skip_checks: tuple[str, ...] = ()
) -> PreparedScript:
    """Check the script at ``path`` (its ``text``) and return the text to submit.

    Raises :class:`ScriptRefused` listing everything missing at once. ``skip_checks`` names checks a site
    does without (``account`` where there are no accounts).
    """
    bad = sorted(set(skip_checks) - set(CHECKABLE))
    if bad:
        raise UsageError(f"unknown check(s) {', '.join(bad)}", hint=f"valid checks: {', '.join(CHECKABLE)}")
    if not text.startswith("#!"):
        raise UsageError(
            f"{path} does not start with '#!' (e.g. #!/bin/bash): sbatch refuses such a script",
            hint="make its first line the interpreter, e.g. #!/bin/bash",
        )
    directives, notes = read_directives(text)
    have = {d.key for d in directives}
    gpu_line = uses_gpu(text)
    wanted = [k for k in ("account", "partition", "time", "memory", "cpus") if k not in skip_checks]
    if gpu_line is not None and "gpus" not in skip_checks:
        wanted.append("gpus")
    missing = tuple(k for k in wanted if k not in have)
    if missing:
        lines = [
            f"  {k}: {REQUIREMENTS[k][0]}" + (f" (line {gpu_line} uses a GPU)" if k == "gpus" else "") for k in missing
        ]
        examples = "; ".join(REQUIREMENTS[k][1] for k in missing)
        skip = " or --no-check-account if the site has no accounts" if "account" in missing else ""
        raise ScriptRefused(
            f"{path} does not ask for everything the cluster needs; missing #SBATCH lines for:\n" + "\n".join(lines),
            missing,
            hint=f"add them to the script's header, e.g. {examples}{skip}",
        )

    array = next((d.value for d in directives if d.key == "array"), None)
    add: list[str] = []
    for key, plain, arr in (("output", OUTPUT, ARRAY_OUTPUT), ("error", ERROR, ARRAY_ERROR)):
        given = [d for d in directives if d.key == key]
        if not given:
            add.append(f"#SBATCH --{key}={arr if array is not None else plain}")
        elif not (given[-1].value or "").startswith(f"{ARTIFACTS_DIR}/"):
            notes.append(
                f"line {given[-1].line}: --{key}={given[-1].value} does not write into "
                f"{ARTIFACTS_DIR}/<JOB_ID>/, so `roach pull` will not bring that log back"
            )
    if preemptible:
        if "requeue" not in have and "no-requeue" not in have:
            add.append("#SBATCH --requeue")
        if "signal" not in have:
            add.append(f"#SBATCH --signal={PREEMPT_SIGNAL}")
        if "no-requeue" in have:
            notes.append("the script says --no-requeue: a preempted job will not come back by itself")
    return PreparedScript(
        path=path,
        text=_insert(text, add),
        added=tuple(add),
        notes=tuple(notes),
        directives=tuple(directives),
        array=array,
        job_name=next((d.value for d in directives if d.key == "job-name"), None),
    )


def _insert(text: str, add: list[str]) -> str:
    """``text`` with ``add`` placed after the last header ``#SBATCH`` line (or the ``#!`` line)."""
    if not add:
        return text
    lines = text.splitlines(keepends=True)
    end = _header_end([ln.rstrip("\n") for ln in lines])
    last = max((i for i in range(end) if lines[i].startswith("#SBATCH")), default=0)
    if not lines[last].endswith("\n"):
        lines[last] += "\n"
    block = [ADDED_MARK + "\n", *(a + "\n" for a in add)]
    return "".join(lines[: last + 1] + block + lines[last + 1 :])
