"""job.json, the state-to-status table, the secret scrubber and a job's paths on the cluster."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from roach.errors import ParseError, RoachError, UsageError
from roach.model.job_state import JobState
from roach.model.status import Status
from roach.records.bundle import (
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    LIVE_STATES,
    BundlePaths,
    JobJson,
    final_job_json,
    indented_json,
    job_json_texts,
    scrub,
    status_from_state,
)
from roach.scheduler.parse import parse_sacct

DATA = Path(__file__).parent / "data"
# The keys users write by hand for each job, in their order, then roach's own.
DSI_KEYS = [
    "job_id",
    "status",
    "slurm_state",
    "exit_code",
    "script",
    "description",
    "submitted_at_utc",
    "recorded_at_utc",
]
ROACH_KEYS = [
    "live_state",
    "cluster",
    "run_id",
    "commit",
    "resources",
    "name",
    "target",
    "python_env",
    "attempts",
    "failure",
]


def base(**kw) -> JobJson:
    values = dict(
        job_id="60",
        script="/scratch/logs/bundles/60/job.sh",
        description="train the model",
        submitted_at_utc="2026-11-29T23:39:46Z",
        cluster="lab",
        run_id="r-1",
        commit="abc123",
        resources={"gpus": 1, "partition": "gpu"},
        name="fail3",
        target="pkg.mod:main",
    )
    return JobJson(**{**values, **kw})


# -- status table -----------------------------------------------------------------------------------
EXPECTED = {
    JobState.COMPLETED: "completed",
    JobState.CANCELLED: "cancelled",
    JobState.TIMEOUT: "timeout",
    JobState.DEADLINE: "timeout",
    JobState.PREEMPTED: "preempted",
    JobState.FAILED: "failed",
    JobState.NODE_FAIL: "failed",
    JobState.OUT_OF_MEMORY: "failed",
    JobState.BOOT_FAIL: "failed",
    JobState.LAUNCH_FAILED: "failed",
    # Federation: a sibling cluster ran the job; this record says nothing about how it ended.
    JobState.REVOKED: "unknown",
}


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_every_state_has_a_status(state):
    got = status_from_state(state, state.value)
    if state.is_terminal:
        assert got == EXPECTED[state]  # a new terminal state must be added to EXPECTED on purpose
        assert got in FINAL_STATUSES
    elif state.is_pending:
        assert got == "pending"
    else:
        assert state.is_running and got == "running"


def test_every_terminal_state_is_in_the_expected_table():
    assert {s for s in JobState if s.is_terminal} == set(EXPECTED)


@pytest.mark.parametrize(
    "text,status",
    [
        ("CANCELLED by 1001", "cancelled"),
        ("CANCELLED+", "cancelled"),
        ("COMPLETED", "completed"),
        ("OUT_OF_ME+", "failed"),
        ("TIMEOUT", "timeout"),
        ("PREEMPTED", "preempted"),
        ("REQUEUE_HOLD", "pending"),
        ("COMPLETING", "running"),
    ],
)
def test_status_from_raw_text(text, status):
    assert status_from_state(JobState.parse(text), text) == status


def test_statuses():
    assert FINAL_STATUSES == ("completed", "failed", "cancelled", "timeout", "preempted", "unknown")
    assert ACTIVE_STATUSES == ("submitted", "pending", "running")
    assert LIVE_STATES == ("submitted", "pending", "running", "ended")


# -- job.json ---------------------------------------------------------------------------------------
def test_job_json_has_exactly_the_dsi_keys_then_roachs_in_order():
    text = base().to_json()
    assert text.endswith("}\n")
    assert text.startswith('{\n  "job_id": "60",\n  "status": "unknown",')
    assert list(json.loads(text)) == DSI_KEYS + ROACH_KEYS


def test_job_json_is_the_text_json_dumps_with_indent_2_writes():
    """indented_json writes what json.dumps(indent=2) writes (its own encoder for the flat values), a container
    shared by several records written once for all of them."""
    odd = {
        "s": 'é\n"\u2028\x00\ud800',
        "n": None,
        "b": False,
        "i": 10**30,
        "f": 1.5,
        "inf": float("-inf"),
        "nan": float("nan"),
        "z": -0.0,
        "d": {"x": [1, 2, {"y": []}], "z": {}},
        "t": (1, 2),
        "e": [],
        "o": {},
        "status": Status.COMPLETED,
    }
    shared: dict = {}
    for obj in (odd, {}, {1: "a", None: "b"}, json.loads(base().to_json())):
        for memo in (None, shared, shared):
            assert indented_json(obj, memo) == json.dumps(obj, indent=2) + "\n"
    resources = {"gpus_per_node": 2, "time": "01:00:00", "extra": {"k": ["v", 2.0]}}
    jobs = [base(job_id=f"7_{i}", resources=resources) for i in range(3)]
    texts = [j.to_json(shared) for j in jobs]
    assert texts == [json.dumps(dataclasses.asdict(j), indent=2) + "\n" for j in jobs]


def test_a_sweeps_job_json_texts_are_each_runs_own():
    runs = [(f"7_{i}", f"sw-{i}") for i in range(3)] + [("7_3", 'é \\ "q"')]
    for template in (base(job_id="7_0", run_id="sw-0"), base(description="\0job_id and \0run_id, the marks")):
        assert job_json_texts(template, runs) == [
            dataclasses.replace(template, job_id=j, run_id=r).to_json() for j, r in runs
        ]


def test_job_json_status_holds_only_the_schemas_six_values_the_live_state_its_own_key():
    fresh = json.loads(base().to_json())
    assert (fresh["status"], fresh["live_state"], fresh["recorded_at_utc"]) == ("unknown", "submitted", None)
    assert not base().is_final
    for status in ("submitted", "running", "done"):
        with pytest.raises(UsageError, match=f"status {status!r} is not one of completed, failed"):
            base(status=status)
    with pytest.raises(UsageError, match="live_state 'gone'"):
        base(live_state="gone")


@pytest.mark.parametrize(
    "old,status,live",
    [("submitted", "unknown", "submitted"), ("running", "unknown", "running"), ("completed", "completed", "ended")],
)
def test_job_json_of_an_older_roach_is_read_as_this_one_writes_it(old, status, live):
    d = json.loads(base().to_json())
    del d["live_state"]
    d["status"] = old
    if old == "completed":
        d.update(slurm_state="COMPLETED", exit_code="0:0", recorded_at_utc="2026-11-30T00:00:00Z")
    j = JobJson.from_json(json.dumps(d))
    assert (j.status, j.live_state, j.is_final) == (status, live, old == "completed")


def test_job_json_round_trip():
    j = base(status="failed", slurm_state="FAILED", exit_code="3:0", recorded_at_utc="2026-11-29T23:40:00Z")
    assert JobJson.from_json(j.to_json()) == j
    fresh = base()
    assert JobJson.from_json(fresh.to_json()) == fresh
    assert json.loads(fresh.to_json())["slurm_state"] is None


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.pop("script"), r"missing \['script'\]"),
        (lambda d: d.update(extra=1), r"unexpected \['extra'\]"),
        (lambda d: d.update(job_id=60), "'job_id' has the wrong type"),
        (lambda d: d.update(resources=[]), "'resources' has the wrong type"),
        (lambda d: d.update(run_id=None), "'run_id' has the wrong type"),
    ],
)
def test_job_json_rejects_a_file_it_did_not_write(mutate, match):
    d = json.loads(base().to_json())
    mutate(d)
    with pytest.raises(ParseError, match=match):
        JobJson.from_json(json.dumps(d))


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_job_json_rejects_non_objects(text):
    with pytest.raises(ParseError, match="job.json"):
        JobJson.from_json(text)


def _acct(job_id: str):
    recs = [r for r in parse_sacct((DATA / "sacct_X_lab_22.05_ended.txt").read_text()) if r.job_id == job_id]
    assert len(recs) == 1
    return recs[0]


@pytest.mark.parametrize(
    "job_id,status,state,exit_code",
    [
        ("60", "failed", "FAILED", "3:0"),
        ("58", "cancelled", "CANCELLED by 1001", "0:0"),
        ("57", "timeout", "TIMEOUT", "0:0"),
        ("73", "completed", "COMPLETED", "0:0"),
        ("74", "failed", "FAILED", "0:9"),
    ],
)
def test_final_job_json_from_captured_sacct(job_id, status, state, exit_code):
    j = final_job_json(base(job_id=job_id), _acct(job_id), "2026-11-30T00:00:00Z")
    assert (j.job_id, j.status, j.slurm_state, j.exit_code, j.recorded_at_utc) == (
        job_id,
        status,
        state,
        exit_code,
        "2026-11-30T00:00:00Z",
    )
    assert j.description == "train the model" and j.run_id == "r-1"
    assert j.live_state == "ended" and j.is_final


def test_final_job_json_refuses_active_or_mismatched_record():
    running = [r for r in parse_sacct((DATA / "sacct_X_lab_22.05_just_started.txt").read_text()) if r.state.is_active][
        0
    ]
    with pytest.raises(UsageError, match="still"):
        final_job_json(base(job_id=str(running.ref.job)), running, "2026-11-30T00:00:00Z")
    with pytest.raises(UsageError, match="sacct record of job 60 given for job.json of job 61"):
        final_job_json(base(job_id="61"), _acct("60"), "2026-11-30T00:00:00Z")


# -- scrub ------------------------------------------------------------------------------------------
SECRET = "hf_s3cr3tT0ken"


@pytest.mark.parametrize(
    "obj,where",
    [
        ({"a": {"b": SECRET}}, "$.a.b"),
        ({"args": [1, "x", SECRET]}, "$.args[2]"),
        ({"cmd": f"--token={SECRET} --fast"}, "$.cmd"),
        ([{"k": ("t", f"pre{SECRET}post")}], "$[0].k[1]"),
        ({SECRET: 1}, "$ (a key)"),
        (Path(f"/tmp/{SECRET}"), "$"),
    ],
)
def test_scrub_finds_secret_anywhere_and_does_not_print_it(obj, where):
    with pytest.raises(RoachError) as e:
        scrub(obj, ["other", SECRET], what="job.json")
    assert f"into job.json at {where}" in str(e.value)
    assert SECRET not in str(e.value)


def test_scrub_passes_clean_objects_and_ignores_empty_secrets():
    scrub({"a": [1, 2.5, True, None, "text"], "b": {"c": "d"}}, [SECRET, ""])
    scrub(base().to_json(), [])
    scrub(json.loads(base().to_json()), iter([SECRET]))


# -- paths ------------------------------------------------------------------------------------------
def test_bundle_paths():
    p = BundlePaths("/scratch/u/repo/exp/slurm-logs", "r-1", 1234)
    assert p.bundle_dir == "/scratch/u/repo/exp/slurm-logs/bundles/1234"
    assert p.script == "/scratch/u/repo/exp/slurm-logs/bundles/1234/job.sh"
    assert p.spec == "/scratch/u/repo/exp/slurm-logs/bundles/1234/spec.json"
    assert p.job_json == "/scratch/u/repo/exp/slurm-logs/bundles/1234/job.json"
    assert p.node_sh == "/scratch/u/repo/exp/slurm-logs/bundles/1234/node.sh"
    assert p.log == "/scratch/u/repo/exp/slurm-logs/r-1_1234.out"
    assert BundlePaths("/logs/", "r", "9").log == "/logs/r_9.out"


def test_bundle_paths_keep_odd_but_legal_names():
    p = BundlePaths("/a dir/$(x)/'q'", "run 1", 5)
    assert p.script == "/a dir/$(x)/'q'/bundles/5/job.sh"


@pytest.mark.parametrize(
    "log_root,run_id,job_id,match",
    [
        ("~/scratch/logs", "r", 1, "must be an absolute path"),
        ("logs", "r", 1, "must be an absolute path"),
        ("/logs", "a/b", 1, "run id 'a/b'"),
        ("/logs", "", 1, "run id ''"),
        ("/logs", "r", "..", "job id '..'"),
    ],
)
def test_bundle_paths_reject(log_root, run_id, job_id, match):
    with pytest.raises(UsageError, match=match):
        BundlePaths(log_root, run_id, job_id)
