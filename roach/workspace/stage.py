"""A remote-workspace job whose stage is over: NeuriCo's runtime archived its bundle and removed its remote root.
Apart from :mod:`roach.workspace.file` so that ``roach status`` can say so without loading the workspace file's
parsing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from roach.errors import MissingError

ARCHIVED_ARTIFACTS = "logs/dsi-slurm-artifacts"

__all__ = ["ARCHIVED_ARTIFACTS", "WorkspaceError", "archived_bundle", "earlier_stage_error"]


class WorkspaceError(MissingError):
    """The workspace lacks something roach must not guess (its remote root, a required file)."""


def archived_bundle(workspace: str | os.PathLike[str], job_id: str) -> Path | None:
    """Where the runtime archived job ``job_id``'s bundle after its stage, if it did (and no live one is here)."""
    root = Path(workspace)
    old = root / ARCHIVED_ARTIFACTS / job_id
    return old if old.is_dir() and not (root / "dsi-slurm-artifacts" / job_id).exists() else None


def earlier_stage_error(workspace: str | os.PathLike[str], job_id: str, archived: Path) -> WorkspaceError:
    """The error for a job whose stage is over: where its bundle went, and that its remote root is gone."""
    status = ""
    try:
        status = json.loads((archived / "job.json").read_text()).get("status") or ""
    except (OSError, ValueError, AttributeError):
        pass
    said = f" (its job.json says {status})" if status else ""
    return WorkspaceError(
        f"job {job_id} ran in an earlier stage of {Path(workspace)}: its bundle was archived to {archived}{said}, and "
        "its remote root is gone (NeuriCo's runtime removes the remote root and the workspace file after a stage)",
        hint=f"read {archived}/job.json and its slurm_*.out/.err; nothing of it is left on the cluster to wait for "
        "or pull",
    )
