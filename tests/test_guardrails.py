"""Guardrails: each refusal, and proof that nothing was submitted (the user's squeue and sacct before and
after, the store, the log root). Lab-based fake clusters stand in for capped ones; metered ones and their grants
are tests/test_grants_lab.py's."""

from __future__ import annotations

import socket
import subprocess
import uuid
from datetime import datetime, timedelta

import pytest

from roach.fleet import guardrails
from roach.fleet.guardrails import Refused, check, check_live
from roach.lab.config import LAB_USER
from roach.records.grants import GrantBook, GrantRefused
from roach.records.store import Store
from roach.slurm import Resources, hold, submit, sweep
from roach.slurm.clusters import ilc
from roach.slurm.clusters.lab import GPU1, GPU2, GPU4, LAB
from tests.conftest import slack

CLUSTER = LAB.with_(run_as=LAB_USER)
PKG = {"pkg/__init__.py": "", "pkg/jobs.py": "def hello(run):\n    run.log('hello')\n    return 1\n"}


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    path = tmp_path / "clusters.toml"
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(path))
    return path


# -- the rules, offline ------------------------------------------------------------------------------------
def test_a_metered_cluster_needs_no_flag_offline():
    """The consent is a grant, held where the submission is queued (tests/test_grants_lab.py); the old flag
    changes nothing."""
    check(LAB.with_(metered=True), GPU1)
    check(LAB.with_(metered=True), GPU1, allow_metered=True)


def test_caps_in_gpus_gpu_hours_and_money(config):
    with pytest.raises(Refused, match=r"4 GPUs \(1 node\(s\) x 4\) is more than the 2 GPUs per submission") as e:
        check(LAB.with_(max_gpus=2), GPU4)
    assert e.value.rule == "cap"
    check(LAB.with_(max_gpus=4), GPU4)
    config.write_text("[clusters.lab]\nmax_gpu_hours = 1.5\n")
    with pytest.raises(Refused, match=r"2 GPU-hours \(4 GPUs x 0.5 h\) is more than the 1.5 GPU-hours"):
        check(LAB, GPU4)  # GPU4 is 30 minutes
    check(LAB, GPU2)
    config.write_text("[clusters.lab]\ngpu_hour_cost = 3.0\nmax_cost = 2.5\n")
    with pytest.raises(Refused, match=r"costs 3.00, more than the 2.5 per submission"):
        check(LAB, GPU2)
    check(LAB, GPU1)


def test_a_sweep_is_one_submission_for_the_caps():
    """Every run is within the caps; the runs held at once, or all of them together, may not be."""
    capped = LAB.with_(max_gpus=3, max_gpu_hours=4, gpu_hour_cost=1.5, max_cost=5.0)  # GPU2: 1 GPU-hour a run
    guardrails.check_caps(capped, GPU2, runs=3, parallelism=1)  # 2 GPUs at once, 3 GPU-hours, 4.50
    with pytest.raises(
        Refused,
        match=r"a sweep of 2 runs of 2 GPUs may hold 4 GPUs at once \(2 runs\), more than "
        r"the 3 GPUs per submission allowed on lab",
    ) as e:
        guardrails.check_caps(capped, GPU2, runs=2)
    assert e.value.rule == "cap" and "parallelism" in e.value.hint
    with pytest.raises(Refused, match=r"a sweep of 5 runs of 1 GPU-hours asks for 5 GPU-hours, more than the 4 "):
        guardrails.check_caps(capped.with_(max_cost=None), GPU2, runs=5, parallelism=1)
    with pytest.raises(Refused, match=r"a sweep of 4 runs \(4 GPU-hours at 1.5\) costs 6.00, more than the 5 per"):
        guardrails.check_caps(capped, GPU2, runs=4, parallelism=1)
    with pytest.raises(Refused, match=r"^4 GPUs \(1 node\(s\) x 4\) is more than the 3 GPUs") as e:
        guardrails.check_caps(capped, GPU4)  # not a sweep: one job's own wording
    assert "parallelism" not in e.value.hint


