"""A job's bundle on the cluster: the folder holding its script and spec, and its ``job.json`` record.

``job.json`` is audit and postmortem metadata: the eight keys users already write by hand for each job
(job_id, status, slurm_state, exit_code, script, description, submitted_at_utc, recorded_at_utc), then
roach's own. ``status`` only ever holds one of the schema's six values (:data:`FINAL_STATUSES`): ``unknown``
until the end is recorded, when ``slurm_state``, ``exit_code`` and ``recorded_at_utc`` become strings; the
live state goes in ``live_state`` (:data:`LIVE_STATES`). :mod:`roach.records.job_end` records the end. Paths here
are plain POSIX strings: they live on the cluster, which may be remote.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from json.encoder import encode_basestring_ascii
from typing import Any

from roach.errors import ParseError, RoachError, UsageError
from roach.model.status import ACTIVE_STATUSES, FINAL_STATUSES, status_from_state
from roach.records.job_record import JobRecord
from roach.scheduler.parse import AcctRecord

# job.json's live_state: one of ACTIVE_STATUSES before the end, "ended" once it is recorded.
LIVE_STATES = (*ACTIVE_STATUSES, "ended")
ENDED = "ended"


def legacy_status(data: dict[str, Any]) -> dict[str, Any]:
    """A job.json's keys as this roach writes them, from one an older roach wrote: a live status
    (``submitted``, ``pending``, ``running``) in ``status`` moves to ``live_state`` and ``status`` becomes
    ``unknown``; a record without ``live_state`` gets the one its end implies."""
    out = dict(data)
    if out.get("status") in ACTIVE_STATUSES:
        out.setdefault("live_state", out["status"])
        out["status"] = "unknown"
    if "live_state" not in out:
        out["live_state"] = ENDED if out.get("recorded_at_utc") else "submitted"
    return out


@dataclass(frozen=True, kw_only=True)
class JobJson:
    """The contents of ``job.json``. Field order is the file's key order: the users' eight keys first."""

    job_id: str
    status: str = "unknown"  # always one of FINAL_STATUSES: "unknown" until the end is recorded
    slurm_state: str | None = None  # raw sacct State, e.g. "COMPLETED", "CANCELLED by 0"; a string once ended
    exit_code: str | None = None  # raw sacct ExitCode, e.g. "0:0"; a string once ended
    script: str  # the batch script's path
    description: str = ""
    submitted_at_utc: str
    recorded_at_utc: str | None = None  # set when the end is recorded: the record is final from then on
    # roach's own
    live_state: str = "submitted"  # LIVE_STATES: "submitted" until the end is recorded, then "ended"
    cluster: str
    run_id: str
    commit: str
    resources: dict[str, Any] = field(default_factory=dict)
    name: str
    target: str
    python_env: dict[str, Any] = field(default_factory=dict)  # {env, source, why}: how its Python was made, and why
    # the attempts that ended on a node roach then excluded ({attempt, job_id, nodes, ended, causes, exc_node_list}),
    # appended by the batch script (node.sh); one line of JSON in the file
    attempts: list[dict[str, Any]] = field(default_factory=list)
    failure: dict[str, Any] | None = None  # what ended it before its ranks ran: {kind: "env_failed", node, message}

    def __post_init__(self) -> None:
        if self.status not in FINAL_STATUSES:
            raise UsageError(
                f"job.json status {self.status!r} is not one of {', '.join(FINAL_STATUSES)}",
                hint="a live state goes in live_state",
            )
        if self.live_state not in LIVE_STATES:
            raise UsageError(f"job.json live_state {self.live_state!r} is not one of {', '.join(LIVE_STATES)}")

    @classmethod
    def submitted(
        cls,
        rec: JobRecord,
        script: str,
        description: str,
        job_id: str | None = None,
        python_env: dict[str, Any] | None = None,
    ) -> JobJson:
        """A new submission's job.json, from its record (``job_id``: Slurm's form of it, where not the record's;
        ``python_env``: :meth:`roach.model.python_env.EnvChoice.to_json`)."""
        return cls(
            job_id=job_id or str(rec.job_id),
            script=script,
            description=description,
            submitted_at_utc=rec.submitted_at,
            cluster=rec.cluster,
            run_id=rec.run_id,
            commit=rec.commit,
            resources=rec.resources,
            name=rec.name,
            target=rec.target,
            python_env=dict(python_env or {}),
        )

    @property
    def is_final(self) -> bool:
        """Whether the job's end is recorded."""
        return self.recorded_at_utc is not None

    def to_json(self, shared: dict[int, tuple[Any, str]] | None = None) -> str:
        """The file's text: ``json.dumps(..., indent=2)``'s (:func:`indented_json`; ``shared`` as there)."""
        # the fields as they are, in order (dataclasses.asdict's deep copy was most of a 1,000-run sweep's submit)
        return indented_json({name: getattr(self, name) for name in _JOB_JSON_KEYS}, shared)

    @classmethod
    def from_json(cls, text: str) -> JobJson:
        """Read a ``job.json``; raises :class:`ParseError` if it is not one (missing, extra or mistyped keys).
        One an older roach wrote (a live status in ``status``, no ``live_state``) is read as this one writes it."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(f"job.json is not JSON ({e}): {text[:200]!r}") from None
        if not isinstance(data, dict):
            raise ParseError(f"job.json must hold an object, got {type(data).__name__}: {text[:200]!r}")
        data = legacy_status(data)
        names = [f.name for f in fields(cls)]
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - data.keys())
        extra = sorted(data.keys() - set(names))
        if missing or extra:
            raise ParseError(
                f"job.json keys do not match: missing {missing}, unexpected {extra}",
                hint=f"expected the keys {', '.join(names)}",
            )
        for key, value in data.items():
            if key in ("resources", "python_env"):
                ok = isinstance(value, dict)
            elif key == "attempts":
                ok = isinstance(value, list) and all(isinstance(a, dict) for a in value)
            else:
                ok = value is None or isinstance(value, dict if key == "failure" else str)
            if not ok or (value is None and key in required):
                raise ParseError(f"job.json key {key!r} has the wrong type: {value!r}")
        try:
            return cls(**data)
        except UsageError as e:
            raise ParseError(e.message, hint=e.hint) from None


_JOB_JSON_KEYS = tuple(f.name for f in fields(JobJson))


def indented_json(obj: dict[str, Any], shared: dict[int, tuple[Any, str]] | None = None) -> str:
    """``json.dumps(obj, indent=2) + "\\n"``, the same text, faster: a string, None, bool, int or float written here
    or by json's C string encoder, a non-empty container by json.dumps indented once more (what indent= makes
    json.dumps do is its Python encoder's work: most of a 1,000-run sweep's job.json files). ``shared`` (for the
    files of one call, whose values nobody changes meanwhile): a container already written, by identity (a
    sweep's runs share one resources dict)."""
    if not obj or not all(isinstance(k, str) for k in obj):  # (json's own ways with other keys)
        return json.dumps(obj, indent=2) + "\n"
    items = []
    for key, value in obj.items():
        kind = type(value)
        if isinstance(value, str):  # a str enum too (Status), as json writes one
            text = encode_basestring_ascii(value)
        elif value is None:
            text = "null"
        elif kind is bool:
            text = "true" if value else "false"
        elif kind is int or (kind is float and math.isfinite(value)):
            text = repr(value)
        elif isinstance(value, (dict, list, tuple)) and value:
            known = shared.get(id(value)) if shared is not None else None
            if known is not None and known[0] is value:
                text = known[1]
            else:
                text = json.dumps(value, indent=2).replace("\n", "\n  ")  # a string's newlines are escaped: \\n
                if shared is not None:
                    shared[id(value)] = (value, text)
        else:
            text = json.dumps(value)
        items.append(f"  {_KEYS.get(key) or encode_basestring_ascii(key)}: {text}")
    return "{\n" + ",\n".join(items) + "\n}\n"


_KEYS = {k: json.dumps(k) for k in _JOB_JSON_KEYS}


def job_json_texts(template: JobJson, runs: Sequence[tuple[str, str]]) -> list[str]:
    """The job.json of each of ``runs`` (``(job_id, run_id)``), records that are ``template`` but for those two (a
    sweep's tasks): each ``replace(template, job_id=..., run_id=...).to_json()``, what lies around the two
    written once."""
    marks = ("\0job_id", "\0run_id")
    probe = replace(template, job_id=marks[0], run_id=marks[1]).to_json()
    job_mark, run_mark = (encode_basestring_ascii(m) for m in marks)
    head, _, rest = probe.partition(job_mark)
    middle, _, tail = rest.partition(run_mark)
    if probe.count(job_mark) != 1 or probe.count(run_mark) != 1 or run_mark in head:  # a mark elsewhere: one by one
        return [replace(template, job_id=j, run_id=r).to_json() for j, r in runs]
    return [f"{head}{encode_basestring_ascii(j)}{middle}{encode_basestring_ascii(r)}{tail}" for j, r in runs]


def final_job_json(base: JobJson, rec: AcctRecord, recorded_at: str) -> JobJson:
    """``base`` with the final state sacct reported in ``rec`` (the job's allocation line)."""
    if rec.state.is_active:
        raise UsageError(
            f"job {rec.job_id} is still {rec.state.value}; job.json records only a final state",
            hint="wait until sacct shows the job ended",
        )
    if base.job_id not in (str(rec.ref), str(rec.ref.job)):
        raise UsageError(f"sacct record of job {rec.job_id} given for job.json of job {base.job_id}")
    return replace(
        base,
        status=status_from_state(rec.state, rec.state_text),
        slurm_state=rec.state_text,
        exit_code=f"{rec.exit_code}:{rec.exit_signal}",
        recorded_at_utc=recorded_at,
        live_state=ENDED,
    )


def scrub(obj: Any, secret_values: Iterable[str], what: str = "a job file") -> None:
    """Raise :class:`RoachError` if any secret value occurs in ``obj`` (keys, values, substrings, nested).

    Defense in depth: secrets reach a job only through its environment, never through job.json or a spec.
    The error names where the secret is, never the secret.
    """
    secrets = [s for s in secret_values if s]  # an empty value would match every string

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(k, f"{where} (a key)")
                walk(v, f"{where}.{k}")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")
        elif isinstance(node, str):
            if any(s in node for s in secrets):
                raise RoachError(
                    f"a secret value would be written into {what} at {where}",
                    hint="pass secrets through the job's secrets, never in arguments, names or resources",
                )
        elif node is not None and not isinstance(node, (bool, int, float)):
            walk(str(node), where)  # anything else is written as its text

    walk(obj, "$")


@dataclass(frozen=True)
class BundlePaths:
    """Every path of one job on the cluster, under an absolute ``log_root``."""

    log_root: str
    run_id: str
    job_id: int | str

    def __post_init__(self) -> None:
        if not posixpath.isabs(self.log_root):
            raise UsageError(
                f"log_root must be an absolute path on the cluster, got {self.log_root!r}",
                hint="expand ~ on the cluster before building the job's paths",
            )
        for label, value in (("run id", self.run_id), ("job id", str(self.job_id))):
            # Both become file names: a slash or an empty one would put files elsewhere.
            if not value or "/" in value or value in (".", ".."):
                raise UsageError(f"{label} {value!r} cannot be part of a file name")

    @property
    def bundle_dir(self) -> str:
        return posixpath.join(self.log_root, "bundles", str(self.job_id))

    @property
    def script(self) -> str:
        return posixpath.join(self.bundle_dir, "job.sh")

    @property
    def spec(self) -> str:
        return posixpath.join(self.bundle_dir, "spec.json")

    @property
    def job_json(self) -> str:
        return posixpath.join(self.bundle_dir, "job.json")

    @property
    def node_sh(self) -> str:
        return posixpath.join(self.bundle_dir, "node.sh")

    @property
    def log(self) -> str:
        return posixpath.join(self.log_root, f"{self.run_id}_{self.job_id}.out")
