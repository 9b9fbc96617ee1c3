"""What a metered cluster's grants have spent, read from Slurm's accounting, and what happens as one runs out.

Each hold on a grant (:mod:`roach.records.grants`) names its jobs; one ``sacct -X -D`` of every job of the
cluster's unfinished holds gives each allocation's GPUs x elapsed time (every attempt and requeue, so far for
one that runs): what the hold spent. Once the store records the end of every job of a hold, that figure is
final and replaces the worst case the hold took. :func:`budget` turns a grant's share spent into the watch's
lines at 50, 80 and 100 %, and at 100 % holds the grant's pending jobs in Slurm: running jobs finish, nothing
more starts until a person makes a new grant, which :func:`rehome` then puts them under and releases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from roach.errors import SlurmError
from roach.records.grants import THRESHOLDS, Grant, GrantBook, GrantUse, Hold
from roach.records.store import Store
from roach.scheduler.client import SlurmClient


def refresh(store: Store, cluster: str, client: SlurmClient) -> list[GrantUse]:
    """The cluster's grants, each hold's spending read again from accounting (one sacct, none when no hold
    is open) and recorded."""
    book = GrantBook(store)
    uses = book.uses(cluster)
    open_holds = [h for u in uses for h in u.holds if h.job_ids and not h.settled]
    if not open_holds:
        return uses
    ids = sorted({j for h in open_holds for j in h.job_ids or ()})
    spent_s: dict[int, float] = defaultdict(float)
    for a in client.allocations(ids):
        spent_s[a.ref.job] += a.gpu_seconds
    unfinished = {r.job_id for r in store.unfinished(cluster)}
    book.record_spent(
        {
            h.id: (
                max(0.0, sum(spent_s[j] for j in h.job_ids or ()) / 3600 - h.base),
                not unfinished.intersection(h.job_ids or ()),
            )
            for h in open_holds
        }
    )
    return book.uses(cluster)


@dataclass(frozen=True)
class BudgetLine:
    """A grant passed a share of its GPU-hours (``share``: 50, 80 or 100); at 100, the jobs held in Slurm."""

    grant: Grant
    share: int
    spent: float
    held_jobs: tuple[int, ...]
    hold_error: str | None

    @property
    def message(self) -> str:
        g = self.grant
        head = (
            f"grant {g.name} on {g.cluster} ({g.scope}) has spent {self.spent:.2f} of its {g.gpu_hours:.4g} GPU-hours "
            f"({self.share}% passed)"
        )
        if self.share < 100:
            return head
        ids = ", ".join(map(str, self.held_jobs))
        held = f": its pending jobs {ids} are held in Slurm" if self.held_jobs else ": it has no pending job"
        failed = f" (holding them failed: {self.hold_error})" if self.hold_error else ""
        make = f"roach grant {g.cluster} --gpu-hours H" + (f" --experiment {g.experiment}" if g.experiment else "")
        return (
            f"{head}{held}{failed}; running jobs finish. To go on, the person whose budget it is makes a new grant "
            f"at a terminal (`{make}`), which releases them"
        )


def budget(store: Store, uses: Iterable[GrantUse], client: SlurmClient, pending: set[int]) -> list[BudgetLine]:
    """A line for each grant that passed a share it had not passed before, and for each spent grant (100 %) whose
    jobs pend again; those jobs in ``pending`` (the cluster's pending jobs not held yet) held in Slurm, in one
    ``scontrol hold`` per grant. Running jobs are left to finish."""
    book = GrantBook(store)
    lines = []
    for u in uses:
        passed = [t for t in THRESHOLDS if u.spent_share * 100 >= t > u.grant.announced]
        holds = [h for h in u.holds if not h.settled] if u.spent_share >= 1 else []
        held = tuple(sorted({j for h in holds for j in h.job_ids or () if j in pending}))
        if not passed and not held:
            continue
        error = None
        try:
            if held:
                client.hold(",".join(map(str, held)))
                book.mark_budget_held([h.id for h in holds if pending.intersection(h.job_ids or ())])
        except SlurmError as e:
            error = e.stderr.strip() or str(e)
        share = max(passed, default=100)
        book.announce(u.grant.id, share)
        lines.append(BudgetLine(u.grant, share, u.spent, held, error))
    return lines


def rehome(store: Store, grant: Grant, client: Callable[[], SlurmClient]) -> list[int]:
    """Put the holds a spent grant held for budget under the new ``grant`` while it has room (oldest first),
    and release their jobs in one ``scontrol release`` (``client`` made only then); the job ids released."""
    book = GrantBook(store)
    uses = book.uses(grant.cluster)
    room = next(u.left for u in uses if u.grant.id == grant.id)
    moved: list[Hold] = []
    for h in sorted((h for u in uses for h in u.holds if h.budget_held and not h.settled), key=lambda h: h.id):
        if not grant.covers(h.cluster, h.experiment) or h.held > room:
            continue
        room -= h.held
        book.move_hold(h, grant.id)
        moved.append(h)
    ids = sorted({j for h in moved for j in h.job_ids or ()})
    if ids:
        client().release(",".join(map(str, ids)))
    return ids
