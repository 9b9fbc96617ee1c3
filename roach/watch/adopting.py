"""Which jobs a watch round looks at: the store's unfinished jobs and the given ids (new this round or not),
the tasks of a given array id first seen in sacct, and the pinned nodelists of jobs pending on
ReqNodeNotAvail (one ``squeue`` for all, asked once per job)."""

from __future__ import annotations

from dataclasses import dataclass, field

from roach.errors import SlurmError, TransportError
from roach.model.ids import RecordKind
from roach.model.states import PendingReason
from roach.records.job_record import JobRecord
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.parse import US, AcctRecord, QueueRecord
from roach.watch.jobs import JobWatch, new_watch

_PINNED_REASONS = (PendingReason.ReqNodeNotAvail, PendingReason.NodesDownDrained)


@dataclass
class Roster:
    """A round's views sorted in one pass, before it looks at them (a long queue's views are many, and most
    parts of a round want only a few of them), each list in the views' order: the keys of the views still
    watched and of those done; of those of a run (only these can be promoted); of the watched ones with a
    log, and of those that asked for a reservation in an earlier round."""

    watched: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)
    reserving: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, views: dict[str, JobWatch]) -> Roster:
        r = cls()
        watched, done, runs, logged, reserving = r.watched, r.done, r.runs, r.logged, r.reserving
        for k, w in views.items():
            if w.done:
                done.append(k)
            else:
                watched.append(k)
                if w.log_path:
                    logged.append(k)
                if w.reservation:
                    reserving.add(k)
            if w.run_id:
                runs.append(k)
        return r


@dataclass
class Adopter:
    """Decides which jobs a watch looks at: the unfinished records a round gives it (the store's, on the watch's
    cluster) and ``job_ids`` (more of the user's jobs, not in the store). ``touched`` collects the keys of views
    these change in place (a round then looks at them again)."""

    client: SlurmClient
    store: Store
    job_ids: tuple[str, ...] = ()

    def adopt(
        self,
        views: dict[str, JobWatch],
        records: dict[str, JobRecord],
        active: dict[str, QueueRecord],
        now: float,
        touched: set[str],
    ) -> set[str]:
        """Start watching the store's unfinished jobs and the given ids; returns the keys new this round."""
        first: set[str] = set()
        counts = self.store.submission_counts([r.run_id for k, r in records.items() if k not in views])
        for key, rec in records.items():
            if key not in views:
                views[key] = new_watch(
                    key,
                    active.get(key),
                    now,
                    run_id=rec.run_id,
                    name=rec.name,
                    log_path=rec.log_path,
                    job_id=rec.job_id,
                    resubmitted=counts.get(rec.run_id, 0) > 1,
                )
                first.add(key)
            holder = rec.kind is RecordKind.HOLDER
            if views[key].holder != holder:
                views[key].holder = holder
                touched.add(key)
        new = [k for k in active if k not in views] if self.job_ids else []  # most of a long queue is watched
        for jid in self.job_ids:
            # the queued jobs it names: its own id, an array's tasks (by the array's id or a task's raw id)
            num = int(jid) if jid.isdigit() and str(int(jid)) == jid else None

            def named(k: str, jid: str = jid, num: int | None = num) -> bool:
                q = active[k]
                return k == jid or (num is not None and (q.ref.job == num or q.raw_id == num))

            for k in [k for k in new if named(k)]:
                if k not in views:
                    views[k] = new_watch(k, active[k], now)
                    first.add(k)
            tasks = jid + "_" if "_" not in jid else None  # the view of a task of array jid: jid_N
            known = any(k == jid or (tasks is not None and k.startswith(tasks)) for k in views)
            if not known and not any(map(named, active)):
                # not queued and never seen: ask sacct what became of it
                views[jid] = new_watch(jid, None, now)
                first.add(jid)
        return first

    def adopt_tasks(
        self, views: dict[str, JobWatch], ask: list[str], found: list[AcctRecord], now: float, watched: list[str]
    ) -> None:
        """A given array id first seen in sacct: watch its tasks by their own ids instead."""
        for key in list(ask):
            w = views[key]
            if "_" in key or w.state is not None or not key.isdigit():
                continue
            # each task by its own id; a range still pending (123_[4-9]) is no id sacct takes: asked again later
            tasks = [r for r in found if r.step is None and str(r.ref.job) == key and r.ref.task is not None]
            if not tasks:
                continue
            del views[key]
            watched.remove(key)
            ask.remove(key)
            for r in tasks:
                k = str(r.ref)
                if k not in views:
                    views[k] = new_watch(k, None, now, job_id=int(r.raw_id) if r.raw_id.isdigit() else r.ref.job)
                    watched.append(k)
                    ask.append(k)

    def ask_req_nodes(
        self, views: dict[str, JobWatch], active: dict[str, QueueRecord], watched: list[str], touched: set[str]
    ) -> None:
        """One squeue for the pinned nodelists of jobs newly pending on ReqNodeNotAvail (asked once per job)."""
        keys = [
            k
            for k in watched
            if (q := active.get(k)) is not None and q.reason in _PINNED_REASONS and views[k].req_nodes is None
        ]
        if not keys:
            return
        try:
            res = self.client.run(
                ["squeue", "--noheader", "--jobs", ",".join(keys), "-O", f"JobArrayID:{US},ReqNodes:\x1e"],
                ok_codes=(0, 1),
            )
        except (SlurmError, TransportError):
            return
        for chunk in res.stdout.split("\x1e"):
            parts = chunk.strip("\n").split(US)
            if len(parts) == 2 and parts[0].strip() in views:
                nodes = parts[1].strip()
                views[parts[0].strip()].req_nodes = "" if nodes in ("(null)", "N/A") else nodes
                touched.add(parts[0].strip())
