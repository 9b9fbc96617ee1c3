"""The remote-workspace backend: scripts checked and amended (pure), then the whole flow on the lab over a
real sshd on 127.0.0.1: sync, held submit, bundle, release, one-session wait, job.json, pull, verify."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from roach.cli.app import RoachGroup
from roach.cli.workspace import MISSING_REQUIRED
from roach.errors import SlurmError, TransportError, UsageError
from roach.fleet.cluster import Cluster
from roach.lab.config import LAB_USER
from roach.records.bundle import FINAL_STATUSES
from roach.records.poller.lock import WatchLock, polled
from roach.records.store import Store
from roach.records.workspace_job import WorkspaceJob, final_record
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.parse import US, parse_sacct
from roach.scheduler.transport import LocalTransport, Transport
from roach.slurm.clusters.lab import LAB
from roach.watch.watcher import Watcher
from roach.workspace.backend import pull, sbatch_script, sync, verify, wait
from roach.workspace.base import Settings, Workspace, min_poll_interval
from roach.workspace.file import WORKSPACE_FILE, WorkspaceError
from roach.workspace.script import ADDED_MARK, ScriptRefused, prepare_script, read_directives
from roach.workspace.verify import required_files
from tests.conftest import private_store, wait_until
from tests.sshd import SSHServer, cluster, sshd, sshd_server  # noqa: F401  (fixtures)
from tests.support.labs import SHARED_TMP


@click.group(cls=RoachGroup)
def app() -> None:
    """The commands as `roach` has them (loaded from roach.cli.app.COMMANDS; errors become exit codes)."""


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module", autouse=True)
def store_path() -> Iterator[Path]:
    """Every test of this module records its sbatch jobs into a store of its own, never the user's."""
    yield from private_store("roach-ws-store-")


HEAD = (
    "#!/bin/bash\n#SBATCH --account=lab\n#SBATCH --partition=gpu\n#SBATCH --time=00:05:00\n"
    "#SBATCH --mem=100M\n#SBATCH --cpus-per-task=1\n"
)


# -- the script (pure) ---------------------------------------------------------------------------------------
def test_a_script_lacking_time_and_memory_is_refused_with_the_whole_list():
    text = "#!/bin/bash\n#SBATCH -A lab -p gpu\n#SBATCH -c 2\npython train.py\n"
    with pytest.raises(ScriptRefused) as exc:
        prepare_script(text, "scripts/train.sbatch")
    assert exc.value.missing == ("time", "memory")
    assert exc.value.exit_code == 2
    assert "scripts/train.sbatch does not ask for everything" in exc.value.message
    assert "time: --time (-t)" in exc.value.message and "memory: --mem" in exc.value.message
    assert "#SBATCH --time=01:00:00" in exc.value.hint and "#SBATCH --mem=16G" in exc.value.hint


def test_account_partition_cpus_and_a_used_gpu_are_required_and_checks_can_be_skipped():
    text = "#!/bin/bash\n#SBATCH --time=10\n#SBATCH --mem-per-cpu=1G\n\nnvidia-smi\npython train.py --device cuda\n"
    with pytest.raises(ScriptRefused) as exc:
        prepare_script(text, "t.sbatch")
    assert exc.value.missing == ("account", "partition", "cpus", "gpus")
    assert "(line 5 uses a GPU)" in exc.value.message and "--no-check-account" in exc.value.hint
    ok = prepare_script(
        text.replace("#SBATCH --time", "#SBATCH -p gpu -c4 --gres=gpu:1\n#SBATCH --time"),
        "t.sbatch",
        skip_checks=("account",),
    )
    assert {d.key for d in ok.directives} >= {"partition", "cpus", "gpus", "time", "memory"}
    with pytest.raises(UsageError, match="unknown check"):
        prepare_script(text, "t.sbatch", skip_checks=("acount",))
    # --gres=local:... is storage, not a GPU
    assert [d.key for d in read_directives("#!/bin/sh\n#SBATCH --gres=local:10G\n")[0]] == ["gres"]


def test_missing_log_lines_are_added_after_the_header_and_reported_the_file_is_untouched():
    text = HEAD + "# a comment\necho hi\n#SBATCH --qos=low\n"
    p = prepare_script(text, "s.sbatch")
    assert p.added == (
        "#SBATCH --output=dsi-slurm-artifacts/%j/slurm_%j.out",
        "#SBATCH --error=dsi-slurm-artifacts/%j/slurm_%j.err",
    )
    assert p.text == HEAD + ADDED_MARK + "\n" + "\n".join(p.added) + "\n# a comment\necho hi\n#SBATCH --qos=low\n"
    assert any("comes after the first command; sbatch ignores it" in n for n in p.notes)
    arr = prepare_script(HEAD + "#SBATCH --array=0-2\necho $SLURM_ARRAY_TASK_ID\n", "a.sbatch")
    assert arr.array == "0-2" and arr.added == (
        "#SBATCH --output=dsi-slurm-artifacts/%A/slurm_%A_%a.out",
        "#SBATCH --error=dsi-slurm-artifacts/%A/slurm_%A_%a.err",
    )
    own = prepare_script(HEAD + "#SBATCH -o out.log\n#SBATCH --error=dsi-slurm-artifacts/%j/e.err\n", "o.sbatch")
    assert own.added == () and own.text == HEAD + "#SBATCH -o out.log\n#SBATCH --error=dsi-slurm-artifacts/%j/e.err\n"
    assert any("--output=out.log does not write into dsi-slurm-artifacts" in n for n in own.notes)


