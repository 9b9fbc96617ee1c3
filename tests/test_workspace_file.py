"""The workspace file as NeuriCo's runtime writes it (pure): every root spelling, the environment, the cluster."""

from __future__ import annotations

import json

import pytest

from roach.errors import UsageError
from roach.workspace.base import Workspace, cluster_for_file
from roach.workspace.file import (
    ENV_ROOT,
    ENV_RSYNC_ROOT,
    WorkspaceError,
    load_workspace_file,
    parse_remote_path,
)
from roach.workspace.stage import archived_bundle
from tests.support.workspace import runtime_file


@pytest.mark.parametrize(
    "text",
    [
        "$HOME/neurico_workspaces/ws",
        "${HOME}/neurico_workspaces/ws",
        "~/neurico_workspaces/ws",
        "~/neurico_workspaces/ws/",
        "$HOME//neurico_workspaces/./ws",
    ],
)
def test_every_home_spelling_is_one_place_made_absolute_with_the_clusters_home(text):
    p = parse_remote_path(text, "remote_root")
    assert (p.home, p.path) == (True, "neurico_workspaces/ws")
    assert p.resolve("/home/roachlab") == "/home/roachlab/neurico_workspaces/ws"
    assert p.resolve("/home/roachlab/") == "/home/roachlab/neurico_workspaces/ws"


def test_absolute_and_bare_home_roots_and_what_is_refused():
    assert parse_remote_path("/scratch/me/ws/", "r").resolve("/home/x") == "/scratch/me/ws"
    assert parse_remote_path("$HOME", "r").resolve("/home/x") == "/home/x"
    assert parse_remote_path("neurico_workspaces/ws/", "r", relative_is_home=True).home  # rsync's host:path
    for bad, why in [
        ("rel/ws", "neither an absolute path"),
        ("$USER/ws", "neither"),
        ("~other/ws", "neither"),
        ("$HOMEDIR/ws", "neither"),
        ("$HOME/../etc", "holds '..'"),
        ("", "is empty"),
    ]:
        with pytest.raises(WorkspaceError, match=why):
            parse_remote_path(bad, "remote_root")
    assert parse_remote_path("/a/$(touch x)/b", "r").path == "/a/$(touch x)/b"  # absolute: taken literally


def test_the_runtimes_file_loads_as_written(tmp_path):
    ws_dir = tmp_path / "my-idea_1.2"
    ws_dir.mkdir()
    runtime_file(ws_dir)
    f = load_workspace_file(ws_dir, env={})
    assert (f.backend, f.ssh_host, f.workspace_name, f.alias, f.rsync_host) == (
        "dsi-slurm",
        "login.ds",
        "my-idea_1.2",
        "login.ds",
        "login.ds",
    )
    assert f.remote_root.text == "$HOME/neurico_workspaces/my-idea_1.2" and f.remote_root.home
    assert f.notes == () and f.source == "file"
    ws = Workspace.load(ws_dir)
    assert not ws.resolved
    with pytest.raises(Exception, match="has not been resolved"):
        _ = ws.remote_root  # nothing uses the root before the cluster made it absolute
    from dataclasses import replace

    done = replace(ws, home="/home/roachlab")
    assert done.remote_root == "/home/roachlab/neurico_workspaces/my-idea_1.2"
    assert done.remote_bundle("7") == "/home/roachlab/neurico_workspaces/my-idea_1.2/dsi-slurm-artifacts/7"


@pytest.mark.parametrize(
    "root,rsync",
    [
        ("/abs/ws", "login.ds:/abs/ws/"),
        ("~/ws", "login.ds:ws/"),
        ("${HOME}/ws", "login.ds:~/ws"),
        ("/abs/ws", "login.ds:~/ws/"),
    ],
)
def test_spellings_that_may_be_one_place_load(tmp_path, root, rsync):
    runtime_file(tmp_path, remote_root=root, rsync_remote_root=rsync)
    load_workspace_file(tmp_path, env={})  # an absolute root against ~/: the cluster's $HOME decides later


