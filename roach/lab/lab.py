"""`roach lab up | down | status | env`: a real Slurm on this machine (two slurmd, slurmdbd on MariaDB, munge)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from roach._fs import atomic_write
from roach.errors import LabError, UsageError
from roach.lab import accounting, conf_files, load, login, prepare, proxy, release, rest
from roach.lab.config import LAB_USER, LabConfig, PreemptSignalSetting
from roach.lab.controllers import BACKUP_SLURMCTLD, backup_up, ctld_on, one_controller
from roach.lab.daemons import Daemon, check_port_free, listening, wait_for
from roach.lab.hosts import BACKUP_CONTROLLER, CONTROLLER, Fabric
from roach.lab.packages import require_packages, require_root, which
from roach.lab.python import ensure_job_venv, ensure_node_venvs
from roach.lab.saved import default_state_dir


def daemons(cfg: LabConfig) -> list[Daemon]:
    """The lab's daemons in start order."""
    env = tuple(cfg.env().items())
    run, log = cfg.run_dir, cfg.log_dir
    fabric = cfg.fabric if cfg.hosts else None
    mungeds = [_munged(cfg, "munged", cfg.munge_socket.parent)]
    if fabric:  # each host its own munged, with the one key: as a site runs them
        for h in fabric.hosts:
            mungeds.append(_on_host(cfg, fabric, h, _munged(cfg, f"munged-{h}", cfg.munge_binding(h)[0])))
    controller = [
        Daemon(
            "mariadbd",
            (which("mariadbd") or "mariadbd", f"--defaults-file={cfg.my_cnf}"),
            run / "mariadbd.pid",
            log / "mariadbd.log",
            ports=(cfg.port("db_port"),),
            forks=False,
        ),
        Daemon(
            "slurmdbd",
            (which("slurmdbd") or "slurmdbd",),
            run / "slurmdbd.pid",
            log / "slurmdbd.log",
            ports=(cfg.port("dbd_port"),),
            env=env,
        ),
        Daemon(
            "slurmctld",
            (which("slurmctld") or "slurmctld", "-f", str(cfg.slurm_conf)),
            run / "slurmctld.pid",
            log / "slurmctld.log",
            ports=(cfg.port("ctld_port"),),
            env=env,
        ),
    ]
    if cfg.rest:
        controller.append(rest.daemon(cfg, env))
    slurmd = which("slurmd") or "slurmd"
    slurmds = [
        Daemon(
            f"slurmd-{n}",
            (slurmd, "-N", n, "-f", str(cfg.slurm_conf), *_rebooted(cfg, n)),
            run / f"slurmd-{n}.pid",
            log / f"slurmd-{n}.log",
            ports=(cfg.node_port(n),),
            env=env,
        )
        for n in cfg.node_names
    ]
    if fabric:
        ctld = next(d for d in controller if d.name == "slurmctld")
        controller = [_on_host(cfg, fabric, CONTROLLER, ctld_on(cfg, CONTROLLER, d)) for d in controller]
        if cfg.backup_controller:
            backup = replace(ctld_on(cfg, BACKUP_CONTROLLER, ctld), name=BACKUP_SLURMCTLD)
            controller.append(_on_host(cfg, fabric, BACKUP_CONTROLLER, backup))
        slurmds = [_on_host(cfg, fabric, n, d, prepare.home_binding(cfg, n)) for n, d in zip(cfg.node_names, slurmds)]
    way_out = [login.daemon(cfg), _proxy(cfg, fabric)] if fabric else []
    return [*mungeds, *controller, *slurmds, *way_out]


def _rebooted(cfg: LabConfig, node: str) -> tuple[str, ...]:
    """slurmd's ``-b`` on its first start after `roach lab reboot NODE` (the reboot noted after the last slurmd's
    pid file was written): it then registers the node as just booted, as Slurm's own tests make a reboot. The
    boot clock alone (a time namespace) is read as a reboot by 22.05's slurmctld, not by every release's."""
    booted, pidfile = cfg.node_booted(node), cfg.run_dir / f"slurmd-{node}.pid"
    if not booted.exists() or pidfile.exists() and pidfile.stat().st_mtime > booted.stat().st_mtime:
        return ()
    return ("-b",)


