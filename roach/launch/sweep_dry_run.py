"""A sweep's dry run: every check :func:`~roach.launch.sweep.sweep` makes, and what it would queue, with nothing
queued or written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from roach.launch.options import Options, SubmitFields
from roach.launch.prepare import Prepared
from roach.launch.sweep import prepare_sweep, split


@dataclass(frozen=True)
class SweepDryRun:
    """What :func:`~roach.launch.sweep.sweep` would queue: the prepared submission, its id, runs and arrays."""

    prepared: Prepared
    sweep_id: str
    runs: int
    arrays: list[tuple[int, int]]  # (its first run's index, its tasks) of each array, in order
    parallelism: int | None
    run_root: str


def dry_run(
    target: str,
    grid: Sequence[Mapping[str, Any]],
    options: Options | None = None,
    *,
    parallelism: int | None = None,
    sweep_id: str | None = None,
    max_array_size: int | None = None,
    **fields: Unpack[SubmitFields],
) -> SweepDryRun:
    """Every check :func:`~roach.launch.sweep.sweep` makes, and its arrays as the cluster's MaxArraySize (the site
    cache's copy) and ``max_array_size`` split them; nothing is queued or written."""
    checked, p, sweep_id, run_root = prepare_sweep(
        target, grid, Options.of(options, fields), parallelism, sweep_id, max_array_size
    )
    limit = p.client.max_array_size(cached=True)
    arrays = split(len(checked), min(limit, max_array_size or limit))
    return SweepDryRun(p, sweep_id, len(checked), arrays, parallelism, run_root)
