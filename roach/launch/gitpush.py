"""A commit for a cluster that cannot reach the git remote: sent from here as a git bundle over SSH.

The clone protocol (``node.sh prepare``) clones ``ROACH_REPO_URL`` at ``ROACH_COMMIT``. A cluster behind a
firewall cannot reach GitHub or the lab's git server, but roach can reach the cluster. So roach keeps a
bare mirror of the repository on the cluster, ``<mirror_root>/<repo>.git``, and sends it the commit:

1. One remote call: create the mirror if needed, and check whether it already has the commit. If not,
   list the commits it has under ``refs/roach/``.
2. If the commit is missing, build ``git bundle create - <commit> --not <those it has and we know>``
   here. This is an incremental bundle: only the objects the mirror lacks. Send it on stdin through the
   shared connection and fetch it into ``refs/roach/<commit>``. A bundle is checked by git on fetch, and
   the commit is looked up again afterwards.
3. The job then clones from the mirror's path (``ROACH_REPO_URL=<mirror>``), into the same clone layout
   as always. The mirror must be on a filesystem the compute nodes see, as ``clone_root`` already must be.

Nothing is sent when the mirror already has the commit.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
from dataclasses import dataclass
from pathlib import Path

from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.fleet.userconfig import get_cluster
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.transport import Transport

DEFAULT_MIRROR_ROOT = "~/roach_clones/.mirrors"

# $1 mirror, $2 commit: "have", or "need" then the commits it has under refs/roach/.
_STATE = (
    'set -e; m=$1; [ -d "$m" ] || git init -q --bare "$m"; '
    'if git -C "$m" cat-file -e "$2^{commit}" 2>/dev/null; then echo have; else echo need; '
    'git -C "$m" for-each-ref --format="%(objectname)" refs/roach/; fi'
)
# $1 mirror, $2 commit, $3 temp file: the bundle on stdin, fetched into refs/roach/<commit>.
_FETCH = (
    'set -e; m=$1; b=$3; trap \'rm -f "$b"\' EXIT; cat > "$b"; '
    'git -C "$m" fetch -q "$b" "refs/roach/$2:refs/roach/$2"; git -C "$m" cat-file -e "$2^{commit}"'
)


@dataclass(frozen=True)
class PushedCommit:
    url: str  # what ROACH_REPO_URL should be: the mirror's path on the cluster
    commit: str
    sent_bytes: int  # 0 when the mirror had the commit already
    basis: tuple[str, ...]  # commits the mirror had that the bundle was built against


def _git(repo: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True)
    if proc.returncode != 0:
        raise RoachError(f"git {' '.join(args[:2])} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def push_commit(
    cluster: Cluster | str,
    repo_root: str | os.PathLike[str] = ".",
    commit: str | None = None,
    *,
    mirror_root: str = DEFAULT_MIRROR_ROOT,
    transport: Transport | None = None,
) -> PushedCommit:
    """Make ``commit`` (default: HEAD) of the repository at ``repo_root`` present in the cluster's mirror."""
    c = get_cluster(cluster)
    t = transport if transport is not None else c.transport()
    root = Path(_git(Path(repo_root), "rev-parse", "--show-toplevel").stdout.decode().strip())
    sha = _git(root, "rev-parse", "--verify", f"{commit or 'HEAD'}^{{commit}}").stdout.decode().strip()
    fs = ClusterFS(t)
    mirror = posixpath.join(fs.expand(mirror_root), f"{root.name}.git")
    fs.makedirs(posixpath.dirname(mirror))
    state = t.run(["sh", "-c", _STATE, "sh", mirror, sha])
    lines = state.stdout.split()
    if state.returncode != 0 or not lines or lines[0] not in ("have", "need"):
        raise RoachError(
            f"could not prepare the git mirror {mirror} on {c.name}: {state.stderr.strip()}",
            hint="git must be installed on the login host",
        )
    if lines[0] == "have":
        return PushedCommit(mirror, sha, 0, ())
    known = [
        s
        for s in lines[1:]
        if subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{s}^{{commit}}"], capture_output=True).returncode
        == 0
    ]
    # A bundle carries refs: name the commit by a ref that exists only while the bundle is built.
    ref = f"refs/roach/{sha}"
    _git(root, "update-ref", ref, sha)
    try:
        data = _git(root, "bundle", "create", "-", ref, *(f"^{s}" for s in known)).stdout
    finally:
        _git(root, "update-ref", "-d", ref)
    res = t.run(["sh", "-c", _FETCH, "sh", mirror, sha, f"{mirror}/roach-incoming-{sha[:12]}.bundle"], input=data)
    if res.returncode != 0:
        raise RoachError(
            f"sending commit {sha[:12]} to {mirror} on {c.name} failed: {res.stderr.strip()}",
            hint="check the free space and permissions of the mirror's directory",
        )
    return PushedCommit(mirror, sha, len(data), tuple(known))
