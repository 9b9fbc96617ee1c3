"""Write final states into jobs' ``job.json`` files on the cluster: one command for many jobs.

:func:`roach.records.job_end.record_ends` (the one place that records a job's end) calls it. Each file is
rewritten atomically (a temp file beside it, then a rename), and only its final keys change (``status``,
``slurm_state``, ``exit_code``, ``recorded_at_utc``, and ``live_state``, which becomes ``ended`` and is added
after ``recorded_at_utc`` where an older roach wrote none): the same result as
:func:`roach.records.bundle.final_job_json` on the file's record. The program is fixed (``sh`` and ``awk``);
the paths and values travel as its arguments, the values already JSON-encoded, so nothing is spliced into
it. A file that is missing, or not in the form roach writes, is left as it is and reported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from roach.errors import RoachError, UsageError
from roach.model.status import FINAL_STATUSES, status_from_state
from roach.records.error_line import LOG_TAIL_BYTES
from roach.scheduler.parse import AcctRecord
from roach.scheduler.transport import Transport

US, RS = "\x1f", "\x1e"
FINAL_KEYS = ("status", "slurm_state", "exit_code", "recorded_at_utc")

# awk reads job.json on stdin and its four new values (JSON text) from its arguments, which awk takes as
# they are (unlike -v, which would read backslashes as escapes). Only top-level keys match: JobJson.to_json
# indents them by two spaces, nested ones by four. live_state becomes "ended"; a file without one (an older
# roach's) gets it on the line after recorded_at_utc. It fails unless all four keys were replaced.
_AWK = r"""BEGIN { v["status"] = ARGV[1]; v["slurm_state"] = ARGV[2]; v["exit_code"] = ARGV[3]
  v["recorded_at_utc"] = ARGV[4]; v["live_state"] = "\"ended\""; ARGC = 1; n = 0; live = 0; after = 0 }
{ k = ""
  if (substr($0, 1, 3) == "  \"") {
    rest = substr($0, 4); q = index(rest, "\""); k = substr(rest, 1, q - 1)
    if (!(q > 1 && (k in v) && substr(rest, q, 3) == "\": ")) k = "" }
  if (after && k != "live_state" && !live) { print "  \"live_state\": \"ended\","; live = 1 }
  after = 0
  if (k != "") {
    c = (substr($0, length($0)) == ",") ? "," : ""
    $0 = "  \"" k "\": " v[k] c
    if (k == "live_state") live = 1; else n++
    if (k == "recorded_at_utc" && c == ",") after = 1 }
  print }
END { exit (n == 4 ? 0 : 3) }"""

# $1: the awk program; $2: how many bytes of a log to read; then groups of six: job.json's path, its four new
# values, and the log whose tail to send back ("" for none: only a failed job's is read, for its error line).
_PROGRAM = r"""a="$1"; n="$2"; shift 2
while [ "$#" -ge 6 ]; do
  f="$1"; shift
  if [ ! -f "$f" ]; then printf 'M\037%s\036' "$f"
  else
    t="$f.tmp.$$"
    if awk "$a" "$1" "$2" "$3" "$4" < "$f" > "$t" 2>/dev/null && chmod 644 "$t" && mv -f -- "$t" "$f"; then
      printf 'W\037%s\036' "$f"
    else
      rm -f -- "$t"; printf 'B\037%s\036' "$f"
    fi
  fi
  if [ -n "$5" ] && [ -f "$5" ] && [ -r "$5" ]; then
    printf 'L\037%s\037' "$f"; tail -c "$n" -- "$5" | tr -d '\036\037'; printf '\036'
  fi
  shift 5
done"""

OUTCOMES = {"W": "written", "M": "missing", "B": "not roach's job.json"}


@dataclass(frozen=True)
class Final:
    """One job's final state, for its ``job.json`` at ``path``."""

    path: str
    status: str
    slurm_state: str
    exit_code: str
    recorded_at_utc: str
    log: str = ""  # the job's log, whose tail comes back (a failed job's, for its error line); "": none

    def __post_init__(self) -> None:
        if self.status not in FINAL_STATUSES:
            raise UsageError(f"{self.status!r} is not a final status; expected one of {', '.join(FINAL_STATUSES)}")

    @classmethod
    def of(cls, path: str, rec: AcctRecord, recorded_at: str) -> Final:
        """From sacct's record of the job (as :func:`~roach.records.bundle.final_job_json` reads it)."""
        return cls(
            path,
            status_from_state(rec.state, rec.state_text),
            rec.state_text,
            f"{rec.exit_code}:{rec.exit_signal}",
            recorded_at,
        )

    def args(self) -> list[str]:
        return [self.path, *(json.dumps(getattr(self, k)) for k in FINAL_KEYS), self.log]


@dataclass(frozen=True)
class Written:
    """What :func:`record_finals` did: each job.json path's outcome (:data:`OUTCOMES`), and the tail of each
    log it was asked for, by job.json path."""

    outcomes: dict[str, str]
    tails: dict[str, str]


def record_finals(transport: Transport, finals: Sequence[Final]) -> Written:
    """Rewrite every ``job.json`` of ``finals`` in one command, reading the tails of the logs they name in it."""
    if not finals:
        return Written({}, {})
    for f in finals:
        if not f.path.startswith("/"):
            raise RoachError(f"job.json path {f.path!r} is not absolute", hint="expand ~ on the cluster first")
    argv = ["sh", "-c", _PROGRAM, "sh", _AWK, str(LOG_TAIL_BYTES), *(a for f in finals for a in f.args())]
    res = transport.run(argv)
    if res.returncode != 0:
        raise RoachError(
            f"recording final states in job.json failed (exit {res.returncode}): {res.stderr.strip()[-500:]}",
            hint="check that the submitting user may write the bundles",
        )
    out, tails = {}, {}
    for rec in res.stdout.split(RS):
        tag, _, rest = rec.partition(US)
        if tag in OUTCOMES:
            out[rest] = OUTCOMES[tag]
        elif tag == "L":
            path, _, tail = rest.partition(US)
            tails[path] = tail
    return Written(out, tails)
