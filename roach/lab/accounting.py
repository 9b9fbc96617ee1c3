"""The lab's accounting: its database user, the cluster record, QOS tiers, the account and its users.

Every step checks before it adds, so `roach lab up` can run any number of times.
"""

from __future__ import annotations

import os
import pwd
import subprocess

from roach.errors import LabError
from roach.lab.conf_files import db_password
from roach.lab.config import ACCOUNT, CLUSTER_NAME, LAB_USER, LabConfig


def _run(argv: list[str], cfg: LabConfig, input: str | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, input=input, env={**os.environ, **cfg.env()}, timeout=60)
    if r.returncode != 0:
        raise LabError(
            f"{' '.join(argv)} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}",
            hint=f"read the logs in {cfg.log_dir}",
        )
    return r.stdout


def ensure_database(cfg: LabConfig) -> None:
    """The slurmdbd's database and its user, made before slurmdbd first starts.

    slurmdbd 26.05 on MariaDB 11.8 dies at start (``_check_mysql_concat_is_sane: null result``) when its
    first connection finds no ``slurm_acct_db``; an empty database made here is one it takes as its own.
    """
    pw = db_password(cfg)
    sql = "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" + "".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{h}' IDENTIFIED BY '{pw}';"
        f"ALTER USER 'slurm'@'{h}' IDENTIFIED BY '{pw}';"
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}';"
        for h in ("127.0.0.1", "localhost")
    )
    _run(["mariadb", f"--defaults-file={cfg.my_cnf}"], cfg, input=sql + "FLUSH PRIVILEGES;\n")


def _names(cfg: LabConfig, what: str, field: str = "name") -> set[str]:
    out = _run(["sacctmgr", "-n", "-P", "show", what, f"format={field}"], cfg)
    return {line.strip() for line in out.splitlines() if line.strip()}


def _sacctmgr(cfg: LabConfig, *args: str) -> None:
    _run(["sacctmgr", "-i", *args], cfg)


def ensure_cluster(cfg: LabConfig) -> None:
    if CLUSTER_NAME not in _names(cfg, "cluster", "cluster"):
        _sacctmgr(cfg, "add", "cluster", CLUSTER_NAME)


# The tiers: a capped high-priority QOS, the normal default, and a low one that the others preempt.
def tiers(cfg: LabConfig) -> dict[str, list[str]]:
    return {
        "low": ["Priority=0", "PreemptMode=requeue", f"GraceTime={cfg.low_grace_time}", "Description=preemptible"],
        "normal": ["Priority=100", "Preempt=low", "Description=default"],
        "high": [
            "Priority=1000",
            "Preempt=low",
            f"MaxTRESPerUser=gres/gpu={cfg.high_gpu_cap}",
            "Description=high priority, capped per user",
        ],
    }


def ensure_tiers_and_users(cfg: LabConfig) -> None:
    existing = _names(cfg, "qos")
    for name, settings in tiers(cfg).items():
        if name not in existing:
            _sacctmgr(cfg, "add", "qos", name)
        _sacctmgr(cfg, "modify", "qos", "where", f"name={name}", "set", *settings)
    if ACCOUNT not in _names(cfg, "account", "account"):
        _sacctmgr(
            cfg, "add", "account", ACCOUNT, f"Cluster={CLUSTER_NAME}", "Description=roach lab", "Organization=roach"
        )
    for user in (pwd.getpwuid(0).pw_name, LAB_USER):
        ensure_user(cfg, user)


def ensure_user(cfg: LabConfig, user: str) -> None:
    """``user`` in the lab's account, with the three QOS and ``normal`` its default."""
    if user not in _names(cfg, "user", "user") or ACCOUNT not in _user_accounts(cfg, user):
        _sacctmgr(cfg, "add", "user", user, f"Account={ACCOUNT}", f"Cluster={CLUSTER_NAME}")
    _sacctmgr(cfg, "modify", "user", "where", f"name={user}", "set", f"DefaultAccount={ACCOUNT}")
    _sacctmgr(
        cfg, "modify", "user", "where", f"name={user}", f"account={ACCOUNT}", "set", "QOS=high,normal,low",
        "DefaultQOS=normal",
    )  # fmt: skip


def _user_accounts(cfg: LabConfig, user: str) -> set[str]:
    out = _run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account"], cfg)
    return {line.strip() for line in out.splitlines() if line.strip()}
