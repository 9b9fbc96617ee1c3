"""Three workspaces exactly as NeuriCo's runtime leaves them, on the lab over a real sshd named ``login.ds``:
doctor -> sync -> sbatch -> wait -> pull -> verify with no --cluster and no --output, then the stage's end.

The remote user's ``$HOME`` holds ``neurico_workspaces/<name>`` (made empty by the test, as the runtime does at
a stage start); the workspace file keeps its literal ``$HOME/...`` and ``login.ds:~/.../``. The lab's cluster
module is given the alias ``login.ds`` (a site module whose login host is that alias), and clusters.toml makes
it the default, so the file's ``ssh_host`` picks it over dsi's own ``login.ds``."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import roach.fleet.cluster as cluster_mod
import roach.fleet.userconfig as userconfig_mod
from roach.lab.config import LAB_USER
from roach.slurm.clusters.lab import LAB
from tests.conftest import private_store
from tests.sshd import SSHServer, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.workspace import runtime_file

HOME = Path(f"/home/{LAB_USER}")
HEAD = (
    "#!/bin/bash\n#SBATCH --account=lab\n#SBATCH --partition=gpu\n#SBATCH --time=00:05:00\n"
    "#SBATCH --mem=100M\n#SBATCH --cpus-per-task=1\n"
)

SCORING = """# Artifact Protocol

## Files to produce

| Path | Purpose | Required |
|---|---|---|
| `src/solution.py` | Module exposing `solve` | yes |
| `results/metrics.json` | Metrics (`accuracy`) | yes |
| `results/predictions.csv` | One row per `id` | yes |
| `figures/` | Plots | yes |
| `logs/train.log` | Training log | no |
| `REPORT.md` | Write-up | recommended |

## Entry points

### `src/solution.py`

- `solve(x: int) -> int`
"""

ARRAY = """# Artifact Protocol

## Files to produce

| Path | Purpose | Required |
|------|---------|----------|
| `results/task_0.json` | task 0 | yes |
| `results/task_1.json` | task 1 | yes |
| `results/task_2.json` | task 2 | yes |
| `checkpoints/model.pt` | weights | any-of:weights |
| `checkpoints/model.safetensors` | weights | any-of:weights |
"""

BOOTSTRAP = """# Artifact Protocol

## Primary outputs

- path: `results/metrics.json`
  - format: json
  - shape: object with `accuracy`
- path: `results/predictions.jsonl`
  - format: jsonl
  - shape: one object per line with `id`
- path: `results/table.csv`
  - format: csv
  - shape: columns `id`, `score`

## Producer API

