"""Named clusters: each is a module and a page; clusters.toml (validated); `roach clusters [show|discover]`;
discovery proposes the lab's real tiers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from roach.cli.app import CONTEXT, RoachGroup
from roach.errors import UsageError
from roach.fleet.cluster import known_clusters
from roach.fleet.discover import discover, propose
from roach.fleet.userconfig import (
    ConfigError,
    configured,
    default_cluster_name,
    fill_resources,
    get_cluster,
    load,
    save_block,
)
from roach.lab.config import LAB_USER
from roach.model.resources import Resources
from roach.model.tiers import Tier
from roach.scheduler.parse_control import NodeRecord, parse_key_values, parse_sacctmgr
from roach.scheduler.rest.client import NoFiles, RestClient
from roach.slurm.clusters.lab import LAB
from tests.conftest import wait_until
from tests.sshd import sshd, sshd_server  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("aws", "dsi", "ilc", "lab", "marlowe")


def cli(*args: str):
    group = RoachGroup(context_settings=CONTEXT)  # loads each command from roach.cli.app.COMMANDS
    return CliRunner().invoke(group, list(args), catch_exceptions=False)


@pytest.fixture
def toml(tmp_path, monkeypatch):
    """Write clusters.toml for one test (``$ROACH_CLUSTERS_TOML``)."""
    path = tmp_path / "clusters.toml"
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(path))

    def write(text: str) -> Path:
        path.write_text(text)
        return path

    return write


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(tmp_path / "absent.toml"))


# -- every cluster: a module and a page ------------------------------------------------------------------
def test_every_cluster_is_a_module_a_site_file_and_a_page():
    assert set(SHIPPED) <= set(known_clusters())
    assert (ROOT / "docs/clusters/README.md").exists()
    for name in known_clusters():
        c = get_cluster(name)
        assert c.name == name
        site = c.site_file()
        assert re.search(r"^ROACH_ENV=(venv|pixi|uv|system)$", site, re.M), name
        page = (ROOT / f"docs/clusters/{name}.md").read_text()
        assert page.startswith("# ") and "budget" in page.lower(), name
        assert f"]({name}.md)" in (ROOT / "docs/clusters/README.md").read_text(), name


def test_the_shipped_clusters_say_what_is_known_and_invent_nothing():
    from roach.slurm.clusters import aws, dsi, ilc, marlowe

    assert ilc.ILC.ssh_alias is None and not ilc.ILC.metered and "AMPERE" in ilc.ILC.presets
    assert marlowe.MARLOWE.ssh_alias == "marlowe" and marlowe.MARLOWE.metered and "H100" in marlowe.MARLOWE.presets
    assert aws.AWS.ssh_alias == "aws" and aws.AWS.metered and "dollars" in aws.AWS.budget
    d = dsi.DSI
    assert d.ssh_alias == "login.ds" and d.gpu_flag == "gres" and d.backend == "remote-workspace"
    assert set(d.partitions) == {"general", "interactive", "protected"} and d.default_partition == "general"
    assert [t.name for t in d.tiers if t.preemptible] == ["general"]
    assert dsi.local_scratch_dir("me", 42) == "/local/scratch/me_42/"
    for c in (ilc.ILC, marlowe.MARLOWE, aws.AWS, d):  # accounts and caps are the user's, in clusters.toml
        assert c.default_account is None and c.max_gpus is None and all(t.gpu_cap is None for t in c.tiers)
        assert all(p.account is None for p in c.presets.values())


def test_an_unknown_cluster_is_an_error_listing_the_known_ones():
    with pytest.raises(UsageError, match="unknown cluster 'nosuch'") as e:
        get_cluster("nosuch")
    assert all(n in e.value.hint for n in SHIPPED)
    r = cli("clusters", "show", "nosuch")
    assert r.exit_code == 2 and "known clusters: aws, dsi, ilc, lab, marlowe" in r.output


def test_roach_clusters_lists_and_shows_each():
    r = cli("clusters", "--json")
    rows = {x["name"]: x for x in json.loads(r.output)}
    assert set(SHIPPED) <= set(rows) and rows["ilc"]["default"] and rows["marlowe"]["metered"]
    text = cli("clusters").output
    assert "ilc (default)" in text and "metered" in text
    for name in SHIPPED:
        r = cli("clusters", "show", name)
        assert r.exit_code == 0 and r.output.startswith(f"{name}: ") and "site file:" in r.output
        d = json.loads(cli("clusters", "show", name, "--json").output)
        assert d["name"] == name and d["page"] == f"docs/clusters/{name}.md" and "ROACH_ENV=" in d["site_file_text"]
    assert "tiers, top down:\n    high: qos high; cap 4 GPUs per user" in cli("clusters", "show", "lab").output


# -- clusters.toml -----------------------------------------------------------------------------------------
GOOD = """
default = "lab"
[clusters.ilc]
account = "grp"
partition = "main"
max_gpus = 8
max_gpu_hours = 100.5
refused_hosts = ["ilc-login*"]
[[clusters.ilc.tiers]]
name = "il"
qos = "il"
partition = "il"
gpu_cap = 8
[[clusters.ilc.tiers]]
name = "low"
qos = "low"
preemptible = true
[clusters.aws]
gpu_hour_cost = 4.5
max_cost = 100
"""


def test_config_is_read_and_applied(toml):
    toml(GOOD)
    cfg = load()
    assert cfg.default == "lab" and default_cluster_name() == "lab"
    ilc = configured("ilc")
    assert (ilc.default_account, ilc.default_partition, ilc.max_gpus, ilc.max_gpu_hours) == ("grp", "main", 8, 100.5)
    assert ilc.tiers == (Tier("il", partition="il", qos="il", gpu_cap=8), Tier("low", qos="low", preemptible=True))
    assert ilc.refused_hosts == ("ilc-login*",) and configured(ilc) == ilc  # idempotent
    assert configured("marlowe") is get_cluster("marlowe")  # nothing said: the module as it is
    from roach.slurm.clusters.ilc import AMPERE

    assert fill_resources(ilc, AMPERE).sbatch_options()[-2:] == ["--account=grp", "--partition=main"]
    assert fill_resources(ilc, AMPERE.replace(qos="il")).partition == "il"  # the tier's partition
    assert fill_resources(ilc, AMPERE.replace(account="x", partition="y")).account == "x"


def test_without_a_config_the_default_is_ilc(toml):
    assert not load().exists and default_cluster_name() == "ilc"


@pytest.mark.parametrize(
    "text, message, hint",
    [
        ("nonsense = 1\n", "top level: unknown key(s) nonsense", "default"),
        (
            "[clusters.nosuch]\naccount = 'a'\n",
            "unknown cluster 'nosuch'",
            "known clusters: aws, dsi, ilc, lab, marlowe",
        ),
        ("[clusters.ilc]\naccout = 'a'\n", "unknown key(s) accout", "account (str)"),
        ("[clusters.ilc]\nmax_gpus = -1\n", "max_gpus: -1 is not an integer >= 0", None),
        ("[clusters.ilc]\nmax_gpus = true\n", "max_gpus: True is not an integer", None),
        ("[clusters.ilc]\nrefused_hosts = 'x'\n", "refused_hosts: 'x' is not a list of non-empty strings", None),
        ("[[clusters.ilc.tiers]]\nqos = 'a'\n", "a tier needs a name", None),
        ("[[clusters.ilc.tiers]]\nname = 'a'\ncap = 3\n", "unknown key(s) cap", "gpu_cap (int)"),
        ("[[clusters.ilc.tiers]]\nname='a'\n[[clusters.ilc.tiers]]\nname='a'\n", "given twice: a", None),
        ("[clusters.aws]\nmax_cost = 5\n", "max_cost needs gpu_hour_cost", None),
        ("default = 'nosuch'\n", "default: unknown cluster 'nosuch'", "known clusters"),
        ("[clusters.ilc\n", "is not valid TOML", None),
        ("[clusters.lab]\nrest_url = 'http://ctl:6820'\n", "exactly one of token_command and token_file", None),
        (
            "[clusters.lab]\nrest_url = 'http://c:1'\ntoken_file = '/t'\ntoken_command = ['scontrol', 'token']\n",
            "exactly one of token_command and token_file",
            "token_command = [",
        ),
        ("[clusters.lab]\ntoken_file = '/t'\n", "token_file without rest_url", "add rest_url"),
        ("[clusters.lab]\nrest_url = 'ctl:6820'\ntoken_file = '/t'\n", "is not an http:// or https:// URL", None),
        ("[clusters.lab]\nrest_url = 'http://c:1'\ntoken_command = 'scontrol token'\n", "is not a list", None),
    ],
)
def test_config_errors_name_the_file_the_key_and_the_choices(toml, text, message, hint):
    path = toml(text)
    with pytest.raises(ConfigError) as e:
        load()
    assert str(path) in e.value.message and message in e.value.message, e.value.message
    if hint:
        assert hint in e.value.hint


def test_rest_url_makes_the_client_a_rest_client_with_the_files_it_may_reach(toml, tmp_path):
    token = tmp_path / "jwt"
    toml(f"[clusters.ilc]\nrest_url = 'http://ctl:6820'\ntoken_file = '{token}'\nshared_fs = true\n")
    ilc = configured("ilc")
    assert (ilc.rest_url, ilc.token_file, ilc.shared_fs) == ("http://ctl:6820", str(token), True)
    client = ilc.client()
    assert isinstance(client, RestClient) and not isinstance(client.transport, NoFiles)
    toml(f"[clusters.ilc]\nrest_url = 'http://ctl:6820'\ntoken_file = '{token}'\n")
    assert isinstance(configured("ilc").client().transport, NoFiles)


def test_a_rest_cluster_may_take_an_ssh_alias_for_its_files(toml):
    toml(
        "[clusters.ilc]\nrest_url = 'http://ctl:6820'\ntoken_command = ['scontrol', 'token']\nssh_alias = 'ilc-files'\n"
    )
    ilc = configured("ilc")
    assert (ilc.rest_url, ilc.ssh_alias) == ("http://ctl:6820", "ilc-files")
    assert isinstance(ilc.client(), RestClient) and not isinstance(ilc.client().transport, NoFiles)


def test_config_may_mark_metered_never_unmark(toml):
    toml("[clusters.lab]\nmetered = true\n")
    assert configured("lab").metered
    toml("[clusters.marlowe]\nmetered = false\n")
    with pytest.raises(ConfigError, match="cannot unmark it"):
        configured("marlowe")
    toml("[clusters.ilc]\nssh_alias = 'x'\n")
    with pytest.raises(ConfigError, match="driven from its own nodes"):
        configured("ilc")
    toml("[clusters.dsi]\nssh_alias = 'dsi-login'\n")
    assert configured("dsi").ssh_alias == "dsi-login"


def test_a_metered_default_is_refused(toml):
    toml('default = "marlowe"\n')
    with pytest.raises(ConfigError, match="metered cluster is never a default"):
        default_cluster_name()
    toml('default = "lab"\n[clusters.lab]\nmetered = true\n')
    with pytest.raises(ConfigError, match="never a default"):
        default_cluster_name()


# -- discovery ---------------------------------------------------------------------------------------------
# Captured from the lab (scontrol show partition -o; sacctmgr -n -P show qos/assoc; sinfo).
LAB_PARTITION = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=n[1-2] PriorityJobFactor=1 "
    "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=REQUEUE "
    "State=UP TotalCPUs=16 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) "
    "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=16,mem=32000M,node=2,billing=16,gres/gpu=8"
)
QOS_FIELDS = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "MaxTRESPU", "MaxWall", "Flags")
LAB_QOS = (
    "normal|100|low|cluster|00:00:00|||\nlow|0||requeue|00:00:20|||\nhigh|1000|low|cluster|00:00:00|gres/gpu=4||\n"
)
ASSOC_FIELDS = ("Cluster", "Account", "User", "Partition", "QOS", "DefaultQOS")
LAB_ASSOC = "lab|lab|roachlab||high,low,normal|normal\n"


def _node(name, gpus, parts):
    return NodeRecord(name, "idle", 0, 8, gpus, 0, parts, 16000, 0)


def test_propose_reads_the_labs_tiers_from_captured_text():
    d = propose(
        "lab",
        partitions=[parse_key_values(LAB_PARTITION)],
        qos=parse_sacctmgr(LAB_QOS, QOS_FIELDS),
        assocs=parse_sacctmgr(LAB_ASSOC, ASSOC_FIELDS),
        nodes=[_node("n1", 4, ("gpu",)), _node("n2", 4, ("gpu",))],
        config={"PreemptType": "preempt/qos", "PreemptMode": "REQUEUE"},
        user="roachlab",
    )
    assert_the_labs_tiers(d)
    low = d.tiers[-1]
    assert (low.grace_time_s, low.preempt_mode, low.priority_tier) == (20, "REQUEUE", 1)
    assert d.tiers[0].cap_from == "QOS high MaxTRESPerUser gres/gpu=4"
    assert d.accounts == ("lab",) and d.max_gpus_per_node == 4 and d.default_partition == "gpu"
    text = d.toml()
    assert "GraceTime 20s" in text and 'account = "lab"' in text and 'qos_names = ["high", "low", "normal"]' in text
    assert "QOS priority 100, PreemptMode REQUEUE, GraceTime 0s, no per-user GPU cap, your default QOS" in text


def assert_the_labs_tiers(d):
    """Discovery proposes every QOS the lab lets its user use, top down: the module's two tiers as declared (high
    capped at 4, low preemptible), and between them normal, uncapped, not preemptible: the default QOS, which
    the module keeps as a QOS (qos_names) and not as a tier (docs/clusters/lab.md)."""
    assert [p.tier for p in d.tiers] == [LAB.tiers[0], Tier("normal", qos="normal"), LAB.tiers[1]]
    assert [p.default_qos for p in d.tiers] == [False, True, False]
    assert sorted(d.qos_names) == sorted(LAB.qos_names)


def test_propose_with_partition_priority_preemption():
    parts = [
        parse_key_values(
            "PartitionName=general Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=300 "
            "AllowQos=ALL QoS=gen State=UP MaxTime=2-00:00:00 TRES=cpu=64,gres/gpu=16"
        ),
        parse_key_values(
            "PartitionName=protected Default=NO PriorityTier=10 PreemptMode=OFF GraceTime=0 "
            "AllowQos=ALL QoS=N/A State=UP MaxTime=04:00:00 TRES=cpu=64,gres/gpu=16"
        ),
        parse_key_values(
            "PartitionName=cpu Default=NO PriorityTier=1 PreemptMode=OFF AllowQos=ALL State=UP TRES=cpu=64"
        ),
    ]
    qos = parse_sacctmgr("normal|0||cluster|00:00:00|||\ngen|0||cluster|00:00:00|gres/gpu=4||\n", QOS_FIELDS)
    nodes = [
        _node("g1", 8, ("general", "protected")),
        _node("g2", 8, ("general", "protected")),
        _node("c1", 0, ("cpu",)),
    ]
    d = propose(
        "dsi",
        partitions=parts,
        qos=qos,
        assocs=parse_sacctmgr("dsi|me|me||normal|normal\n", ASSOC_FIELDS),
        nodes=nodes,
        config={"PreemptType": "preempt/partition_prio", "PreemptMode": "REQUEUE"},
        user="me",
    )
    assert [p.tier for p in d.tiers] == [
        Tier("protected", partition="protected"),
        Tier("general", partition="general", gpu_cap=4, preemptible=True),
    ]
    assert d.tiers[1].grace_time_s == 300 and "partition QOS gen" in d.tiers[1].cap_from
    assert any("cpu" in n for n in d.notes) and d.max_gpus_per_node == 8


@pytest.mark.lab
def test_discovery_on_the_lab_proposes_its_real_tiers(lab):
    d = discover(LAB.with_(run_as=LAB_USER))
    assert_the_labs_tiers(d)  # caps and preemptibility as the lab is configured
    assert d.user == LAB_USER and d.accounts == ("lab",)


@pytest.mark.lab
def test_discover_cli_saves_once_and_the_saved_file_reads_back(lab, toml):
    path = toml('default = "ilc"\n')
    r = cli("clusters", "discover", "lab", "--run-as", LAB_USER)
    assert r.exit_code == 0 and "[[clusters.lab.tiers]]" in r.output and "not saved" in r.output
    r = cli("clusters", "discover", "lab", "--run-as", LAB_USER, "--save")
    assert r.exit_code == 0 and f"saved in {path}" in r.output
    saved = configured("lab")  # what the user saved is what is used: all three, normal included
    assert [t.name for t in saved.tiers] == ["high", "normal", "low"] and saved.tiers[0] == LAB.tiers[0]
    assert saved.tiers[2] == LAB.tiers[1] and load().default == "ilc"
    r = cli("clusters", "discover", "lab", "--run-as", LAB_USER, "--save")
    assert r.exit_code == 2 and "already has [clusters.lab]" in r.output


def test_save_block_refuses_to_overwrite(toml):
    path = toml("[clusters.ilc]\naccount = 'mine'\n")
    with pytest.raises(ConfigError, match="already has"):
        save_block("ilc", "[clusters.ilc]\naccount = 'other'\n")
    assert "mine" in path.read_text()
    save_block("aws", "[clusters.aws]\nmax_gpus = 1\n")
    assert configured("aws").max_gpus == 1 and configured("ilc").default_account == "mine"


def test_presets_need_no_site_values_to_render():
    for name in SHIPPED:
        for preset in get_cluster(name).presets.values():
            assert isinstance(preset, Resources) and preset.sbatch_options(get_cluster(name).gpu_flag)


# -- every command gets a cluster by name with clusters.toml applied ----------------------------------------
def test_get_cluster_applies_clusters_toml_to_a_name_and_takes_an_object_as_given(toml):
    from roach.fleet.cluster import module_cluster
    from roach.slurm.clusters.dsi import DSI

    toml('[clusters.dsi]\nssh_alias = "dsi-mine"\naccount = "grp"\n[clusters.lab]\nmax_gpus = 3\n')
    assert (get_cluster("dsi").ssh_alias, get_cluster("dsi").default_account) == ("dsi-mine", "grp")
    assert get_cluster("lab").max_gpus == 3 and get_cluster("lab").tiers == LAB.tiers
    assert module_cluster("dsi") is DSI and get_cluster(DSI) is DSI  # the module as declared; an object as given
    assert configured(get_cluster("dsi")) == get_cluster("dsi")  # applying the file again changes nothing
    toml('[clusters.dsi]\nssh_alias = ""\n')  # a broken file is an error for every lookup, naming file and key
    with pytest.raises(ConfigError, match=r"\[clusters.dsi\] ssh_alias: '' is not a non-empty string"):
        get_cluster("dsi")
    with pytest.raises(UsageError, match="unknown cluster 'nosuch'"):
        module_cluster("nosuch")


@pytest.mark.lab
def test_job_commands_reach_a_cluster_the_way_clusters_toml_says(
    lab, sshd, user_slurm, jobs, toml, tmp_path, monkeypatch
):
    """dsi is reached as clusters.toml says: its ssh alias and setup lines lead to the lab's Slurm through a real
    sshd. `roach clusters show`, `ls`, `status` and `cancel` (none of which submits) all see it; the module's own
    alias (login.ds) reaches nothing here, so a command that ignored the file would fail."""
    from roach.cli.app import cli as roach_cli
    from roach.records.job_record import JobRecord, utc_now
    from roach.records.store import Store

    toml(
        f'[clusters.dsi]\nssh_alias = "{sshd.alias}"\nssh_config = "{sshd.config_path}"\n'
        f'remote_setup = ["export SLURM_CONF={lab.slurm_conf}"]\naccount = "lab"\n'
    )
    shown = json.loads(cli("clusters", "show", "dsi", "--json").output)
    assert shown["reached"] == f"ssh {sshd.alias}" and shown["default_account"] == "lab"
    assert shown["config"]["configured"] and shown["remote_setup"] == [f"export SLURM_CONF={lab.slurm_conf}"]
    held = user_slurm.sbatch(
        ["--hold", "--time=1", "--output=/dev/null", "--job-name=cfg-alias"], "#!/bin/bash\ntrue\n"
    )
    jobs.append(held)
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    run_id = f"cfg-alias-{held}"
    with Store() as store:
        store.add(
            JobRecord(
                cluster="dsi",
                job_id=held,
                run_id=run_id,
                name="cfg-alias",
                target="pkg.m:f",
                commit="0" * 40,
                repo="file:///nowhere",
                log_path="/dev/null",
                bundle_dir="/nowhere",
                run_dir="/nowhere",
                submitted_at=utc_now(),
                resources={},
                status="submitted",
                slurm_state=None,
                exit_code=None,
                recorded_at=None,
            )
        )

    def roach(*args: str):
        return CliRunner().invoke(roach_cli, list(args), catch_exceptions=False)

    r = roach("ls", "--cluster", "dsi", "--json")
    assert r.exit_code == 0, r.output
    (view,) = json.loads(r.output)
    assert (view["job_id"], view["state"], view["status"]) == (held, "PENDING", "pending"), view
    r = roach("status", run_id, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["state"] == "PENDING", r.output
    r = roach("cancel", run_id)
    assert r.exit_code == 0 and f"cancelled job {held} (run {run_id}) on dsi" in r.output, r.output
    wait_until(
        "the cancelled job to leave the queue",
        lambda: not [q for q in user_slurm.squeue(job_ids=[held]) if q.state.is_active],
        timeout=30,
    )


def test_an_ssh_alias_the_caller_chose_is_not_replaced_by_clusters_toml(tmp_path, monkeypatch):
    from roach.fleet.cluster import module_cluster
    from roach.fleet.userconfig import configured, get_cluster

    toml = tmp_path / "clusters.toml"
    toml.write_text('[clusters.dsi]\nssh_alias = "from-toml"\naccount = "acct1"\n')
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(toml))
    assert get_cluster("dsi").ssh_alias == "from-toml"
    chosen = configured(module_cluster("dsi").with_(ssh_alias="chosen"))
    assert (chosen.ssh_alias, chosen.default_account) == ("chosen", "acct1")  # the rest of the file still applies
