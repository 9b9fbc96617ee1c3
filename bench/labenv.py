"""The lab as the benchmarks use it: a user of their own, clients, held jobs, RPC snapshots, cleanup.

The benchmarks submit and watch as ``roachbench``, a Unix user with a lab association made for them
(idempotently, by :func:`ensure_bench_user`), so that the controllers' per-user RPC counters hold exactly
the benchmark's calls while anyone else uses the lab as ``roachlab`` or root. Every job a benchmark
submits is registered with a :class:`Jobs` and cancelled by id when the benchmark ends, however it ends.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench import rpcstats
from roach.lab.config import ACCOUNT, CLUSTER_NAME, LabConfig
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import LocalTransport

BENCH_USER = "roachbench"
ROOT = Path(__file__).resolve().parent.parent  # the repository
BENCH_DIR = ROOT / "bench"
OUT = BENCH_DIR / "out"
PYLIB = OUT / "pylib"  # submitit and its dependencies, for the benchmark's processes and its jobs


class BenchError(RuntimeError):
    """The lab is not ready for a benchmark; the message says what to do."""


@dataclass
class Lab:
    """The running lab and the clients a benchmark needs."""

    cfg: LabConfig
    user: str = BENCH_USER
    made: list[Path] = field(default_factory=list)  # work directories, removed after a benchmark succeeds

    @classmethod
    def load(cls) -> Lab:
        if os.geteuid() != 0:
            raise BenchError(
                "the benchmarks need root (sdiag, sacctmgr stats, running as the bench user); run `make bench` as root"
            )
        try:
            cfg = LabConfig.load()
        except Exception as exc:
            raise BenchError(f"no lab: {exc}; start it with `make lab`") from exc
        return cls(cfg)

    @property
    def env(self) -> dict[str, str]:
        return self.cfg.env()

    @property
    def python(self) -> str:
        """The python of the lab's job venv (torch is there): every method's jobs run with it."""
        return str(self.cfg.state / "pyenv" / "bin" / "python")

    def user_client(self) -> SlurmClient:
        return SlurmClient(LocalTransport(env=self.env, user=self.user, default_timeout=600))

    def root_client(self) -> SlurmClient:
        return SlurmClient(LocalTransport(env=self.env, default_timeout=120))

    def as_user(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` as the bench user with the lab's environment (and PYTHONPATH for submitit)."""
        env = {
            **os.environ,
            **self.env,
            "PYTHONPATH": f"{ROOT}:{PYLIB}",
            "HOME": self.home,
            "ROACH_LAB_DIR": str(self.cfg.state),  # roach's lab cluster finds its SLURM_CONF there
        }
        return subprocess.run(["runuser", "-u", self.user, "--", *argv], env=env, cwd="/", **kw)

    @property
    def home(self) -> str:
        return pwd.getpwnam(self.user).pw_dir

    # -- RPC counters ---------------------------------------------------------------------------------
    def snapshot(self) -> tuple[rpcstats.RpcStats, rpcstats.RpcStats]:
        """(slurmctld, slurmdbd) RPC counters now."""
        root = self.root_client()
        ctld = rpcstats.parse(root.run(["sdiag"]).stdout)
        dbd = rpcstats.parse(root.run(["sacctmgr", "show", "stats"]).stdout)
        return ctld, dbd

    def workdir(self, name: str, under: str = "/var/tmp") -> Path:
        """A fresh directory under ``under`` that the bench user owns (its jobs write there): /var/tmp, which every node
        sees in either layout (in the hosts layout each node has a /tmp of its own)."""
        d = Path(tempfile.mkdtemp(prefix=f"roach-bench-{name}-", dir=under))
        os.chmod(d, 0o755)
        shutil.chown(d, self.user, self.user)
        self.made.append(d)
        return d

    def remove_workdirs(self) -> None:
        while self.made:
            shutil.rmtree(self.made.pop(), ignore_errors=True)


def read_events(path: Path) -> list[dict]:
    """The JSON lines a job's progress file holds so far (none before it exists)."""
    try:
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