def test_preemptible_adds_requeue_and_signal_unless_present():
    p = prepare_script(HEAD + "srun train\n", "p.sbatch", preemptible=True)
    assert p.added[-2:] == ("#SBATCH --requeue", "#SBATCH --signal=B:USR1@300")
    q = prepare_script(HEAD + "#SBATCH --signal=USR2@60\n", "p.sbatch", preemptible=True)
    assert "#SBATCH --requeue" in q.added and not any("--signal" in a for a in q.added)
    assert prepare_script(HEAD, "p.sbatch").added[-1].startswith("#SBATCH --error")  # not asked: nothing added


def test_a_script_without_an_interpreter_line_is_refused():
    with pytest.raises(UsageError, match="does not start with '#!'"):
        prepare_script("#SBATCH --time=1\necho\n", "x.sbatch")


# -- the workspace file and settings (pure) -------------------------------------------------------------------
def _ws_file(root: Path, data) -> None:
    f = root / WORKSPACE_FILE
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(data if isinstance(data, str) else json.dumps(data))


def test_a_missing_or_invalid_workspace_file_is_the_blocker(tmp_path):
    with pytest.raises(WorkspaceError) as exc:
        Workspace.load(tmp_path)
    assert exc.value.exit_code == 7
    assert str(tmp_path / WORKSPACE_FILE) in exc.value.message and "remote_root" in exc.value.hint
    assert "never chooses" in exc.value.hint
    _ws_file(tmp_path, {"remote_root": "/r/ws"})
    with pytest.raises(WorkspaceError, match="lacks rsync_remote_root"):
        Workspace.load(tmp_path)
    _ws_file(tmp_path, {"remote_root": "rel/ws", "rsync_remote_root": "h:rel/ws"})
    with pytest.raises(WorkspaceError, match="neither an absolute path nor one below \\$HOME"):
        Workspace.load(tmp_path)
    _ws_file(tmp_path, {"remote_root": "/r/ws", "rsync_remote_root": "h:/r/other/"})
    with pytest.raises(WorkspaceError, match="does not name the same directory"):
        Workspace.load(tmp_path)
    _ws_file(tmp_path, {"remote_root": "/r/ws/", "rsync_remote_root": "me@login.ds:/r/ws/"})
    ws = Workspace.load(tmp_path)
    assert (ws.remote_root, ws.rsync_host, ws.remote_bundle("7")) == (
        "/r/ws",
        "login.ds",
        "/r/ws/dsi-slurm-artifacts/7",
    )


def test_roach_toml_sets_cluster_excludes_and_outputs(tmp_path):
    assert Settings.load(tmp_path) == Settings()
    (tmp_path / "roach.toml").write_text('[workspace]\ncluster = "lab"\nexclude = ["data/"]\noutputs = ["out/"]\n')
    assert Settings.load(tmp_path) == Settings(cluster="lab", exclude=("data/",), outputs=("out/",))
    (tmp_path / "roach.toml").write_text('[workspace]\nexclud = ["data/"]\n')
    with pytest.raises(UsageError, match="unknown key.*exclud") as exc:
        Settings.load(tmp_path)
    assert "cluster, exclude, outputs" in exc.value.hint
    (tmp_path / "roach.toml").write_text('[workspace]\noutputs = ["../secret"]\n')
    with pytest.raises(UsageError, match="relative to the workspace"):
        Settings.load(tmp_path)


def test_the_poll_interval_floor_is_a_minute_except_on_the_lab(tmp_path):
    dsi = LAB.with_(name="dsi", min_poll_s=Cluster.min_poll_s)
    assert min_poll_interval(LAB) == 1.0 and min_poll_interval(dsi) == 60.0
    _ws_file(tmp_path, {"remote_root": "/r", "rsync_remote_root": "x:/r"})
    with pytest.raises(UsageError, match="shorter than cluster dsi allows \\(60s\\)"):
        wait(tmp_path, 123, dsi, interval_s=2)


# -- required files (pure) -----------------------------------------------------------------------------------
INTERFACE = """# Scoring interface

Scoring reads these.

## Required files

- `metrics.json`: the final metrics
- `results/predictions.csv`
- `figures/` (a directory) and any of `checkpoints/*.pt`

### Notes
- `results/predictions.csv` again, and `python score.py` is not a path

## Optional files
- `extra.txt`

```
## Required files inside a fence do not count
- `fenced.txt`
```
"""


def test_required_files_are_the_backticked_paths_under_the_heading():
    assert required_files(INTERFACE) == ["metrics.json", "results/predictions.csv", "figures/", "checkpoints/*.pt"]


def test_verify_lists_what_is_missing(tmp_path):
    (tmp_path / "scoring").mkdir()
    (tmp_path / "scoring" / "interface.md").write_text(INTERFACE)
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "figures").mkdir()
    assert verify(tmp_path).missing == ("results/predictions.csv", "figures/", "checkpoints/*.pt")  # empty: not there
    (tmp_path / "figures" / "loss.png").write_text("png")
    res = verify(tmp_path)
    assert not res.ok and res.missing == ("results/predictions.csv", "checkpoints/*.pt")
    out = _cli("verify", "--workspace", str(tmp_path))
    assert out.exit_code == MISSING_REQUIRED == 7
    assert "2 required file(s) missing or invalid" in out.output and "results/predictions.csv: missing" in out.output
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "predictions.csv").write_text("a\n")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_text("x")
    assert verify(tmp_path).ok
    assert _cli("verify", "--workspace", str(tmp_path)).exit_code == 0
    (tmp_path / "scoring" / "interface.md").unlink()
    with pytest.raises(WorkspaceError, match="interface.md is missing"):
        verify(tmp_path)


