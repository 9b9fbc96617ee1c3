"""The lab's config files (slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf, my.cnf), written from their templates
for a :class:`~roach.lab.config.LabConfig`, and the database password they share.

Apart from the configuration itself, which every command that reaches the lab reads (its site module): what
they are written from needs the installed Slurm's release (:mod:`roach.lab.release`), only ``roach lab up`` does.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from string import Template

from roach._fs import atomic_write
from roach.lab import release
from roach.lab.config import BACKUP_SLURMCTLD_TIMEOUT, CLUSTER_NAME, LabConfig, PreemptSignalSetting
from roach.lab.hosts import BACKUP_CONTROLLER, CONTROLLER, LOGIN

TEMPLATES = Path(__file__).parent / "templates"  # the config files' templates (package data, beside this module)


def _values(cfg: LabConfig) -> dict[str, str]:
    have = release.installed()
    if cfg.memory_cgroup:
        cgroup = "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\nAllowedSwapSpace=0"
        tracking = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
    else:
        cgroup = (
            "CgroupPlugin=disabled"
            if have is not None and have.knows_cgroup_plugin_disabled
            else ("# (this Slurm has no CgroupPlugin=disabled: the default, where no cgroup plugin is used)")
        )
        tracking = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none"
    setting = PreemptSignalSetting(cfg.preempt_signal_setting)
    where = addresses(cfg)
    params = [setting.line()] if cfg.preempt_send_user_signal else []
    return {
        "cluster": CLUSTER_NAME,
        "state": str(cfg.state),
        "host": cfg.host,
        "munge_socket": str(cfg.munge_socket),
        "min_job_age": str(cfg.min_job_age),
        "slurmd_timeout": str(cfg.slurmd_timeout),
        "max_array_size": str(cfg.max_array_size),
        "cred_expire": str(cfg.cred_expire),
        "max_job_count": str(cfg.max_job_count),
        "first_job_id": str(cfg.first_job_id),
        "ctld_parameters": "\n".join(params),
        "prolog": f"Prolog={cfg.prolog}" if cfg.prolog else "# no Prolog (`roach lab up --prolog PATH` sets one)",
        "cgroup_plugin": cgroup,
        "tracking": tracking,
        "db_password": db_password(cfg),
        "jwt": _jwt_lines(cfg),
        **{k: str(v) for k, v in cfg.ports.items()},
        "ctld_addr": where["controller"],
        "ctld_host": CONTROLLER if cfg.hosts else cfg.host,
        **_controller_values(cfg, where),
        "node_lines": "\n".join(_node_line(cfg, n, where[n]) for n in cfg.node_names),
        "node_list": ",".join(cfg.node_names),
        "gres_lines": "\n".join(_gres_line(cfg, n) for n in cfg.node_names),
    }


def _controller_values(cfg: LabConfig, where: dict[str, str]) -> dict[str, str]:
    """slurm.conf's controller lines: its host (and the backup's, second, with its SlurmctldTimeout), and where
    slurmctld keeps its pid and log: the state directory, or with a backup each controller host's own /tmp (the
    two share slurm.conf, as a site's do, and each its local disk)."""
    primary = CONTROLLER if cfg.hosts else cfg.host  # slurmdbd's DbdHost too
    if not cfg.backup_controller:
        return {
            "ctld_hosts": f"SlurmctldHost={primary}({where['controller']})",
            "ctld_pid_file": f"{cfg.state}/run/slurmctld.pid",
            "ctld_log_file": f"{cfg.state}/log/slurmctld.log",
        }
    hosts = (
        f"SlurmctldHost={primary}({where['controller']})\n"
        f"SlurmctldHost={BACKUP_CONTROLLER}({where[BACKUP_CONTROLLER]})\n"
        "# The backup takes over once the primary has not answered for this long (Slurm's default: 120 s).\n"
        f"SlurmctldTimeout={BACKUP_SLURMCTLD_TIMEOUT}"
    )
    return {"ctld_hosts": hosts, "ctld_pid_file": "/tmp/slurmctld.pid", "ctld_log_file": "/tmp/slurmctld.log"}


def _node_line(cfg: LabConfig, node: str, addr: str) -> str:
    """slurm.conf's line of one node: more CPUs and memory than this machine has (nothing checks them)."""
    host = node if cfg.hosts else cfg.host
    return (
        f"NodeName={node} NodeHostname={host} NodeAddr={addr} Port={cfg.node_port(node)} CPUs=8 RealMemory=16000 "
        f"Gres=gpu:{cfg.gpus_per_node} State=UNKNOWN"
    )


def _gres_line(cfg: LabConfig, node: str) -> str:
    """gres.conf's line of one node: its fake GPUs, the character devices `roach lab up` makes."""
    return f"NodeName={node} Name=gpu File={cfg.state}/dev/{node}/nvidia[0-{cfg.gpus_per_node - 1}]"


def addresses(cfg: LabConfig) -> dict[str, str]:
    """The controller's address and each node's: all 127.0.0.1 on one host, else each its own on the bridge (and
    the login host's)."""
    if not cfg.hosts:
        return {"controller": "127.0.0.1", **{n: "127.0.0.1" for n in cfg.node_names}}
    fabric = cfg.fabric
    hosts = (*cfg.node_names, LOGIN, *((BACKUP_CONTROLLER,) if cfg.backup_controller else ()))
    return {"controller": fabric.controller_addr, **{n: fabric.node_addr(n) for n in hosts}}


def rest_url(cfg: LabConfig) -> str:
    """Where the lab's slurmrestd answers: the controller host's address on the bridge, or 127.0.0.1."""
    return f"http://{addresses(cfg)['controller']}:{cfg.port('rest_port')}"


def jwt_key(cfg: LabConfig) -> Path:
    """The key slurmctld and slurmdbd sign and check JWT tokens with: made once, root's, mode 0600."""
    if not cfg.jwt_key.exists():
        atomic_write(cfg.jwt_key, secrets.token_bytes(32), mode=0o600)
    return cfg.jwt_key


def _jwt_lines(cfg: LabConfig) -> str:
    """slurm.conf's and slurmdbd.conf's lines that accept JWT tokens besides munge, where Slurm has the plugin."""
    if not any(Path(d, "auth_jwt.so").exists() for d in _plugin_dirs()):
        return "# (no auth/jwt plugin installed: no JWT tokens, no slurmrestd)"
    return f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={jwt_key(cfg)}"


def _plugin_dirs() -> tuple[str, ...]:
    """Where Debian's Slurm keeps its plugins."""
    return ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib/slurm")


def db_password(cfg: LabConfig) -> str:
    """The slurmdbd's database password, made once and kept in a root-only file."""
    path = cfg.etc / "db_password"
    if path.exists():
        return path.read_text().strip()
    pw = secrets.token_hex(16)
    atomic_write(path, pw + "\n", mode=0o600)
    return pw


def render(cfg: LabConfig) -> list[Path]:
    """Write every config file from its template; returns the files whose content changed."""
    values = _values(cfg)
    changed = []
    for name, mode in (
        ("slurm.conf", 0o644),
        ("gres.conf", 0o644),
        ("cgroup.conf", 0o644),
        ("slurmdbd.conf", 0o600),
        ("my.cnf", 0o644),
    ):
        template = (TEMPLATES / name).read_text()
        text = Template(template).substitute(values)
        path = cfg.etc / name
        if not path.exists() or path.read_text() != text:
            atomic_write(path, text, mode=mode)
            changed.append(path)
        os.chmod(path, mode)
    return changed
