"""Every call roach makes to Slurm's commands, through a :class:`Transport`.

One client per cluster. Reads (squeue, sacct, sinfo, scontrol show, sacctmgr show) retry transient
failures with bounded backoff; writes (sbatch, scancel, scontrol requeue/release/hold) run once, since
a retried write can act twice. Each status round is one ``squeue`` and at most one ``sacct``, whatever
the number of jobs. Parsing lives in :mod:`roach.scheduler.parse`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roach.errors import SlurmError, SlurmTransientError
from roach.model.job_state import JobState
from roach.scheduler import parse as P
from roach.scheduler.ends import end_recorded, fold_step_ends
from roach.scheduler.queue_states import ONLY_JOB_STATE, StateRecord, parse_squeue_states
from roach.scheduler.site_cache import SiteCache
from roach.scheduler.transport import Result, Transport

if TYPE_CHECKING:
    from roach.scheduler.accounting import Allocation
    from roach.scheduler.capabilities import Capabilities
    from roach.scheduler.parse_control import NodeRecord

# The parsers of the control commands (sinfo, scontrol show, sacctmgr, sbatch), the ledger's sacct and the
# capability probe are imported by the methods that use them: a status round (`roach ls`) reads only
# squeue and sacct, and each of those modules costs it a few milliseconds of dataclasses built at import.

# sbatch's refusal of an array whose indices reach MaxArraySize (or are otherwise invalid).
ARRAY_REFUSED = "Invalid job array specification"

# stderr that means "try again shortly", seen from controllers under load or restarting.
_TRANSIENT = re.compile(
    r"Socket timed out|Resource temporarily unavailable|Unable to contact slurm controller|"
    r"Connection refused|Transport endpoint is not connected|Zero Bytes were transmitted or received|"
    r"slurm_persist_conn_open|Slurm backup controller in standby mode|Communication connection failure|"
    r"Unable to establish a connection|Connection reset by peer",
    re.IGNORECASE,
)

# stderr -> what the user should do about it
_HINTS = (
    (
        r"Invalid account|account/partition combination",
        "check the account in your Resources; `sacctmgr show assoc user=$USER format=account,partition,qos` lists yours",
    ),
    (
        r"Invalid qos specification",
        "check the qos in your Resources; `sacctmgr show assoc user=$USER format=qos` lists the QOS you may use",
    ),
    (r"Invalid partition name", "check the partition in your Resources; `sinfo -s` lists the partitions"),
    (
        r"Requested node configuration is not available",
        "the request exceeds every node (GPUs, CPUs or memory per node); ask for less per node",
    ),
    (
        r"Invalid generic resource \(gres\) specification",
        "the GPU request names a GRES the cluster lacks; `sinfo -o %G` shows them",
    ),
    (r"Invalid job id specified", "the job is no longer known to the controller; its record is in sacct"),
    (
        r"Unable to contact slurm controller|Connection refused",
        "the controller is down or unreachable; for the lab run `roach lab status`",
    ),
    (
        r"Job violates accounting/QOS policy",
        "the job exceeds a QOS or association limit; `sacctmgr show qos` shows the limits",
    ),
    (r"Access/permission denied|Access denied", "you may only act on your own jobs"),
)


def error_hint(stderr: str) -> str | None:
    for pattern, hint in _HINTS:
        if re.search(pattern, stderr, re.IGNORECASE):
            return hint
    return None


@dataclass
class SlurmClient:
    """Runs Slurm's commands on one cluster through ``transport`` and returns typed records."""

    transport: Transport
    retries: int = 3
    backoff_s: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    site_cache: SiteCache | None = field(default=None, repr=False)  # nodes and partitions, kept a few minutes
    _caps: Capabilities | None = field(default=None, init=False, repr=False)

    # -- running -------------------------------------------------------------------------------------
    def run(
        self, argv: Sequence[str], *, input: str | None = None, retry: bool = True, ok_codes: Iterable[int] = (0,)
    ) -> Result:
        """Run one Slurm command; raise :class:`SlurmError` (with command, stderr and hint) if it fails."""
        attempts = 1 + (self.retries if retry else 0)
        ok = set(ok_codes)
        for attempt in range(attempts):
            res = self.transport.run(list(argv), input=input)
            transient = res.returncode != 0 and bool(_TRANSIENT.search(res.stderr))
            if res.returncode in ok and not transient:
                return res
            if not (transient and attempt + 1 < attempts):
                cls = SlurmTransientError if transient else SlurmError
                raise cls(argv, res.returncode, res.stderr or res.stdout, hint=error_hint(res.stderr or res.stdout))
            self.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    # -- reads ---------------------------------------------------------------------------------------
    def squeue(
        self, *, user: str | None = None, job_ids: Iterable[str | int] = (), all_users: bool = False
    ) -> list[P.QueueRecord]:
        """One ``squeue`` call for a user's jobs (default: the transport's user), or for given ids.

        Array tasks are listed one per line (``--array``); still-pending ranges stay one record.
        """
        argv = ["squeue", "--noheader", "--array", "-O", P.squeue_format()]
        ids = [str(j) for j in job_ids]
        if ids:
            argv += ["--jobs", ",".join(ids)]
        if user:
            argv += ["--user", user]
        elif not ids and not all_users:
            argv += ["--me"]
        res = self.run(argv, ok_codes=(0, 1) if ids else (0,))
        if res.returncode == 1:  # every given id has left the controller: not an error for a poller
            if "Invalid job id" in res.stderr:
                return []
            raise SlurmError(argv, 1, res.stderr, error_hint(res.stderr))
        return P.parse_squeue(res.stdout)

    def job_states(self, job_ids: Iterable[str | int]) -> list[StateRecord]:
        """The states of the given jobs still in the queue, the lightest way this Slurm offers: ``squeue
        --only-job-state`` where the probed capabilities list it (23.11.5+), else the full squeue. Ids that
        left the queue are not listed; a still-pending range of array tasks may be one record."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return []
        if self.capabilities().only_job_state:
            argv = ["squeue", "--noheader", ONLY_JOB_STATE, "--jobs", ",".join(ids)]
            try:
                return parse_squeue_states(self.run(argv).stdout)
            except SlurmError:
                pass  # its errors name no cause ("Unspecified error"): the full squeue says what is wrong
        return [StateRecord.of(r) for r in self.squeue(job_ids=ids)]

    def sacct(
        self,
        job_ids: Iterable[str | int] = (),
        *,
        allocations_only: bool = True,
        duplicates: bool = False,
        user: str | None = None,
        since: str | None = None,
    ) -> list[P.AcctRecord]:
        """One ``sacct`` call for a set of jobs (``-X``: allocations only; ``-D``: every requeued run too)."""
        argv = ["sacct", "--noheader", "--parsable2", f"--delimiter={P.US}", f"--format={','.join(P.SACCT_FIELDS)}"]
        ids = [str(j) for j in job_ids]
        if ids:
            argv += ["--jobs", ",".join(ids)]
        if allocations_only:
            argv.append("--allocations")
        if duplicates:
            argv.append("--duplicates")
        if user:
            argv += ["--user", user]
        if since:
            argv += ["--starttime", since]
        elif ids:
            argv += ["--starttime", "1970-01-01"]  # an id alone would otherwise only search since midnight
        return P.parse_sacct(self.run(argv).stdout)

    def allocations(self, job_ids: Iterable[str | int]) -> list[Allocation]:
        """Every attempt of ``job_ids`` (an array's id names all its tasks) in one ``sacct -X -D`` with
        ``Eligible``: what a run's GPU-hour ledger is summed from."""
        from roach.scheduler.accounting import ledger_argv, parse_allocations

        ids = [str(j) for j in job_ids]
        return parse_allocations(self.run(ledger_argv(ids)).stdout) if ids else []

    def ends(self, job_ids: Iterable[str | int], *, duplicates: bool = False) -> list[P.AcctRecord]:
        """sacct's allocations (:meth:`sacct`), each FAILED one whose ranks' step ran out of memory read as
        OUT_OF_MEMORY (:func:`~roach.scheduler.ends.fold_step_ends`). A second sacct, for the FAILED ones only,
        runs only when some allocation FAILED: still a constant number of calls for any number of jobs.
        An allocation in an ended state with no End is left out (:func:`~roach.scheduler.ends.end_recorded`)."""
        allocations = [a for a in self.sacct(job_ids, duplicates=duplicates) if end_recorded(a)]
        failed = sorted({a.raw_id for a in allocations if a.state is JobState.FAILED and a.step is None})
        if not failed:
            return allocations
        return fold_step_ends(allocations, self.sacct(failed, allocations_only=False))

    def show_job(self, job_id: str | int) -> dict[str, str] | None:
        """``scontrol show job -o``: every key Slurm keeps for a job still in the controller, or None."""
        from roach.scheduler.parse_control import parse_key_values

        argv = ["scontrol", "show", "job", "-o", str(job_id)]
        res = self.run(argv, ok_codes=(0, 1))
        if res.returncode == 1:
            if "Invalid job id" in res.stderr:
                return None
            raise SlurmError(argv, 1, res.stderr, error_hint(res.stderr))
        # One record per job (an array lists one per task), and a job name may hold a newline:
        # split on the JobId= that starts each record, not on lines.
        records = [r for r in re.split(r"(?=(?<!\S)JobId=)", res.stdout) if r.strip()]
        return parse_key_values(records[0]) if records else None

    def _site_read(self, key: str, argv: list[str], cached: bool) -> str:
        """``argv``'s output, from :attr:`site_cache` when ``cached`` and it has a fresh copy."""
        text = self.site_cache.get(key) if cached and self.site_cache else None
        if text is None:
            text = self.run(argv).stdout
            if self.site_cache:
                self.site_cache.put(key, text)  # a fresh read refreshes the cache
        return text

    def nodes(self, *, cached: bool = False) -> list[NodeRecord]:
        """Every node (``sinfo``). ``cached``: what was read within the site cache's age will do (the nodes'
        sizes and partitions, not their states, which go stale at once)."""
        from roach.scheduler.parse_control import parse_sinfo_nodes, sinfo_format

        argv = ["sinfo", "--Node", "--noheader", "-O", sinfo_format()]
        return parse_sinfo_nodes(self._site_read("nodes", argv, cached))

    def partitions(self, *, cached: bool = False) -> list[dict[str, str]]:
        from roach.scheduler.parse_control import parse_key_values

        out = self._site_read("partitions", ["scontrol", "show", "partition", "-o"], cached)
        return [parse_key_values(ln) for ln in out.splitlines() if ln.strip()]

    def qos(self) -> list[dict[str, str]]:
        from roach.scheduler.parse_control import parse_sacctmgr

        fields_ = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "MaxTRESPU", "MaxWall", "Flags")
        out = self.run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", f"format={','.join(fields_)}"]).stdout
        return parse_sacctmgr(out, fields_)

    def associations(self, user: str | None = None) -> list[dict[str, str]]:
        from roach.scheduler.parse_control import parse_sacctmgr

        fields_ = ("Cluster", "Account", "User", "Partition", "QOS", "DefaultQOS")
        argv = ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", f"format={','.join(fields_)}"]
        if user:
            argv.append(f"user={user}")
        return parse_sacctmgr(self.run(argv).stdout, fields_)

    def config(self, *, cached: bool = False) -> dict[str, str]:
        """``scontrol show config``; ``cached``: what was read within the site cache's age will do."""
        from roach.scheduler.parse_control import parse_show_config

        return parse_show_config(self._site_read("config", ["scontrol", "show", "config"], cached))

    def reservations_text(self, *, cached: bool = False) -> str:
        """``scontrol show reservation -o``; ``cached``: what was read within the site cache's age will do."""
        return self._site_read("reservations", ["scontrol", "show", "reservation", "-o"], cached)

    def max_array_size(self, *, cached: bool = False) -> int:
        """MaxArraySize (task indices 0 .. it - 1). ``cached`` may be stale: an administrator may lower it, and
        sbatch then refuses a larger array (:data:`ARRAY_REFUSED`): ask again fresh and split again."""
        return int(self.config(cached=cached).get("MaxArraySize", "1001"))

    def capabilities(self, refresh: bool = False) -> Capabilities:
        """What this cluster's Slurm can do and how it is set (probed once per client, then cached)."""
        from roach.scheduler.capabilities import probe

        if self._caps is None or refresh:
            self._caps = probe(self)
        return self._caps

    def hostnames(self, nodelist: str) -> list[str]:
        """``scontrol show hostnames``: a nodelist (``n[1-2]``) as its host names, in Slurm's order."""
        return self.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()

    def steps_text(self, job_ids: Sequence[str], fmt: str) -> str:
        """One ``squeue --steps`` of the given jobs in ``fmt`` (``-O``); empty when none of them runs."""
        argv = ["squeue", "--steps", "--noheader", "--jobs", ",".join(job_ids), "-O", fmt]
        res = self.run(argv, ok_codes=(0, 1))
        if res.returncode == 1:
            if "Invalid job id" in res.stderr:
                return ""
            self.run(argv)  # raises with the command and its stderr
        return res.stdout

    def test_only(self, options: Sequence[str], job_name: str) -> Result:
        """``sbatch --test-only``: what Slurm says of a job with ``options`` (when and where it would start;
        a refusal's reason), on stderr. Queues nothing; exit 1 (a refusal) is an answer, not an error."""
        return self.run(
            ["sbatch", "--test-only", f"--job-name={job_name}", *options, "--wrap", "true"],
            retry=False,
            ok_codes=(0, 1),
        )

    # -- writes (never retried) ------------------------------------------------------------------------
    def sbatch(self, options: Sequence[str], script: str) -> int:
        """Submit ``script`` (its text, sent on stdin) with ``options``; returns the job id."""
        from roach.scheduler.parse_control import parse_sbatch  # before the job exists: its id is read at once

        res = self.run(["sbatch", "--parsable", *options], input=script, retry=False)
        return parse_sbatch(res.stdout)[0]

    def scancel(self, job_ids: Iterable[str | int], *, signal: str | None = None, batch: bool = False) -> None:
        """Cancel (or signal) exactly the given jobs. Never by name or user: only ids the caller owns."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch:
            argv.append("--batch")
        self.run([*argv, *ids], retry=False)

    def requeue(self, job_id: str | int, *, hold: bool = False) -> None:
        self.run(["scontrol", "requeuehold" if hold else "requeue", str(job_id)], retry=False)

    def release(self, job_id: str | int) -> None:
        self.run(["scontrol", "release", str(job_id)], retry=False)

    def hold(self, job_id: str | int) -> None:
        self.run(["scontrol", "hold", str(job_id)], retry=False)
