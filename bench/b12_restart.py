"""Benchmark 12, the cost of coming back: a requeued 2 x 2 DDP attempt, batch script start to its first trained
step, by phase, beside its floor and beside submitit's requeue of the same training.

The training (bench/jobfns.py ``ddp_restart_roach``; ``jobfns_submitit.DdpRestartSubmitit``): gloo, 2 nodes x 2
ranks pinned to n1 and n2, a ``Linear(8, 8)`` trained with DDP and a checkpoint of ``mb`` MB (the model, the
optimizer and a payload tensor of that size beside them, so the first step's all-reduce stays the small model's).
Each run does a few steps, gets its checkpoint signal (roach's USR1 through ``scancel --signal``: its ranks
checkpoint and rank 0 requeues the job; submitit's USR2: rank 0's handler calls ``checkpoint()``, which saves the
file, and requeues), and the requeued attempt is measured. Rank 0 writes a JSON line per mark, read afterwards:

* its batch shell's start and its own process's start (``/proc``, the kernel's 10 ms tick; rank 0 runs on the
  batch script's node);
* ``torch`` imported, the process ``group`` made, the checkpoint ``loaded``, the first ``step`` done.

The floor, in the same repetition on the same nodes: a batch script whose one line is ``srun python -c`` of a
bare program that imports torch, makes the gloo process group (its address and port given, nothing asked) and
``torch.load``s a copy of the first roach run's ``resume.pt``, every rank; measured from its batch shell's start to
the barrier after every rank's load. A repetition runs the three in turn, each one first, second and last in
turn across the repetitions. The floor's phases are the same marks. After its measured end the floor also
builds the DDP wrapper the training builds next (a row of its own: DistributedDataParallel's constructor imports
torch's compiler, ``torch._dynamo``, about a second of CPU per rank, which every DDP restart pays and the floor does
not).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

from bench.labenv import ROOT, BenchError, Jobs, Lab, read_events, wait_for
from bench.repo import make_repo
from bench.report import Section
from bench.stats import Row, comparison_table, target_row
from roach.lab.config import NODES as LAB_NODES
from roach.lab.hosts import Fabric
from roach.model.resources import Resources
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB

METHODS = ("roach", "submitit", "floor")
# the order of a repetition's runs, in turn (the first makes the checkpoint file the floors load)
ORDERS = (("roach", "submitit", "floor"), ("submitit", "floor", "roach"), ("floor", "roach", "submitit"))
NODES = ("n1", "n2")
# (label, from mark, to mark): the phases of an attempt, in the order they run
PHASES = (
    ("node prepare and rank launch (batch start -> rank 0's process)", "batch", "process"),
    ("Python start and imports (-> torch imported)", "process", "torch"),
    ("process group (-> group made)", "torch", "group"),
    ("checkpoint load (-> loaded)", "group", "loaded"),
    ("DDP wrapper (-> made: a broadcast that waits for every rank)", "loaded", "ddp"),
    ("first step (-> first step done)", "ddp", "step"),
)

FLOOR = r"""
import os, sys, time
t0 = time.time()
import torch, torch.distributed as dist
t1 = time.time()
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
addr, port = os.environ["FLOOR_ADDR"], os.environ["FLOOR_PORT"]
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
t2 = time.time()
torch.load(sys.argv[1], map_location="cpu", weights_only=False)
dist.barrier()  # every rank has it
t3 = time.time()
# beyond the floor: the DDP wrapper the training builds next (its constructor imports torch's compiler)
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8), find_unused_parameters=True)
t4 = time.time()
if rank == 0:
    from bench.jobfns import Progress, batch_process, process_start
    p, batch = Progress(sys.argv[2]), batch_process()
    now = time.time()
    p.event("entry", process=process_start(os.getpid(), now), batch=None if batch is None else process_start(batch, now))
    p.event("torch", t=t1)
    p.event("group", t=t2)
    p.event("loaded", t=t3)
    p.event("ddp", t=t4)
del ddp
dist.destroy_process_group()
"""


def marks(events: list[dict], restart: int) -> dict[str, float]:
    """The attempt's marks (absolute times): batch, process, torch, group, loaded and, where it ran, step."""
    out: dict[str, float] = {}
    for e in events:
        if e.get("restart") != restart:
            continue
        if e["kind"] == "entry":
            out["process"] = e.get("process")
            if "batch" in e:
                out["batch"] = e["batch"]
        elif e["kind"] == "batch" and "batch" not in out:
            out["batch"] = e.get("batch")
        elif e["kind"] in ("torch", "group", "loaded", "ddp") and e["kind"] not in out:
            out[e["kind"]] = e["t"]
        elif e["kind"] == "step" and "step" not in out:
            out["step"] = e["t"]
    return out


