"""The resource plan: the choice itself on made-up tier tables, then `roach plan` on the lab (tiers high, capped,
and low, preemptible): high while it has room, and low once the user's own jobs claim high's cap, saying why."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner

from roach.cli.app import CONTEXT, RoachGroup
from roach.errors import UsageError
from roach.fleet.guardrails import Refused
from roach.lab.config import LAB_USER
from roach.model.resources import Resources
from roach.model.tiers import Tier
from roach.ops.events import TierRow
from roach.ops.plan import Ask, Plan, choose, idle_slots, plan
from roach.scheduler.parse_control import NodeRecord
from roach.slurm.clusters.lab import LAB
from tests.conftest import wait_until

NOW = datetime(2026, 1, 1, 12, 0, 0)
TIERS = (Tier("high", qos="high", gpu_cap=4), Tier("normal", qos="normal"), Tier("low", qos="low", preemptible=True))
REQ = Resources(gpus_per_node=2, time="02:00:00")


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    path = tmp_path / "clusters.toml"
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(path))
    return path


def rows(high=0, normal=0, low=0):
    return [
        TierRow("high", 4, high, high, 0),
        TierRow("normal", None, normal, normal, 0),
        TierRow("low", None, low, low, 0, True),
    ]


def probe_from(starts):
    asked = []

    def probe(tier, res):
        asked.append(tier.name)
        s = starts[tier.name]
        return (None, None, s) if isinstance(s, str) else (NOW + timedelta(minutes=s), "n1", "ok")

    return probe, asked


# -- the choice (pure) ------------------------------------------------------------------------------------
def test_high_while_it_has_room():
    probe, asked = probe_from({"high": 0, "normal": 0, "low": 0})
    placements, chosen, why = choose(TIERS, rows(high=2), REQ, NOW, probe)
    assert chosen.tier == "high" and chosen.resources.qos == "high" and asked == ["high", "normal", "low"]
    assert chosen.finish == NOW + timedelta(hours=2)
    assert (
        "normal, low would start as soon, and high is higher in the cluster's order and is not preemptible" in why[-1]
    )


def test_a_claimed_cap_is_skipped_without_asking_slurm():
    probe, asked = probe_from({"high": 0, "normal": 30, "low": 0})
    placements, chosen, why = choose(TIERS, rows(high=3), REQ, NOW, probe)
    assert asked == ["normal", "low"] and chosen.tier == "low"
    assert placements[0].why.startswith("cap 4 GPUs per user, you claim 3 (3 running, 0 pending): 1 free < 2 asked")
    assert any(w.startswith("not high: cap 4") for w in why)
    assert "later: normal (starts at 2026-01-01 12:30:00 (in 0h30m))" in why[-1]
    assert why[-1].endswith(
        "; not high, though higher in the cluster's order: cap 4 GPUs per user, you claim 3 "
        "(3 running, 0 pending): 1 free < 2 asked"
    )


def test_the_soonest_start_wins_not_the_order():
    probe, _ = probe_from({"high": 120, "normal": 45, "low": 45})
    _, chosen, why = choose(TIERS, rows(), REQ, NOW, probe)
    assert chosen.tier == "normal" and "low would start as soon" in why[-1] and "later: high" in why[-1]
    assert "not high" not in why[-1]  # high was possible, only later


def test_a_tier_slurm_refuses_above_the_choice_is_said_too():
    probe, _ = probe_from({"high": "sbatch: error: Batch job submission failed", "normal": 0, "low": 0})
    _, chosen, why = choose(TIERS, rows(), REQ, NOW, probe)
    assert chosen.tier == "normal" and why[-1].endswith(
        "; not high, though higher in the cluster's order: Slurm would not take it"
    )


def test_nothing_possible_and_slurms_refusal_is_said():
    probe, _ = probe_from({"high": 0, "normal": "sbatch: error: Job violates accounting/QOS policy", "low": "nope"})
    placements, chosen, why = choose(TIERS, rows(high=4), REQ, NOW, probe)
    assert chosen is None and "no tier can take it now" in why[-1]
    assert placements[1].why == "Slurm would not take it: sbatch: error: Job violates accounting/QOS policy"


def test_a_request_larger_than_a_cap_says_so_not_that_the_cap_is_claimed():
    probe, asked = probe_from({"high": 0, "normal": 0, "low": 0})
    placements, chosen, why = choose(TIERS, rows(), Resources(nodes=2, gpus_per_node=4), NOW, probe)
    assert asked == ["normal", "low"]
    assert chosen.tier == "normal"
    assert placements[0].why == (
        "cap 4 GPUs per user: the request (8 GPUs) is larger than the cap; skipped without asking Slurm"
    )
    assert why[-1].endswith(
        "; not high, though higher in the cluster's order: cap 4 GPUs per user: the request (8 GPUs) is larger than the cap"
    )


def test_a_sweep_goes_to_the_tier_where_the_most_of_its_runs_start_now():
    probe, _ = probe_from({"high": 0, "normal": 30, "low": 0})
    ask = Ask(Resources(gpus_per_node=1), runs=8, slots={"": 6})
    placements, chosen, why = choose(TIERS, rows(high=1), ask, NOW, probe)
    assert [p.runs_now for p in placements] == [3, 0, 6]  # high: its cap's room; normal: later; low: idle GPUs
    assert chosen.tier == "low"
    assert why[-1] == (
        "low: 6 of 8 runs start now, the most of any tier (the first starts now); "
        "runs starting now elsewhere: high 3, normal 0"
    )
    assert placements[0].why.endswith("; 3 of 8 runs start now (the cap's room holds 3, idle GPUs hold 6)")


def test_idle_slots_count_each_partitions_free_gpus_in_runs():
    def node(name, used, parts=("gpu",)):
        return NodeRecord(name, "mixed", 0, 8, 4, used, parts, 16000, 0)

    nodes = [node("n1", 3), node("n2", 0), node("n3", 0, ("gpu", "debug"))]
    assert idle_slots(nodes, Resources(gpus_per_node=1)) == {"gpu": 9, "debug": 4, "": 9}
    assert idle_slots(nodes, Resources(gpus_per_node=2)) == {"gpu": 4, "debug": 2, "": 4}
    assert idle_slots(nodes, Resources(nodes=2, gpus_per_node=4)) == {"gpu": 1, "debug": 0, "": 1}


def test_plan_writes_python_and_json(tmp_path):
    probe, _ = probe_from({"high": 0, "normal": 0, "low": 0})
    placements, chosen, why = choose(TIERS, rows(), REQ, NOW, probe)
    p = Plan("lab", 2, 1, "02:00:00", NOW, tuple(rows()), tuple(placements), chosen, tuple(why))
    ns: dict = {}
    exec(p.write(tmp_path / "res.py").read_text(), ns)
    assert ns["RESOURCES"] == chosen.resources
    data = json.loads(p.write(tmp_path / "res.json").read_text())
    assert Resources(**{k: tuple(v) if k == "extra" else v for k, v in data["resources"].items()}) == chosen.resources
    assert "chosen: high (--nodes=1 --ntasks-per-node=2 --time=02:00:00 --gres=gpu:2 --qos=high)" in p.text()
    with pytest.raises(UsageError, match="nothing to write"):
        Plan("lab", 2, 1, "1", NOW, (), (), None).write(tmp_path / "x.py")


def test_plan_refuses_before_reading_the_cluster():
    with pytest.raises(UsageError, match="do not split evenly over 2 nodes"):
        plan(LAB, 3, nodes=2)
    with pytest.raises(Refused, match="more than the 1 GPUs per submission"):
        plan(LAB.with_(max_gpus=1), 2)
    with pytest.raises(UsageError, match="cluster ilc declares no tiers") as e:
        plan("ilc", 1)
    assert "roach clusters discover ilc" in e.value.hint


# -- on the lab ---------------------------------------------------------------------------------------------
CLUSTER = LAB.with_(run_as=LAB_USER)


def cli(*args: str):
    group = RoachGroup(context_settings=CONTEXT)  # loads each command from roach.cli.app.COMMANDS
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


def _high_claim(user_slurm) -> int:
    return sum(q.tres.gpus for q in user_slurm.squeue() if q.qos == "high" and q.state.is_active)


@pytest.mark.lab
def test_lab_plan_picks_high_when_it_has_room(user_slurm, tmp_path):
    wait_until("room on high for the lab user", lambda: _high_claim(user_slurm) <= 2, timeout=120, every=2)
    r = cli(
        "plan",
        "--cluster",
        "lab",
        "--gpus",
        "2",
        "--time",
        "00:10:00",
        "--run-as",
        LAB_USER,
        "--json",
        "--write",
        str(tmp_path / "res.py"),
    )
    p = json.loads(r.output)
    assert r.exit_code == 0 and p["chosen"]["tier"] == "high", p["reasoning"]
    assert p["chosen"]["resources"]["qos"] == "high" and p["reasoning"][-1].startswith("high: ")
    assert [t["tier"] for t in p["tiers"]] == ["high", "low"] and not p["chosen"]["preemptible"]
    assert "low" in p["reasoning"][-1] and "not high" not in p["reasoning"][-1]  # low: as soon, or later
    assert "RESOURCES = Resources(qos='high'" in (tmp_path / "res.py").read_text()
    text = cli("plan", "--cluster", "lab", "--gpus", "2", "--run-as", LAB_USER).output
    assert "chosen: high" in text and "why:" in text


@pytest.mark.lab
def test_lab_plan_picks_low_when_the_users_own_jobs_claim_highs_cap(user_slurm, jobs):
    for _ in range(2):  # 4 GPUs on high, running or pending: either way they claim the cap
        jobs.append(
            user_slurm.sbatch(
                ["--qos=high", "--gres=gpu:2", "--time=3", "--output=/dev/null", "--job-name=plan-occupy"],
                "#!/bin/bash\nsleep 120\n",
            )
        )
    r = cli("plan", "--cluster", "lab", "--gpus", "2", "--time", "00:10:00", "--run-as", LAB_USER, "--json")
    p = json.loads(r.output)
    assert r.exit_code == 0 and [t["tier"] for t in p["tiers"]] == ["high", "low"], r.output
    high = p["placements"][0]
    assert (
        not high["possible"]
        and "cap 4 GPUs per user, you claim" in high["why"]
        and "skipped without asking" in high["why"]
    )
    assert p["chosen"]["tier"] == "low" and p["chosen"]["resources"]["qos"] == "low", p["reasoning"]
    assert p["chosen"]["preemptible"] and p["reasoning"][-1].startswith("low: ")
    # why low: high, higher in the order, has its cap claimed by the user's own jobs (N/4, N >= 4)
    claimed = re.search(
        r"; not high, though higher in the cluster's order: cap 4 GPUs per user, you claim (\d+) "
        r"\(\d+ running, \d+ pending\): \d+ free < 2 asked$",
        p["reasoning"][-1],
    )
    assert claimed, p["reasoning"]
    assert int(claimed[1]) >= 4, p["reasoning"]
    text = cli("plan", "--cluster", "lab", "--gpus", "2", "--time", "00:10:00", "--run-as", LAB_USER).output
    assert "chosen: low (" in text
    assert "you claim" in text
    assert "--qos=low" in text


@pytest.mark.lab
def test_lab_plan_sees_the_account_clusters_toml_gives(user_slurm, config):
    """`roach plan` gets the lab by name with clusters.toml applied: the account given there is the plan's."""
    config.write_text('[clusters.lab]\naccount = "lab"\n')
    p = json.loads(
        cli("plan", "--cluster", "lab", "--gpus", "1", "--time", "00:05:00", "--run-as", LAB_USER, "--json").output
    )
    assert p["chosen"]["resources"]["account"] == "lab" and all(
        pl["resources"]["account"] == "lab" for pl in p["placements"]
    )
    config.write_text('[clusters.lab]\naccount = "not-an-account-of-yours"\n')
    r = cli("plan", "--cluster", "lab", "--gpus", "1", "--run-as", LAB_USER)
    assert r.exit_code == 2 and "account 'not-an-account-of-yours' is not one of yours on lab" in r.output


def test_a_planned_nodes_idle_gpus_are_a_pending_jobs_not_idle_slots():
    from pathlib import Path

    from roach.scheduler.parse_control import parse_sinfo_nodes

    text = (Path(__file__).parent / "data" / "estimate" / "sinfo_nodes_planned_24.11.txt").read_text()
    nodes = parse_sinfo_nodes(text)  # n5 and n6 `planned` with 4 idle GPUs each; every other node's 4 in use
    assert idle_slots(nodes, Resources(gpus_per_node=1)).get("gpu", 0) == 0