def wait_for(what: str, check, timeout: float, every: float = 0.25, explain=None):
    """``check()``'s first true answer, asked every ``every`` seconds; a :class:`BenchError` after ``timeout``, with
    what ``explain()`` says of the state then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    said = f":\n{explain()}" if explain is not None else ""
    raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}{said}")


def ensure_bench_user(lab: Lab, log=print) -> None:
    """The Unix user and its lab association (account ``lab``, QOS high/normal/low), made if missing."""
    try:
        pwd.getpwnam(lab.user)
    except KeyError:
        log(f"bench: creating the Unix user {lab.user} (home /home/{lab.user})")
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", lab.user], check=True)
    root = lab.root_client()
    have = root.run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={lab.user}", "format=account"]).stdout.split()
    if ACCOUNT not in have:
        log(f"bench: adding {lab.user} to the lab's account {ACCOUNT}")
        root.run(
            ["sacctmgr", "-i", "add", "user", lab.user, f"Account={ACCOUNT}", f"Cluster={CLUSTER_NAME}"], retry=False
        )
        root.run(
            [
                "sacctmgr",
                "-i",
                "modify",
                "user",
                "where",
                f"name={lab.user}",
                f"account={ACCOUNT}",
                "set",
                "QOS=high,normal,low",
                "DefaultQOS=normal",
            ],
            retry=False,
        )
        deadline = time.monotonic() + 30  # slurmctld learns of the association from slurmdbd
        while time.monotonic() < deadline:
            res = lab.user_client().run(["sbatch", "--test-only", "--wrap=true"], ok_codes=(0, 1), retry=False)
            if res.returncode == 0:
                break
            time.sleep(1)


def ensure_submitit(lab: Lab, log=print) -> None:
    """submitit in bench/out/pylib, installed with the lab job venv's pip (so its jobs can import it)."""
    if (PYLIB / "submitit" / "__init__.py").exists():
        return
    log(f"bench: installing submitit into {PYLIB} (for the benchmark and its jobs)")
    pip = str(Path(lab.python).with_name("pip"))
    subprocess.run([pip, "install", "-q", "--target", str(PYLIB), "submitit"], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(OUT)], check=True)


def import_submitit():
    """submitit, imported from bench/out/pylib."""
    import sys

    if str(PYLIB) not in sys.path:
        sys.path.append(str(PYLIB))
    import submitit

    return submitit


@dataclass
class Jobs:
    """Every job id a benchmark submitted (as the bench user, or as root for preemptors); ``cancel_all``
    cancels exactly those, by id."""

    lab: Lab
    user_ids: list[str] = field(default_factory=list)
    root_ids: list[str] = field(default_factory=list)

    def add(self, ids: Iterable[str | int], root: bool = False) -> None:
        (self.root_ids if root else self.user_ids).extend(str(i) for i in ids)

    def cancel(self, ids: Iterable[str | int], wait_s: float = 60) -> None:
        """Cancel ``ids`` (the bench user's) and wait until they left the queue."""
        ids = [str(i) for i in ids]
        if not ids:
            return
        client = self.lab.user_client()
        for i in range(0, len(ids), 500):
            client.scancel(ids[i : i + 500])
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not [r for r in client.squeue() if str(r.ref.job) in ids and r.state.is_active]:
                break
            time.sleep(0.5)
        self.user_ids = [j for j in self.user_ids if j not in set(ids)]

    def cancel_all(self) -> None:
        try:
            self.cancel(self.user_ids)
        finally:
            if self.root_ids:
                self.lab.root_client().scancel(self.root_ids)
                self.root_ids = []


def submit_held(lab: Lab, n: int, name: str = "bench-held") -> list[str]:
    """``n`` individual held jobs of the bench user (one shell loop, so 1000 cost one runuser)."""
    script = (
        f"for i in $(seq 1 {int(n)}); do sbatch --parsable --hold --job-name={name} --output=/dev/null "
        "--time=5 --wrap=true || exit 1; done"
    )
    res = lab.user_client().run(["bash", "-c", script], retry=False)
    ids = [ln.split(";")[0].strip() for ln in res.stdout.splitlines() if ln.strip()]
    if len(ids) != n:
        raise BenchError(f"asked for {n} held jobs, sbatch gave {len(ids)}: {res.stderr[-500:]}")
    return ids


def submit_held_array(lab: Lab, n: int, name: str = "bench-array") -> str:
    """One held array of ``n`` tasks (0..n-1) of the bench user; returns its id."""
    return str(
        lab.user_client().sbatch(
            ["--hold", f"--array=0-{int(n) - 1}", f"--job-name={name}", "--output=/dev/null", "--time=5"],
            "#!/bin/bash\ntrue\n",
        )
    )