class Restart:
    def __init__(self, lab: Lab, jobs: Jobs, wd: Path, log=print):
        self.lab, self.jobs, self.wd, self.log = lab, jobs, wd, log
        for sub in ("logs", "submitit", "progress", "ckpt", "floor"):  # the bench user's jobs write there
            (wd / sub).mkdir()
            shutil.chown(wd / sub, lab.user, lab.user)
        self.work = make_repo(lab, wd / "repo")
        self.store = Store(wd / "store.sqlite")
        self.user = lab.user_client()
        self.n = 0
        self.addr = self._first_node_addr()

    def _first_node_addr(self) -> str:
        if self.lab.cfg.hosts:
            return Fabric(self.lab.cfg.port_base, LAB_NODES).node_addr(NODES[0])
        return "127.0.0.1"

    def _signal(self, jid: str, sig: str) -> None:
        self.user.run(["scancel", f"--signal={sig}", jid], retry=False)

    def _until_gone(self, jid: str) -> None:
        """The job killed (no checkpoint on TERM, no submitit ranks training on through KillWait) and every process
        of the bench user gone: the next run must not share the CPU with this one's end."""
        self.user.run(["scancel", "--full", "--signal=KILL", jid], ok_codes=(0, 1), retry=False)
        self.jobs.cancel([jid], wait_s=120)
        wait_for(
            f"job {jid}'s processes to end",
            lambda: subprocess.run(["pgrep", "-u", self.lab.user], capture_output=True).returncode == 1,
            120,
        )

    def _requeue_and_measure(self, jid: str, progress: Path, sig: str, timeout: float) -> dict[str, float]:
        wait_for(
            f"job {jid}'s first attempt to do 3 steps",
            lambda: sum(e["kind"] == "step" and e["restart"] == 0 for e in read_events(progress)) >= 3,
            timeout,
        )
        self._signal(jid, sig)
        wait_for(
            f"job {jid}'s requeued attempt to do its first step",
            lambda: any(e["kind"] == "step" and e["restart"] >= 1 for e in read_events(progress)),
            timeout,
            0.5,
        )
        self._until_gone(jid)
        return marks(read_events(progress), 1)

    def roach(self, mb: int, timeout: float) -> tuple[dict[str, float], Path]:
        self.n += 1
        progress = self.wd / "progress" / f"roach-{self.n}.jsonl"
        res = Resources(
            nodes=2, gpus_per_node=2, cpus_per_gpu=1, time="00:30:00", extra=(f"--nodelist={','.join(NODES)}",)
        )
        job = submit(
            "pkg.jobfns:ddp_restart_roach",
            {"mb": mb, "progress": str(progress)},
            resources=res,
            cluster=LAB.with_(run_as=self.lab.user, env_factory=self.lab.cfg.env),
            name=f"restart-roach-{self.n}",
            repo_root=self.work,
            store=self.store,
            log_root=str(self.wd / "logs"),
            clone_root=str(self.wd / "clones"),
            run_root=str(self.wd / "runs"),
        )
        jid = str(job.job_id)
        self.jobs.add([jid])
        m = self._requeue_and_measure(jid, progress, "USR1", timeout)
        log = job.log()
        if "resumed at step" not in log:
            raise BenchError(f"roach's requeued attempt did not resume:\n{log[-3000:]}")
        self.last_roach_log = log
        return m, Path(job.record.run_dir) / "resume.pt"

    def submitit(self, mb: int, timeout: float) -> dict[str, float]:
        self.n += 1
        progress = self.wd / "progress" / f"submitit-{self.n}.jsonl"
        ckpt = self.wd / "ckpt" / f"submitit-{self.n}.pt"
        proc = self.lab.as_user(
            [
                self.lab.python,
                "-m",
                "bench.submitit_driver",
                "ddp",
                "--folder",
                str(self.wd / "submitit" / "%j"),
                "--progress",
                str(progress),
                "--ckpt",
                str(ckpt),
                "--mb",
                str(mb),
                "--nodes",
                ",".join(NODES),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BenchError(f"submitit driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
        jid = json.loads(proc.stdout.strip().splitlines()[-1])["job_id"]
        self.jobs.add([jid])
        try:
            return self._requeue_and_measure(jid, progress, "USR2", timeout)
        finally:
            ckpt.unlink(missing_ok=True)

    def floor(self, ckpt: Path, timeout: float) -> dict[str, float]:
        self.n += 1
        progress = self.wd / "progress" / f"floor-{self.n}.jsonl"
        script = (
            "#!/bin/bash\n"
            f"export FLOOR_ADDR={shlex.quote(self.addr)} FLOOR_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))"
            f" PYTHONPATH={shlex.quote(str(ROOT))}\n"
            f"srun {shlex.quote(self.lab.python)} -c {shlex.quote(FLOOR)} {shlex.quote(str(ckpt))} "
            f"{shlex.quote(str(progress))}\n"
        )
        jid = str(
            self.user.sbatch(
                [
                    "--nodes=2",
                    "--ntasks-per-node=2",
                    "--gres=gpu:2",
                    "--cpus-per-task=1",
                    f"--nodelist={','.join(NODES)}",
                    "--time=10",
                    "--job-name=restart-floor",
                    f"--output={self.wd / 'floor' / f'{self.n}.out'}",
                ],
                script,
            )
        )
        self.jobs.add([jid])
        wait_for(
            f"the floor job {jid} to end",
            lambda: not [r for r in self.user.squeue(job_ids=[jid]) if r.state.is_active],
            timeout,
            0.5,
        )
        self._until_gone(jid)
        m = marks(read_events(progress), 0)
        if "loaded" not in m:
            out = (self.wd / "floor" / f"{self.n}.out").read_text(errors="replace")
            raise BenchError(f"the floor job {jid} wrote no marks:\n{out[-2000:]}")
        return m


def _phase(m: dict[str, float], a: str, b: str) -> float | None:
    return None if m.get(a) is None or m.get(b) is None else m[b] - m[a]


def run(lab: Lab, jobs: Jobs, sizes: list[int], reps: int, big_reps: int | None = None, log=print) -> Section:
    """``sizes``: checkpoints in MB; ``big_reps``: repetitions of sizes of 1000 MB and more (default ``reps``)."""
    r = Restart(lab, jobs, lab.workdir("restart"), log)
    samples: dict[int, list[dict[str, dict[str, float]]]] = {}
    for mb in sizes:
        n = reps if mb < 1000 or big_reps is None else big_reps
        timeout = 300 + mb * 0.6
        floor_file = r.wd / "ckpt" / f"floor-{mb}.pt"  # the first roach run's resume.pt, which the floors load
        for rep in range(n):
            got: dict[str, dict[str, float]] = {}
            for method in ORDERS[rep % len(ORDERS)]:  # each method first, second and last in turn
                if method == "roach":
                    got["roach"], ckpt = r.roach(mb, timeout)
                    if not floor_file.exists():
                        shutil.copyfile(ckpt, floor_file)
                        shutil.chown(floor_file, lab.user, lab.user)
                    ckpt.unlink(missing_ok=True)
                elif method == "submitit":
                    got["submitit"] = r.submitit(mb, timeout)
                else:
                    got["floor"] = r.floor(floor_file, timeout)
            samples.setdefault(mb, []).append(got)
            line = ", ".join(f"{m} {_total(got[m]):.2f} s" for m in METHODS)
            log(f"  {mb} MB rep {rep + 1}/{n}: {line}")
        floor_file.unlink(missing_ok=True)
    r.store.close()
    return _section(samples, reps, big_reps)


def _total(m: dict[str, float]) -> float:
    """Batch script start to the first trained step (the floor: to its load, it trains nothing)."""
    end = m.get("step", m.get("loaded"))
    return float("nan") if end is None or m.get("batch") is None else end - m["batch"]


def _section(samples: dict[int, list[dict]], reps: int, big_reps: int | None) -> Section:
    body = [
        "A requeued attempt of a 2-node x 2-rank gloo DDP run (CPU torch, ranks pinned to n1 and n2), from its batch "
        "shell's start to rank 0's first trained step, by phase, under roach and under submitit's checkpoint/requeue, "
        "beside the floor: a batch script of one `srun python -c` that imports torch, makes the process group (address "
        "and port given) and `torch.load`s the same file on every rank, measured to a barrier after every rank's load. Marks are rank 0's "
        "(`time.time()`; the batch shell's and the process's start from `/proc`, to the kernel's 10 ms tick). A phase "
        "is the time from one mark to the next, in the order the marks fall; floor / roach below 1 means roach is the "
        "slower.",
        "",
    ]
    summary = []
    for mb, reps_got in samples.items():
        rows = []
        for label, a, b in PHASES:
            rows.append(Row(label, {m: [_phase(g[m], a, b) for g in reps_got] for m in METHODS}, "s"))
        totals = {m: [_total(g[m]) for g in reps_got] for m in METHODS}
        rows.append(Row("**batch script start -> first trained step** (floor: -> every rank loaded)", totals, "s"))
        with_ddp = {"floor": [_phase(g["floor"], "batch", "ddp") for g in reps_got]}
        rows.append(Row("floor with the DDP wrapper built after it (-> DDP made)", with_ddp, "s"))
        body += [f"### Checkpoint of {mb} MB ({len(reps_got)} repetitions)", "", comparison_table(rows, METHODS), ""]
        summary.append(
            target_row(
                f"a requeued 2 x 2 DDP attempt's restart, checkpoint {mb} MB, as a multiple of its floor",
                totals["roach"],
                totals["floor"],
                "floor",
                "s",
                max_ratio=1.2,
            )
        )
        summary.append(
            target_row(
                f"the same restart as a multiple of its floor with the DDP wrapper built, checkpoint {mb} MB",
                totals["roach"],
                with_ddp["floor"],
                "floor + DDP wrapper",
                "s",
            )
        )
        summary.append(
            target_row(
                f"the same restart beside submitit's requeue, checkpoint {mb} MB",
                totals["roach"],
                totals["submitit"],
                "submitit",
                "s",
                max_ratio=1.0,
            )
        )
    params = {"reps": reps, "sizes_mb": list(samples)} | ({"big_reps": big_reps} if big_reps is not None else {})
    title = "The cost of coming back: a requeued DDP attempt's restart"
    return Section(12, title, "\n".join(body), params, summary=summary)