def _proxy(cfg: LabConfig, fabric: Fabric) -> Daemon:
    """The hosts' HTTPS proxy (roach/lab/proxy.py) on this machine's address on the bridge; lab.sh gives it to the
    jobs from ``<etc>/https_proxy``."""
    python = os.path.realpath(sys.executable)
    argv = (python, "-m", "roach.lab.proxy", fabric.machine_addr, str(proxy.PORT))
    env = (("PYTHONPATH", str(Path(__file__).resolve().parents[2])),)  # this roach, wherever it runs from
    return Daemon("proxy", argv, cfg.run_dir / "proxy.pid", cfg.log_dir / "proxy.log", forks=False, env=env)


def _on_host(cfg: LabConfig, fabric: Fabric, host: str, d: Daemon, home: tuple[Path, str] | None = None) -> Daemon:
    """``d`` run on ``host``, with that host's munged: in its network namespace its ports are its own, so nothing
    on this machine can hold them."""
    booted = cfg.node_booted(host)
    booted_at = float(booted.read_text()) if booted.exists() else None
    argv = fabric.run_on(host, cfg.etc, cfg.node_tmp(host), d.argv, home, cfg.munge_binding(host), booted_at)
    return replace(d, argv=argv, ports=(), program=d.argv[0])


def _munged(cfg: LabConfig, name: str, home: Path) -> Daemon:
    """A munged with the lab's key, its socket at the lab's path, its seed in ``home`` (where the socket lies
    on this machine)."""
    run, log = cfg.run_dir, cfg.log_dir
    argv = (
        which("munged") or "munged",
        "--force",
        f"--socket={cfg.munge_socket}",
        f"--key-file={cfg.etc / 'munge.key'}",
        f"--pid-file={run / f'{name}.pid'}",
        f"--log-file={log / f'{name}.log'}",
        f"--seed-file={home / 'seed'}",
    )
    return Daemon(name, argv, run / f"{name}.pid", log / f"{name}.log")


def _by_name(cfg: LabConfig) -> dict[str, Daemon]:
    return {d.name: d for d in daemons(cfg)}


def _ok(argv: list[str], cfg: LabConfig) -> bool:
    r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **cfg.env()}, timeout=30)
    return r.returncode == 0


def _nodes_up(cfg: LabConfig) -> bool:
    r = subprocess.run(
        ["sinfo", "-N", "-h", "-o", "%N %t"],
        capture_output=True,
        text=True,
        env={**os.environ, **cfg.env()},
        timeout=30,
    )
    if r.returncode != 0:
        return False
    states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
    return set(states) >= set(cfg.node_names) and all(
        states[n].rstrip("*~#!%$@^-") in {"idle", "mix", "alloc", "comp"} for n in cfg.node_names
    )


# Settings a running lab takes with `scontrol reconfigure` (and sacctmgr for the tiers); others need a restart.
LIVE = {
    "preempt_send_user_signal",
    "preempt_signal_setting",
    "min_job_age",
    "max_array_size",
    "low_grace_time",
    "high_gpu_cap",
    "prolog",
    "slurmd_timeout",
    "rest",
    "node_tmp_mb",
}


def resolve_config(state_dir: str | None = None, **options) -> LabConfig:
    """The configuration to start: the saved one, updated with any option given.

    While the lab runs, only :data:`LIVE` settings may change; any other difference is an error.
    """
    state = Path(state_dir).absolute() if state_dir else default_state_dir()
    options = {k: v for k, v in options.items() if v is not None}
    try:
        saved = LabConfig.load(state)
    except LabError:
        cfg = LabConfig(state_dir=str(state), **options)
        _check_release(cfg)
        return cfg
    wanted = replace(saved, **options)
    _check_release(wanted)
    diff = {k: (v, asdict(wanted)[k]) for k, v in asdict(saved).items() if asdict(wanted)[k] != v}
    if set(diff) - LIVE and any(d.alive() for d in daemons(saved)):
        raise LabError(
            f"the lab in {state} is running with other settings: {', '.join(f'{k} {a!r} -> {b!r}' for k, (a, b) in diff.items())}",
            hint="`roach lab down` first, then `roach lab up` with the new settings",
        )
    return wanted


def _check_release(cfg: LabConfig) -> None:
    """Refuse a setting the installed Slurm has no spelling for, before anything is written or started."""
    if not cfg.preempt_send_user_signal or cfg.preempt_signal_setting != PreemptSignalSetting.PREEMPT.value:
        return
    have = release.installed()
    if have is not None and not have.has_preempt_send_user_signal_in_preempt_parameters:
        raise UsageError(
            f"Slurm {have} has no PreemptParameters=send_user_signal (it came in 23.02)",
            hint=f"use --preempt-signal-setting {PreemptSignalSetting.SLURMCTLD.value}, which every release reads",
        )