# -- the final state of an array (pure, captured sacct text) ---------------------------------------------------
def _acct(job: str, state: str, code: str) -> str:
    return US.join(
        [
            job,
            "1",
            "a.sbatch",
            LAB_USER,
            "lab",
            "gpu",
            "normal",
            state,
            code,
            "3",
            "5",
            "2024-05-01T10:00:00",
            "2024-05-01T10:00:01",
            "2024-05-01T10:00:04",
            "1",
            "n1",
            "billing=1,cpu=1,mem=100M,node=1",
            "None",
        ]
    )


def test_an_array_is_as_bad_as_its_worst_task_and_every_task_is_kept():
    text = "\n".join(
        [
            _acct("40_0", "COMPLETED", "0:0"),
            _acct("40_1", "FAILED", "3:0"),
            _acct("40_2", "CANCELLED by 1001", "0:15"),
            _acct("41", "COMPLETED", "0:0"),
        ]
    )
    base = WorkspaceJob(job_id="40", array="0-2", script="a.sbatch")
    rec = final_record(base, parse_sacct(text), "2024-05-01T10:01:00Z")
    assert (rec.status, rec.slurm_state, rec.exit_code) == ("failed", "FAILED", "3:0")
    assert rec.tasks["2"] == {"status": "cancelled", "slurm_state": "CANCELLED by 1001", "exit_code": "0:15"}
    assert sorted(rec.tasks) == ["0", "1", "2"] and rec.submitted_at_utc == "2024-05-01T10:00:00Z"
    assert final_record(base, parse_sacct(_acct("40_0", "RUNNING", "0:0")), "now") is None  # not over yet
    gone = final_record(base, [], "now")
    assert (gone.status, gone.slurm_state, gone.exit_code) == ("unknown", "UNKNOWN", "unknown")


# -- on the lab, over SSH ------------------------------------------------------------------------------------------
@pytest.fixture
def ws(sshd: SSHServer, tmp_path) -> Workspace:
    """A local workspace whose remote root (a folder the lab user owns) is reached through the sshd alias."""
    remote = Path(tempfile.mkdtemp(prefix="roach-ws-", dir=SHARED_TMP))
    shutil.chown(remote, LAB_USER, LAB_USER)
    local = tmp_path / "ws"
    local.mkdir()
    _ws_file(local, {"remote_root": str(remote), "rsync_remote_root": f"{sshd.alias}:{remote}/"})
    yield Workspace.load(local)
    shutil.rmtree(remote, ignore_errors=True)


def _script(ws: Workspace, rel: str, body: str, head: str = HEAD) -> str:
    p = ws.root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(head + body)
    return rel


def _sessions(sshd: SSHServer) -> int:
    return sshd.log.read_text(errors="replace").count("Starting session:")


@pytest.fixture
def cancel_after(user_slurm):
    ids: list[str] = []
    yield ids
    if ids:
        user_slurm.scancel(ids)


@pytest.mark.lab
def test_sync_excludes_defaults_and_never_deletes_by_default(ws, cluster, sshd: SSHServer):
    files = {
        "src/train.py": "print('train')\n",
        ".venv/bin/python": "x",
        "pkg/__pycache__/m.pyc": "x",
        ".cache/c": "x",
        "logs/old.log": "x",
        ".conda/x": "x",
        "data/keep.csv": "a,b\n",
        "dsi-slurm-artifacts/9/slurm_9.out": "a stale local copy",
    }
    for rel, text in files.items():
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_text(text)
    remote = Path(ws.remote_root)
    (remote / "remote_only.txt").write_text("made on the cluster")
    (remote / "dsi-slurm-artifacts" / "9").mkdir(parents=True)
    (remote / "dsi-slurm-artifacts" / "9" / "slurm_9.out").write_text("the live log")
    before = sshd.accepted_connections()
    res = sync(ws, cluster, extra_excludes=["data/"])
    assert sorted(res.changed) == [".neurico/dsi_slurm_remote_workspace.json", "src/train.py"]
    assert (remote / "src" / "train.py").read_text() == "print('train')\n"
    for gone in (".venv", "pkg/__pycache__", ".cache", "logs", ".conda", "data"):
        assert not (remote / gone).exists(), gone
    assert (remote / "remote_only.txt").read_text() == "made on the cluster"  # no --delete by default
    assert (remote / "dsi-slurm-artifacts" / "9" / "slurm_9.out").read_text() == "the live log"
    assert (remote / "src" / "train.py").stat().st_uid == (remote.stat().st_uid)  # the lab user's files
    assert sync(ws, cluster, extra_excludes=["data/"]).changed == ()  # nothing new: nothing sent
    assert sshd.accepted_connections() <= before + 1  # rsync rode on the one connection
    (ws.root / "src" / "train.py").unlink()
    dry = sync(ws, cluster, delete=True, dry_run=True)
    assert dry.deleted and (remote / "src" / "train.py").exists()


def _flow(ws, cluster, sshd, rel, description, **kw):
    """Submit, then wait with a 2 s interval; returns (submission, record, events, sessions during the run)."""
    sub = sbatch_script(ws, cluster, rel, description, **kw)
    events, marks = [], {}

    def on_event(ev):
        events.append(ev)
        if ev.kind == "state" and "first" not in marks:
            marks["first"] = _sessions(sshd)
        if ev.kind == "gone":
            marks["gone"] = _sessions(sshd)

    rec = wait(ws, sub.job_id, cluster, interval_s=2, on_event=on_event)
    return sub, rec, events, marks


