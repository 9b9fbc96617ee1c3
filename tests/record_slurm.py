"""Record the output of every Slurm command roach runs, on a running lab, into tests/data/<version>/.

    python -m tests.record_slurm --state-dir DIR [--out tests/data]    (as root, the lab up and empty)

One scenario, the same on every release: jobs are known by their names (``rec-*``), never by their ids, so
the parser tests (tests/test_slurm_versions.py) check each release's recording with the same assertions.
Files are the bytes each command printed (stdout, or ``.stderr.txt``), with exactly roach's argv (the
format strings and field lists come from roach.scheduler.parse). INDEX.md in tests/data lists them.
The controller and slurmdbd are made unreachable through a copy of slurm.conf that names closed ports.
On a lab up with ``--rest``, each squeue, sacct, sinfo and scontrol show job is read through slurmrestd too, at the
same moment, into ``rest/``: the command's output and the answer (``tests/test_rest_client.py`` reads both through
the client).
Takes about 4 minutes (a requeue waits out cred_expire, a preemption the low QOS's GraceTime).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from roach.lab.conf_files import rest_url
from roach.lab.config import LAB_USER, LabConfig
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.accounting import ledger_argv
from roach.scheduler.rest.client import SINCE_EVER
from roach.scheduler.rest.request import RestApi
from roach.scheduler.rest.token import TokenSource
from roach.scheduler.transport import LocalTransport

WEIRD = "we|ird $(name) x\nline2"  # the array's name: a pipe, spaces, $() and a newline
SQUEUE = ["squeue", "--noheader", "--array", "-O", P.squeue_format()]
SACCT = ["sacct", "--noheader", "--parsable2", f"--delimiter={P.US}", f"--format={','.join(P.SACCT_FIELDS)}"]
SINFO = ["sinfo", "--Node", "--noheader", "-O", PC.sinfo_format()]
QOS = [
    "sacctmgr",
    "--noheader",
    "--parsable2",
    "show",
    "qos",
    "format=Name,Priority,Preempt,PreemptMode,GraceTime,MaxTRESPU,MaxWall,Flags",
]
ASSOC = [
    "sacctmgr",
    "--noheader",
    "--parsable2",
    "show",
    "assoc",
    "format=Cluster,Account,User,Partition,QOS,DefaultQOS",
]
STATES = ["squeue", "--noheader", "--only-job-state"]  # 23.11.5+: job id and state only


# slurmrestd's reads beside the commands' (a lab up with --rest): command -> (API, path below its version)
REST_PAIRS = {"squeue": ("slurm", "jobs"), "sacct": ("slurmdb", "jobs"), "sinfo": ("slurm", "nodes")}


class Recorder:
    def __init__(self, cfg: LabConfig, out: Path):
        self.cfg, self.out, self.env = cfg, out, {**os.environ, **cfg.env()}
        self.env.pop("SLURM_TIME_FORMAT", None)
        self.ids: dict[str, int] = {}
        self.rest = rest_api(cfg) if cfg.rest else None

    def save_rest(self, name: str, argv: list[str], text: str) -> None:
        """slurmrestd's answer of the same moment beside a command's output: ``rest/<name>`` (the output) and
        ``rest/<stem>.json`` (the argv, slurmrestd's clock and the answer's body)."""
        pair = REST_PAIRS.get(argv[0])
        if argv[:3] == ["scontrol", "show", "job"]:
            pair = ("slurm", f"job/{argv[-1]}")
        ledger = any("Eligible" in a for a in argv)  # the ledger's sacct, read by its own parser
        if self.rest is None or pair is None or ledger or "--only-job-state" in argv or "--help" in argv:
            return
        api, tail = pair
        path = self.rest.ctld(tail) if api == "slurm" else self.rest.dbd(tail)
        query = {"start_time": SINCE_EVER} if api == "slurmdb" else None
        answer = self.rest.request("GET", path, query=query)
        folder = self.out / "rest"
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(text.encode())
        body = listed_jobs(answer.body, text) if api == "slurmdb" else answer.body
        record = {"argv": argv, "path": path, "now": answer.now.isoformat(), "body": body}
        (folder / f"{Path(name).stem}.json").write_text(json.dumps(record, sort_keys=True) + "\n")
        print(f"  rest/{name} and its answer", flush=True)

    def run(self, argv: list[str], *, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["runuser", "-u", LAB_USER, "--", *argv],
            check=False,
            input=input,
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            cwd="/tmp",
            timeout=60,
        )

    def save(
        self,
        name: str,
        argv: list[str],
        *,
        stderr: bool = False,
        env: dict | None = None,
        ok: bool = True,
        may_be_empty: bool = False,
    ) -> str:
        r = self.run(argv, env=env)
        text = r.stderr if stderr else r.stdout
        if ok and not stderr and r.returncode != 0:
            raise SystemExit(f"{name}: {argv[0]} failed ({r.returncode}): {r.stderr}")
        if stderr and not text and not may_be_empty:
            raise SystemExit(f"{name}: {argv[0]} printed no error (rc {r.returncode}, stdout {r.stdout[:200]!r})")
        (self.out / name).write_bytes(text.encode())
        print(f"  {name} ({len(text)} bytes)", flush=True)
        if not stderr and env is None:
            self.save_rest(name, argv, text)
        return text

    def sbatch(self, role: str, options: list[str], body: str = "sleep 600") -> int:
        name = WEIRD if role == "rec-array" else role
        r = self.run(
            ["sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null", *options],
            input=f"#!/bin/bash\n{body}\n",
        )
        if r.returncode != 0 and "Socket timed out" in r.stderr:
            # 24.11's slurmctld may queue the job and answer after sbatch gave up (seen right after a requeued
            # job's cancel): the job is the one of that name, as roach's lost-submission sweep finds it
            time.sleep(2)
            found = [q.raw_id for q in self.queue().get(role, [])]
            if len(set(found)) == 1:
                self.ids[role] = found[0]
                return found[0]
        if r.returncode != 0:
            raise SystemExit(f"sbatch {role}: {r.stderr}")
        self.ids[role] = PC.parse_sbatch(r.stdout)[0]
        return self.ids[role]

    def queue(self) -> dict[str, list[P.QueueRecord]]:
        by: dict[str, list[P.QueueRecord]] = {}
        for r in P.parse_squeue(self.run([*SQUEUE, "--user", LAB_USER]).stdout):
            by.setdefault("rec-array" if r.name == WEIRD else r.name, []).append(r)
        return by

    def wait(self, what: str, cond, timeout: float = 180) -> None:
        end = time.monotonic() + timeout
        while not cond(self.queue()):
            if time.monotonic() > end:
                raise SystemExit(f"timed out waiting for {what}: {self.queue()}")
            time.sleep(1)

    def state(self, role: str, q) -> set[str]:
        return {r.state.name for r in q.get(role, [])}

    def reason(self, role: str, q) -> set[str]:
        return {r.reason_text for r in q.get(role, [])}

    def cancel(self, *roles: str) -> None:
        self.run(["scancel", *[str(self.ids[r]) for r in roles]])

    def ids_of(self, *roles: str) -> str:
        return ",".join(str(self.ids[r]) for r in roles)


def listed_jobs(body: dict, sacct_text: str) -> dict:
    """Of slurmdbd's jobs since the epoch, those the command's sacct listed (an earlier recording's jobs are not)."""
    ids = {int(r.raw_id.split(".")[0]) for r in P.parse_sacct(sacct_text)}
    return {**body, "jobs": [j for j in body.get("jobs") or [] if j.get("job_id") in ids]}


def rest_api(cfg: LabConfig) -> RestApi:
    """The lab's slurmrestd as its user, with a token ``scontrol token`` makes for the recording."""
    command = ("runuser", "-u", LAB_USER, "--", "scontrol", "token", "lifespan=3600")
    return RestApi(rest_url(cfg), TokenSource(LAB_USER, command, transport=LocalTransport(env=cfg.env())))


def record(cfg: LabConfig, out: Path, errors_only: bool = False, ledger_only: bool = False) -> None:
    rec = Recorder(cfg, out)
    if rec.queue():
        raise SystemExit("the lab's queue is not empty: cancel its jobs first")
    if ledger_only:
        ledger(rec)
        return
    if not errors_only:
        scenario(rec, out)
        ledger(rec)
    errors(rec, cfg, out)


def ledger(rec: Recorder) -> None:
    """The ledger's sacct (``ledger_argv``: the usual fields and Eligible, -X -D) of a one-GPU low job preempted by
    a normal one: while it waits to be eligible again, and once its second attempt has completed."""
    print("the ledger's sacct", flush=True)
    again = 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 300; else sleep 5; fi'  # killed after the GraceTime
    rec.sbatch("rec-ledger", ["--qos=low", "--gres=gpu:1", "-w", "n2", "--requeue"], again)
    rec.wait("the ledger's job to run", lambda q: rec.state("rec-ledger", q) == {"RUNNING"})
    time.sleep(3)
    rec.sbatch("rec-ledger-preemptor", ["--qos=normal", "--gres=gpu:4", "-w", "n2"], "sleep 3")
    rec.wait("its requeue", lambda q: rec.state("rec-ledger", q) == {"PENDING"})
    time.sleep(2)  # until slurmdbd has the requeued record
    rec.save("sacct_XD_ledger_preempted_then_pending.txt", ledger_argv([rec.ids["rec-ledger"]]))
    rec.wait("its second attempt to end", lambda q: not q.get("rec-ledger") and not q.get("rec-ledger-preemptor"), 240)
    time.sleep(2)
    rec.save("sacct_XD_ledger_preempted_then_completed.txt", ledger_argv([rec.ids["rec-ledger"]]))
    # a sweep's array whose tasks wait: one runs, the others are one pending range until they start
    rec.sbatch("rec-ledger-array", ["--array=0-2%1", "--gres=gpu:4", "-w", "n1"], "sleep 300")
    rec.wait("its first task to run", lambda q: "RUNNING" in rec.state("rec-ledger-array", q))
    time.sleep(5)  # until slurmdbd has the running task
    # the array's id: its tasks' ids would leave out the range of tasks that have not started
    rec.save("sacct_XD_ledger_array_pending.txt", ledger_argv([rec.ids["rec-ledger-array"]]))
    rec.cancel("rec-ledger-array")


def scenario(rec: Recorder, out: Path) -> None:
    save, sb = rec.save, rec.sbatch
    save("scontrol_show_config.txt", ["scontrol", "show", "config"])
    save("squeue_help.txt", ["squeue", "--help"])
    save("sinfo_nodes_idle.txt", SINFO)
    save("scontrol_show_partition.txt", ["scontrol", "show", "partition", "-o"])
    save("sacctmgr_show_qos.txt", QOS)
    save("sacctmgr_show_assoc.txt", ASSOC)
    save("sacctmgr_show_assoc_user.txt", [*ASSOC, f"user={LAB_USER}"])
    has_states = "--only-job-state" in (out / "squeue_help.txt").read_text()

    print("mixed queue", flush=True)
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")  # this run's jobs only, not an earlier run's
    sb("rec-timeout", ["--time=1", "-w", "n1"])
    sb("rec-gpu1", ["--gres=gpu:1", "-w", "n1"])
    sb("rec-srun", ["-w", "n2"], "srun sleep 600")
    sb("rec-fail", ["-w", "n1"], "exit 3")
    sb("rec-high-a", ["--qos=high", "--gres=gpu:2", "--time=365-0", "-w", "n1"])
    sb("rec-high-b", ["--qos=high", "--gres=gpu:2", "--time=365-0", "-w", "n2"])
    rec.wait(
        "the first jobs to run",
        lambda q: all(
            rec.state(r, q) == {"RUNNING"} for r in ("rec-timeout", "rec-gpu1", "rec-srun", "rec-high-a", "rec-high-b")
        ),
    )
    save(
        "sacct_X_just_started.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-high-b"), "--allocations", "--starttime", "1970-01-01"],
    )
    sb("rec-qosmax", ["--qos=high", "--gres=gpu:1"])
    sb("rec-resources", ["--cpus-per-task=8", "--mem=4000"])
    sb("rec-priority", ["--cpus-per-task=8", "--mem=4000"])
    sb("rec-held", ["--hold"])
    sb("rec-begin", ["--begin=now+1hour"])
    sb("rec-array", ["--array=0-3%2", "--time=5", "-w", "n1"], "sleep 30")
    sb("rec-dep", [f"--dependency=afterok:{rec.ids['rec-gpu1']}"])
    sb("rec-depnever", [f"--dependency=afterok:{rec.ids['rec-fail']}"])
    rec.wait(
        "the mixed queue",
        lambda q: (
            rec.reason("rec-depnever", q) == {"DependencyNeverSatisfied"}
            and rec.state("rec-array", q) == {"RUNNING", "PENDING"}
            and rec.reason("rec-resources", q) == {"Resources"}
            and rec.reason("rec-qosmax", q) == {"QOSMaxGRESPerUser"}
            and rec.state("rec-srun", q) == {"RUNNING"}
        ),
    )
    time.sleep(2)  # the srun step starts after its job
    save("squeue_mixed.txt", [*SQUEUE, "--user", LAB_USER])
    if has_states:
        save("squeue_only_job_state_mixed.txt", [*STATES, "--jobs", ",".join(map(str, rec.ids.values()))])
        # 24.11 prints an empty list (the states carry no user), 26.05 refuses: roach never adds --user
        save("squeue_only_job_state_user.stderr.txt", [*STATES, "--user", LAB_USER], stderr=True, may_be_empty=True)
        save("squeue_only_job_state_array.txt", [*STATES, "--jobs", rec.ids_of("rec-array")])
    save("sacct_X_mixed.txt", [*SACCT, "--allocations", "--user", LAB_USER, "--starttime", since])
    save("sacct_steps_mixed.txt", [*SACCT, "--user", LAB_USER, "--starttime", since])
    save("sinfo_nodes_mixed.txt", SINFO)
    save("scontrol_show_job_running_gpu.txt", ["scontrol", "show", "job", "-o", str(rec.ids["rec-gpu1"])])
    save("scontrol_show_job_held.txt", ["scontrol", "show", "job", "-o", str(rec.ids["rec-held"])])
    save("scontrol_show_job_pending_array.txt", ["scontrol", "show", "job", "-o", str(rec.ids["rec-array"])])
    save(
        "sacct_X_SLURM_TIME_FORMAT_relative.txt",
        [*SACCT, "--allocations", "--user", LAB_USER, "--starttime", since],
        env={"SLURM_TIME_FORMAT": "relative"},
    )

    print("ended jobs", flush=True)
    rec.cancel(
        "rec-qosmax",
        "rec-resources",
        "rec-priority",
        "rec-begin",
        "rec-dep",
        "rec-depnever",
        "rec-high-a",
        "rec-high-b",
        "rec-srun",
    )
    sb("rec-ignore-term", ["-w", "n2"], "trap '' TERM; while true; do sleep 1; done")
    sb("rec-kill9", ["-w", "n2"], "kill -9 $$")
    sb("rec-ok", ["-w", "n2"], "true")
    rec.wait("ignore-term to run", lambda q: rec.state("rec-ignore-term", q) == {"RUNNING"})
    time.sleep(2)
    rec.cancel("rec-ignore-term", "rec-gpu1", "rec-held")
    rec.wait("a completing job", lambda q: rec.state("rec-ignore-term", q) == {"COMPLETING"})
    save("squeue_completing.txt", [*SQUEUE, "--user", LAB_USER])
    if has_states:
        save("squeue_only_job_state_completing.txt", [*STATES, "--jobs", rec.ids_of("rec-ignore-term", "rec-ok")])
    ended = ("rec-timeout", "rec-gpu1", "rec-fail", "rec-held", "rec-ok", "rec-kill9", "rec-ignore-term", "rec-array")
    rec.wait("the timeout, the array and the SIGKILL", lambda q: not any(q.get(r) for r in ended), 300)
    save("squeue_states_all_ended.txt", [*SQUEUE, "--user", LAB_USER, "--states", "all"])
    save("sacct_X_ended.txt", [*SACCT, "--jobs", rec.ids_of(*ended[:-1]), "--allocations", "--starttime", "1970-01-01"])
    save("sacct_steps_ended.txt", [*SACCT, "--jobs", rec.ids_of(*ended[:-1]), "--starttime", "1970-01-01"])
    save(
        "sacct_X_array_done.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-array"), "--allocations", "--starttime", "1970-01-01"],
    )
    if has_states:
        save("squeue_only_job_state_ended.txt", [*STATES, "--jobs", rec.ids_of(*ended)], ok=False)

    print("preemption", flush=True)
    sb("rec-low", ["--qos=low", "--exclusive", "--gres=gpu:4", "-w", "n2", "--requeue"], "sleep 600")
    rec.wait("low to run", lambda q: rec.state("rec-low", q) == {"RUNNING"})
    save("squeue_low_running.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-low")])
    sb("rec-preemptor", ["--qos=high", "--exclusive", "--gres=gpu:1", "-w", "n2"], "sleep 15")
    rec.wait(
        "the preemptor to wait",
        lambda q: rec.state("rec-preemptor", q) == {"PENDING"} and rec.reason("rec-preemptor", q) != {"None"},
    )  # until the scheduler has looked at it
    save("squeue_preemptor_pending.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-low", "rec-preemptor")])
    rec.wait(
        "the requeue", lambda q: rec.state("rec-low", q) == {"PENDING"} and rec.state("rec-preemptor", q) == {"RUNNING"}
    )
    save("squeue_requeued_begintime.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-low", "rec-preemptor")])
    save(
        "sacct_XD_preempted_then_pending.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-low"), "--allocations", "--duplicates", "--starttime", "1970-01-01"],
    )
    rec.wait("low to run again", lambda q: rec.state("rec-low", q) == {"RUNNING"} and not q.get("rec-preemptor"), 240)
    time.sleep(2)
    save("squeue_requeued_running.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-low")])
    save(
        "sacct_XD_preempted_then_running.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-low"), "--allocations", "--duplicates", "--starttime", "1970-01-01"],
    )
    save(
        "sacct_D_steps_preempted.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-low", "rec-preemptor"), "--duplicates", "--starttime", "1970-01-01"],
    )
    rec.cancel("rec-low")

    print("scontrol requeue", flush=True)
    sb("rec-requeue", ["-w", "n1"], "sleep 600")
    rec.wait("requeue to run", lambda q: rec.state("rec-requeue", q) == {"RUNNING"})
    rec.run(["scontrol", "requeue", str(rec.ids["rec-requeue"])])
    rec.wait("the requeue", lambda q: rec.state("rec-requeue", q) in ({"COMPLETING"}, {"PENDING"}))
    save("squeue_requeue_completing.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-requeue")])
    rec.wait("requeue to run again", lambda q: rec.state("rec-requeue", q) == {"RUNNING"}, 120)
    time.sleep(2)
    save(
        "sacct_XD_requeued_then_running.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-requeue"), "--allocations", "--duplicates", "--starttime", "1970-01-01"],
    )
    rec.run(["scontrol", "requeuehold", str(rec.ids["rec-requeue"])])
    rec.wait("the requeuehold", lambda q: rec.state("rec-requeue", q) in ({"COMPLETING"}, {"PENDING"}))
    save("squeue_requeuehold_completing.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-requeue")])
    rec.wait("the held requeue", lambda q: rec.state("rec-requeue", q) == {"PENDING"})
    save("squeue_requeuehold_pending.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-requeue")])
    save("scontrol_show_job_requeue_held.txt", ["scontrol", "show", "job", "-o", str(rec.ids["rec-requeue"])])
    save(
        "sacct_XD_requeued_twice_held.txt",
        [*SACCT, "--jobs", rec.ids_of("rec-requeue"), "--allocations", "--duplicates", "--starttime", "1970-01-01"],
    )
    rec.cancel("rec-requeue")

    print("two nodes", flush=True)
    rec.wait("the queue to empty", lambda q: not q, 120)
    sb("rec-two", ["-N", "2", "--exclusive", "--gres=gpu:1"], "srun sleep 600")
    rec.wait("two to run", lambda q: rec.state("rec-two", q) == {"RUNNING"})
    time.sleep(3)
    save("squeue_two_nodes.txt", [*SQUEUE, "--jobs", rec.ids_of("rec-two")])
    save("scontrol_show_job_two_nodes.txt", ["scontrol", "show", "job", "-o", str(rec.ids["rec-two"])])
    save("sacct_steps_two_nodes.txt", [*SACCT, "--jobs", rec.ids_of("rec-two"), "--starttime", "1970-01-01"])
    save("sinfo_nodes_allocated.txt", SINFO)
    rec.cancel("rec-two")