def _auth_alt(cfg: LabConfig) -> list[str]:
    """The JWT lines of the lab's slurm.conf and slurmdbd.conf as written now."""
    lines = []
    for conf in (cfg.slurm_conf, cfg.slurm_conf.with_name("slurmdbd.conf")):
        text = conf.read_text() if conf.exists() else ""
        lines += [ln for ln in text.splitlines() if ln.startswith("AuthAlt")]
    return lines


def up(state_dir: str | None = None, log=print, job_packages: tuple[str, ...] = (), **options) -> LabConfig:
    """Start whatever part of the lab is not running; a no-op when it all is.

    ``job_packages`` are pip requirements installed into the venv the lab's jobs run in (e.g. torch).
    """
    require_root()
    require_packages()
    cfg = resolve_config(state_dir, **options)
    if cfg.rest:
        require_packages({"slurmrestd": "slurmrestd"})
    elif rest.daemon(cfg, ()).stop():
        log("stopped slurmrestd (--no-rest)")
    ds = _by_name(cfg)
    if cfg.hosts:
        prepare.rebind_node_tmps(cfg, ds, log)
    if all(d.alive() for d in ds.values()) and _nodes_up(cfg):
        ensure_job_venv(cfg, job_packages)
        saved = LabConfig.load(cfg.state)
        if cfg != saved:
            _reconfigure_live(cfg)
            changed = ", ".join(f"{k} {v!r}" for k, v in asdict(cfg).items() if asdict(saved)[k] != v)
            log(f"lab is up ({cfg.state}); reconfigured live: {changed}")
        else:
            log(f"lab is up ({cfg.state})")
        return cfg
    # The namespaces and every port are checked before anything is written or started.
    if cfg.hosts:
        prepare.check_namespaces(cfg)
    for d in ds.values():
        if not d.alive():
            for port in d.ports:
                check_port_free(port, d.name)
    before = _auth_alt(cfg)
    prepare.write_state(cfg)
    if _auth_alt(cfg) != before:  # JWT on (its plugin installed since they started): read only at a daemon's start
        for name in ("slurmctld", "slurmdbd"):
            if ds[name].stop():
                log(f"restarting {name}: its JWT settings changed")
    if cfg.hosts:
        prepare.make_fabric(cfg)
    prepare.mount_node_tmps(cfg)  # before the nodes' slurmd bind it as their /tmp
    ensure_job_venv(cfg, job_packages)
    ensure_node_venvs(cfg)
    cfg.save()
    ds["munged"].start(ready=lambda: cfg.munge_socket.exists())
    if cfg.hosts:
        for h in cfg.fabric.hosts:
            sock = cfg.munge_binding(h)[0] / cfg.munge_socket.name
            ds[f"munged-{h}"].start(ready=sock.exists)
    prepare.init_mariadb(cfg)
    ds["mariadbd"].start(ready=lambda: _ok(["mariadb-admin", f"--defaults-file={cfg.my_cnf}", "ping"], cfg))
    accounting.ensure_database(cfg)
    ds["slurmdbd"].start(ready=lambda: _ok(["sacctmgr", "-n", "-P", "show", "cluster"], cfg))
    accounting.ensure_cluster(cfg)
    ds["slurmctld"].start(ready=lambda: _ok(["scontrol", "ping"], cfg))
    if cfg.backup_controller:
        ds[BACKUP_SLURMCTLD].start(ready=lambda: backup_up(cfg))
    accounting.ensure_tiers_and_users(cfg)
    # slurmctld reads QOS preemption lists when it (re)configures, not when slurmdbd changes them.
    _reconfigure(cfg, "after setting the QOS tiers")
    if cfg.rest:
        ds["slurmrestd"].start(ready=lambda: rest.listening(cfg))
    for n in cfg.node_names:
        ds[f"slurmd-{n}"].start(ready=lambda: True)
    if cfg.hosts:
        ds["sshd-login"].start(ready=lambda: login.listening(cfg))
        address = cfg.fabric.machine_addr
        ds["proxy"].start(ready=lambda: listening(address, proxy.PORT))
        atomic_write(cfg.etc / "https_proxy", proxy.url(address) + "\n")
    wait_for(
        f"all {cfg.nodes} nodes to register with slurmctld",
        lambda: _nodes_up(cfg) or _resume_down_nodes(cfg),
        timeout=90,
        logs=[ds["slurmctld"], *(ds[f"slurmd-{n}"] for n in cfg.node_names)],
    )
    log(f'lab is up ({cfg.state}); run: eval "$(roach lab env)"')
    return cfg