@pytest.mark.lab
def test_a_job_that_completes_end_to_end(ws, cluster, sshd: SSHServer):
    body = (
        'test -d "dsi-slurm-artifacts/$SLURM_JOB_ID" && echo "bundle existed before the job ran"\n'
        'echo "to stderr" >&2\nmkdir -p results artifacts\necho \'{"acc": 0.9}\' > metrics.json\n'
        "echo pred > results/predictions.csv\necho model > artifacts/model.txt\nsleep 3\n"
    )
    rel = _script(ws, "scripts/train.sbatch", body)
    original = (ws.root / rel).read_text()
    sync(ws, cluster)
    before = sshd.accepted_connections()
    sub, rec, events, marks = _flow(ws, cluster, sshd, rel, "a probe that completes")
    assert (ws.root / rel).read_text() == original  # the user's file is never changed
    assert sub.script.added == (
        "#SBATCH --output=dsi-slurm-artifacts/%j/slurm_%j.out",
        "#SBATCH --error=dsi-slurm-artifacts/%j/slurm_%j.err",
    )
    assert [e.kind for e in events][-1] == "gone" and any(e.text == "RUNNING=1" for e in events)
    finished = [x for x in Store().watch_log("lab") if x.data.get("job_id") == sub.job_id]
    assert [x.data["kind"] for x in finished].count("finished") == 1  # the poller the wait read recorded the end
    assert sshd.accepted_connections() <= before + 1  # the wait and its poller rode on one connection

    remote_bundle = Path(sub.remote_bundle)
    assert (rec.status, rec.slurm_state, rec.exit_code) == ("completed", "COMPLETED", "0:0")
    for side in (
        json.loads((remote_bundle / "job.json").read_text()),
        json.loads((sub.local_bundle / "job.json").read_text()),
    ):
        assert {k: side[k] for k in ("job_id", "status", "slurm_state", "exit_code", "script", "description")} == {
            "job_id": sub.job_id,
            "status": "completed",
            "slurm_state": "COMPLETED",
            "exit_code": "0:0",
            "script": "scripts/train.sbatch",
            "description": "a probe that completes",
        }
        assert side["submitted_at_utc"] <= side["recorded_at_utc"] and side["cluster"] == "lab"
    assert (remote_bundle / "submitted-train.sbatch").read_text().count(ADDED_MARK) == 1

    res = pull(ws, sub.job_id, cluster)
    assert res.bundle_found and res.copied == ("metrics.json", "artifacts/", "results/") and res.missing == ()
    out = (ws.root / "dsi-slurm-artifacts" / sub.job_id / f"slurm_{sub.job_id}.out").read_text()
    assert "bundle existed before the job ran" in out
    assert (ws.root / "dsi-slurm-artifacts" / sub.job_id / f"slurm_{sub.job_id}.err").read_text() == "to stderr\n"
    assert json.loads((ws.root / "metrics.json").read_text()) == {"acc": 0.9}
    assert (ws.root / "results" / "predictions.csv").read_text() == "pred\n"
    assert (ws.root / "artifacts" / "model.txt").read_text() == "model\n"

    (ws.root / "scoring").mkdir()
    (ws.root / "scoring" / "interface.md").write_text(
        "## Required files\n- `metrics.json`\n- `results/predictions.csv`\n- `figures/loss.png`\n"
    )
    got = verify(ws)
    assert got.missing == ("figures/loss.png",)


@pytest.mark.lab
def test_two_waits_read_one_poller_that_records_each_end_once(ws, cluster, sshd: SSHServer, own_store: Store):
    # a store of its own: the module's store may still have an earlier test's poller lingering for its readers
    rels = [_script(ws, f"w{i}.sbatch", "sleep 3\n") for i in range(2)]
    subs = [sbatch_script(ws, cluster, rel, "read through the poller") for rel in rels]
    store = own_store
    pollers: set[int] = set()
    done = threading.Event()

    def spy() -> None:
        while not done.is_set():
            if polled(store.path, "lab") and (pid := WatchLock(store.path, "lab").holder()) is not None:
                pollers.add(pid)
            time.sleep(0.1)

    threading.Thread(target=spy, daemon=True).start()
    with ThreadPoolExecutor(2) as waits:  # both at once: each may start a poller, one of them polls
        recs = list(waits.map(lambda sub: wait(ws, sub.job_id, cluster, interval_s=1), subs))
    done.set()
    assert [r.status for r in recs] == ["completed", "completed"]
    assert len(pollers) == 1, pollers  # the two waits read one poller's rounds
    for sub in subs:
        kinds = [x.data["kind"] for x in store.watch_log("lab") if x.data.get("job_id") == sub.job_id]
        assert kinds.count("finished") == 1  # its end recorded once, by the poller
        assert store.get("lab", int(sub.job_id)).status == "completed"


@pytest.mark.lab
def test_a_job_that_exits_3_is_failed_and_pull_brings_what_exists(ws, cluster, sshd: SSHServer):
    rel = _script(ws, "fail.sbatch", 'echo "about to fail" >&2\nexit 3\n')
    sub, rec, _, _ = _flow(ws, cluster, sshd, rel, "fails on purpose")
    assert (rec.status, rec.slurm_state, rec.exit_code) == ("failed", "FAILED", "3:0")
    res = pull(ws, sub.job_id, cluster)
    assert res.bundle_found and res.copied == () and res.missing == ("metrics.json", "artifacts/", "results/")
    assert (res.bundle / f"slurm_{sub.job_id}.err").read_text() == "about to fail\n"
    assert json.loads((res.bundle / "job.json").read_text())["status"] == "failed"