def errors(rec: Recorder, cfg: LabConfig, out: Path) -> None:
    save = rec.save
    print("errors", flush=True)
    script = "#!/bin/bash\ntrue\n"

    def sbatch_err(name: str, *opts: str, env: dict | None = None) -> None:
        r = rec.run(["sbatch", "--parsable", "--output=/dev/null", *opts], input=script, env=env)
        if r.returncode == 0 or not r.stderr:
            raise SystemExit(f"{name}: sbatch did not fail: {r.stdout} {r.stderr}")
        (out / name).write_bytes(r.stderr.encode())
        print(f"  {name}", flush=True)

    r = rec.run(["sbatch", "--parsable", "--output=/dev/null", "--hold"], input=script)
    (out / "sbatch_parsable.txt").write_bytes(r.stdout.encode())
    rec.run(["scancel", r.stdout.strip()])
    sbatch_err("sbatch_invalid_qos.stderr.txt", "--qos=nosuch")
    sbatch_err("sbatch_invalid_account.stderr.txt", "--account=nosuch")
    sbatch_err("sbatch_invalid_partition.stderr.txt", "--partition=nosuch")
    sbatch_err("sbatch_too_many_gpus.stderr.txt", "--gres=gpu:5")
    save("squeue_unknown_id.stderr.txt", [*SQUEUE, "--jobs", "999999"], stderr=True)
    save("scancel_invalid_id.stderr.txt", ["scancel", "999999"], stderr=True, may_be_empty=True)  # 24.11+: silent
    save("scontrol_requeue_invalid_id.stderr.txt", ["scontrol", "requeue", "999999"], stderr=True)
    save("scontrol_show_job_invalid_id.stderr.txt", ["scontrol", "show", "job", "-o", "999999"], stderr=True)
    save(
        "sacct_invalid_time.stderr.txt",
        [*SACCT, "--allocations", "--user", LAB_USER, "--starttime", "garbage"],
        stderr=True,
    )
    etc = Path(tempfile.mkdtemp(prefix="roach-record-"))  # a copy of the lab's etc: gres.conf and the rest beside it
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):  # not the keys and passwords
        shutil.copy(cfg.slurm_conf.parent / name, etc / name)
    etc.chmod(0o755)
    down = etc / "slurm.conf"
    text = re.sub(r"^SlurmctldPort=.*$", "SlurmctldPort=1", down.read_text(), flags=re.MULTILINE)
    down.write_text(re.sub(r"^AccountingStoragePort=.*$", "AccountingStoragePort=1", text, flags=re.MULTILINE))
    dn = {"SLURM_CONF": str(down)}
    save("squeue_controller_down.stderr.txt", [*SQUEUE, "--me"], stderr=True, env=dn)
    save("sinfo_controller_down.stderr.txt", SINFO, stderr=True, env=dn)
    save("scancel_controller_down.stderr.txt", ["scancel", "999999"], stderr=True, env=dn)
    sbatch_err("sbatch_controller_down.stderr.txt", env=dn)
    save(
        "sacct_slurmdbd_down.stderr.txt",
        [*SACCT, "--allocations", "--user", LAB_USER, "--starttime", "now-1hours"],
        stderr=True,
        env=dn,
    )
    if "--only-job-state" in (out / "squeue_help.txt").read_text():
        save("squeue_only_job_state_controller_down.stderr.txt", [*STATES, "--jobs", "1"], stderr=True, env=dn)
    shutil.rmtree(etc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--out", default=str(Path(__file__).parent / "data"))
    ap.add_argument("--errors-only", action="store_true", help="record only the error outputs")
    ap.add_argument("--ledger-only", action="store_true", help="record only the ledger's sacct (roach report)")
    args = ap.parse_args()
    cfg = LabConfig.load(args.state_dir)
    r = subprocess.run(
        ["scontrol", "--version"], check=True, capture_output=True, text=True, env={**os.environ, **cfg.env()}
    )
    version = ".".join(r.stdout.split()[1].split(".")[:2])  # "slurm 24.11.5" -> 24.11
    out = Path(args.out) / version
    out.mkdir(parents=True, exist_ok=True)
    print(f"recording Slurm {r.stdout.strip()} into {out}", flush=True)
    record(cfg, out, args.errors_only, args.ledger_only)
    (out / "VERSION").write_text(r.stdout.split()[1] + "\n")


if __name__ == "__main__":
    sys.exit(main())
