"""`roach top`: the watch's rounds as a full-screen view, live (the model is :mod:`roach.watch.screen`, the
lines :mod:`roach.cli.top_view`).

`roach top` is a viewer like `roach watch` (:mod:`roach.watch.shared`): the one poller of the store and cluster
takes the rounds, whichever viewer it is, and the screen is drawn from what its last round saved (the jobs'
views and the queue), so a `roach top` beside a running watch costs no Slurm call of its own.
"""

from __future__ import annotations

import json
import sys
import termios
import time
import tty
from dataclasses import dataclass, field

import click
from rich.console import Console

from roach.cli.args import cli_cluster
from roach.cli.common import ssh_config_option
from roach.cli.jsonout import stamp
from roach.cli.refs import ssh_alias_option
from roach.cli.terminal import draw, read_keys, terminal_size
from roach.cli.top_view import Mode, View, screen_lines
from roach.cli.watch import (
    check_job_ids,
    cluster_option,
    job_ids_option,
    pick_cluster,
    rate_limit_of,
    recorded_way,
    repo_option,
    run_as_option,
    stall_after_option,
    why_lines,
)
from roach.errors import RoachError, UsageError
from roach.fleet.cluster import with_ssh_override
from roach.ops.events import Event, human_seconds
from roach.ops.rebalance import promote as promote_job
from roach.records.poller.readers import Rank
from roach.records.store import Store
from roach.scheduler import queue_json
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.parse import QueueRecord
from roach.watch.logs import StallRule
from roach.watch.screen import Frame, JobRow, build_frame, holders_idle_of
from roach.watch.shared import Viewer
from roach.watch.watcher import Watcher

TICK_S = 0.2  # how often keys and the terminal's size are looked at between rounds


