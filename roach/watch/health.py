"""The watch's status lines: outages and recoveries (said once each), disk thresholds, nodes not responding
under running jobs, and the heartbeat.

Pure: each function reads and updates the saved ``meta`` of the watch and returns the events to say. The
watcher (:mod:`roach.watch.watcher`) decides when to call them and gathers what they need from Slurm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from roach.ops.events import Event, EventKind, TierRow, human_bytes, human_seconds
from roach.scheduler.parse import QueueRecord
from roach.scheduler.rest.site import hostnames
from roach.watch.jobs import Ctx, JobWatch
from roach.watch.logs import DiskLook


def outage_events(cluster: str, meta: dict[str, Any], what: str, err: Exception, now: float) -> list[Event]:
    """``what`` (slurmctld, slurmdbd, the cluster) failed: said once per outage."""
    key = f"outage_{what}"
    if meta.get(key):
        return []
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    meta[key] = {"since": now, "error": text}
    return [
        Event(
            EventKind.OUTAGE,
            now,
            cluster,
            f"{what} unreachable: {text}; retrying with backoff; no job is marked ended meanwhile",
            data={"service": what, "error": str(err)},
        )
    ]


def recovered_events(cluster: str, meta: dict[str, Any], whats: Iterable[str], now: float) -> list[Event]:
    events = []
    for what in whats:
        was = meta.get(f"outage_{what}")
        if was:
            meta[f"outage_{what}"] = None
            events.append(
                Event(
                    EventKind.RECOVERED,
                    now,
                    cluster,
                    f"{what} reachable again after {human_seconds(now - was['since'])}",
                    data={"service": what, "down_s": round(now - was["since"], 1)},
                )
            )
    return events


def disk_events(
    cluster: str,
    meta: dict[str, Any],
    disks: Mapping[str, DiskLook],
    now: float,
    max_bytes: int | None,
    free_min_fraction: float,
) -> list[Event]:
    """A line when a log directory crosses ``max_bytes`` or its file system ``free_min_fraction``, either way."""
    events = []
    flags = dict(meta.get("disk") or {})
    for d, look in disks.items():
        over = bool(max_bytes and look.used is not None and look.used > max_bytes)
        low = bool(look.free_fraction is not None and look.free_fraction < free_min_fraction)
        before = flags.get(d, {"over": False, "low": False})
        if (over, low) != (before["over"], before["low"]):
            said = []
            if over != before["over"]:
                said.append(
                    f"log directory {d} holds {human_bytes(look.used)}, "
                    f"{'over' if over else 'back under'} {human_bytes(max_bytes)}"
                )
            if low != before["low"]:
                frac = look.free_fraction or 0.0
                said.append(
                    f"its file system has {human_bytes(look.fs_free)} free ({frac:.0%}), "
                    f"{'under' if low else 'back over'} {free_min_fraction:.0%}"
                )
            events.append(
                Event(
                    EventKind.DISK,
                    now,
                    cluster,
                    "; ".join(said),
                    data={
                        "dir": d,
                        "used": look.used,
                        "fs_free": look.fs_free,
                        "fs_size": look.fs_size,
                        "over": over,
                        "low_free": low,
                    },
                )
            )
        flags[d] = {"over": over, "low": low}
    meta["disk"] = flags
    meta["disk_summary"] = {d: [x.used, x.fs_free, x.fs_size] for d, x in disks.items()}
    return events


def node_events(
    views: Mapping[str, JobWatch], running: Mapping[str, QueueRecord], dead: set[str], ctx: Ctx
) -> list[Event]:
    """A line for each running job (``running``: its queue record by key) with a node in ``dead``, the nodes
    Slurm marks not responding; each job and node is said once (in the view's ``reported``)."""
    events = []
    for key, q in running.items():
        w = views[key]
        new = [n for n in hostnames(q.nodelist) if n in dead and f"not_responding:{n}" not in w.reported]
        if not new:
            continue
        w.reported += [f"not_responding:{n}" for n in new]
        which = ", ".join(new)
        events.append(
            ctx.event(
                EventKind.NODE_NOT_RESPONDING,
                w,
                f"{w.label()} runs on {which}, which Slurm marks not responding: unless "
                f"{'it answers' if len(new) == 1 else 'they answer'} again, Slurm sets "
                f"{'it' if len(new) == 1 else 'them'} DOWN after SlurmdTimeout and the job fails (or, with "
                "--requeue, goes back to the queue and resumes from its checkpoint)",
                nodes=q.nodelist,
                not_responding=new,
            )
        )
    return events


def holder_text(h: Mapping[str, Any]) -> str:
    """``holder 412 (dbg) held 12m03s of 2h00m: IDLE: charged, no attempt runs ...``"""
    limit = f" of {human_seconds(h['time_limit_s'])}" if h["time_limit_s"] else ""
    said = {
        True: "IDLE: charged, no attempt runs (`roach release` it if done)",
        False: "an attempt runs",
        None: "whether an attempt runs is not known",
    }[h["idle"]]
    name = f" ({h['name']})" if h["name"] else ""
    return f"holder {h['job_id']}{name} held {human_seconds(h['held_s'])}{limit}: {said}"


def heartbeat_event(
    cluster: str,
    meta: dict[str, Any],
    now: float,
    views: Mapping[str, JobWatch],
    rows: tuple[TierRow, ...] | None,
    holders: list[dict[str, Any]],
) -> Event:
    """The heartbeat: what is watched, outages, disk, running holders, and the tier table (``rows``, or the last
    saved one when Slurm did not answer this round)."""
    if rows is None:
        rows = tuple(
            TierRow(r["tier"], r["cap"], r["claimed"], r["running"], r["pending"], r["preemptible"])
            for r in meta.get("tiers") or []
        )
    live = [w for w in views.values() if not w.done]
    running = sum(w.running for w in live)
    pending = sum(w.pending for w in live)
    done = sum(w.done for w in views.values())
    out = [
        f"outage: {k.removeprefix('outage_')} since {human_seconds(now - v['since'])} ago"
        for k, v in meta.items()
        if k.startswith("outage_") and v
    ]
    disk = meta.get("disk_summary") or {}
    disk_text = "; ".join(f"logs {human_bytes(u)} in {d}, {human_bytes(f)} free" for d, (u, f, _) in disk.items())
    msg = (
        f"watching {len(live)} job{'s' if len(live) != 1 else ''}: {running} running, {pending} pending, "
        f"{done} ended"
        + "".join(f"; {o}" for o in out)
        + (f"; {disk_text}" if disk_text else "")
        + "".join(f"; {holder_text(h)}" for h in holders)
    )
    return Event(
        EventKind.HEARTBEAT,
        now,
        cluster,
        msg,
        data={
            "watching": len(live),
            "running": running,
            "pending": pending,
            "ended": done,
            "outages": out,
            "holders": holders,
        },
        tiers=rows,
    )
