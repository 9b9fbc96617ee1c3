"""Benchmark 5, preemption loss: the same training loop under roach and under submitit's
checkpoint/requeue, each preempted once by a high-QOS job.

The loop (bench/jobfns.py: a 1-rank torch regression, ``steps`` steps of ``step_s`` seconds) appends a
JSON line per step with Slurm's restart count and the time. A run goes to a low-QOS job with 1 GPU
pinned to one node; once it has done ``preempt_after`` steps, a root job at QOS high, pinned to that node
and asking one GPU more than the node has free, preempts it (as tests/test_resume.py ``_preempt``). Read
from the progress file and ``sacct --duplicates``:

* steps recomputed: the steps the first attempt finished that the requeued attempt ran again;
* requeued start -> first resumed step: from Slurm's Start of the requeued run (1 s resolution) to the
  requeued attempt's first step (function entry -> first step is shown apart);
* preemption -> requeued start: Slurm's requeue, plus the grace time a job that ignores SIGTERM makes the
  preemptor wait.

What the job gets on preemption depends on the site: SIGTERM (then SIGKILL after the QOS GraceTime), or
with ``SlurmctldParameters=preempt_send_user_signal`` first the job's ``--signal`` (roach: USR1,
submitit: USR2). ``modes`` picks which the lab is set to (``roach lab up`` reconfigures it live); "as-is"
keeps whatever it is. Safety: the preemptor is sent only when no other user's low-QOS job runs on the node.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from bench.labenv import BenchError, Jobs, Lab, ensure_bench_user, read_events, wait_for
from bench.repo import make_repo
from bench.report import Section
from bench.stats import Row, comparison_table
from roach.lab.config import LabConfig
from roach.model.resources import Resources
from roach.records.store import Store
from roach.slurm import submit
from roach.slurm.clusters.lab import LAB

METHODS = ("roach", "submitit")


class Preempt:
    def __init__(self, lab: Lab, jobs: Jobs, wd: Path, steps: int, step_s: float, preempt_after: int, log=print):
        self.lab, self.jobs, self.wd, self.log = lab, jobs, wd, log
        for sub in ("logs", "submitit", "progress"):  # the bench user's jobs write there
            (wd / sub).mkdir()
            shutil.chown(wd / sub, lab.user, lab.user)
        self.steps, self.step_s, self.preempt_after = steps, step_s, preempt_after
        self.work = make_repo(lab, wd / "repo")
        self.store = Store(wd / "store.sqlite")
        self.root, self.user = lab.root_client(), lab.user_client()
        self.n = 0

    # -- submitting ------------------------------------------------------------------------------------------
    def submit(self, method: str, node: str, progress: Path) -> str:
        if method == "roach":
            res = Resources(gpus_per_node=1, cpus_per_gpu=1, time="00:10:00", qos="low", extra=(f"--nodelist={node}",))
            job = submit(
                "pkg.jobfns:train_roach",
                {"steps": self.steps, "step_s": self.step_s, "progress": str(progress)},
                resources=res,
                cluster=LAB.with_(run_as=self.lab.user, env_factory=self.lab.cfg.env),  # this lab, not the default
                name="preempt-roach",
                repo_root=self.work,
                store=self.store,
                log_root=str(self.wd / "logs"),
                clone_root=str(self.wd / "clones"),
                run_root=str(self.wd / "runs"),
            )
            jid = str(job.job_id)
        else:
            proc = self.lab.as_user(
                [
                    self.lab.python,
                    "-m",
                    "bench.submitit_driver",
                    "train",
                    "--folder",
                    str(self.wd / "submitit" / "%j"),
                    "--progress",
                    str(progress),
                    "--steps",
                    str(self.steps),
                    "--step-s",
                    str(self.step_s),
                    "--node",
                    node,
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise BenchError(f"submitit driver failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
            jid = json.loads(proc.stdout.strip().splitlines()[-1])["job_id"]
        self.jobs.add([jid])
        return jid

    def pick_node(self) -> str:
        """The node with the most free GPUs and no other user's preemptible job (else wait for one)."""

        def ok():
            others = self._others_low()
            free = [
                (n.gpus_total - n.gpus_used, n.name)
                for n in self.root.nodes()
                if n.name not in others and n.gpus_total - n.gpus_used >= 1
            ]
            return max(free)[1] if free else None

        return wait_for("a node with a free GPU and no one else's low-QOS job", ok, 300, 2)

    def _others_low(self) -> set[str]:
        """Nodes where a low-QOS job of another user runs (the preemptor might hit it)."""
        out = self.root.run(["squeue", "--noheader", "--all", "--states=RUNNING,COMPLETING", "-o", "%u|%q|%N"]).stdout
        nodes = set()
        for ln in out.splitlines():
            user, qos, nodelist = (ln.split("|") + ["", "", ""])[:3]
            if qos.strip() == "low" and user.strip() != self.lab.user:
                nodes.update(self.root.run(["scontrol", "show", "hostnames", nodelist.strip()]).stdout.split())
        return nodes

    def preempt(self, node: str) -> float:
        wait_for(f"no other user's low-QOS job on {node}", lambda: node not in self._others_low(), 120, 1)
        n = next(x for x in self.root.nodes() if x.name == node)
        gpus = min(n.gpus_total, n.gpus_total - n.gpus_used + 1)
        t = time.time()
        jid = self.root.sbatch(
            [
                "--qos=high",
                f"--nodelist={node}",
                f"--gres=gpu:{gpus}",
                "--time=1",
                "--output=/dev/null",
                "--job-name=bench-preemptor",
            ],
            "#!/bin/bash\nsleep 2\n",
        )
        self.jobs.add([jid], root=True)
        return t

    # -- one run -------------------------------------------------------------------------------------------
    def once(self, method: str, timeout: float = 300) -> dict:
        self.n += 1
        progress = self.wd / "progress" / f"{method}-{self.n}.jsonl"
        node = self.pick_node()
        jid = self.submit(method, node, progress)
        wait_for(
            f"{method} job {jid} to do {self.preempt_after} steps",
            lambda: sum(e["kind"] == "step" for e in read_events(progress)) >= self.preempt_after,
            timeout,
        )
        user_signal = self.root.capabilities(refresh=True).preempt_send_user_signal
        t_preempt = self.preempt(node)
        wait_for(
            f"{method} job {jid} to end",
            lambda: not [r for r in self.user.squeue(job_ids=[jid]) if r.state.is_active],
            timeout,
            1,
        )
        events = read_events(progress)
        first_attempt = [e["step"] for e in events if e["kind"] == "step" and e["restart"] == 0]
        resumed = [e for e in events if e["kind"] == "step" and e["restart"] > 0]
        if not resumed:  # it finished before the grace time ran out: never requeued
            return {
                "method": method,
                "job": jid,
                "node": node,
                "user_signal": user_signal,
                "recomputed": None,
                "first_attempt_steps": max(first_attempt) + 1,
                "start_to_step": None,
                "entry_to_step": None,
                "preempt_to_start": None,
                "completed": True,
                "requeued": False,
            }
        nxt = min(e["restart"] for e in resumed)
        again = (
            resumed[0]
            if resumed[0]["restart"] == nxt
            else min((e for e in resumed if e["restart"] == nxt), key=lambda e: e["t"])
        )
        entry = [e for e in events if e["kind"] == "start" and e["restart"] == nxt]
        runs = sorted(
            (r for r in self.user.sacct([jid], duplicates=True) if r.step is None and r.start_time),
            key=lambda r: r.start_time,
        )
        starts = [r.start_time.timestamp() for r in runs if r.start_time.timestamp() <= again["t"] + 1]
        start2 = starts[-1] if len(starts) >= 2 else None
        done = [e for e in events if e["kind"] == "end"]
        return {
            "method": method,
            "job": jid,
            "node": node,
            "user_signal": user_signal,
            "recomputed": max(first_attempt) + 1 - again["step"],
            "first_attempt_steps": max(first_attempt) + 1,
            "start_to_step": None if start2 is None else again["t"] - start2,
            "entry_to_step": again["t"] - entry[0]["t"] if entry else None,
            "preempt_to_start": None if start2 is None else start2 - t_preempt,
            "completed": bool(done),
            "requeued": True,
        }