@pytest.mark.lab
def test_a_cancelled_job_is_recorded_cancelled_by_pull_without_a_wait(ws, cluster, user_slurm, cancel_after):
    rel = _script(ws, "long.sbatch", "echo started\nmkdir -p results\necho partial > results/part.txt\nsleep 120\n")
    sub = sbatch_script(ws, cluster, rel, "cancelled on purpose")
    cancel_after.append(sub.job_id)
    wait_until("the job to write its partial result", lambda: (Path(ws.remote_root) / "results" / "part.txt").exists())
    early = pull(ws, sub.job_id, cluster)  # still running: copies what exists, job.json stays open
    assert early.still_queued == ("RUNNING",) and (early.record.status, early.record.live_state) == (
        "unknown",
        "submitted",
    )
    assert not early.record.is_final
    user_slurm.scancel([sub.job_id])
    wait_until(
        "the job to leave the queue",
        lambda: not [r for r in user_slurm.squeue(job_ids=[sub.job_id]) if r.state.is_active],
        timeout=60,
    )
    res = pull(ws, sub.job_id, cluster)
    assert res.record.status == "cancelled" and res.record.slurm_state.startswith("CANCELLED")
    assert res.copied == ("results/",) and (ws.root / "results" / "part.txt").read_text() == "partial\n"
    assert "started" in (res.bundle / f"slurm_{sub.job_id}.out").read_text()
    again = wait(ws, sub.job_id, cluster, interval_s=2)  # waiting on an ended job records the same at once
    assert again.status == "cancelled"


@pytest.mark.lab
def test_an_array_of_three(ws, cluster, sshd: SSHServer):
    rel = _script(
        ws, "array.sbatch", 'echo "task $SLURM_ARRAY_TASK_ID"\nsleep 1\n', head=HEAD + "#SBATCH --array=0-2\n"
    )
    sub, rec, _, _ = _flow(ws, cluster, sshd, rel, "three tasks")
    assert sub.script.added[0] == "#SBATCH --output=dsi-slurm-artifacts/%A/slurm_%A_%a.out"
    assert (rec.status, rec.array, sorted(rec.tasks)) == ("completed", "0-2", ["0", "1", "2"])
    assert all(t["status"] == "completed" for t in rec.tasks.values())
    res = pull(ws, sub.job_id, cluster)
    for task in range(3):
        assert (res.bundle / f"slurm_{sub.job_id}_{task}.out").read_text() == f"task {task}\n"
    assert json.loads((res.bundle / "job.json").read_text())["tasks"]["1"]["slurm_state"] == "COMPLETED"


@pytest.mark.lab
def test_a_watch_records_an_array_as_bad_as_its_worst_task_once_every_task_ended(ws, cluster, sshd: SSHServer):
    head = HEAD + "#SBATCH --array=0-2\n"
    rel = _script(ws, "worst.sbatch", 'sleep "$SLURM_ARRAY_TASK_ID"\ntest "$SLURM_ARRAY_TASK_ID" != 1\n', head=head)
    sub = sbatch_script(ws, cluster, rel, "task 1 fails")
    store = Store()
    events: list = []
    watcher = Watcher(cluster, cluster.client(), store, interval_s=1, heartbeat_s=900)
    assert watcher.run(events.append) == 6, [e.message for e in events]  # a task failed
    row = store.get("lab", int(sub.job_id))
    assert (row.status, row.slurm_state, row.exit_code) == ("failed", "FAILED", "1:0")  # the worst task's
    finished = [e.job_id for e in events if e.kind.value == "finished"]
    assert sorted(finished) == [f"{sub.job_id}_{t}" for t in range(3)]  # each task's end said once
    assert json.loads((Path(sub.remote_bundle) / "job.json").read_text())["status"] == "failed"


@pytest.mark.lab
def test_a_watch_round_over_an_array_still_pending_as_one_range_asks_sacct_nothing_it_refuses(
    ws, cluster, sshd: SSHServer, cancel_after
):
    head = HEAD + "#SBATCH --array=0-2\n#SBATCH --begin=now+600\n"
    sub = sbatch_script(ws, cluster, _script(ws, "later.sbatch", "true\n", head=head), "starts later")
    cancel_after.append(sub.job_id)
    client = cluster.client()
    wait_until(  # before a task starts, sacct lists the array as one pending range: 123_[0-2]
        "sacct to list the pending array", lambda: any(r.ref.tasks for r in client.ends([sub.job_id])), timeout=30
    )
    watcher = Watcher(cluster, client, Store(), interval_s=1, heartbeat_s=900)
    events = watcher.round() + watcher.round()
    assert not [e for e in events if e.kind.value == "outage"], [e.message for e in events]


