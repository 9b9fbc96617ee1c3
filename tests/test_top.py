"""`roach top` on the lab, driven in a real terminal: tmux (send-keys, capture-pane) runs the real command in an
80x24 pane. A sweep of 6 runs appears, a run that ends changes its row, the selected run's log is followed, a
resize redraws, `q` quits; a preempted run shows its restart; `p` asks, and `y` promotes; `--once --json`
prints the frame's data. Over SSH (a real sshd), its rounds are the watch's few commands on one connection."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from roach.cli.top import Top
from roach.cli.top_view import Mode
from roach.lab.config import LAB_USER
from roach.launch.sweep import sweep
from roach.slurm.clusters.lab import GPU1, LAB
from roach.watch.shared import Viewer
from roach.watch.watcher import Watcher
from tests.conftest import slack, wait_until
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.pane import Pane, roach_argv, roach_env
from tests.support.schemas import validate_output
from tests.support.submitting import pending_below_room, submit_to_lab
from tests.support.watch import TRAIN

CLUSTER = LAB.with_(run_as=LAB_USER)
KEYS_LINE = "up/down select"


PKG = {"pkg/__init__.py": "", "pkg/train.py": TRAIN}  # what the repo fixture commits


def fits(lines: list[str], width: int, height: int) -> bool:
    """The frame fills the pane exactly: its title on the first line, its keys line the last, none wrapped."""
    body = [ln for ln in lines if ln.strip()]
    return (
        len(lines) >= height
        and lines[0].startswith("roach top")
        and lines[height - 1].rstrip() != ""
        and all(len(ln) <= width for ln in lines)
        and len(body) <= height
    )


def restarted(line: str | None) -> bool:
    """The row's R/P cell says it restarted and was preempted (`1/1`: restart count / preemptions)."""
    return bool(line and re.search(r" [1-9]\d*/[1-9]\d* ", line))


def row(lines: list[str], key: str) -> str | None:
    return next((ln for ln in lines if ln[1:].startswith(f"{key} ")), None)


