"""`roach doctor` for a cluster reached through slurmrestd (``rest_url``): the token, the URL, the data versions,
a held test submission made and cancelled, and how files reach the cluster.

1. ``rest-token``: the token source gives a JWT (the command runs, or the file has mode 600 and a token that
   has not expired); its user and expiry are said, the token never.
2. ``rest-url``: slurmrestd answers ``GET /openapi/v3`` at the URL with that token.
3. ``rest-versions``: the data versions it offers, and the one roach reads of them (refused when none).
4. ``rest-submit``: a held job (``true``, one minute) is submitted, seen in the queue and cancelled.
5. ``files``: over the ssh alias, to the shared file system, or refused with what would carry them.

A failed token or URL stops the list: nothing after it can be checked.
"""

from __future__ import annotations

from datetime import datetime

from roach.errors import RoachError
from roach.fleet.cluster import Cluster
from roach.scheduler.rest.client import RestClient
from roach.scheduler.rest.request import KNOWN, offered_versions, token_expiry
from roach.workspace.doctor_check import Check, attempt

PROBE = "#!/bin/sh\ntrue\n"


def rest_checks(c: Cluster, client: RestClient) -> list[Check]:
    """The REST checks in order; stops after a failed token or URL."""
    api = client.rest
    token = attempt("rest-token", lambda: _token(client))
    if not token.ok:
        return [token]
    try:
        spec = api.spec()
    except RoachError as err:
        return [token, Check("rest-url", False, err.message, err.hint)]
    checks = [token, Check("rest-url", True, f"slurmrestd answers at {api.url} (GET /openapi/v3)")]
    ctld, dbd = offered_versions(spec)

    def versions() -> Check:
        api._versions = None  # chosen from the answer just read
        chosen = api.versions()
        return Check(
            "rest-versions",
            True,
            f"offered: slurm {', '.join(sorted(ctld)) or 'none'}, slurmdb {', '.join(sorted(dbd)) or 'none'}; "
            f"roach reads {chosen[0].value} and {chosen[1].value} (it knows {', '.join(v.value for v in KNOWN)})",
        )

    checks.append(attempt("rest-versions", versions))
    if checks[-1].ok:
        checks.append(attempt("rest-submit", lambda: _submit(c, client)))
    checks.append(files_check(c))
    return checks


def _token(client: RestClient) -> Check:
    source = client.rest.token
    exp = token_expiry(source.token())
    until = f", valid until {datetime.fromtimestamp(exp):%Y-%m-%d %H:%M:%S}" if exp else ""
    how = (
        f"`{' '.join(source.command)}` makes it (renewed before it expires)"
        if source.renewable
        else (f"{source.file} (mode 600) holds it")
    )
    return Check("rest-token", True, f"a JWT for {source.user_name()}{until}: {how}")


def _submit(c: Cluster, client: RestClient) -> Check:
    options = ["--hold", "--job-name=roach-doctor", "--time=1", "--output=/dev/null"]
    options += [f"--account={c.default_account}"] if c.default_account else []
    options += [f"--partition={c.default_partition}"] if c.default_partition else []
    job = client.sbatch(options, PROBE)
    try:
        seen = [r.reason_text for r in client.squeue(job_ids=[job])]
    finally:
        client.scancel([job])
    return Check("rest-submit", True, f"held job {job} was queued ({', '.join(seen) or 'not listed'}) and cancelled")


def files_check(c: Cluster) -> Check:
    if c.ssh_alias:
        return Check("files", True, f"over ssh {c.ssh_alias} (files only: no Slurm command runs there)")
    if c.shared_fs:
        return Check("files", True, "shared: this machine sees the cluster's files at the same paths (shared_fs)")
    return Check(
        "files",
        False,
        "slurmrestd carries no files, and this cluster has neither an ssh alias nor a shared file system",
        f"give [clusters.{c.name}] an ssh_alias for files, or set shared_fs = true; see docs/rest.md",
    )