@pytest.mark.lab
def test_a_dropped_connection_records_the_last_state_backs_off_and_retries_once(ws, cluster, sshd: SSHServer, lab):
    rel = _script(ws, "slow.sbatch", "sleep 10\n")
    t = sshd.transport(env=lab.env(), backoff_s=3.0)
    sub = sbatch_script(ws, cluster, rel, "outlives a dropped connection", transport=t)
    events, seen = [], {}

    def on_event(ev):
        events.append(ev)
        if ev.kind == "state" and ev.text == "RUNNING=1" and "dropped" not in seen:
            seen["dropped"], seen["accepted"] = time.monotonic(), sshd.accepted_connections()
            threading.Thread(target=_bounce, args=(sshd,), daemon=True).start()
        if ev.kind == "note":
            seen["noted"] = time.monotonic()
            seen["kept"] = json.loads((ws.local_bundle(sub.job_id) / "job.json").read_text())
        if ev.kind == "state" and "noted" in seen and "resumed" not in seen:
            seen["resumed"] = time.monotonic()

    rec = wait(ws, sub.job_id, cluster, interval_s=2, on_event=on_event, transport=t)
    notes = [e for e in events if e.kind == "note"]
    assert len(notes) == 1 and "connection lost" in notes[0].text and "trying once more in 3s" in notes[0].text
    # the last known state, here: in live_state; status stays one of the schema's values until the end, and
    # the skill's string fields are "" until known
    assert (seen["kept"]["status"], seen["kept"]["live_state"], seen["kept"]["slurm_state"]) == (
        "unknown",
        "running",
        "",
    )
    assert seen["kept"]["last_seen_utc"]
    assert seen["resumed"] - seen["noted"] >= 2.5  # it backed off before the one retry
    assert sshd.accepted_connections() == seen["accepted"] + 1  # exactly one new login: the retry
    assert rec.status == "completed"
    assert json.loads((ws.local_bundle(sub.job_id) / "job.json").read_text())["status"] == "completed"


def _bounce(sshd: SSHServer) -> None:
    sshd.stop()  # the login host goes away with every session (the watch loop with it)
    time.sleep(1.0)
    sshd.start()