def run(
    lab: Lab,
    jobs: Jobs,
    reps: int,
    modes: list[str],
    steps: int | None = None,
    step_s: float = 0.05,
    preempt_after: int = 40,
    cred_expire: int | None = None,
    log=print,
) -> Section:
    """``steps`` default: enough that the run outlasts the low QOS's GraceTime after the preemption (a job
    that ignores SIGTERM and ends within the grace time is never requeued, and that measures nothing).
    ``cred_expire``: the same runs again on a second lab whose job credentials live that long (Slurm's default
    is 120 s, the lab's 10 s): a requeued job may start only once its credential expired."""
    if steps is None:
        grace = _grace_s(lab)
        steps = preempt_after + int((grace + 15) / step_s)
    p = Preempt(lab, jobs, lab.workdir("preempt"), steps, step_s, preempt_after, log)
    results: dict[str, list[dict]] = {}
    original = lab.cfg.preempt_send_user_signal
    try:
        for mode in modes:
            if mode != "as-is":
                _set_mode(mode == "user-signal", log)
            for rep in range(reps):
                for m in METHODS:
                    r = p.once(m)
                    label = "preempt_send_user_signal" if r["user_signal"] else "SIGTERM"
                    results.setdefault(label, []).append(r)
                    log(
                        f"bench 5: {label} rep {rep + 1} {m:9s} recomputed {r['recomputed']} of "
                        f"{r['first_attempt_steps']} steps; requeued start -> first step "
                        f"{r['start_to_step'] if r['start_to_step'] is None else round(r['start_to_step'], 2)} s"
                    )
    finally:
        jobs.cancel(jobs.user_ids)
        if any(m != "as-is" for m in modes) and LabConfig.load().preempt_send_user_signal != original:
            _set_mode(original, log)
    if cred_expire:
        results.update(_with_cred_expire(cred_expire, reps, steps, step_s, preempt_after, log))
    return _section(results, reps, steps, step_s, preempt_after, cred_expire)