@pytest.mark.slow
@pytest.mark.lab
def test_a_sweep_of_six_in_80x24_its_ends_the_log_a_resize_and_q(lab, repo, store, roots, slurm):
    grid = [{"steps": 6, "step_s": 0.2}] + [{"steps": 900, "step_s": 0.3} for _ in range(5)]
    sw = sweep(
        "pkg.train:train",
        grid,
        resources=GPU1.replace(time="00:05:00"),
        cluster=CLUSTER,
        repo_root=repo.work,
        store=store,
        name="topsweep",
        **roots,
    )
    keys = [j.slurm_id for j in sw]
    pane = Pane(
        "sweep", roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1"), roach_env(store)
    )
    try:
        lines = pane.wait("the 6 runs' rows", lambda ls: all(row(ls, k) for k in keys), timeout=60)
        assert fits(lines, 80, 24), lines
        assert lines[-1].startswith(KEYS_LINE) or lines[23].startswith(KEYS_LINE), lines
        assert any(ln.startswith("high ") for ln in lines) and any(ln.startswith("low ") for ln in lines)
        # the short run ends: its row says how; the others run on with their pace and ETA
        lines = pane.wait(
            "the short run's row to say COMPLETED",
            lambda ls: "COMPLETED" in (row(ls, keys[0]) or "") and "exit 0:0" in (row(ls, keys[0]) or ""),
            timeout=90,
        )
        lines = pane.wait(
            "a running row with its steps per minute and ETA",
            lambda ls: any(
                "RUNNING" in (r := row(ls, k) or "") and "step " in r and r.split()[7] != "-" for k in keys[1:]
            ),
            timeout=60,
        )
        assert fits(lines, 80, 24) and "1 ended" in lines[0], lines
        # the second run's log, followed
        pane.keys("Down", "l")
        lines = pane.wait("its log", lambda ls: ls[1].startswith(f"log of job {keys[1]}") and "step" in "\n".join(ls))
        assert fits(lines, 80, 24), lines
        pane.keys("l")
        pane.wait("the table again", lambda ls: row(ls, keys[1]) is not None and row(ls, keys[1]).startswith(">"))
        # a resize redraws the whole frame at the new size, and back
        pane.tmux("resize-window", "-t", "sweep", "-x", "100", "-y", "30")
        lines = pane.wait("the frame at 100x30", lambda ls: fits(ls, 100, 30) and ls[29].startswith(KEYS_LINE))
        assert fits(lines, 100, 30) and all(row(lines, k) for k in keys), "\n".join(lines)
        pane.tmux("resize-window", "-t", "sweep", "-x", "80", "-y", "24")
        lines = pane.wait("the frame at 80x24", lambda ls: fits(ls, 80, 24) and ls[23].startswith(KEYS_LINE))
        assert fits(lines, 80, 24) and all(row(lines, k) for k in keys), lines
        # while top polls, another viewer of this store and cluster reads its rounds: never refused
        other = subprocess.run(
            roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--once"),
            env=roach_env(store),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode == 0, other.stdout + other.stderr
        assert "6 jobs:" in other.stdout and all(k in other.stdout for k in keys), other.stdout
        pane.keys("q")
        wait_until("top to quit", pane.exited, timeout=15)
        assert pane.exited() == "exit status 0", pane.text()
    finally:
        pane.close()
        slurm.scancel(sw.array_ids)
        wait_until(  # the next test's runs want these GPUs
            "the sweep to leave the queue",
            lambda: (
                not [q for q in slurm.squeue(all_users=True) if str(q.job_id).split("_")[0] in map(str, sw.array_ids)]
            ),
            timeout=60,
        )
    once = subprocess.run(
        roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--once", "--json"),
        env=roach_env(store),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert once.returncode == 0, once.stderr
    frame = json.loads(once.stdout)
    validate_output("top", frame)
    assert frame["schema"] == "roach.top/1"
    jobs = {j["job_id"]: j for j in frame["jobs"]}
    assert set(keys) <= set(jobs) and jobs[keys[0]]["state"] == "COMPLETED" and jobs[keys[0]]["done"]
    assert {t["tier"] for t in frame["tiers"]} == {"high", "low"}


@pytest.mark.slow
@pytest.mark.lab
def test_a_preempted_run_shows_its_restart(lab, repo, store, roots, slurm):

    low_on_n1 = GPU1.replace(qos="low", time="00:05:00", extra=("--nodelist=n1",))
    args = {"steps": 400, "step_s": 0.2}
    job = submit_to_lab(repo, store, roots, "pkg.train:train", args, resources=low_on_n1, name="preemptible")
    key = str(job.job_id)
    pane = Pane(
        "preempt", roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1"), roach_env(store)
    )
    try:
        pane.wait("the run to make progress", lambda ls: "step " in (row(ls, key) or ""), timeout=90)
        assert " 0/0 " in row(pane.lines(), key)
        slurm.sbatch(
            ["--qos=high", "--nodelist=n1", "--gres=gpu:4", "--time=1", "--output=/dev/null"], "#!/bin/bash\nsleep 5\n"
        )
        lines = pane.wait("its restart and preemption", lambda ls: restarted(row(ls, key)), timeout=slack(90))
        assert fits(lines, 80, 24), lines
        pane.wait(
            "it to run again, or end, its restart still shown",
            lambda ls: restarted(r := row(ls, key)) and ("RUNNING" in (r or "") or "COMPLETED" in (r or "")),
            timeout=120,
        )
        assert " 1/1 " in row(pane.lines(), key), pane.lines()  # one preemption, counted once
        pane.keys("q")
        wait_until("top to quit", pane.exited, timeout=15)
    finally:
        pane.close()
        job.cancel()


@pytest.mark.lab
def test_p_proposes_a_promotion_asks_and_y_makes_it(lab, repo, store, roots, user_slurm, jobs):

    job = pending_below_room(repo, store, roots, user_slurm, jobs, "wants-high")
    key = str(job.job_id)
    argv = roach_argv("top", "--cluster", "lab", "--run-as", LAB_USER, "--interval", "1", "--repo-root", str(repo.work))
    pane = Pane("promote", argv, roach_env(store))
    try:
        pane.wait("the promotion it proposes", lambda ls: "clears p->high" in (row(ls, key) or ""), timeout=60)
        pane.keys("p")
        lines = pane.wait("the question", lambda ls: "[y/N]" in ls[23], timeout=15)
        assert lines[23].startswith(f"promote job {key} from low to high? [y/N]  (run {job.run_id[:10]}"), lines[23]
        pane.keys("n")
        pane.wait("no promotion", lambda ls: ls[23].startswith("not promoted"), timeout=15)
        assert store.get("lab", job.job_id).status == "submitted"  # nothing moved
        pane.keys("p")
        pane.wait("the question again", lambda ls: "[y/N]" in ls[23], timeout=15)
        pane.keys("y")
        lines = pane.wait("the promotion made", lambda ls: f"promoted job {key}" in ls[23], timeout=60)
        new_id = int(lines[23].split("now job ")[1].split()[0])
        jobs.append(new_id)
        lines = pane.wait(
            "the old row moved on and the new job's row on high",
            lambda ls: f"moved to {new_id}" in (row(ls, key) or "") and " high " in (row(ls, str(new_id)) or ""),
            timeout=60,
        )
        assert fits(lines, 80, 24), lines
        assert store.get("lab", new_id).run_id == job.run_id
        pane.keys("q")
        wait_until("top to quit", pane.exited, timeout=15)
    finally:
        pane.close()
        job.cancel()


@pytest.mark.lab
def test_over_ssh_its_rounds_are_the_watchs_few_commands_on_one_connection(
    repo, store, roots, cluster, sshd: SSHServer
):
    job = submit_to_lab(
        repo,
        store,
        roots,
        "pkg.train:train",
        {"steps": 200, "step_s": 0.3},
        resources=GPU1.replace(time="00:05:00"),
        cluster=cluster,
    )
    top = Top(Viewer(Watcher(cluster, cluster.client(), store, interval_s=1.0, heartbeat_s=1e9)), ".")
    sessions = lambda: sshd.log.read_text(errors="replace").count("Starting session: command")  # noqa: E731
    try:
        top.refresh(top.viewer.step(now=True))
        connections = sshd.accepted_connections()
        per_round = []
        deadline = time.monotonic() + slack(60)
        while not (top.frame and top.frame.rows[0].pace.eta_s is not None):
            assert time.monotonic() < deadline, per_round
            time.sleep(1.0)
            before = sessions()
            top.refresh(top.viewer.step(now=True))
            per_round.append(sessions() - before)
        assert set(per_round) <= {1, 2} and 2 in per_round, per_round  # squeue, and the log look while it runs
        top.key("l")  # following the log: one read more a round, on the same connection
        assert top.view.mode is Mode.LOG and any("step" in ln for ln in top.view.log_lines), top.view.log_lines
        before = sessions()
        top.refresh(top.viewer.step(now=True))
        assert sessions() - before == 3
        assert sshd.accepted_connections() == connections
    finally:
        job.cancel()