# -- the commands ----------------------------------------------------------------------------------------------
@pytest.mark.lab
def test_cli_refuses_a_script_lacking_time_and_mem_and_reports_added_lines(ws, cluster, sshd: SSHServer, cancel_after):
    base = [
        "--workspace",
        str(ws.root),
        "--cluster",
        "lab",
        "--ssh-alias",
        sshd.alias,
        "--ssh-config",
        str(sshd.config_path),
    ]
    _script(ws, "bad.sbatch", "true\n", head="#!/bin/bash\n#SBATCH --account=lab --partition=gpu -c 1\n")
    res = _cli("sbatch", "bad.sbatch", *base, "--description", "x")
    assert res.exit_code == 2
    assert "bad.sbatch does not ask for everything" in res.output
    assert "time: --time (-t)" in res.output and "memory: --mem, --mem-per-cpu or --mem-per-gpu" in res.output
    assert not (ws.root / "dsi-slurm-artifacts").exists()

    _script(ws, "ok.sbatch", "true\n")
    res = _cli("sbatch", "ok.sbatch", *base, "--description", "cli", "--preemptible", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    cancel_after.append(out["job_id"])
    assert out["run_id"] == f"sbatch-{out['job_id']}"
    assert out["added"] == [
        "#SBATCH --output=dsi-slurm-artifacts/%j/slurm_%j.out",
        "#SBATCH --error=dsi-slurm-artifacts/%j/slurm_%j.err",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@300",
    ]
    res = CliRunner().invoke(app, ["wait", out["job_id"], *base, "--interval", "1", "--pull", "--json"])
    assert res.exit_code == 0, res.output + res.stderr
    got = json.loads(res.stdout)
    assert (got["status"], got["script"], got["description"]) == ("completed", "ok.sbatch", "cli")
    assert got["pull"]["bundle_found"] and got["pull"]["missing"] == ["metrics.json", "artifacts/", "results/"]
    assert "RUNNING=1" in res.stderr or "gone" in res.stderr  # the state lines go to stderr with --json
    res = _cli("pull", out["job_id"], *base, "--output", "nothing-here.txt")
    assert res.exit_code == 0 and "not on the cluster: metrics.json artifacts/ results/ nothing-here.txt" in res.output
    _script(ws, "three.sbatch", "exit 3\n")
    res = _cli("sbatch", "three.sbatch", *base, "--json")
    job = json.loads(res.output)["job_id"]
    cancel_after.append(job)
    res = _cli("wait", job, *base, "--interval", "1")
    assert res.exit_code == 6 and f"job {job}: failed" in res.output


def test_cli_says_a_missing_workspace_file_is_the_blocker(tmp_path):
    (tmp_path / "s.sbatch").write_text(HEAD)
    res = _cli("sbatch", "s.sbatch", "--workspace", str(tmp_path), "--cluster", "lab")
    assert res.exit_code == 7
    assert f"{tmp_path / WORKSPACE_FILE} is missing" in res.output.replace("\n", "")
    assert "remote_root" in res.output


def test_the_stores_log_path_fills_the_ids_and_name_and_keeps_an_arrays_task():
    from roach.records.workspace_job import log_path
    from roach.scheduler.parse import in_array

    assert log_path("dsi-slurm-artifacts/%j/slurm_%j.out", "12", "t", "/w") == "/w/dsi-slurm-artifacts/12/slurm_12.out"
    assert log_path("/logs/%x-%A_%a.%%.out", "12", "train", "/w") == "/logs/train-12_%a.%.out"
    assert [in_array("5-9%2", t) for t in (4, 5, 9, 10)] == [False, True, True, False]
    assert in_array("1,3,8-10:2", 10) and not in_array("1,3,8-10:2", 9) and not in_array(None, 0)


def test_array_sizes_and_an_array_accounting_has_not_caught_up_with():
    from roach.records.workspace_job import array_size

    assert [array_size(s) for s in ("0-2", "0-99%10", "1,3,8-10", "0-9:3", "7", "x", None)] == [
        3,
        100,
        5,
        4,
        1,
        None,
        None,
    ]
    base = WorkspaceJob(job_id="40", array="0-2")
    lagging = parse_sacct(_acct("40", "COMPLETED", "0:0"))  # sacct briefly lists only the array's own record
    assert final_record(base, lagging, "now") is None
    assert final_record(base, parse_sacct(_acct("40_0", "COMPLETED", "0:0")), "now") is None  # 1 of 3
    assert final_record(base, lagging, "now", partial=True).status == "completed"  # the last try takes what is there


@pytest.mark.lab
def test_a_local_cluster_runs_the_same_flow_without_ssh(lab, shared_tmp: Path):
    """The lab reached on this machine as its user: rsync copies locally, the watch loop runs here."""
    remote = shared_tmp / "remote"
    remote.mkdir()
    shutil.chown(remote, LAB_USER, LAB_USER)
    local = shared_tmp / "local"
    local.mkdir()
    _ws_file(local, {"remote_root": str(remote), "rsync_remote_root": str(remote)})
    (local / "roach.toml").write_text('[workspace]\ncluster = "lab"\noutputs = ["out.txt"]\n')
    subprocess.run(["chmod", "-R", "a+rX", str(local)], check=True)
    ws = Workspace.load(local)
    rel = _script(ws, "s.sbatch", "echo done > out.txt\n")
    os.chmod(ws.root / rel, 0o644)
    cluster = LAB.with_(run_as=LAB_USER)
    assert sync(ws, cluster).changed and (remote / "s.sbatch").owner() == LAB_USER
    sub = sbatch_script(ws, None, rel, "local")  # the cluster from roach.toml; run_as from nowhere: as root
    rec = wait(ws, sub.job_id, interval_s=1)
    assert rec.status == "completed" and rec.cluster == "lab"
    res = pull(ws, sub.job_id)
    assert res.copied == ("out.txt",) and (local / "out.txt").read_text() == "done\n"
    assert (res.bundle / f"slurm_{sub.job_id}.out").exists()


def _loops_for(job_id: str) -> list[int]:
    """Processes on this machine (the login host here) running roach's wait loop for ``job_id``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(b"# roach wait loop") for a in argv) and job_id.encode() in argv:
            found.append(int(pid))
    return found


@pytest.mark.lab
def test_a_watch_given_up_here_leaves_no_loop_on_the_login_host(ws, cluster, cancel_after):
    from roach.workspace.base import connect
    from roach.workspace.wait import watch

    sub = sbatch_script(ws, cluster, _script(ws, "idle.sbatch", "sleep 60\n"), "watched, then left")
    cancel_after.append(sub.job_id)

    class GiveUp(Exception):
        pass

    def on_event(ev):
        if ev.kind == "state" and "RUNNING" in ev.text:
            assert _loops_for(sub.job_id)  # the loop runs on the login host
            raise GiveUp

    with pytest.raises(GiveUp):
        watch(connect(cluster), sub.job_id, 1, on_event)
    wait_until("the abandoned loop to end", lambda: not _loops_for(sub.job_id), timeout=10)


@pytest.mark.lab
def test_hostile_names_arrive_verbatim(ws, cluster, sshd: SSHServer, shared_tmp: Path):
    """A remote root, a script name and a description with quotes, spaces and $(...): nothing runs."""
    odd = Path(ws.remote_root) / "it's a $(touch pwned) `x` dir"
    odd.mkdir()
    shutil.chown(odd, LAB_USER, LAB_USER)
    _ws_file(ws.root, {"remote_root": str(odd), "rsync_remote_root": f"{sshd.alias}:{odd}/"})
    hostile = Workspace.load(ws.root)
    rel = _script(hostile, "my 'odd' $(touch pwned).sbatch", 'mkdir -p results && echo "ran in $PWD" > results/r.txt\n')
    sync(hostile, cluster)
    assert (odd / rel).exists()
    description = 'say "hi" $(touch pwned); `x`'
    sub = sbatch_script(hostile, cluster, rel, description)
    rec = wait(hostile, sub.job_id, cluster, interval_s=1)
    assert rec.status == "completed" and rec.description == description and rec.script == rel
    res = pull(hostile, sub.job_id, cluster)
    assert (ws.root / "results" / "r.txt").read_text() == f"ran in {odd}\n"
    assert res.copied == ("results/",)
    assert not list(Path(ws.remote_root).rglob("pwned")) and not list(ws.root.rglob("pwned"))
    assert not Path("pwned").exists() and not Path("/home/roachlab/pwned").exists()


# -- in roach's store: `roach ls`, `status`, `logs` see sbatch jobs -------------------------------------------------
def _roach(*args: str):
    from roach.cli.app import cli

    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def own_store(tmp_path, monkeypatch) -> Store:
    monkeypatch.setenv("ROACH_STORE", str(tmp_path / "store.sqlite"))
    return Store()


@pytest.fixture
def ssh_only():
    """Call it to make every command roach runs on this machine fail (noted): what works then went through ssh.
    Undone before the fixtures set up ahead of it clean up."""
    used: list[list[str]] = []

    def refuse(self, argv, **kw):
        used.append(list(argv))
        raise TransportError(f"the test forbids local commands here: {argv[0]}", argv)

    mp = pytest.MonkeyPatch()

    def off() -> list[list[str]]:
        mp.setattr(LocalTransport, "run", refuse)
        return used

    yield off
    mp.undo()


@pytest.mark.lab
def test_a_submitted_script_is_in_the_store_and_ls_status_logs_wait_read_it_through_its_alias(
    ws, cluster, sshd: SSHServer, own_store, cancel_after, ssh_only
):
    rel = _script(ws, "scripts/hello.sbatch", 'echo "hello from the workspace"\nsleep 2\n')
    sub = sbatch_script(ws, cluster, rel, "seen by roach ls")
    cancel_after.append(sub.job_id)
    rec = own_store.get("lab", int(sub.job_id))
    assert (rec.run_id, rec.target, rec.name, rec.via, rec.status) == (
        f"sbatch-{sub.job_id}",
        "scripts/hello.sbatch",
        "hello.sbatch",
        sshd.alias,
        "submitted",
    )
    assert rec.log_path == f"{ws.remote_root}/dsi-slurm-artifacts/{sub.job_id}/slurm_{sub.job_id}.out"
    assert (rec.bundle_dir, rec.run_dir, rec.commit) == (sub.remote_bundle, ws.remote_root, "")
    assert rec.resources["backend"] == "remote-workspace" and rec.resources["time"] == "00:05:00"

    used = ssh_only()
    cfg = str(sshd.config_path)
    r = _roach("ls", "--json", "--ssh-config", cfg)
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert (row["job_id"], row["run_id"], row["target"], row["via"]) == (int(sub.job_id), rec.run_id, rel, sshd.alias)
    assert row["state"] in ("PENDING", "RUNNING", "COMPLETED")

    def status() -> dict:
        r = _roach("status", sub.job_id, "--json", "--ssh-config", cfg)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    got = wait_until("roach status to see the job end", lambda: (s := status())["status"] == "completed" and s)
    assert (got["state"], got["exit_code"], got["via"]) == ("COMPLETED", "0:0", sshd.alias)
    assert own_store.get("lab", int(sub.job_id)).status == "completed"  # what status learned, it recorded
    side = json.loads((Path(ws.remote_bundle(sub.job_id)) / "job.json").read_text())  # ... and into job.json there
    assert (side["status"], side["slurm_state"], side["live_state"]) == ("completed", "COMPLETED", "ended")
    assert own_store.get("lab", int(sub.job_id)).job_json_at is not None
    r = _roach("logs", rec.run_id, "--ssh-config", cfg)
    assert r.exit_code == 0 and r.stdout == "hello from the workspace\n", r.output

    # `roach wait` without --cluster or --ssh-alias: the cluster from job.json, the alias from the store
    r = _roach("wait", sub.job_id, "--workspace", str(ws.root), "--ssh-config", cfg, "--interval", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "completed"
    assert used == []


@pytest.mark.lab
def test_a_script_array_is_one_store_job_as_bad_as_its_worst_task(
    ws, cluster, sshd: SSHServer, own_store, user_slurm, cancel_after
):
    body = 'echo "task $SLURM_ARRAY_TASK_ID"\nif [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then exit 3; fi\n'
    sub = sbatch_script(ws, cluster, _script(ws, "three.sbatch", body, head=HEAD + "#SBATCH --array=0-2\n"), "")
    cancel_after.append(sub.job_id)
    assert own_store.get("lab", int(sub.job_id)).log_path.endswith(f"/{sub.job_id}/slurm_{sub.job_id}_%a.out")
    wait_until(
        "the array to leave the queue",
        lambda: not [q for q in user_slurm.squeue(job_ids=[sub.job_id]) if q.state.is_active],
        timeout=120,
    )
    cfg = str(sshd.config_path)
    got = wait_until(
        "accounting to have all three tasks ended",
        lambda: (
            (s := json.loads(_roach("status", sub.job_id, "--json", "--ssh-config", cfg).stdout))["status"]
            in FINAL_STATUSES
            and s
        ),
    )
    assert (got["status"], got["state"], got["exit_code"]) == ("failed", "FAILED", "3:0")
    assert own_store.get("lab", int(sub.job_id)).status == "failed"
    r = _roach("logs", sub.job_id, "--ssh-config", cfg)
    assert r.exit_code == 2 and "is an array: each task writes its own log" in r.stderr and "roach pull" in r.stderr
    rec = wait(ws, sub.job_id, cluster, interval_s=1)  # job.json agrees with the store
    assert rec.status == "failed" and own_store.get("lab", int(sub.job_id)).status == "failed"


def _refuses_release(inner: Transport) -> MockTransport:
    """The cluster's own transport, except that `scontrol release` fails as a controller that refused it would."""
    refused = (1, "", "scontrol: error: Access/permission denied for job (the test)")
    return MockTransport({("scontrol", "release"): refused}, inner=inner)


@pytest.mark.lab
def test_a_failure_after_the_record_is_added_cancels_the_held_job_and_removes_the_record(
    ws, cluster, own_store, user_slurm
):
    name = f"rollback-{os.getpid()}-{time.monotonic_ns()}"
    rel = _script(ws, "held.sbatch", "true\n", head=HEAD + f"#SBATCH --job-name={name}\n")
    with pytest.raises(SlurmError, match="Access/permission denied"):
        sbatch_script(ws, cluster, rel, "never released", transport=_refuses_release(cluster.transport()))
    assert own_store.recent() == []  # the record was added (the release came after it), then removed
    states = user_slurm.run(["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%T"]).stdout.split()
    assert states == ["CANCELLED"]  # queued held, never released, cancelled
    assert not (ws.root / "dsi-slurm-artifacts").exists() or not any((ws.root / "dsi-slurm-artifacts").iterdir())