CRED_PORT_BASE = 19317  # the second lab's ports: away from the main lab's and the tests' private labs


def _with_cred_expire(seconds: int, reps: int, steps: int, step_s: float, preempt_after: int, log) -> dict:
    """The runs on a second lab, started for this with ``cred_expire=seconds`` and stopped after (SIGTERM)."""
    from roach.lab import lab as lablib

    state = f"/var/lib/roach/lab-bench-cred-expire-{seconds}"
    log(f"bench 5: starting a lab with cred_expire={seconds} in {state} (torch for its jobs: minutes the first time)")
    cfg = lablib.up(
        state,
        log=lambda *_: None,
        port_base=CRED_PORT_BASE,
        cred_expire=seconds,
        job_packages=("torch==2.13.0", "numpy"),
    )
    lab = Lab(cfg)
    jobs = Jobs(lab)
    label = f"SIGTERM, cred_expire {seconds} s"
    out: list[dict] = []
    try:
        ensure_bench_user(lab, log)
        p = Preempt(lab, jobs, lab.workdir("preempt-cred"), steps, step_s, preempt_after, log)
        for rep in range(reps):
            for m in METHODS:
                r = p.once(m)
                out.append(r)
                log(f"bench 5: {label} rep {rep + 1} {m:9s} preemption -> requeued start {r['preempt_to_start']} s")
    finally:
        jobs.cancel(jobs.user_ids)
        lablib.down(state, log=lambda *_: None)
    return {label: out}


def _grace_s(lab: Lab) -> int:
    from roach.scheduler.fields import parse_duration

    low = [q for q in lab.root_client().qos() if q.get("Name") == "low"]
    return (parse_duration(low[0].get("GraceTime", "")) or 0) if low else 0


def _set_mode(user_signal: bool, log) -> None:
    from roach.lab import lab as lablib

    log(f"bench 5: setting the lab's preempt_send_user_signal={user_signal} (live reconfigure)")
    lablib.up(log=lambda *_: None, preempt_send_user_signal=user_signal)


def _section(results, reps, steps, step_s, preempt_after, cred_expire=None) -> Section:
    body = []
    for label, rs in results.items():

        def col(key, rs=rs):
            return {m: [r[key] for r in rs if r["method"] == m and r[key] is not None] for m in METHODS}

        never = [r for r in rs if not r["requeued"]]
        rows = [
            Row("steps the first attempt finished", col("first_attempt_steps")),
            Row("steps recomputed per preemption", col("recomputed")),
            Row("requeued start -> first resumed step", col("start_to_step"), "s"),
            Row("function entry -> first resumed step", col("entry_to_step"), "s"),
            Row("preemption -> requeued start", col("preempt_to_start"), "s"),
        ]
        sig = (
            "the job's --signal first (roach USR1, submitit USR2), SIGTERM after the grace time"
            if label == "preempt_send_user_signal"
            else "SIGTERM, SIGKILL after the QOS GraceTime"
        )
        if label.startswith("SIGTERM, cred_expire"):
            sig += f", on a lab with Slurm's default credential lifetime ({label.split(', ', 1)[1]}; the lab's: 10 s)"
        body += [f"### Preemption sends {sig}", "", comparison_table(rows, METHODS)]
        if never:
            body += [f"Not requeued (ended within the grace time): {', '.join(r['method'] for r in never)}.", ""]
    body.insert(
        0, f"Each run: {steps} steps of {step_s} s, preempted after {preempt_after} steps, then run to the end.\n"
    )
    return Section(
        5,
        "Preemption loss",
        "\n".join(body),
        {"reps": reps, "steps": steps, "step_s": step_s, "preempt_after": preempt_after}
        | ({"cred_expire": cred_expire} if cred_expire else {}),
    )
