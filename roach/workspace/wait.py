"""``wait``: watch one job through the one poller, or from ONE session on the cluster, then record how it ended.

A job in roach's store is followed through the one poller of its store and cluster
(:mod:`roach.workspace.follow`), which records its end; any number of waits, watches and tops cost that
poller's calls. A job submitted by hand, or a cluster that ``roach watch --serve`` cannot reach as the wait
does, is watched on its own, from one session: opening a connection per look at the queue is what gets a
login host to reset connections. Instead roach sends one small POSIX sh loop (a fixed program; the job id
and interval are its arguments, never spliced in) that asks ``squeue`` about the job, prints a line when its
state changes, sleeps, and exits when the job has left the queue. Its lines stream back as they come. Then ``sacct`` gives the final state and
``job.json`` is written in the bundle, on the cluster and here.

If the connection drops mid-watch, the last state seen is recorded locally, the transport backs off
(minutes on a real cluster) and the watch is tried exactly once more; a second failure is raised.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from roach.errors import RoachError, TransportError, UsageError
from roach.fleet.cluster import Cluster
from roach.launch.poller import waiting
from roach.records.job_record import utc_now
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob
from roach.scheduler.ssh import SSH_FAILED, SSHConnectError, SSHTransport, remote_command
from roach.scheduler.transport import PINNED_ENV, LocalTransport, Transport
from roach.workspace.base import (
    Remote,
    Workspace,
    check_job_id,
    connect,
    min_poll_interval,
    read_local,
    resolve_cluster,
)
from roach.workspace.events import WaitEvent
from roach.workspace.follow import NotFollowed, follow
from roach.workspace.mirror import read_record, record_final, write_local
from roach.workspace.stage import archived_bundle, earlier_stage_error

# $1 job id, $2 seconds between looks. Prints "state <utc> <STATE=n,...>" on each change, "error <utc> <msg>"
# when squeue fails (the loop goes on), "gone <utc>" once no entry of the job is pending or running, and
# "tick" after each look otherwise: if roach went away, that write fails and the loop ends with it.
WAIT_LOOP = r"""# roach wait loop
job=$1; every=$2; last=
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
while :; do
  out=$(squeue --noheader --array --jobs="$job" --format=%T 2>&1); rc=$?
  if [ "$rc" -ne 0 ]; then
    case $out in
      *"Invalid job id"*) out= ;;
      *) printf 'error %s %s\n' "$(now)" "$(printf '%s' "$out" | tr '\n' ' ')"; sleep "$every"; continue ;;
    esac
  fi
  states=$(printf '%s\n' "$out" | awk '
    $1 ~ /^(PENDING|RUNNING|SUSPENDED|COMPLETING|CONFIGURING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|SPECIAL_EXIT|RESIZING|STOPPED|SIGNALING|STAGE_OUT|RESV_DEL_HOLD|POWER_UP_NODE)$/ { n[$1]++ }
    END { s = ""; for (k in n) s = s (s == "" ? "" : ",") k "=" n[k]; print s }' | tr ',' '\n' | sort | paste -sd, -)
  if [ -z "$states" ]; then printf 'gone %s\n' "$(now)"; exit 0; fi
  if [ "$states" != "$last" ]; then printf 'state %s %s\n' "$(now)" "$states"; last=$states
  else printf 'tick\n' || exit 1; fi
  sleep "$every"
done
"""


def stream(
    transport: Transport, argv: Sequence[str], on_line: Callable[[str], None], *, timeout: float | None = None
) -> int:
    """Run ``argv`` where ``transport`` runs commands, calling ``on_line`` with each stdout line as it comes.

    Returns the exit status. Over SSH it rides on the transport's shared connection and its failures
    become the transport's errors (and backoff); a transport that cannot stream gets its output at the end.
    """
    own = getattr(transport, "stream", None)
    if own is not None:
        return own(argv, on_line, timeout=timeout)

    if isinstance(transport, SSHTransport):
        transport.check()  # the one paced, backed-off connection attempt, if the master is not up
        full = [
            transport.ssh,
            *transport.ssh_options(),
            transport.alias,
            remote_command(list(argv), transport.env, transport.setup),
        ]
        env, cwd = None, None
    elif isinstance(transport, LocalTransport):
        full = [str(a) for a in argv]
        if transport.user:
            full = ["runuser", "-u", transport.user, "--", *full]
        env, cwd = {**os.environ, **PINNED_ENV, **transport.env}, transport.cwd or ("/" if transport.user else None)
    else:
        res = transport.run(list(argv), timeout=timeout)
        for line in res.stdout.splitlines():
            on_line(line)
        return res.returncode
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        raise TransportError(f"could not run {full[0]}: {exc}", full) from exc
    err: list[str] = []
    err_pipe, out_pipe = proc.stderr, proc.stdout
    assert err_pipe is not None and out_pipe is not None  # both piped above
    reader = threading.Thread(target=lambda: err.append(err_pipe.read()), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill) if timeout else None
    if timer:
        timer.start()
    try:
        for line in out_pipe:
            on_line(line.rstrip("\n"))
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if timer:
            timer.cancel()
        reader.join(5)
    stderr = "".join(err)
    if isinstance(transport, SSHTransport):
        # ssh's own failures (exit 255 and its message) become the transport's errors, backoff included.
        transport._judge(full, subprocess.CompletedProcess(full, proc.returncode, "", stderr))
        if proc.returncode == SSH_FAILED and not transport.master_running():
            # The shared connection died under a running session: ssh exits 255 without a word (LogLevel=ERROR).
            raise SSHConnectError(
                f"ssh {transport.alias}: the connection dropped while the watch ran",
                full,
                hint="the login host went away or cut the connection; roach tries once "
                f"more after {transport.backoff_s:.0f}s, never in a tight loop",
                retry_at=transport.clock() + transport.backoff_s,
            )
    if proc.returncode != 0:
        raise RoachError(
            f"the watch loop on the cluster exited {proc.returncode}: "
            f"{stderr.strip().splitlines()[-1] if stderr.strip() else '(no message)'}",
            hint="check that sh, squeue, awk, sort and paste work on the login host",
        )
    return proc.returncode


def watch(remote: Remote, job_id: str, interval_s: float, on_event: Callable[[WaitEvent], None]) -> WaitEvent | None:
    """Run the loop once; returns the last ``state`` event seen (None if the job was already gone)."""
    last: list[WaitEvent] = []

    def line(text: str) -> None:
        if not text.strip() or text.strip() == "tick":
            return
        ev = WaitEvent.parse(text)
        if ev.kind == "state":
            last[:] = [ev]
        on_event(ev)

    stream(remote.transport, ["sh", "-c", WAIT_LOOP, "sh", job_id, f"{interval_s:g}"], line)
    return last[0] if last else None


def wait(
    workspace: Workspace | str | os.PathLike[str],
    job_id: str | int,
    cluster: Cluster | str | None = None,
    *,
    interval_s: float | None = None,
    on_event: Callable[[WaitEvent], None] = lambda e: None,
    transport: Transport | None = None,
    sleep: Callable[[float], None] = time.sleep,
    store: Store | None = None,
) -> WorkspaceJob:
    """Wait until the job (or array) leaves the queue, then record its final state; returns the record.

    ``interval_s`` (default: the cluster's minimum, 60 s on a shared cluster) may not be shorter than
    :func:`~roach.workspace.base.min_poll_interval` allows. ``cluster`` defaults to the one the job's
    local record names (reached through the ssh alias it was submitted through, per ``store``); the final
    state is also recorded in ``store`` (default: roach's) when the job is there.
    """
    job_id = check_job_id(job_id)
    ws = workspace if isinstance(workspace, Workspace) else Workspace.load(workspace, job_id)
    c = resolve_cluster(ws, cluster, job_id, store)
    floor = min_poll_interval(c)
    interval = floor if interval_s is None else float(interval_s)
    if interval < floor:
        raise UsageError(
            f"an interval of {interval:g}s is shorter than cluster {c.name} allows ({floor:g}s)",
            hint="a login host is shared: roach looks at the queue at most once a minute there",
        )
    remote = connect(c, transport)
    remote.open()
    ws = remote.resolve(ws)
    old = archived_bundle(ws.root, job_id)
    if old is not None and not read_local(ws, job_id):
        raise earlier_stage_error(ws.root, job_id, old)
    base = read_record(ws, remote, job_id)
    store = store if store is not None else Store()
    lost = _Lost(ws, base, remote.where, on_event)
    if transport is None and _followed(store, c, remote.transport, job_id, interval, lost):
        return record_final(ws, remote, job_id, base, store=store)
    seen: list[WaitEvent] = []

    def keep(ev: WaitEvent) -> None:
        if ev.kind == "state":
            seen[:] = [ev]
        on_event(ev)

    for attempt in (1, 2):
        try:
            watch(remote, job_id, interval, keep)
            break
        except SSHConnectError as err:
            lost.keep(seen[0] if seen else None)
            if attempt == 2:
                raise lost.again(seen[0] if seen else None, err.message) from err
            delay = max(0.0, err.retry_at - getattr(remote.transport, "clock", time.monotonic)())
            on_event(
                WaitEvent(
                    "note",
                    utc_now(),
                    f"connection lost ({err.message}); last known state recorded; trying once more in {delay:.0f}s",
                )
            )
            sleep(delay)
    return record_final(ws, remote, job_id, base, store=store)


def _followed(
    store: Store,
    c: Cluster,
    transport: Transport,
    job_id: str,
    interval: float,
    lost: _Lost,
) -> bool:
    """Whether the job was followed to its end through the one poller (:mod:`roach.workspace.follow`); False for a
    job the store does not hold or a poller that cannot be had, which the one-session loop watches instead."""
    row = store.get(c.name, int(job_id)) if job_id.isdigit() else None
    w = waiting(c, store, transport, interval) if row is not None else None
    if w is None or not (w.can_start or w.watched()):
        return False
    with w:
        try:
            follow(store, c.name, job_id, w, lost.on_event, on_outage=lost.outage)
        except NotFollowed:
            return False
    return True


@dataclass
class _Lost:
    """What a wait does when the cluster cannot be reached: the last known state goes into the local job.json
    (its status stays ``unknown`` until the end is recorded; the live state has its own key), and a second loss
    ends the wait."""

    ws: Workspace
    base: WorkspaceJob
    where: str
    on_event: Callable[[WaitEvent], None]
    outages: int = 0

    def keep(self, last: WaitEvent | None) -> None:
        kept = replace(
            self.base,
            live_state=(last.status if last else None) or self.base.live_state,
            last_seen_utc=last.at_utc if last else self.base.last_seen_utc,
        )
        write_local(self.ws, kept)

    def again(self, last: WaitEvent | None, message: str) -> RoachError:
        return RoachError(
            f"lost the connection to {self.where} again while waiting for job {self.base.job_id}; its last known "
            f"state ({last.text if last else self.base.live_state}) is recorded in "
            f"{self.ws.local_bundle(self.base.job_id) / 'job.json'}: {message}",
            hint=f"run `roach wait {self.base.job_id}` later; the job goes on without roach",
        )

    def outage(self, last: WaitEvent | None, message: str) -> None:
        """The poller could not reach the cluster: said and recorded; the second time, the wait ends."""
        self.outages += 1
        self.keep(last)
        if self.outages == 2:
            raise self.again(last, message)
        self.on_event(
            WaitEvent("note", utc_now(), f"connection lost ({message}); last known state recorded; the poller retries")
        )