@dataclass
class Top:
    """The live screen's state between rounds: its viewer, the last frame, what the user looks at."""

    viewer: Viewer
    repo_root: str
    view: View = field(default_factory=View)
    frame: Frame | None = None
    idle: dict[str, bool | None] = field(default_factory=dict)  # holders' idleness, from the last heartbeat
    quit: bool = False
    height: int = 24  # the screen's lines, as last drawn: how much of a followed log to read
    shown: int | None = None  # the poller's round the frame shows
    _queue: tuple[str, list[QueueRecord]] = ("", [])  # the saved queue's text and its records

    @property
    def watcher(self) -> Watcher:
        return self.viewer.watcher

    # -- rounds ---------------------------------------------------------------------------------------------------
    def refresh(self, events: list[Event] | None = None) -> bool:
        """The poller's round where one is due (this viewer's, if it polls), then a new frame if the log has a
        round the frame does not show (and the followed log); True when it drew a new frame."""
        events = self.viewer.step() if events is None else events
        said = holders_idle_of(events)
        if said is not None:
            self.idle = said
        last, _ = self.watcher.store.watch_round(self.watcher.cluster.name)
        n = last.round if last else 0
        if self.frame is not None and n == self.shown:
            return False
        self.shown, self.frame = n, self.frame_now()
        if self.view.selected is None or self.frame.row(self.view.selected) is None:
            self.view.selected = self.frame.rows[0].key if self.frame.rows else None
        if self.view.mode is Mode.LOG:
            self.load_log(self.height)
        return True

    def frame_now(self) -> Frame:
        """The frame of the poller's last round, from the state it saved and its queue: this viewer's own where it
        took that round, else the one the poller saved."""
        w = self.watcher
        queue = w.queue if self.viewer.rounds else self._saved_queue()
        saved, meta = w.store.watch_load(w.cluster.name)
        return build_frame(w.cluster.name, w.cluster.tiers, w.clock(), saved, meta, queue, self.idle)

    def _saved_queue(self) -> list[QueueRecord]:
        w = self.watcher
        text = w.store.watch_queue(w.cluster.name) or "[]"
        if text != self._queue[0]:
            self._queue = (text, queue_json.loads(text))
        return self._queue[1]

    def selected(self) -> JobRow | None:
        if self.frame is None or self.view.selected is None:
            return None
        return self.frame.row(self.view.selected)

    # -- keys -----------------------------------------------------------------------------------------------------
    def key(self, k: str, lines: int = 24) -> None:
        """One key: ``lines`` is the screen's height (how much log to read)."""
        v = self.view
        if v.mode is Mode.CONFIRM:
            v.mode = Mode.TABLE
            if k in ("y", "Y"):
                self.promote()
            else:
                v.message = "not promoted"
            return
        v.message = ""
        if k == "q":
            self.quit = True
        elif k in ("up", "down"):
            self.move(-1 if k == "up" else 1)
            if v.mode is Mode.LOG:
                self.load_log(lines)
            elif v.mode is Mode.WHY:
                self.why()
        elif k == "esc":
            v.mode = Mode.TABLE
        elif k == "l":
            if v.mode is Mode.LOG:
                v.mode = Mode.TABLE
            else:
                v.mode = Mode.LOG
                self.load_log(lines)
        elif k == "w":
            if v.mode is Mode.WHY:
                v.mode = Mode.TABLE
            else:
                self.why()
        elif k == "p":
            self.propose()

    def move(self, by: int) -> None:
        if self.frame is None or not self.frame.rows:
            return
        keys = [r.key for r in self.frame.rows]
        at = keys.index(self.view.selected) if self.view.selected in keys else 0
        self.view.selected = keys[min(max(at + by, 0), len(keys) - 1)]

    def load_log(self, lines: int = 24) -> None:
        """The last lines of the selected job's log: one read through the watch's transport."""
        r, v = self.selected(), self.view
        if r is None or not r.log_path:
            v.mode, v.message = Mode.TABLE, "no log roach knows of for this job" if r else "no job selected"
            return
        v.log_title = f"log of job {r.key}{f' (run {r.run_id})' if r.run_id else ''}: {r.log_path}"
        try:
            text = ClusterFS(self.watcher.client.transport).tail(r.log_path, max(lines, 10))
        except RoachError as err:
            v.log_lines = [f"(no log to read yet: {err.message.splitlines()[0]})"]
            return
        v.log_lines = text.splitlines()

    def why(self) -> None:
        r, v = self.selected(), self.view
        if r is None:
            v.message = "no job selected"
        elif r.explanation is None:
            v.mode, v.message = Mode.TABLE, f"job {r.key} is {r.state}: it is not pending"
        else:
            label = f"job {r.key}" + (f" (run {r.run_id})" if r.run_id else "") + f" on {self.watcher.cluster.name}"
            v.mode, v.why_lines = Mode.WHY, why_lines(label, r.tier, r.explanation)
            if r.estimate:
                e = r.estimate
                if e.get("likely_in_s") is not None:
                    v.why_lines.append(
                        f"  starts:  likely in {human_seconds(e['likely_in_s'])} "
                        f"({human_seconds(e['earliest_in_s'])} to "
                        f"{'no bound' if e['latest_in_s'] is None else human_seconds(e['latest_in_s'])})"
                    )
                v.why_lines.append(f"           basis: {e['basis']}")

    def propose(self) -> None:
        """Ask before promoting the selected job to the tier the watch's plan names for it now."""
        r, v = self.selected(), self.view
        if r is None:
            v.message = "no job selected"
        elif r.explanation is None:
            v.message = f"job {r.key} is {r.state}: only a pending job is promoted (`roach move` moves a running run)"
        elif not r.run_id:
            v.message = f"job {r.key} is no roach run: only runs in roach's store are promoted"
        elif r.promotion is None:
            v.message = (
                f"no promotion for job {r.key} now: no higher tier has room for it "
                "(one is proposed once a tier has room and the job pended two rounds)"
            )
        else:
            v.mode = Mode.CONFIRM
            # the answer first: a narrow terminal cuts the line's end
            v.question = (
                f"promote job {r.key} from {r.tier} to {r.promotion}? [y/N]  (run {r.run_id}: held, resubmitted "
                "there, cancelled)"
            )

    def promote(self) -> None:
        """The confirmed promotion, as `roach promote` makes it."""
        r, w = self.selected(), self.watcher
        if r is None or r.promotion is None:
            return
        try:
            new = promote_job(r.key, r.promotion, cluster=w.cluster, store=w.store, repo_root=self.repo_root)
        except RoachError as err:
            self.view.message = f"could not promote job {r.key}: {err.message.splitlines()[0]}"
            return
        w.supersede(r.key, new.job_id)
        self.view.message = f"promoted job {r.key} (run {r.run_id}) to {r.promotion}: now job {new.job_id}"