def test_submit_hosts_and_refused_hosts():
    login = LAB.with_(refused_hosts=("ilc-login*",), refused_host_reason="its home is AFS")
    with pytest.raises(
        Refused, match=r"ilc-login2.example.org is not a submit host for lab .*'ilc-login\*'\): its home is AFS"
    ) as e:
        check(login, GPU1, hostname="ilc-login2.example.org")
    assert e.value.rule == "host"
    check(login, GPU1, hostname="ilc-node7")
    only = LAB.with_(submit_hosts=("node*",))
    with pytest.raises(Refused, match="submit_hosts are node"):
        check(only, GPU1, hostname="laptop")
    check(only, GPU1, hostname="node3.cluster")
    with pytest.raises(Refused, match="not a submit host for lab: home on AFS"):
        check(LAB.with_(host_check=lambda: "home on AFS"), GPU1)


def test_ilc_refuses_its_login_host_by_name_and_by_afs_home(config, monkeypatch):
    config.write_text('[clusters.ilc]\nrefused_hosts = ["ilc-login*"]\n')
    with pytest.raises(Refused, match="the ILC login host is not a submit host: its home is AFS"):
        check(ilc.ILC, ilc.AMPERE, hostname="ilc-login")
    check(ilc.ILC, ilc.AMPERE, hostname="ilc-n12")
    monkeypatch.setenv("HOME", "/afs/cs/u/me")
    assert "is on AFS" in ilc.afs_home()
    with pytest.raises(Refused, match="is on AFS"):
        check(ilc.ILC, ilc.AMPERE)
    monkeypatch.setenv("HOME", "/home/me")
    assert ilc.afs_home() is None


def test_requests_no_tier_can_satisfy_offline():
    with pytest.raises(Refused, match="qos 'nosuch' is not a QOS of lab") as e:
        check(LAB, GPU1.replace(qos="nosuch"))
    assert e.value.rule == "unsatisfiable" and "its QOS: high, normal, low" in e.value.hint
    assert "tiers, top down: high (qos high); low (qos low)" in e.value.hint
    check(LAB, GPU1.replace(qos="normal", partition="gpu"))  # the lab's default QOS: a QOS, though no tier
    with pytest.raises(Refused, match="qos 'normal' is in no tier of lab") as e:  # where only the tiers are known
        check(LAB.with_(qos_names=()), GPU1.replace(qos="normal"))
    assert "high (qos high); low (qos low)" in e.value.hint
    with pytest.raises(Refused, match="partition 'nopart' is not a partition of lab"):
        check(LAB.with_(partitions=("gpu",)), GPU1.replace(partition="nopart"))
    with pytest.raises(Refused, match="8 GPUs per node is more than any node of lab has"):
        check(LAB.with_(max_gpus_per_node=4), GPU1.replace(gpus_per_node=8))
    from roach.slurm.clusters.dsi import DSI
    from roach.slurm.clusters.dsi import GPU1 as DSI_GPU1

    check(DSI, DSI_GPU1.replace(partition="interactive"))
    with pytest.raises(Refused, match="partition 'gpu' is not a partition of dsi"):
        check(DSI, DSI_GPU1.replace(partition="gpu"))


# -- live: asking the lab ------------------------------------------------------------------------------------
@pytest.mark.lab
def test_check_live_asks_the_lab(lab):
    check_live(CLUSTER, GPU2.replace(qos="high", account="lab", partition="gpu"))
    with pytest.raises(Refused, match=r"1 node\(s\) with 5 GPUs, 5 CPUs each: 0 node\(s\) of lab partition gpu"):
        check_live(CLUSTER, GPU1.replace(gpus_per_node=5))
    with pytest.raises(Refused, match=r"3 node\(s\) with 1 GPUs"):
        check_live(CLUSTER, GPU1.replace(nodes=3))
    with pytest.raises(Refused, match="partition 'nopart' does not exist on lab"):
        check_live(CLUSTER, GPU1.replace(partition="nopart"))
    with pytest.raises(Refused, match="account 'nosuch' is not one of yours") as e:
        check_live(CLUSTER, GPU1.replace(account="nosuch"))
    assert "lab" in e.value.hint


