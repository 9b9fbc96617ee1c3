"""The ``--json`` records of the remote-workspace commands (``doctor``, ``sync``, ``sbatch``, ``wait``,
``pull``, ``verify``): built here, printed by :mod:`roach.cli.workspace` and :mod:`roach.cli.remote`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from roach.cli.jsonout import stamp
from roach.records.workspace_job import WorkspaceJob, run_id_of
from roach.workspace.backend import PullResult, Submission, SyncResult
from roach.workspace.doctor import Check
from roach.workspace.verify import VerifyResult


def doctor_json(cluster: str, checks: Sequence[Check]) -> dict[str, Any]:
    """``roach doctor --json``: every check in order, and whether all passed."""
    return stamp(
        "doctor", {"cluster": cluster, "ok": all(ch.ok for ch in checks), "checks": [ch.to_json() for ch in checks]}
    )


def sync_json(res: SyncResult) -> dict[str, Any]:
    """``roach sync --json``: what went where, and which files were sent (or would be, in a dry run)."""
    return stamp("sync", asdict(res))


def sbatch_json(sub: Submission) -> dict[str, Any]:
    """``roach sbatch --json``: the job, what roach added to the script, and where its bundle is."""
    return stamp(
        "sbatch",
        {
            "job_id": sub.job_id,
            "run_id": run_id_of(sub.job_id),
            "cluster": sub.cluster,
            "script": sub.script.path,
            "added": list(sub.script.added),
            "notes": list(sub.script.notes),
            "remote_bundle": sub.remote_bundle,
            "local_bundle": str(sub.local_bundle),
        },
    )


def pull_fields(res: PullResult) -> dict[str, Any]:
    """What a pull copied back (``roach pull``'s record without its ``schema``; ``wait --pull`` nests it)."""
    return {
        "job_id": res.job_id,
        "status": res.record.status,
        "bundle": str(res.bundle),
        "bundle_found": res.bundle_found,
        "copied": list(res.copied),
        "missing": list(res.missing),
        "still_queued": list(res.still_queued),
        "notes": list(res.notes),
    }


def pull_json(res: PullResult) -> dict[str, Any]:
    """``roach pull --json``."""
    return stamp("pull", pull_fields(res))


def wait_json(rec: WorkspaceJob, pulled: PullResult | None = None) -> dict[str, Any]:
    """``roach wait --json``: the job's final ``job.json`` record, and with ``--pull`` what was copied back."""
    return stamp("wait", {**asdict(rec), **({"pull": pull_fields(pulled)} if pulled else {})})


def verify_json(res: VerifyResult) -> dict[str, Any]:
    """``roach verify --json``: the files the interface requires, and each problem with why."""
    return stamp(
        "verify",
        {
            "interface": str(res.interface),
            "ok": res.ok,
            "required": list(res.required),
            "missing": list(res.missing),
            "problems": [{"path": f.path, "reason": f.reason} for f in res.problems],
            "notes": list(res.notes),
        },
    )