- file: `src/run.py`, function `main`
"""


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    yield from private_store("roach-neurico-store-")


@pytest.fixture
def site(sshd: SSHServer, tmp_path, monkeypatch):
    """The lab reached as ``login.ds`` (its module says so), the default in clusters.toml."""
    lab_there = LAB.with_(ssh_alias=sshd.dsi_alias, ssh_config=str(sshd.config_path))
    real = cluster_mod.module_cluster

    def module_cluster(name):
        return lab_there if name == "lab" else real(name)

    monkeypatch.setattr(cluster_mod, "module_cluster", module_cluster)
    monkeypatch.setattr(userconfig_mod, "module_cluster", module_cluster)
    cfg = tmp_path / "clusters.toml"
    cfg.write_text('default = "lab"\n')
    monkeypatch.setenv("ROACH_CLUSTERS_TOML", str(cfg))
    return sshd


@pytest.fixture
def make_ws(tmp_path) -> Iterator:
    """A local workspace named NAME and its empty remote root ~roachlab/neurico_workspaces/NAME, as the
    runtime makes them at a stage start; the remote roots are removed afterwards."""
    made: list[Path] = []

    def make(name: str, interface: str, files: dict[str, str]) -> Path:
        base = HOME / "neurico_workspaces"
        base.mkdir(exist_ok=True)
        shutil.chown(base, LAB_USER, LAB_USER)
        remote = base / name
        shutil.rmtree(remote, ignore_errors=True)
        remote.mkdir()
        shutil.chown(remote, LAB_USER, LAB_USER)
        made.append(remote)
        local = tmp_path / name
        local.mkdir()
        runtime_file(local)
        for rel, text in {"scoring/interface.md": interface, **files}.items():
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_text(text)
        return local

    yield make
    for remote in made:
        shutil.rmtree(remote, ignore_errors=True)


def _roach(*args: str):
    from roach.cli.app import cli

    return CliRunner().invoke(cli, list(args))


def _ok(res, code: int = 0):
    assert res.exit_code == code, res.output + (res.stderr if res.stderr_bytes else "")
    return res


def _flow_start(ws: Path) -> None:
    w = ["--workspace", str(ws)]
    doc = json.loads(_ok(_roach("doctor", *w, "--json")).stdout)
    assert doc["cluster"] == "lab" and doc["ok"]
    check = {c["name"]: c for c in doc["checks"]}["workspace"]
    remote = HOME / "neurico_workspaces" / ws.name
    assert f"remote root {remote} (remote_root $HOME/neurico_workspaces/{ws.name})" in check["detail"]
    assert f"rsync goes to login.ds:{remote}/" in check["detail"]
    _ok(_roach("sync", *w))


def _submit(ws: Path, script: str, description: str) -> str:
    out = json.loads(
        _ok(_roach("sbatch", script, "--workspace", str(ws), "--description", description, "--json")).stdout
    )
    assert out["cluster"] == "lab"
    assert out["remote_bundle"] == f"{HOME}/neurico_workspaces/{ws.name}/dsi-slurm-artifacts/{out['job_id']}"
    return out["job_id"]


def _wait(ws: Path, job: str, code: int = 0) -> dict:
    return json.loads(_ok(_roach("wait", job, "--workspace", str(ws), "--interval", "1", "--json"), code).stdout)


def _pull(ws: Path, job: str) -> dict:
    return json.loads(_ok(_roach("pull", job, "--workspace", str(ws), "--json")).stdout)


def _verify(ws: Path, code: int) -> dict:
    return json.loads(_ok(_roach("verify", "--workspace", str(ws), "--json"), code).stdout)


def _job_json(ws: Path, job: str) -> dict:
    return json.loads((ws / "dsi-slurm-artifacts" / job / "job.json").read_text())


@pytest.mark.lab
def test_doctor_of_a_workspace_in_a_git_tree_does_not_check_its_remote(site, make_ws, tmp_path, monkeypatch):
    """A workspace reaches the cluster by rsync: whose remote its git tree names is nothing the jobs read."""
    ws = make_ws("remote-ws", SCORING, {"src/solution.py": "def solve(x):\n    return x\n"})
    bare = tmp_path / "unreadable.git"  # root's: the lab user's git would refuse it
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run(["git", "-C", str(ws), "remote", "add", "origin", str(bare)], check=True)
    monkeypatch.chdir(ws)
    res = _roach("doctor", "--workspace", ".", "--json")
    assert res.exit_code == 0, res.output
    assert "repo-remote" not in [c["name"] for c in json.loads(res.stdout)["checks"]]


@pytest.mark.lab
def test_scoring_mode_table_with_a_directory_row_passes_after_pull(site, make_ws):
    body = (
        "mkdir -p results figures\necho '{\"accuracy\": 0.91}' > results/metrics.json\n"
        'printf "id,label\\n1,a\\n2,b\\n" > results/predictions.csv\necho png > figures/loss.png\n'
    )
    ws = make_ws(
        "scoring-ws", SCORING, {"src/solution.py": "def solve(x):\n    return x\n", "scripts/train.sbatch": HEAD + body}
    )
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # the workspace is a git repository
    _flow_start(ws)
    remote = HOME / "neurico_workspaces" / ws.name
    assert (remote / "src" / "solution.py").exists() and not (remote / ".git").exists()
    job = _submit(ws, "scripts/train.sbatch", "scoring mode")
    before = _verify(ws, 7)  # nothing pulled yet
    assert before["missing"] == ["results/metrics.json", "results/predictions.csv", "figures/"]
    rec = _wait(ws, job)
    assert (rec["status"], rec["slurm_state"], rec["exit_code"], rec["script"]) == (
        "completed",
        "COMPLETED",
        "0:0",
        "scripts/train.sbatch",
    )
    pulled = _pull(ws, job)
    assert pulled["bundle_found"] and set(pulled["copied"]) >= {
        "src/solution.py",
        "results/metrics.json",
        "results/predictions.csv",
        "figures/",
    }
    assert "logs/train.log" in pulled["missing"] and "REPORT.md" in pulled["missing"]
    assert not {"metrics.json", "artifacts/", "results/"} & set(pulled["copied"] + pulled["missing"])  # no roach.toml
    local = _job_json(ws, job)
    assert all(
        isinstance(local[k], str)
        for k in (
            "job_id",
            "status",
            "slurm_state",
            "exit_code",
            "script",
            "description",
            "submitted_at_utc",
            "recorded_at_utc",
        )
    )
    got = _verify(ws, 0)
    assert got["ok"] and got["notes"] == ["logs/train.log (no) missing", "REPORT.md (recommended) missing"]


@pytest.mark.lab
def test_any_of_group_and_an_array_0_2(site, make_ws):
    body = (
        "#SBATCH --array=0-2\nmkdir -p results checkpoints\n"
        'echo "{\\"task\\": $SLURM_ARRAY_TASK_ID}" > "results/task_$SLURM_ARRAY_TASK_ID.json"\n'
        'if [ "$SLURM_ARRAY_TASK_ID" = 2 ]; then echo weights > checkpoints/model.safetensors; fi\n'
    )
    ws = make_ws("array-ws", ARRAY, {"scripts/sweep.sbatch": HEAD + body})
    _flow_start(ws)
    job = _submit(ws, "scripts/sweep.sbatch", "array 0-2")
    rec = _wait(ws, job)
    assert rec["status"] == "completed" and sorted(rec["tasks"]) == ["0", "1", "2"]
    pulled = _pull(ws, job)
    assert {f"results/task_{i}.json" for i in range(3)} | {"checkpoints/model.safetensors"} <= set(pulled["copied"])
    assert pulled["missing"] == ["checkpoints/model.pt"]
    for i in range(3):
        assert (ws / "dsi-slurm-artifacts" / job / f"slurm_{job}_{i}.out").exists()
    got = _verify(ws, 0)
    assert "any-of:weights met by checkpoints/model.safetensors (checkpoints/model.pt missing)" in got["notes"]


@pytest.mark.lab
def test_bootstrap_mode_one_job_completes_one_exits_3_then_the_stage_ends(site, make_ws):
    train = (
        "mkdir -p results\necho '{\"accuracy\": 0.7}' > results/metrics.json\n"
        'printf \'{"id": 1}\\n{"id": 2}\\n\' > results/predictions.jsonl\n'
    )
    evaluate = 'mkdir -p results\necho "id,score" > results/partial.csv\necho "eval failed" >&2\nexit 3\n'
    ws = make_ws(
        "bootstrap-ws", BOOTSTRAP, {"scripts/train.sbatch": HEAD + train, "scripts/eval.sbatch": HEAD + evaluate}
    )
    _flow_start(ws)
    first = _submit(ws, "scripts/train.sbatch", "train")
    assert _wait(ws, first)["status"] == "completed"
    assert set(_pull(ws, first)["copied"]) == {"results/metrics.json", "results/predictions.jsonl"}
    second = _submit(ws, "scripts/eval.sbatch", "eval, fails")
    rec = _wait(ws, second, 6)
    assert (rec["status"], rec["slurm_state"], rec["exit_code"]) == ("failed", "FAILED", "3:0")
    pulled = _pull(ws, second)
    assert pulled["missing"] == ["results/table.csv"]
    assert (ws / "dsi-slurm-artifacts" / second / f"slurm_{second}.err").read_text() == "eval failed\n"
    got = _verify(ws, 7)
    assert got["problems"] == [{"path": "results/table.csv", "reason": "missing"}]  # exactly the missing file

    # The stage ends as the runtime ends it: bundles archived under logs/, remote root and file removed.
    (ws / "logs").mkdir()
    (ws / "dsi-slurm-artifacts").rename(ws / "logs" / "dsi-slurm-artifacts")
    shutil.rmtree(HOME / "neurico_workspaces" / ws.name)
    (ws / ".neurico" / "dsi_slurm_remote_workspace.json").unlink()
    archived = ws / "logs" / "dsi-slurm-artifacts" / second
    for cmd in ("wait", "pull"):
        res = _roach(cmd, second, "--workspace", str(ws))
        assert res.exit_code == 7
        text = " ".join(res.output.split())
        assert f"job {second} ran in an earlier stage" in text and f"archived to {archived}" in text
        assert "(its job.json says failed)" in text and "its remote root is gone" in text
    # status still answers from accounting, and says where the bundle went
    res = _ok(_roach("status", second, "--json"))
    said = json.loads(res.stdout)
    assert said["status"] == "failed" and f"archived to {archived}" in said["earlier_stage"]
    res = _ok(_roach("status", second))
    assert f"archived to {archived}" in " ".join(res.stderr.split()) and "its remote root is gone" in res.stderr