# -- submit refuses, and nothing is submitted ---------------------------------------------------------------
def _refused(repo, shared_tmp, user_slurm, cluster, resources, rule, match, **kw):
    name = f"guard-{uuid.uuid4().hex[:8]}"
    since = (datetime.now() - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S")
    before = {r.raw_id for r in user_slurm.squeue()}
    store = kw.pop("store", None) or Store(shared_tmp / "store.sqlite")
    recorded = store.all_jobs()
    log_root = shared_tmp / "logs"
    with pytest.raises((Refused, GrantRefused)) as e:
        submit(
            "pkg.jobs:hello",
            cluster=cluster,
            resources=resources,
            name=name,
            repo_root=repo.work,
            store=store,
            log_root=str(log_root),
            clone_root=str(shared_tmp / "clones"),
            **kw,
        )
    assert e.value.rule == rule and match in str(e.value), str(e.value)
    after = user_slurm.squeue()
    assert not [r for r in after if r.raw_id not in before and r.name == name]  # nothing queued ...
    assert not [r for r in user_slurm.sacct(user=LAB_USER, since=since) if r.name == name]  # ... not even held
    assert store.all_jobs() == recorded  # nothing recorded ...
    assert not log_root.exists()  # ... or written
    return e.value


def _submit_ok(repo, shared_tmp, store, resources=GPU1, **kw):
    return submit(
        "pkg.jobs:hello",
        cluster=METERED,
        resources=resources,
        repo_root=repo.work,
        store=store,
        log_root=str(shared_tmp / "ok-logs"),
        clone_root=str(shared_tmp / "clones"),
        **kw,
    )


METERED = CLUSTER.with_(metered=True, budget="pretend dollars")


@pytest.mark.lab
def test_a_metered_submission_without_a_grant_is_refused_and_nothing_is_left(repo, shared_tmp, user_slurm):
    e = _refused(repo, shared_tmp, user_slurm, METERED, GPU1, "grant", "no live grant covers it")
    assert "roach grant lab --gpu-hours H" in (e.hint or "")


@pytest.mark.lab
def test_three_half_hour_submits_against_one_grant_hour_queue_two(repo, shared_tmp, user_slurm, jobs):
    store = Store(shared_tmp / "store.sqlite")
    g = GrantBook(store).make("lab", 1.0, granted_by="budget-owner")
    for _ in range(2):  # GPU1: 1 GPU x 30 minutes, 0.5 GPU-hours at worst
        jobs.append(_submit_ok(repo, shared_tmp, store).job_id)
    e = _refused(repo, shared_tmp, user_slurm, METERED, GPU1, "grant", f"grant {g.name} on lab", store=store)
    assert "has 0.00 of its 1 GPU-hours left" in str(e)
    assert "needs 0.50 GPU-hours" in str(e)
    assert sorted(j for h in GrantBook(store).uses("lab")[0].holds for j in h.job_ids or ()) == sorted(jobs)


@pytest.mark.lab
def test_a_sweep_and_a_holder_are_held_at_their_worst_case(repo, shared_tmp, user_slurm, jobs):
    store = Store(shared_tmp / "store.sqlite")
    GrantBook(store).make("lab", 0.9, granted_by="budget-owner")
    before = {r.raw_id for r in user_slurm.squeue()}
    with pytest.raises(GrantRefused, match=r"\(2 x 1 GPUs x 0.5 h\) needs 1.00 GPU-hours"):  # 2 runs x 0.5
        sweep(
            "pkg.jobs:hello",
            [{}, {}],
            cluster=METERED,
            resources=GPU1,
            repo_root=repo.work,
            store=store,
            log_root=str(shared_tmp / "sweep-logs"),
        )
    with pytest.raises(GrantRefused, match=r"holder .* \(2 GPUs x 0.5 h\) needs 1.00 GPU-hours"):  # 2 GPUs x 30 minutes
        hold(GPU2, cluster=METERED, log_root=str(shared_tmp / "holders"), store=store)
    assert {r.raw_id for r in user_slurm.squeue()} == before
    holder = hold(GPU1, cluster=METERED, log_root=str(shared_tmp / "holders"), store=store)
    jobs.append(holder.job_id)
    assert GrantBook(store).uses("lab")[0].used == 0.5


@pytest.mark.lab
def test_submit_refuses_more_than_the_cap(repo, shared_tmp, user_slurm, config):
    _refused(
        repo, shared_tmp, user_slurm, CLUSTER.with_(max_gpus=2), GPU4, "cap", "more than the 2 GPUs per submission"
    )
    config.write_text("[clusters.lab]\nmax_gpu_hours = 0.25\n")
    _refused(repo, shared_tmp, user_slurm, CLUSTER, GPU1, "cap", "0.5 GPU-hours (1 GPUs x 0.5 h) is more than the 0.25")


@pytest.mark.lab
def test_submit_refuses_a_host_that_is_not_a_submit_host(repo, shared_tmp, user_slurm):
    here = socket.gethostname()
    login = CLUSTER.with_(refused_hosts=(here,), refused_host_reason="this stands in for a login host")
    _refused(repo, shared_tmp, user_slurm, login, GPU1, "host", f"{here} is not a submit host for lab")
    elsewhere = CLUSTER.with_(submit_hosts=("no-such-node-*",))
    _refused(repo, shared_tmp, user_slurm, elsewhere, GPU1, "host", "submit_hosts are no-such-node-*")


@pytest.mark.lab
def test_submit_refuses_what_no_tier_can_satisfy(repo, shared_tmp, user_slurm):
    _refused(
        repo,
        shared_tmp,
        user_slurm,
        CLUSTER,
        GPU1.replace(qos="nosuch"),
        "unsatisfiable",
        "qos 'nosuch' is not a QOS of lab",
    )
    sized = CLUSTER.with_(max_gpus_per_node=4)
    _refused(
        repo,
        shared_tmp,
        user_slurm,
        sized,
        Resources(gpus_per_node=6, time="00:05:00"),
        "unsatisfiable",
        "6 GPUs per node is more than any node of lab has (4)",
    )


def test_hours_and_gpu_hours_read_slurm_times():
    assert guardrails.hours(Resources(time="90")) == 1.5  # minutes
    assert guardrails.hours(Resources(time="1-00:00:00")) == 24
    assert guardrails.gpu_hours(Resources(nodes=2, gpus_per_node=4, time="00:30:00")) == 4


# -- the default cluster at submit ---------------------------------------------------------------------------
@pytest.mark.lab
def test_submit_without_a_cluster_goes_to_the_configured_default(tmp_path, monkeypatch, lab, git_repo, shared_tmp):
    from roach.model.job_state import JobState
    from roach.records.store import Store
    from roach.slurm import submit as submit_fn

    toml = tmp_path / "clusters.toml"
    toml.write_text('default = "lab"\n')
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    git_repo.commit({"pkg/__init__.py": "", "pkg/f.py": "def f():\n    return 7\n"})
    subprocess.run(["chown", "-R", "root", str(git_repo.remote)], check=True)  # this job runs as root
    job = submit_fn(
        "pkg.f:f",
        resources="CPU",
        repo_root=git_repo.work,
        log_root=str(shared_tmp / "logs"),
        store=Store(tmp_path / "s.sqlite"),
    )
    assert job.cluster.name == "lab"
    assert job.wait(timeout=slack(120)).state is JobState.COMPLETED


def test_a_metered_default_cluster_is_refused_before_anything(tmp_path, monkeypatch, git_repo, shared_tmp):
    from roach.errors import RoachError
    from roach.records.store import Store
    from roach.slurm import submit as submit_fn

    toml = tmp_path / "clusters.toml"
    toml.write_text('default = "marlowe"\n')
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    git_repo.commit({"pkg/__init__.py": "", "pkg/f.py": "def f():\n    return 7\n"})
    store = Store(tmp_path / "s.sqlite")
    with pytest.raises(RoachError, match="metered"):
        submit_fn("pkg.f:f", resources="H100", repo_root=git_repo.work, log_root=str(shared_tmp / "logs"), store=store)
    assert store.recent() == [] and not (shared_tmp / "logs").exists()
