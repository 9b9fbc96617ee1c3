"""The Slurm client through slurmrestd: the same methods and typed records as :class:`SlurmClient`'s commands.

A watch round is still a constant number of calls: one ``GET .../jobs`` for the queue (from v0.0.42 only when
slurmctld's job list changed since the last read), one ``GET .../slurmdb/.../jobs`` for accounting, asked for the
given ids (``step``, as sacct's ``--jobs``) or, from v0.0.42, the user's jobs (``users``), and filtered here as the
commands' options would. Reads are retried as the commands' are; writes never
(:class:`~roach.scheduler.rest.request.RestApi` renews a token before it expires, and sends a request again only where
its token was refused, which did nothing). ``transport`` carries files only (a bundle, a log): a shared file system
seen from here (local) or SSH; a command of Slurm's is not run through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from roach.errors import NoFilesError, SlurmError, SlurmTransientError, TransportError, UsageError
from roach.model.job_state import JobState
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.accounting import Allocation
from roach.scheduler.client import SlurmClient, error_hint
from roach.scheduler.queue_states import StateRecord
from roach.scheduler.rest import jobs as RP
from roach.scheduler.rest import site as RS
from roach.scheduler.rest.job_description import job_description, job_description_v42
from roach.scheduler.rest.request import Answer, DataVersion, RestApi
from roach.scheduler.transport import Result

NOT_OVER_REST = "not available through slurmrestd"
SSH_HINT = (
    "this cluster is reached through rest_url; for this reach it by ssh (a clusters.toml entry with its ssh_alias "
    "and no rest_url); see docs/rest.md"
)
REQUEUE_PATH = "/slurm/v0.0.45/job/{job_id}/requeue"  # the first data version with a requeue (Slurm 26.05)
# sacct's "--starttime 1970-01-01" for given ids; slurmrestd 22.05's time parser refuses the first day of 1970
SINCE_EVER = "1970-01-02T00:00:00"
EMPTY_RESULT = frozenset({9003})  # ESLURM_REST_EMPTY_RESULT: slurmdbd found no job, an empty list
JOB_HELD = frozenset({2042})  # ESLURM_JOB_HELD: a held submission's answer, with its job id


class Api(Enum):
    """slurmrestd's two APIs: slurmctld's and slurmdbd's."""

    SLURM = "slurm"
    SLURMDB = "slurmdb"


