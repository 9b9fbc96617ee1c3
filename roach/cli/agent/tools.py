"""The agent interface's tools: each one is a `roach` command run with ``--json`` (:mod:`roach.cli.agent.invoke`).

A tool's arguments become the command's options, its result is the JSON the command prints, and whatever the
command refuses the tool refuses with the same message and hint. ``run_as`` is fixed when the server starts
(`roach mcp --run-as USER`), so an agent acts as one user and cannot pick another.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from roach.cli.agent.invoke import CommandFailed, Ran, run_command
from roach.records.results import JOB_NOT_COMPLETED


def _submission(
    resources: str,
    cluster: str | None,
    env: dict[str, str] | None,
    experiment: str | None,
    name: str | None,
    repo_root: str,
    description: str | None,
    log_root: str | None,
    run_root: str | None,
    python_env: str | None = None,
    tier: str | None = None,
) -> list[str]:
    """The options `roach submit` and `roach sweep` share (the CLI's ``submission_options``)."""
    return [
        *_opt("--cluster", cluster),
        *_opt("--resources", resources),
        *_opt("--tier", tier),
        *_pairs("--env", env),
        *_opt("--experiment", experiment),
        *_opt("--name", name),
        *_opt("--repo-root", repo_root),
        *_opt("--description", description),
        *_opt("--log-root", log_root),
        *_opt("--run-root", run_root),
        *_opt("--python-env", python_env),
    ]


def _opt(name: str, value: Any) -> list[str]:
    """``--name value`` when the value is given (None: the command's default)."""
    return [] if value is None else [name, str(value)]


def _flag(name: str, on: bool) -> list[str]:
    return [name] if on else []


def _many(name: str, values: Iterable[str] | None) -> list[str]:
    return [a for v in values or () for a in (name, v)]


def _pairs(name: str, values: dict[str, Any] | None) -> list[str]:
    return [a for k, v in (values or {}).items() for a in (name, f"{k}={v}")]


@dataclass
class AgentTools:
    """One agent's tools over roach's commands, as ``run_as`` (None: as whoever runs the server)."""

    run_as: str | None = None

    def _run(self, name: str, args: Sequence[str], positional: Sequence[str] = ()) -> Ran:
        # `--` before the positionals: a run id or target that starts with "-" stays a value, never an option
        ran = run_command([name, *args, *_opt("--run-as", self.run_as), "--", *positional])
        if ran.exit_code != 0:
            said = (ran.stderr.strip() + "\n" + ran.stdout.strip()).strip()
            raise CommandFailed(f"roach {name} exited {ran.exit_code}" + (f": {said}" if said else ""), ran.exit_code)
        return ran

    def _json(self, name: str, args: Sequence[str], positional: Sequence[str] = ()) -> str:
        ran = self._run(name, [*args, "--json"], positional)
        ran.json()  # it must be JSON; the text goes back as the command printed it
        return ran.stdout

    # -- the tools ------------------------------------------------------------------------------------------
    def submit(
        self,
        target: str,
        resources: str,
        cluster: str | None = None,
        args: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        experiment: str | None = None,
        name: str | None = None,
        repo_root: str = ".",
        run_id: str | None = None,
        description: str | None = None,
        log_root: str | None = None,
        run_root: str | None = None,
        python_env: str | None = None,
        tier: str | None = None,
        dry_run: bool = False,
    ) -> str:
        argv = [
            *_submission(
                resources,
                cluster,
                env,
                experiment,
                name,
                repo_root,
                description,
                log_root,
                run_root,
                python_env,
                tier,
            ),
            *_opt("--args-json", json.dumps(args) if args else None),
            *_opt("--run-id", run_id),
            *_flag("--dry-run", dry_run),
        ]
        return self._json("submit", argv, [target])

    def sweep(
        self,
        target: str,
        grid: list[dict[str, Any]],
        resources: str,
        cluster: str | None = None,
        parallelism: int | None = None,
        env: dict[str, str] | None = None,
        experiment: str | None = None,
        name: str | None = None,
        sweep_id: str | None = None,
        repo_root: str = ".",
        description: str | None = None,
        log_root: str | None = None,
        run_root: str | None = None,
        max_array_size: int | None = None,
        python_env: str | None = None,
        tier: str | None = None,
        dry_run: bool = False,
    ) -> str:
        fd, path = tempfile.mkstemp(prefix="roach-grid-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w") as f:
                f.writelines(json.dumps(entry) + "\n" for entry in grid)
            argv = [
                *_submission(
                    resources,
                    cluster,
                    env,
                    experiment,
                    name,
                    repo_root,
                    description,
                    log_root,
                    run_root,
                    python_env,
                    tier,
                ),
                *_opt("--grid", path),
                *_opt("--parallelism", parallelism),
                *_opt("--sweep-id", sweep_id),
                *_opt("--max-array-size", max_array_size),
                *_flag("--dry-run", dry_run),
            ]
            return self._json("sweep", argv, [target])
        finally:
            os.unlink(path)

    def status(self, ref: str, cluster: str | None = None) -> str:
        return self._json("status", _opt("--cluster", cluster), [ref])

    def ls(self, cluster: str | None = None, limit: int = 20) -> str:
        return self._json("ls", [*_opt("--cluster", cluster), *_opt("--limit", limit)])

    def logs(self, ref: str, lines: int = 50, cluster: str | None = None) -> str:
        ran = self._run("logs", [*_opt("-n", lines), *_opt("--cluster", cluster)], [ref])
        return json.dumps({"ref": ref, "lines": lines, "log": ran.stdout, "note": ran.stderr.strip() or None})

    def cancel(self, ref: str, cluster: str | None = None, wait_s: float = 120.0) -> str:
        return self._json("cancel", [*_opt("--cluster", cluster), *_opt("--wait", wait_s)], [ref])

    def why(self, ref: str, cluster: str | None = None) -> str:
        return self._json("why", _opt("--cluster", cluster), [ref])

    def plan(self, gpus: int, cluster: str | None = None, nodes: int = 1, time: str = "01:00:00", runs: int = 1) -> str:
        argv = [*_opt("--gpus", gpus), *_opt("--cluster", cluster), *_opt("--nodes", nodes), *_opt("--time", time)]
        return self._json("plan", [*argv, *_opt("--runs", runs)])

    def move(
        self,
        ref: str,
        to: str,
        cluster: str | None = None,
        force: bool = False,
        wait_s: float = 300.0,
        repo_root: str = ".",
        allow_new_commit: bool = False,
    ) -> str:
        argv = [
            *_opt("--to", to),
            *_opt("--cluster", cluster),
            *_flag("--force", force),
            *_opt("--wait", wait_s),
            *_opt("--repo-root", repo_root),
            *_flag("--allow-new-commit", allow_new_commit),
        ]
        return self._json("move", argv, [ref])

    def clean(self, experiment: str, cluster: str | None = None, dry_run: bool = True) -> str:
        return self._json("clean", [*_opt("--cluster", cluster), *_flag("--dry-run", dry_run)], [experiment])

    def report(self, name: str) -> str:
        return self._json("report", [], [name])

    def watch_events(
        self, cursor: int = 0, cluster: str | None = None, jobs: list[str] | None = None, limit: int | None = None
    ) -> str:
        """`roach watch --once --json --since CURSOR`: the watch log's events after ``cursor``, a round taken
        first where no poller runs."""
        ran = run_command(
            [
                "watch",
                "--once",
                "--json",
                *_opt("--since", cursor),
                *_opt("--cluster", cluster),
                *_many("--job", jobs),
                *_opt("--run-as", self.run_as),
            ]
        )
        if ran.exit_code not in (0, JOB_NOT_COMPLETED):
            said = (ran.stderr.strip() + "\n" + ran.stdout.strip()).strip()
            raise CommandFailed(f"roach watch exited {ran.exit_code}: {said}", ran.exit_code)
        events = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
        stale = bool(events) and events[0]["seq"] <= cursor  # a cursor the log never gave: all it keeps
        dropped = 0 if stale or not events or not cursor else max(0, events[0]["seq"] - cursor - 1)
        if limit is not None:
            events = events[:limit]
        out = {
            "events": events,
            "cursor": events[-1]["seq"] if events else cursor,
            "dropped": dropped,
            "stale_cursor": stale,
            # `roach watch`'s own status: 0 every watched job COMPLETED or still going, 6 one ended otherwise
            "watch_exit_code": ran.exit_code,
        }
        return json.dumps(out, indent=2)