def test_spellings_that_cannot_be_one_place_or_hosts_that_differ_are_refused(tmp_path):
    runtime_file(tmp_path, rsync_remote_root="login.ds:~/neurico_workspaces/other/")
    with pytest.raises(WorkspaceError, match="does not name the same directory"):
        load_workspace_file(tmp_path, env={})
    runtime_file(tmp_path, ssh_host="login.other")
    with pytest.raises(WorkspaceError, match="ssh_host 'login.other' and rsync_remote_root's host 'login.ds' differ"):
        load_workspace_file(tmp_path, env={})
    runtime_file(tmp_path, backend=3)
    with pytest.raises(WorkspaceError, match="backend must be a string"):
        load_workspace_file(tmp_path, env={})


def test_the_file_wins_over_the_environment_and_says_so(tmp_path):
    runtime_file(tmp_path)
    name = tmp_path.name
    agree = {ENV_ROOT: f"${{HOME}}/neurico_workspaces/{name}", ENV_RSYNC_ROOT: f"login.ds:~/neurico_workspaces/{name}"}
    assert load_workspace_file(tmp_path, env=agree).notes == ()  # other spellings of the same place
    disagree = {ENV_ROOT: "/scratch/elsewhere", ENV_RSYNC_ROOT: "login.ds:/scratch/elsewhere/"}
    f = load_workspace_file(tmp_path, env=disagree)
    assert f.remote_root.text == f"$HOME/neurico_workspaces/{name}"
    assert len(f.notes) == 2 and all("the file wins" in n for n in f.notes)
    assert f"${ENV_ROOT}=/scratch/elsewhere differs from remote_root=$HOME/neurico_workspaces/{name}" in f.notes[0]


def test_without_the_file_the_environment_is_used_and_said_else_the_blocker(tmp_path):
    env = {ENV_ROOT: "$HOME/neurico_workspaces/x", ENV_RSYNC_ROOT: "login.ds:~/neurico_workspaces/x/"}
    f = load_workspace_file(tmp_path, env=env)
    assert f.source == "environment" and f.rsync_host == "login.ds" and "is missing" in f.notes[0]
    with pytest.raises(WorkspaceError, match="is missing") as exc:
        load_workspace_file(tmp_path, env={ENV_ROOT: "$HOME/x"})  # one of two is not enough
    assert exc.value.exit_code == 7 and "never chooses" in exc.value.hint


def test_the_cluster_is_the_one_whose_alias_is_ssh_host(tmp_path, monkeypatch):
    runtime_file(tmp_path)
    cfg = tmp_path / "clusters.toml"
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(cfg))
    f = load_workspace_file(tmp_path, env={})
    assert cluster_for_file(f).name == "dsi"  # only dsi's alias is login.ds
    cfg.write_text('[clusters.marlowe]\nssh_alias = "login.ds"\n')
    assert cluster_for_file(f).name == "dsi"  # two have it: the backend's own
    cfg.write_text('default = "marlowe"\n[clusters.marlowe]\nssh_alias = "login.ds"\n')
    assert cluster_for_file(f).name == "marlowe"  # two have it: the user's default among them
    runtime_file(tmp_path, ssh_host="login.other", rsync_remote_root="login.other:~/w/", remote_root="~/w")
    c = cluster_for_file(load_workspace_file(tmp_path, env={}))
    assert (c.name, c.ssh_alias) == ("dsi", "login.other")  # nobody's alias: the backend's cluster through it
    runtime_file(
        tmp_path, backend="other", ssh_host="login.other", rsync_remote_root="login.other:~/w/", remote_root="~/w"
    )
    with pytest.raises(UsageError, match="no cluster given"):
        cluster_for_file(load_workspace_file(tmp_path, env={}))


def test_a_job_of_an_earlier_stage_says_where_its_bundle_went(tmp_path):
    old = tmp_path / "logs" / "dsi-slurm-artifacts" / "41"
    old.mkdir(parents=True)
    (old / "job.json").write_text(json.dumps({"job_id": "41", "status": "completed"}))
    assert archived_bundle(tmp_path, "41") == old and archived_bundle(tmp_path, "42") is None
    with pytest.raises(WorkspaceError) as exc:
        Workspace.load(tmp_path, "41")  # the file is gone with the stage
    assert f"bundle was archived to {old} (its job.json says completed)" in exc.value.message
    assert "its remote root is gone" in exc.value.message and exc.value.exit_code == 7
    with pytest.raises(WorkspaceError, match="is missing"):
        Workspace.load(tmp_path, "42")  # no such job here: the plain blocker