@dataclass
class RestClient(SlurmClient):
    """:class:`SlurmClient` whose Slurm calls are HTTP requests to ``api``."""

    api: RestApi | None = field(default=None, repr=False)
    filters: bool = True  # ask slurmrestd only for what a read needs (ids, user, changes since), where it can
    _home: str | None = field(default=None, init=False, repr=False)
    _queue: tuple[int, list[Any]] | None = field(default=None, init=False, repr=False)  # (update_time, jobs)

    @property
    def rest(self) -> RestApi:
        if self.api is None:
            raise UsageError("a REST client needs its API", hint="set rest_url in clusters.toml")
        return self.api

    # -- running -------------------------------------------------------------------------------------
    def run(
        self, argv: Sequence[str], *, input: str | None = None, retry: bool = True, ok_codes: Iterable[int] = (0,)
    ) -> Result:
        """No Slurm command runs on a REST cluster: what a method here does not do over REST is refused."""
        raise SlurmError(argv, 1, f"{' '.join(argv[:2])}: {NOT_OVER_REST}", hint=SSH_HINT)

    def _refuse(self, argv: Sequence[str], missing: str) -> SlurmError:
        """What slurmrestd cannot do, naming what it lacks and the data versions this one offers."""
        ctld, _ = self.rest.versions()
        return SlurmError(
            argv, 1, f"{' '.join(argv[:2])}: {NOT_OVER_REST}: {missing} (this one reads {ctld.value})", hint=SSH_HINT
        )

    def _read(
        self, api: Api, tail: str, query: Mapping[str, str] | None = None, notices: frozenset[int] = frozenset()
    ) -> Answer:
        """A GET of ``tail`` below ``api``'s data version (read first, within the retries), retried with bounded
        backoff while slurmrestd or the controller behind it is unreachable."""
        attempts = 1 + self.retries
        for attempt in range(attempts):
            try:
                path = self.rest.ctld(tail) if api is Api.SLURM else self.rest.dbd(tail)
                return self.rest.request("GET", path, query=query, notices=notices)
            except (SlurmTransientError, TransportError):
                if attempt + 1 == attempts:
                    raise
            self.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _write(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        notices: frozenset[int] = frozenset(),
    ) -> Answer:
        return self.rest.request(method, path, body=body, query=query, notices=notices)

    # -- reads ---------------------------------------------------------------------------------------
    def squeue(
        self, *, user: str | None = None, job_ids: Iterable[str | int] = (), all_users: bool = False
    ) -> list[P.QueueRecord]:
        """The queue as ``squeue --array`` lists it, for a user's jobs (default: the token's user) or given ids."""
        jobs, now = self._jobs()
        # squeue lists no job that has ended (whatever --jobs names), slurmctld's list keeps them for MinJobAge
        recs = [r for r in RP.queue_records(jobs, now) if not r.state.is_terminal]
        ids = [str(j) for j in job_ids]
        if ids:
            recs = [r for r in recs if _named(r.ref, r.raw_id, ids)]
        if user or not (ids or all_users):
            who = user or self.rest.token.user_name()
            recs = [r for r in recs if r.user == who]
        return recs

    def queue_reservations(self) -> tuple[str, list[P.QueueRecord], dict[str, str]]:
        """The user's queue as the watch reads it (:func:`roach.watch.resv.read_queue`): a text that changes when
        the queue does, its records, and each job's reservation (by squeue's id), from one request."""
        every, now = self._jobs()
        who = self.rest.token.user_name()
        jobs = [j for j in every if j.get("user_name") == who]
        recs = [r for r in RP.queue_records(jobs, now) if not r.state.is_terminal]
        by_raw = {j["job_id"]: str(j.get("resv_name") or "") for j in jobs}
        resv = {r.job_id: by_raw[r.raw_id] for r in recs if by_raw.get(r.raw_id)}
        return repr((recs, sorted(resv.items()))), recs, resv

    def held_with_output(self) -> list[tuple[int, str]]:
        """(job id, output path) of the token's user's jobs held by their user: what the lost-submission sweep
        (:mod:`roach.launch.lost`) reads with ``squeue -O JobID,StdOut,Reason``."""
        who = self.rest.token.user_name()
        return [
            (j["job_id"], str(j.get("standard_output") or ""))
            for j in self._jobs()[0]
            if j.get("user_name") == who and j.get("state_reason") == "JobHeldUser"
        ]

    def _jobs(self) -> tuple[list[Any], datetime]:
        """slurmctld's jobs (``GET .../jobs``) and slurmrestd's clock. From v0.0.42 the answer says when slurmctld's
        job list last changed (``last_update``): the next read asks for the list only if it changed since
        (``update_time``; a second before, lest a change in that same second be missed), and slurmctld answers no
        job where none changed: the list read before is still the queue."""
        since = self._queue[0] if self._queue and self.filters else None
        answer = self._read(Api.SLURM, "jobs", {"update_time": str(since)} if since else None)
        stamp = RP.number(answer.body.get("last_update")) or 0
        if since and self._queue and not stamp:
            return self._queue[1], answer.now
        jobs = answer.body.get("jobs") or []
        self._queue = (stamp - 1, jobs) if stamp and self.rest.versions()[0] is not DataVersion.V0_0_38 else None
        return jobs, answer.now

    def job_states(self, job_ids: Iterable[str | int]) -> list[StateRecord]:
        """The states of the given jobs still in the queue: from v0.0.42 ``GET .../jobs/state`` of those ids only
        (as ``squeue --only-job-state``; each array task a record of its own), else the queue's."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return []
        if not self.filters or self.rest.versions()[0] is DataVersion.V0_0_38:
            return [StateRecord.of(r) for r in self.squeue(job_ids=ids)]
        answer = self._read(Api.SLURM, "jobs/state", {"job_id": ",".join(dict.fromkeys(ids))})
        out = []
        for j in answer.body.get("jobs") or []:
            ref = P.JobRef.parse(str(j["job_id"]))  # an array's task answers for every task of it: filtered here
            state = JobState.parse(RP.state_word(j.get("state")))
            if not state.is_terminal and _named(ref, ref.job, ids):
                out.append(StateRecord(ref, state))
        return out

    def sacct(
        self,
        job_ids: Iterable[str | int] = (),
        *,
        allocations_only: bool = True,
        duplicates: bool = False,
        user: str | None = None,
        since: str | None = None,
    ) -> list[P.AcctRecord]:
        """slurmdbd's records as ``sacct`` lists them: of given ids (since the epoch, as roach asks sacct), else of
        a user's jobs (default: the token's user) since ``since``."""
        ids = [str(j) for j in job_ids]
        query = {"start_time": since or (SINCE_EVER if ids else "now-1days")}
        if self.filters:
            query |= self._acct_filter(ids, user)
            if allocations_only:
                query["skip_steps"] = "true"
        answer = self._read(Api.SLURMDB, "jobs", query, notices=EMPTY_RESULT)
        recs = RP.acct_records(answer.body.get("jobs") or [], allocations_only=allocations_only, duplicates=duplicates)
        if ids:
            recs = [r for r in recs if _named(r.ref, int(r.raw_id.split(".")[0]), ids)]
        if user or not ids:
            who = user or self.rest.token.user_name()
            mine = {r.raw_id for r in recs if r.step is None and r.user == who}
            recs = [r for r in recs if r.raw_id.split(".")[0] in mine]
        return recs

    def allocations(self, job_ids: Iterable[str | int]) -> list[Allocation]:
        """Every run of ``job_ids`` with its Eligible time, from slurmdbd's jobs since the epoch (one request)."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return []
        query = {"start_time": SINCE_EVER}
        if self.filters:
            query |= {**self._acct_filter(ids, None), "skip_steps": "true"}
        answer = self._read(Api.SLURMDB, "jobs", query, notices=EMPTY_RESULT)
        runs = RP.allocations(answer.body.get("jobs") or [])
        return [a for a in runs if _named(a.ref, int(a.record.raw_id), ids)]

    def _acct_filter(self, ids: Sequence[str], user: str | None) -> dict[str, str]:
        """What slurmdbd is asked to keep of its jobs: the ids as sacct's ``--jobs`` names them (``step``: a job, an
        array's every task, or ``123_4``; every run of each, as ``--duplicates``), else (from v0.0.42) the user's."""
        if ids:
            return {"step": ",".join(ids)}
        if self.rest.versions()[1] is DataVersion.V0_0_38:
            return {}  # v0.0.38 has no user filter
        return {"users": user or self.rest.token.user_name()}

    def show_job(self, job_id: str | int) -> dict[str, str] | None:
        """``scontrol show job``'s keys that :func:`~roach.scheduler.rest.site.show_job_keys` reads from
        ``GET .../job/{id}`` (an array's first record), or None for a job the controller no longer knows."""
        try:
            answer = self._read(Api.SLURM, f"job/{job_id}")
        except SlurmError as err:
            if "Invalid job id" in err.stderr:
                return None
            raise
        jobs = answer.body.get("jobs") or []
        return RS.show_job_keys(jobs[0]) if jobs else None

    def steps_text(self, job_ids: Sequence[str], fmt: str) -> str:
        """``squeue --steps`` reads slurmctld's steps, which no data version serves (v0.0.38 to v0.0.45)."""
        raise self._refuse(["squeue", "--steps"], "slurmrestd serves no job's steps from slurmctld")

    def test_only(self, options: Sequence[str], job_name: str) -> Result:
        """``sbatch --test-only`` asks slurmctld when a job would start: no data version has it (v0.0.38 to v0.0.45)."""
        raise self._refuse(["sbatch", "--test-only"], "slurmrestd's job submission has no test-only")

    def nodes(self, *, cached: bool = False) -> list[PC.NodeRecord]:
        """Every node, as ``sinfo --Node`` lists them (the site cache is for the commands' text; REST is read anew)."""
        return RS.node_records(self._read(Api.SLURM, "nodes").body.get("nodes") or [])

    def qos(self) -> list[dict[str, str]]:
        """The QOS, as roach's ``sacctmgr show qos`` lists them."""
        body = self._read(Api.SLURMDB, "qos").body
        return RS.qos_records(body.get("QOS") or body.get("qos") or [])  # v0.0.38's key, v0.0.42's

    def partitions(self, *, cached: bool = False) -> list[dict[str, str]]:
        """The partitions, with the keys of ``scontrol show partition`` that roach reads (read anew each time)."""
        return RS.partition_records(self._read(Api.SLURM, "partitions").body.get("partitions") or [])

    def config(self, *, cached: bool = False) -> dict[str, str]:
        """What slurmrestd tells of the configuration: the release and the cluster's name (the rest of ``scontrol
        show config`` is not served; :func:`~roach.scheduler.capabilities.from_config` gives Slurm's defaults)."""
        meta = self._read(Api.SLURM, "diag").body.get("meta") or {}
        release = str((meta.get("Slurm") or meta.get("slurm") or {}).get("release") or "")
        if not release:
            raise SlurmError((f"GET {self.rest.ctld('diag')}",), 0, "slurmrestd named no Slurm release")
        clusters = self._read(Api.SLURMDB, "clusters").body.get("clusters") or []
        names = [str(c.get("name")) for c in clusters if c.get("name")]
        return {
            "SLURM_VERSION": release,
            "ClusterName": names[0] if len(names) == 1 else "",
            # slurmdbd answered: accounting is kept (sacct's records are there to read)
            "AccountingStorageType": "accounting_storage/slurmdbd",
        }

    def reservations(self) -> list[RS.ReservationRecord]:
        answer = self._read(Api.SLURM, "reservations")
        return RS.reservation_records(answer.body.get("reservations") or [], answer.now)

    def hostnames(self, nodelist: str) -> list[str]:
        return RS.hostnames(nodelist)

    # -- writes (never retried) ------------------------------------------------------------------------
    def sbatch(self, options: Sequence[str], script: str) -> int:
        """Submit ``script`` with ``options`` (its ``#SBATCH`` lines read here); returns the job id."""
        if self.rest.versions()[0] is DataVersion.V0_0_38:
            job = job_description(options, script)
        else:
            job = job_description_v42(options, script, self._job_environment())
        body = {"script": script, "job": job}
        answer = self._write("POST", self.rest.ctld("job/submit"), body, notices=JOB_HELD)
        job_id = answer.body.get("job_id")
        if not isinstance(job_id, int):
            raise SlurmError((f"POST {self.rest.ctld('job/submit')}",), answer.status, "slurmrestd returned no job id")
        return job_id

    def _job_environment(self) -> dict[str, str]:
        """The user's name and home for a job's environment (a data version that loads no login environment):
        ``getent passwd`` where the files are (this machine's shared file system, or over SSH)."""
        if self._home is None:
            user = self.rest.token.user_name()
            res = self.transport.run(["getent", "passwd", user])
            fields = res.stdout.strip().split(":")
            if not res.ok or len(fields) < 6 or not fields[5]:
                raise SlurmError(
                    ["getent", "passwd", user],
                    res.returncode,
                    res.stderr or f"no passwd entry for {user}",
                    hint="the job's HOME is read where the cluster's files are; give the cluster an ssh alias",
                )
            self._home = fields[5]
        return {"USER": self.rest.token.user_name(), "LOGNAME": self.rest.token.user_name(), "HOME": self._home}

    def scancel(self, job_ids: Iterable[str | int], *, signal: str | None = None, batch: bool = False) -> None:
        """Cancel (or signal) exactly the given jobs, one request each. Never by name or user."""
        query = {"signal": signal} if signal else {}
        if batch:
            if self.rest.versions()[0] is DataVersion.V0_0_38:
                raise self._refuse(["scancel", "--batch"], "v0.0.38's DELETE .../job/{id} takes no flags")
            query["flags"] = "BATCH_JOB"  # the batch step only, as scancel --batch
        for job_id in [str(j) for j in job_ids]:
            path = self.rest.ctld(f"job/{job_id}")
            _refused_jobs(f"DELETE {path}", self._write("DELETE", path, query=query or None))

    def release(self, job_id: str | int) -> None:
        self._write("POST", self.rest.ctld(f"job/{job_id}"), {"hold": False})

    def hold(self, job_id: str | int) -> None:
        self._write("POST", self.rest.ctld(f"job/{job_id}"), {"hold": True})

    def requeue(self, job_id: str | int, *, hold: bool = False) -> None:
        """``scontrol requeue`` (``requeuehold``): v0.0.45's ``GET .../job/{id}/requeue`` (``?Hold``), where slurmrestd
        offers it (Slurm 26.05); no earlier data version can requeue a job."""
        argv = ["scontrol", "requeuehold" if hold else "requeue", str(job_id)]
        if not self.rest.offers(REQUEUE_PATH):
            raise self._refuse(argv, "requeue needs data version v0.0.45 (Slurm 26.05)")
        path = REQUEUE_PATH.format(job_id=job_id)
        _refused_jobs(f"GET {path}", self._write("GET", path, query={"Hold": ""} if hold else None))


