"""Benchmark 7: the fault suite (tests/faults, docs/faults.md) on this lab's Slurm: one row per Slurm version.

Every fault test ends with the step-ledger check and the no-process-left check, so a test passed is a scenario
survived with its ledger intact. The suite runs as pytest does in `make test` (a subprocess, pointed at this lab);
its JUnit XML says what passed. Rows of other Slurm versions (the matrix, run on their Debian releases) are kept
in bench/out/faults-rows.json from their last runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from bench.labenv import OUT, ROOT
from bench.report import Section

ROW = "fault scenarios passed, ledger intact"


@dataclass(frozen=True)
class Outcome:
    passed: int
    failed: list[str]
    skipped: int
    seconds: float

    @property
    def cell(self) -> str:
        total = self.passed + len(self.failed)
        said = f"{self.passed} of {total} tests passed" + (f", {self.skipped} skipped" if self.skipped else "")
        if self.failed:
            said += ": **failed** " + ", ".join(f"`{f}`" for f in self.failed)
        return said


def read_junit(path: Path, seconds: float | None = None, *, only: str = "") -> Outcome:
    """What pytest's ``--junitxml`` file says: tests passed, failed (errors too) by name, skipped; ``only``
    keeps the tests whose class name starts with it; ``seconds`` None: the kept tests' own times."""
    passed, failed, skipped, spent = 0, [], 0, 0.0
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("classname", "").startswith(only):
            continue
        spent += float(case.get("time", 0) or 0)
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed.append(f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}")
        elif "skipped" in kinds:
            skipped += 1
        else:
            passed += 1
    return Outcome(passed, failed, skipped, spent if seconds is None else seconds)


HUNG_RANK = "test_a_stopped_rank_stalls_the_run_and_the_watch_requeues_it_to_resume"


def hung_rank(path: Path) -> dict[str, float]:
    """Scenario 22's timings, as its test records them in the JUnit file (``record_property``): from the rank's
    stop to the watch's requeue and to the resumed step, and the stall limit the watch applied; {} where it did not
    run or pass."""
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.get("name") == HUNG_RANK and not {c.tag for c in case} & {"failure", "error", "skipped"}:
            return {
                p.get("name", ""): float(p.get("value", "nan"))
                for p in case.iter("property")
                if p.get("value") not in (None, "None")
            }
    return {}


def hung_rank_text(t: dict[str, float]) -> str:
    """The hung rank's line (scenario 22: a 2-node run, one rank SIGSTOPped; the watch's interval 1 s)."""
    if not {"stop_to_requeue_s", "stop_to_resumed_s"} <= t.keys():
        return "\n\nA hung rank (scenario 22): not measured in this run (its test did not pass).\n"
    limit = f"{t['stall_limit_s']:.0f} s" if "stall_limit_s" in t else "not said"
    return (
        "\n\nA hung rank (scenario 22: one rank of a 2-node run SIGSTOPped, `roach watch --on-stall requeue "
        f"--stall-after 5 --interval 1`): {t['stop_to_requeue_s']:.0f} s from the stop to the watch's requeue, "
        f"{t['stop_to_resumed_s']:.0f} s to the resumed step; the stall limit the watch applied: {limit}.\n"
    )


def table(rows: dict[str, dict]) -> str:
    """The section's table: one row per Slurm version."""
    lines = [f"| Slurm | {ROW} | wall time |", "| --- | --- | --- |"]
    for version in sorted(rows, key=lambda v: [int(x) for x in v.split(".")]):
        r = rows[version]
        lines.append(f"| {version} | {r['cell']} | {r['seconds'] / 60:.1f} min |")
    return "\n".join(lines)


ROWS = OUT / "faults-rows.json"  # every Slurm version's row, kept across runs (each run writes its own)


def _earlier_rows() -> dict[str, dict]:
    try:
        return json.loads(ROWS.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def run(lab, jobs, log, pytest_args: tuple[str, ...] = ()) -> Section:
    major, minor, micro = lab.root_client().capabilities().version
    version = f"{major}.{minor:02d}.{micro}"
    junit = OUT / "faults-junit.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ROACH_LAB_DIR": str(lab.cfg.state), "PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "tests/faults",
        f"--junitxml={junit}",
        *pytest_args,
    ]
    log(f"  {' '.join(argv[2:])} (ROACH_LAB_DIR={lab.cfg.state})")
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, check=False)
    outcome = read_junit(junit, time.monotonic() - t0)
    log(f"  Slurm {version}: {outcome.cell} (pytest exit {done.returncode})")
    rows = {**_earlier_rows(), version: {"cell": outcome.cell, "seconds": round(outcome.seconds)}}
    ROWS.write_text(json.dumps(rows, indent=2) + "\n")
    body = (
        "The fault suite (`tests/faults`, scenarios in docs/faults.md) on the lab, one row per Slurm version "
        "(the others from their own runs). Every test ends with the step-ledger check and the no-process-left "
        "check: a test passed is a scenario survived with every step once.\n\n" + table(rows)
    ) + hung_rank_text(hung_rank(junit))
    return Section(7, "Fault suite", body, params={"slurm": version, "failed": len(outcome.failed)})
