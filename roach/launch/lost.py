"""Held submissions that may outlive the process that made them: every ``sbatch --hold`` of submit, sweep and
hold goes through :func:`sbatch_held`. Its answer may be lost (the connection dropped while sbatch ran), or the
process killed before the job has a record: either way a job is queued held that no record names, and nothing
would ever release or cancel it.

Such a job is found by what its submission gave it: its log path (``<log root>/<run, sweep or holder id>_...``),
held by its user, and no record of it in the store. Each submission is noted in ``<store>.lost.json`` (this module
is its only writer) before its sbatch, with the pid that makes it, and forgotten once its jobs are recorded and
released. :func:`settle` cancels the held jobs of the submissions whose process is gone (a lost answer: at once,
on a fresh connection, when the cluster answers again); else the next submission to that cluster does. A note is
kept until it is settled: its job cancelled, or a look made :data:`SETTLE_S` after it found none (a controller
still busy with the request may queue it late).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from roach._fs import atomic_write
from roach._proc import alive, boot_id
from roach.errors import NoFilesError, RoachError, TransportError
from roach.records.store import Store
from roach.scheduler.rest.client import RestClient

SETTLE_S = 120.0  # a controller answers a request it has received well within this (MessageTimeout is 10 s)
LOOKS = 3  # looks a second apart right after the loss: the controller may be finishing the request


def _path(store: Store) -> Path:
    return Path(str(store.path) + ".lost.json")


def _load(store: Store) -> list[dict]:
    try:
        return json.loads(_path(store).read_text())
    except (FileNotFoundError, ValueError):
        return []


def _save(store: Store, items: list[dict]) -> None:
    if items or _path(store).exists():
        atomic_write(_path(store), json.dumps(items, indent=1) + "\n")


def remember(store: Store, cluster: str, log_prefix: str, now: float | None = None, lost: bool = True) -> None:
    """Note a submission to ``cluster`` whose jobs, if queued, log to ``<log_prefix>...``: lost (its answer never
    came), or being made by this process (``lost=False``: settled only once this process is gone)."""
    items = [i for i in _load(store) if (i["cluster"], i["log_prefix"]) != (cluster, log_prefix)]
    at = time.time() if now is None else now
    note = {"cluster": cluster, "log_prefix": log_prefix, "at": at, "lost": lost, "pid": os.getpid(), "boot": boot_id()}
    _save(store, [*items, note])


def forget(store: Store, cluster: str, log_prefix: str) -> None:
    """The submission's jobs are recorded and released: nothing of it is left to settle."""
    items = _load(store)
    kept = [i for i in items if (i["cluster"], i["log_prefix"]) != (cluster, log_prefix)]
    if len(kept) != len(items):
        _save(store, kept)


def pending(store: Store, cluster: str) -> list[dict]:
    """The notes of ``cluster`` that a look may settle: the losses, and the submissions of processes gone."""
    return [i for i in _load(store) if i["cluster"] == cluster and not _in_flight(i)]


def _in_flight(item: dict) -> bool:
    """Whether a live process is making this submission: its jobs are not recorded yet, and not lost."""
    pid = item.get("pid")
    if item.get("lost", True) or not isinstance(pid, int) or item.get("boot") != boot_id():
        return False
    return alive(pid)


def _held_jobs(client) -> list[tuple[int, str]]:
    """(job id, log path) of the transport user's jobs held by their user (through slurmrestd: the token's user's)."""
    if isinstance(client, RestClient):
        return client.held_with_output()
    res = client.run(["squeue", "--me", "-h", "-t", "PENDING", "-O", "JobID:|,StdOut:|,Reason:|"])
    out = []
    for line in res.stdout.splitlines():
        if line.count("|") < 3:
            continue
        job, rest = line.split("|", 1)
        path, reason = rest.rstrip("|").rsplit("|", 1)
        if reason.strip() == "JobHeldUser" and job.strip().isdigit():
            out.append((int(job), path.strip()))
    return out


def settle(store: Store, cluster: str, client, now: Callable[[], float] = time.time) -> list[int]:
    """One look: cancel the held jobs of ``cluster``'s lost submissions and forget the losses settled. Returns the
    ids cancelled; raises what the cluster's commands raise (the losses stay remembered then)."""
    items = pending(store, cluster)
    if not items:
        return []
    held = _held_jobs(client)
    known = {r.job_id for r in store.unfinished(cluster)}
    found = {
        i["log_prefix"]: [j for j, path in held if path.startswith(i["log_prefix"]) and j not in known] for i in items
    }
    ids = sorted({j for js in found.values() for j in js})
    if ids:
        client.scancel(ids)
    settled = {p for p, js in found.items() if js} | {i["log_prefix"] for i in items if now() - i["at"] >= SETTLE_S}
    _save(store, [i for i in _load(store) if not (i["cluster"] == cluster and i["log_prefix"] in settled)])
    return ids


def after_loss(store: Store, cluster, log_prefix: str, sleep: Callable[[float], None] = time.sleep) -> str:
    """Right after a lost sbatch answer: remember it, then look for its job on a fresh connection each time, a
    second apart (the old one may linger; the controller may be finishing the request). Returns what happened,
    for the error the submit raises."""
    remember(store, cluster.name, log_prefix)
    failed: RoachError | None = None
    for n in range(LOOKS):
        if n:
            sleep(1.0)
        try:
            ids = settle(store, cluster.name, cluster.client())
        except RoachError as exc:
            failed = exc
            continue
        if ids:
            return f"the held job it had queued (job {', '.join(map(str, ids))}) was cancelled: nothing is left"
        failed = None
    if failed is not None:
        return (
            f"the job it may have queued (held, logging to {log_prefix}<job id>.out) could not be looked for "
            f"({failed}); the next submit to {cluster.name} cancels it"
        )
    return (
        f"no held job of it was found; should the controller queue it late, the next submit to {cluster.name} "
        f"cancels it"
    )


def sbatch_held(client, store: Store, cluster, script_text: str, log_prefix: str) -> int:
    """``sbatch --hold``, noted first (the caller forgets the note once its jobs are recorded and released), after
    the cluster's earlier losses and killed submissions are settled. Where the answer is lost, the job it may have queued is
    cancelled and the submission fails, leaving nothing."""
    if pending(store, cluster.name):
        try:
            settle(store, cluster.name, client)
        except RoachError:
            pass  # this submission's own commands will say what is wrong with the cluster
    remember(store, cluster.name, log_prefix, lost=False)
    try:
        return client.sbatch(["--hold"], script_text)
    except NoFilesError:
        forget(store, cluster.name, log_prefix)
        raise  # refused before anything was sent: nothing can have been queued
    except TransportError as exc:
        what = after_loss(store, cluster, log_prefix)
        raise TransportError(
            f"{exc} (while sbatch ran on {cluster.name}: {what})",
            exc.argv,
            hint="submit again once the connection is back",
        ) from exc
