"""`roach grant`: the GPU-hours a person allows on a metered cluster; made, listed and revoked here only."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from roach.cli.args import cli_cluster
from roach.cli.common import echo_json, json_option, run_as_option
from roach.cli.jsonout import stamp
from roach.errors import RoachError, TransportError, UsageError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import configured
from roach.ops import spend
from roach.records.grants import Grant, GrantBook, GrantUse, parse_ref
from roach.records.store import Store

_SPAN = re.compile(r"(\d+(?:\.\d+)?)([hd])")


def parse_until(text: str | None) -> datetime | None:
    """``--until``: an ISO date or time (UTC unless it says), or a span from now (``12h``, ``7d``)."""
    if text is None:
        return None
    if m := _SPAN.fullmatch(text.strip()):
        n, unit = float(m[1]), m[2]
        return datetime.now(UTC) + (timedelta(hours=n) if unit == "h" else timedelta(days=n))
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--until {text!r} is neither a date or time nor a span",
            hint="give an ISO date or time (2026-12-31, 2026-12-31T18:00, in UTC unless it says) or 12h, 7d",
        ) from None
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    if t <= datetime.now(UTC):
        raise UsageError(f"--until {text!r} has passed: a grant must end in the future")
    return t


def confirm_at_terminal(what: str, cluster: str) -> None:
    """Ask the person at the terminal to type the cluster's name; refuse where standard input is no terminal."""
    if not sys.stdin.isatty():
        raise UsageError(
            f"a grant is the budget owner's to {what}, at a terminal: standard input is not one, so nothing was done",
            hint=f"the person whose budget {cluster} spends runs this command in their own terminal; an agent "
            "or a script cannot make, change or revoke a grant",
        )
    typed = click.prompt(f"Type the cluster's name ({cluster}) to {what} this grant", default="", show_default=False)
    if typed.strip() != cluster:
        raise UsageError(f"{typed.strip()!r} is not {cluster!r}: nothing was done")


def grant_json(u: GrantUse, now: datetime) -> dict[str, Any]:
    g = u.grant
    return stamp(
        "grant",
        {
            "id": g.name,
            "cluster": g.cluster,
            "gpu_hours": g.gpu_hours,
            "experiment": g.experiment,
            "until": g.until,
            "note": g.note,
            "granted_by": g.granted_by,
            "made_at": g.made_at,
            "revoked_at": g.revoked_at,
            "live": g.live(now),
            "spent": round(u.spent, 4),
            "held": round(u.held, 4),
            "left": round(u.left, 4),
            "submissions": len(u.holds),
        },
    )


def grant_text(u: GrantUse, now: datetime) -> str:
    g = u.grant
    state = "live" if g.live(now) else ("revoked" if g.revoked_at else "ended")
    until = f" until {g.until}" if g.until else ""
    note = f" ({g.note})" if g.note else ""
    return (
        f"{g.name}  {g.cluster}  {g.gpu_hours:g} GPU-h for {g.scope}{until}, by {g.granted_by} at {g.made_at}: "
        f"{state}; spent {u.spent:.2f}, held {u.held:.2f}, left {u.left:.2f}{note}"
    )


def _refreshed(store: Store, run_as: str | None) -> list[GrantUse]:
    """Every grant, the spending of each cluster with open holds read again (a cluster out of reach: as last
    read, said on stderr)."""
    uses = GrantBook(store).uses()
    for name in sorted({u.grant.cluster for u in uses if any(h.job_ids and not h.settled for h in u.holds)}):
        try:
            spend.refresh(store, name, cli_cluster(name, run_as).client())
        except (RoachError, TransportError) as e:
            click.echo(f"roach: {name}: what its grants spent is as last read ({e.message})", err=True)
    return GrantBook(store).uses()


def _metered(name: str, run_as: str | None) -> Cluster:
    c = configured(cli_cluster(name, run_as))
    if not c.metered:
        raise UsageError(f"cluster {name} is not metered: it needs no grant", hint="`roach clusters` marks the metered")
    return c


@click.command("grant")
@click.argument("cluster", required=False)
@click.option("--gpu-hours", type=click.FloatRange(min=0, min_open=True), help="The GPU-hours it allows.")
@click.option("--experiment", default=None, help="Only this experiment's submissions. [default: every one]")
@click.option("--until", "until", default=None, metavar="WHEN", help="Its end: 2026-12-31, 2026-12-31T18:00, 12h, 7d.")
@click.option("--note", default=None, help="Free text kept with it.")
@click.option("--list", "list_", is_flag=True, help="List the grants: what each spent, holds and has left.")
@click.option("--revoke", default=None, metavar="ID", help="End grant ID now (what it holds stays counted).")
@run_as_option
@json_option
def grant(
    cluster: str | None,
    gpu_hours: float | None,
    experiment: str | None,
    until: str | None,
    note: str | None,
    list_: bool,
    revoke: str | None,
    run_as: str | None,
    as_json: bool,
) -> None:
    """Allow GPU-hours on a metered cluster: the budget owner's consent, made at a terminal.

    A submission to a metered cluster (submit, sweep, hold, resume, move) is queued only when a live grant that
    covers it has room for its worst case (GPUs x time limit x runs). Making or revoking a grant asks the person
    to type the cluster's name, and is refused where standard input is not a terminal. `--list` shows each
    grant with what it spent (Slurm's accounting), holds and has left.
    """
    now = datetime.now(UTC)
    with Store() as store:
        if list_:
            uses = _refreshed(store, run_as)
            if as_json:
                echo_json([grant_json(u, now) for u in uses])
            else:
                click.echo("\n".join(grant_text(u, now) for u in uses) or "no grants")
            return
        if revoke is not None:
            book = GrantBook(store)
            known = {u.grant.name: u.grant for u in book.uses()}
            target = known.get(f"g{parse_ref(revoke)}")
            if target is None:
                raise UsageError(f"no grant {revoke!r} in the store", hint="`roach grant --list` lists the grants")
            confirm_at_terminal("revoke", target.cluster)
            _said(store, book.revoke(revoke), now, as_json)
            return
        if cluster is None or gpu_hours is None:
            raise UsageError(
                "roach grant needs a CLUSTER and --gpu-hours H (or --list, or --revoke ID)",
                hint="roach grant CLUSTER --gpu-hours H [--experiment E] [--until WHEN] [--note TEXT]",
            )
        c = _metered(cluster, run_as)
        scope = f"experiment {experiment}" if experiment else "every experiment"
        end = parse_until(until)
        confirm_at_terminal("make", c.name)
        made = GrantBook(store).make(c.name, gpu_hours, experiment=experiment, until=end, note=note)
        released = spend.rehome(store, made, c.client)
        if not as_json:
            click.echo(f"granted {made.name}: {gpu_hours:g} GPU-hours on {c.name} for {scope}")
            if released:
                click.echo(f"released {', '.join(map(str, released))}, held when an earlier grant ran out")
        _said(store, made, now, as_json)


def _said(store: Store, g: Grant, now: datetime, as_json: bool) -> None:
    use = next(u for u in GrantBook(store).uses(g.cluster) if u.grant.id == g.id)
    if as_json:
        echo_json(grant_json(use, now))
    else:
        click.echo(grant_text(use, now))