def live_loop(top: Top, console: Console) -> None:
    """Rounds every interval, keys and resizes in between; the screen is redrawn on each change."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    console.set_alt_screen(True)
    console.show_cursor(False)
    try:
        size = terminal_size(console)
        top.height = size[1]
        draw(console, screen_lines(None, top.view, *size), clear=True)
        due = 0.0
        while not top.quit:
            dirty = clear = False
            if time.monotonic() >= due:
                dirty = top.refresh()
                due = time.monotonic() + top.viewer.next_wait()
            now_size = terminal_size(console)
            if now_size != size:
                size, dirty, clear = now_size, True, True
                top.height = size[1]
            if dirty:
                draw(console, screen_lines(top.frame, top.view, *size), clear)
            for k in read_keys(fd, min(TICK_S, due - time.monotonic())):
                if top.view.mode is Mode.CONFIRM and k in ("y", "Y"):
                    top.view.message = "promoting ..."
                    draw(console, screen_lines(top.frame, top.view, *size))
                top.key(k, size[1])
                if top.quit:
                    break
                draw(console, screen_lines(top.frame, top.view, *size))
    finally:
        console.show_cursor(True)
        console.set_alt_screen(False)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@click.command()
@cluster_option
@run_as_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds between rounds, never under the cluster's floor (60 s on a real cluster; the lab 1 s).",
)
@job_ids_option
@click.option("--once", is_flag=True, help="One round: print its frame to stdout and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the frame's data as one JSON object.")
@repo_option
@stall_after_option
@ssh_alias_option
@ssh_config_option
def top(
    cluster: str | None,
    run_as: str | None,
    interval: float,
    job_ids: tuple[str, ...],
    once: bool,
    as_json: bool,
    repo_root: str,
    stall_after: float,
    ssh_alias: str | None,
    ssh_config: str | None,
) -> None:
    """Your jobs at a glance, live: the tier table, one row per watched job (state, tier, nodes,
    restarts/preemptions, progress, steps per minute, ETA, the pending reason and its outlook, stalls).

    Columns: R/P is Slurm's restart count / the preemptions the watch saw; ST/M the run's steps per minute
    over its recent progress lines; ETA the time its remaining steps take at that pace (docs/top.md).

    Keys: up/down select, l follows the job's log, w says why it is pending, p proposes a promotion and asks
    before making it, q quits. It shows the rounds of the one poller of this store and cluster: its own, or
    those of a `roach watch` (or another top) already running.
    """
    if as_json and not once:
        raise click.BadParameter("needs --once (the live screen is for a terminal)", param_hint="--json")
    check_job_ids(job_ids)
    if not once and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("roach top needs a terminal", hint="`roach top --once` prints one frame (--json: its data)")
    with Store() as store:
        name = cluster or (pick_cluster(None, store) if not job_ids else None)
        if name is None:
            raise UsageError("--job needs --cluster", hint="e.g. --cluster lab")
        c = cli_cluster(pick_cluster(name, store), run_as)
        c = with_ssh_override(c, *((ssh_alias, ssh_config) if ssh_alias else recorded_way(store, c, ssh_config)))
        client = c.client()
        w = Watcher(
            c,
            client,
            store,
            interval_s=interval,
            job_ids=tuple(job_ids),
            stall=StallRule(min_s=stall_after),
            rate_limit=None if once else rate_limit_of(client),
        )
        with Viewer(w, rank=Rank.TOP) as viewer:  # the poller if none runs, else a reader of its rounds
            t = Top(viewer, repo_root)
            if once:
                t.refresh(viewer.once())
                assert t.frame is not None
                if as_json:
                    click.echo(json.dumps(stamp("top", t.frame.to_json()), indent=2))
                    return
                console = Console(highlight=False)
                width = console.size.width if console.is_terminal else 80
                for line in screen_lines(t.frame, t.view, width, len(t.frame.rows) + 40, fill=False)[:-1]:
                    console.print(line, soft_wrap=True)
                return
            try:
                live_loop(t, Console(highlight=False))
            except KeyboardInterrupt:  # as `roach watch` exits on Ctrl-C
                click.echo("stopped; the jobs go on (`roach top` or `roach watch` picks up where this one left)")
                sys.exit(130)
    click.echo("stopped; the jobs go on (`roach top` or `roach watch` picks up where this one left)")