def _reconfigure_live(cfg: LabConfig) -> None:
    conf_files.render(cfg)
    accounting.ensure_tiers_and_users(cfg)
    _reconfigure(cfg, "for the new settings", nodes=True)
    cfg.save()


def _reconfigure(cfg: LabConfig, why: str, nodes: bool = False) -> None:
    """`scontrol reconfigure`, then wait until one slurmctld of this lab answers and its pid file names it
    (and, with ``nodes``, until both slurmd are alive by their pid files and their nodes up).

    From 23.11 slurmctld and slurmd reconfigure by handing over to a new process (a new pid, the old one exits
    once the new one is up); before, the same process rereads its files. Either way, what follows must find the
    lab whole: `lab up` again must not take an outgoing daemon for the lab's or miss one during the handover.
    """
    ds = _by_name(cfg)
    ctld = ds["slurmctld"]
    if not _ok(["scontrol", "reconfigure"], cfg):
        raise LabError(f"scontrol reconfigure failed {why}", hint=f"read {ctld.logfile}")

    def settled() -> bool:
        if not (one_controller(cfg, ctld) and _ok(["scontrol", "ping"], cfg)):
            return False
        return not nodes or (all(ds[f"slurmd-{n}"].alive() for n in cfg.node_names) and _nodes_up(cfg))

    wait_for(f"slurmctld to take the new configuration ({why})", settled, timeout=60, logs=[ctld])


def _resume_down_nodes(cfg: LabConfig) -> bool:
    """A node left DOWN by an unclean stop comes back only when told; nothing else blocks start-up."""
    r = subprocess.run(
        ["sinfo", "-N", "-h", "-o", "%N %t"],
        capture_output=True,
        text=True,
        env={**os.environ, **cfg.env()},
        timeout=30,
    )
    down = [
        line.split()[0] for line in r.stdout.splitlines() if line.split()[1:] and line.split()[1].startswith("down")
    ]
    if down:
        subprocess.run(
            ["scontrol", "update", f"NodeName={','.join(sorted(set(down)))}", "State=RESUME"],
            capture_output=True,
            env={**os.environ, **cfg.env()},
            timeout=30,
        )
    return False


def down(state_dir: str | None = None, log=print) -> list[str]:
    """Stop the lab's daemons (only those named by its pid files); returns the names that were running."""
    require_root()
    state = Path(state_dir).absolute() if state_dir else default_state_dir()
    try:
        cfg = LabConfig.load(state)
    except LabError:
        log(f"no lab in {state}; nothing to stop")
        return []
    ds = daemons(cfg)
    if load.playing(cfg):  # it would go on submitting to a lab that is gone
        load.stop(cfg)
        log("stopped the load playing on the lab")
    if any(d.alive() for d in ds if d.name in ("slurmctld", BACKUP_SLURMCTLD)):
        _end_jobs(cfg)
    stopped = [d.name for d in reversed(ds) if d.stop()]
    log(f"stopped: {', '.join(stopped)}" if stopped else "lab was not running")
    if cfg.hosts:
        removed = cfg.fabric.down()
        removed += prepare.unmount_node_tmps(cfg)
        if login.remove_alias(cfg):
            removed.append(f"the ssh alias {login.alias(cfg)}")
        if removed:
            log(f"removed: {', '.join(removed)}")
    return stopped


def _end_jobs(cfg: LabConfig, timeout: float = 40.0) -> None:
    """Cancel every job of the lab, whoever's (a load's users, the bench's), so no slurmstepd or job process
    outlives `down`."""
    env = {**os.environ, **cfg.env()}
    queued = subprocess.run(["squeue", "-h", "-o", "%u"], capture_output=True, text=True, env=env, timeout=30)
    users = {pwd.getpwuid(0).pw_name, LAB_USER, *queued.stdout.split()}
    for user in sorted(users):
        subprocess.run(["scancel", "--user", user], capture_output=True, env=env, timeout=30)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%i"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        if r.returncode != 0 or not r.stdout.strip():
            return
        time.sleep(0.5)