@dataclass(frozen=True)
class NoFiles:
    """The transport of a cluster reached through REST alone: it carries no file, and says what would."""

    cluster: str

    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result:
        raise NoFilesError(
            f"cluster {self.cluster} is reached through slurmrestd alone, which carries no files "
            f"(roach needed to run {argv[0] if argv else 'a command'} there for a bundle, a clone or a log)",
            argv,
            hint=f"give [clusters.{self.cluster}] an ssh_alias for files, or set shared_fs = true where this machine "
            "sees the cluster's file system at the same paths; see docs/rest.md",
        )


def _refused_jobs(what: str, answer: Answer) -> None:
    """Raise what slurmctld refused for a job, where the answer carries it in its ``status`` list (v0.0.42 and later
    answer an unknown job's cancel with HTTP 200 and the error there)."""
    for s in answer.body.get("status") or ():
        error = s.get("error") or {} if isinstance(s, Mapping) else {}
        if error.get("code"):
            text = str(error.get("message") or error.get("string") or error["code"])
            raise SlurmError((what,), answer.status, text, hint=error_hint(text))


def _named(ref: P.JobRef, raw_id: int, ids: Sequence[str]) -> bool:
    """Whether a record is one of ``ids`` as ``--jobs`` reads them: ``123`` (a job, or every task of an array)
    or ``123_4`` (one task)."""
    for i in ids:
        job, _, task = i.partition("_")
        if task:
            if str(ref) == i or (str(ref.job) == job and ref.task is not None and str(ref.task) == task):
                return True
        elif str(raw_id) == job or str(ref.job) == job:
            return True
    return False
