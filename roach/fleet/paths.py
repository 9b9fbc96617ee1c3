"""The one check of a path roach writes on the cluster (log root, run root, clone root, secrets dir).

Such a path reaches ``#SBATCH`` lines, where Slurm splits on whitespace, reads ``%`` as a file-name pattern
and quotes its own way, and the batch script and remote commands. Rather than quote it three ways, roach
refuses what would need quoting, before anything is written or queued.
"""

from __future__ import annotations

from roach.errors import UsageError

SAFE_PUNCTUATION = "/._-+,=@:"


def unsafe_characters(path: str) -> list[str]:
    """The characters of ``path`` (after a leading ``~/``) that roach does not put on the cluster, in order."""
    body = path[1:] if path.startswith("~") else path
    bad: list[str] = []
    for c in body:
        if not (c.isalnum() or c in SAFE_PUNCTUATION) and c not in bad:
            bad.append(c)
    return bad


def check_cluster_path(label: str, path: str | None) -> None:
    """Refuse a cluster path that is not absolute or ``~/...``, or that holds characters Slurm or a shell reads."""
    if path is None:
        return
    if not (path.startswith("/") or path == "~" or path.startswith("~/")):
        raise UsageError(f"{label} {path!r} must be absolute or start with ~/ (the cluster's home)")
    bad = unsafe_characters(path)
    if bad:
        shown = " ".join(repr(c) for c in bad)
        raise UsageError(
            f"{label} {path!r} has characters roach does not put in a Slurm job's paths: {shown}",
            hint=f"use a path of letters, digits and {' '.join(SAFE_PUNCTUATION)} (a leading ~/ is the cluster's "
            "home); sbatch splits #SBATCH lines on spaces and reads % as a pattern",
        )
