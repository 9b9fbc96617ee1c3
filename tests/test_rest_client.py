"""The REST client gives the records the commands give: on recorded answers of each release, and pure parts.

Each tests/data/<release>/rest/ pair is a command's output and slurmrestd's answer read at the same moment
(tests/record_slurm.py on a lab up with --rest); the client reads the answer with the command's own filters
(its --jobs, --user, --allocations) and must give the command parser's records, field for field. What the two
reads cannot share is only what moves between them: a running job's elapsed seconds.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from roach.errors import SlurmError, UsageError
from roach.model.job_state import JobState
from roach.scheduler import parse as P
from roach.scheduler import parse_control as PC
from roach.scheduler.rest import jobs as RP
from roach.scheduler.rest import site as RS
from roach.scheduler.rest.job_description import directives, job_description
from roach.scheduler.rest.request import DataVersion, RestApi, choose_version, offered_versions, token_expiry
from roach.scheduler.rest.token import TokenSource, read_token
from tests.support.rest import RestRecording, recordings, replayed_client

RECORDINGS = recordings()
ELAPSED_SLACK_S = 3  # the command and the request ran this close together at most


def _ids(rec: RestRecording) -> list[str]:
    jobs = rec.option("--jobs")
    return jobs.split(",") if jobs else []


def _same(expected, got, slack: int = ELAPSED_SLACK_S) -> None:
    assert abs(expected.elapsed_s - got.elapsed_s) <= slack, (expected, got)
    assert replace(got, elapsed_s=expected.elapsed_s) == expected


@pytest.mark.parametrize(
    "rec", [r for r in RECORDINGS if r.argv[0] == "squeue" and "--states" not in r.argv], ids=lambda r: str(r.path.stem)
)
def test_queue_through_rest_is_squeue(rec: RestRecording) -> None:
    expected = P.parse_squeue(rec.text)
    client = replayed_client(rec)
    got = {r.job_id: r for r in client.squeue(job_ids=_ids(rec), user=rec.option("--user"))}
    assert sorted(got) == sorted(r.job_id for r in expected)
    for e in expected:
        _same(e, got[e.job_id])


def _release(rec: RestRecording) -> str:
    return rec.path.parent.parent.name


def _sacct_same(e: P.AcctRecord, g: P.AcctRecord, release: str) -> None:
    # sacct writes who cancelled a job into its state ("CANCELLED by 1001"); slurmrestd keeps the word
    assert e.state_text.split(" by ")[0] == g.state_text, (e, g)
    g = replace(g, state_text=e.state_text)
    if release == "22.05" and g.state is JobState.FAILED:
        # slurmrestd 22.05 reads a failed job's exit code as 0 ("SUCCESS"): only the state says it failed
        assert g.exit_code == 0
        g = replace(g, exit_code=e.exit_code)
    running = e.end_time is None and e.start_time is not None
    _same(e, g, ELAPSED_SLACK_S if running else 0)


def _unstored(e: P.AcctRecord, by_id: dict[str, P.AcctRecord]) -> bool:
    """A record slurmdbd's job list leaves out: a job that never started (cancelled while held), or one whose start
    slurmdbd had not stored yet (sacct shows it without a partition); a step goes with its allocation."""
    alloc = by_id.get(e.raw_id.split(".")[0], e)
    return (alloc.start_time is None and alloc.end_time is not None) or alloc.partition == ""


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.argv[0] == "sacct"], ids=lambda r: str(r.path.stem))
def test_accounting_through_rest_is_sacct(rec: RestRecording) -> None:
    client = replayed_client(rec)
    records = client.sacct(
        _ids(rec),
        allocations_only="--allocations" in rec.argv,
        duplicates="--duplicates" in rec.argv,
        user=rec.option("--user"),
        since=rec.option("--starttime"),
    )
    got = {r.job_id: r for r in records}
    if "--duplicates" not in rec.argv:
        assert len(records) == len(got), "one record a job (and step): its latest run"
    runs = P.parse_sacct(rec.text)
    expected = {e.job_id: e for e in runs}  # with --duplicates: each job's latest run
    allocations = {e.raw_id: e for e in expected.values() if e.step is None}
    listed = {k for k, e in expected.items() if not _unstored(e, allocations)}
    # the recording keeps, of slurmdbd's answer since the epoch, the jobs sacct listed; it may lack those unstored
    assert listed <= set(got) <= set(expected)
    for job_id in set(got):
        if "--duplicates" in rec.argv:
            # sacct --duplicates lists each run of a requeued job; slurmdbd's list (asked without its flag) one of
            # them, the latest (22.05) or the first (26.05): it is one of sacct's runs
            g = got[job_id]
            assert (g.state, g.start_time, g.end_time) in [(e.state, e.start_time, e.end_time) for e in runs], g
        else:
            _sacct_same(expected[job_id], got[job_id], _release(rec))


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.argv[0] == "sinfo"], ids=lambda r: str(r.path.stem))
def test_nodes_through_rest_are_sinfo(rec: RestRecording) -> None:
    assert replayed_client(rec).nodes() == PC.parse_sinfo_nodes(rec.text)


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.argv[:3] == ["scontrol", "show", "partition"]], ids=str)
def test_partitions_through_rest_say_what_scontrol_says(rec: RestRecording) -> None:
    keys = (
        "PartitionName",
        "MaxTime",
        "DefaultTime",
        "GraceTime",
        "PriorityTier",
        "Nodes",
        "State",
        "TRES",
        "AllowQos",
    )
    expected = [PC.parse_key_values(ln) for ln in rec.text.splitlines() if ln.strip()]
    got = replayed_client(rec).partitions()
    assert [{k: p[k] for k in keys} for p in got] == [{k: p[k] for k in keys} for p in expected]
    # v0.0.38 says which partition is the default; v0.0.42 does not say it at all
    v38 = rec.record["path"].startswith("/slurm/v0.0.38/")
    assert [p["Default"] for p in got] == ([p["Default"] for p in expected] if v38 else ["NO"] * len(got))


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.argv[0] == "sacctmgr"], ids=str)
def test_qos_through_rest_are_sacctmgrs(rec: RestRecording) -> None:
    fields = ("Name", "Priority", "Preempt", "PreemptMode", "GraceTime", "MaxTRESPU", "MaxWall", "Flags")
    assert replayed_client(rec).qos() == PC.parse_sacctmgr(rec.text, fields)


def test_every_release_recorded_through_rest_has_each_read() -> None:
    kinds = {(r.path.parent.parent.name, r.argv[0]) for r in RECORDINGS}
    releases = {k[0] for k in kinds}
    assert releases, "no rest/ recordings in tests/data"
    for release in releases:
        assert {(release, c) for c in ("squeue", "sacct", "sinfo", "scontrol", "sacctmgr")} <= kinds


# -- pure parts ---------------------------------------------------------------------------------------------
def test_hostnames_expand_like_scontrol() -> None:
    assert RS.hostnames("n[1-2]") == ["n1", "n2"]
    assert RS.hostnames("gpu[01-02,07],login") == ["gpu01", "gpu02", "gpu07", "login"]


def test_tres_list_reads_as_slurms_text() -> None:
    items = [
        {"type": "cpu", "name": None, "count": 2},
        {"type": "mem", "name": None, "count": 1000},
        {"type": "energy", "name": None, "count": None},
        {"type": "gres", "name": "gpu", "count": 4},
    ]
    assert RP.tres_text(items) == "cpu=2,mem=1000M,gres/gpu=4"


def test_script_directives_become_the_job_description() -> None:
    script = (
        "#!/bin/bash\n#SBATCH --job-name=a b\n# a comment\n#SBATCH --nodes=2\n#SBATCH --time=1:30:00\n"
        "#SBATCH --mem=2G\n#SBATCH --requeue\nsrun true\n#SBATCH --qos=late\n"
    )
    assert directives(script)[:2] == ["--job-name=a", "b"]
    job = job_description(["--hold"], script.replace("=a b", "=ab"))
    assert job["name"] == "ab" and job["nodes"] == [2, 2] and job["time_limit"] == 90
    assert job["memory_per_node"] == 2048 and job["requeue"] is True and job["hold"] is True
    assert "qos" not in job  # after the first command sbatch reads no directive


def test_an_option_rest_cannot_send_is_refused_with_the_ones_it_can() -> None:
    with pytest.raises(UsageError) as err:
        job_description(["--exclusive"], "#!/bin/bash\ntrue\n")
    assert "--exclusive" in err.value.message and "--job-name=" in (err.value.hint or "")


def test_version_choice_is_the_highest_both_know_and_lists_both_when_none() -> None:
    spec = {"paths": {"/slurm/v0.0.37/jobs": {}, "/slurm/v0.0.38/jobs": {}, "/slurmdb/v0.0.38/jobs": {}}}
    ctld, dbd = offered_versions(spec)
    assert choose_version(ctld, "slurm", "u") is DataVersion.V0_0_38
    with pytest.raises(UsageError) as err:
        choose_version({"v0.0.36", "v0.0.37"}, "slurm", "http://x:1")
    assert "v0.0.36, v0.0.37" in err.value.message and "v0.0.38" in err.value.message


def _jwt(exp: float) -> str:
    claims = base64.urlsafe_b64encode(json.dumps({"exp": int(exp), "sun": "u"}).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJIUzI1NiJ9.{claims}.c2ln"


def test_a_token_reads_from_what_scontrol_token_prints() -> None:
    token = _jwt(2e9)
    assert read_token(f"SLURM_JWT={token}\n", "x") == token
    assert token_expiry(token) == 2e9
    with pytest.raises(UsageError):
        read_token("no token here\n", "x")


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(f"SLURM_JWT={_jwt(2e9)}\n")
    os.chmod(f, 0o644)
    with pytest.raises(UsageError) as err:
        TokenSource("u", file=f).token()
    assert "644" in err.value.message and err.value.hint == f"chmod 600 {f}"
    assert _jwt(2e9) not in str(err.value)
    os.chmod(f, 0o600)
    assert TokenSource("u", file=f).token() == _jwt(2e9)


def test_an_expired_token_file_is_refused_with_the_fix_before_any_request(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(_jwt(time.time() - 10))
    os.chmod(f, 0o600)
    api = RestApi("http://127.0.0.1:9", TokenSource("u", file=f))
    with pytest.raises(UsageError) as err:
        api.request("GET", "/slurm/v0.0.38/jobs")
    assert "expired" in err.value.message and "scontrol token" in (err.value.hint or "")


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(UsageError):
        RestApi("ctl:6820", TokenSource("u", file=Path("/x")))


def test_the_client_runs_no_slurm_command() -> None:
    rec = next(r for r in RECORDINGS if r.argv[0] == "squeue")
    with pytest.raises(SlurmError) as err:
        replayed_client(rec).run(["scontrol", "show", "reservation"])
    assert "slurmrestd" in err.value.stderr


@pytest.mark.parametrize(
    "rec",
    [r for r in RECORDINGS if r.argv[0] == "sacct" and {"--duplicates", "--allocations"} <= set(r.argv)],
    ids=lambda r: str(r),
)
def test_the_ledgers_runs_through_rest_are_sacct_duplicates_with_their_eligible_time(rec: RestRecording) -> None:
    client = replayed_client(rec)
    runs = client.allocations(_ids(rec))
    assert sorted(map(repr, (a.record for a in runs))) == sorted(map(repr, client.sacct(_ids(rec), duplicates=True)))
    answered = {
        RP.epoch_time(j["time"]["submission"]): RP.epoch_time(j["time"].get("eligible"))
        for j in rec.record["body"]["jobs"]
    }
    sacct_runs = [(e.state, e.start_time) for e in P.parse_sacct(rec.text)]
    assert runs and [a.eligible for a in runs] == [answered[a.record.submit_time] for a in runs]
    for a in runs:
        assert a.eligible is None or a.record.start_time is None or a.eligible <= a.record.start_time
        assert a.record.start_time is None or (a.record.state, a.record.start_time) in sacct_runs
    per_job = [[a.record.submit_time for a in runs if a.record.raw_id == j] for j in {a.record.raw_id for a in runs}]
    assert all(times == sorted(times) for times in per_job)  # a job's runs oldest first, as sacct -D lists them


@pytest.mark.parametrize(
    "rec",
    [r for r in RECORDINGS if r.argv[0] == "squeue"][:1]
    + [r for r in RECORDINGS if r.argv[0] == "squeue" and "/v0.0.42/" in r.record["path"]][:1],
    ids=str,
)
def test_what_slurmrestd_cannot_do_is_refused_naming_what_it_lacks(rec: RestRecording) -> None:
    client = replayed_client(rec)
    version = client.rest.versions()[0]
    refusals = {
        "sbatch --test-only": lambda: client.test_only(["--time=1"], "probe"),
        "squeue --steps": lambda: client.steps_text(["1"], "StepId"),
        "scontrol requeue": lambda: client.requeue(1),  # the recorded API lists no v0.0.45 path
    }
    if version is DataVersion.V0_0_38:
        refusals["scancel --batch"] = lambda: client.scancel([1], signal="USR1", batch=True)
    for what, call in refusals.items():
        with pytest.raises(SlurmError) as err:
            call()
        assert err.value.stderr.startswith(f"{what}: not available through slurmrestd: "), err.value.stderr
        assert version.value in err.value.stderr and "ssh" in (err.value.hint or "")


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.argv[:3] == ["scontrol", "show", "job"]], ids=str)
def test_a_job_through_rest_says_what_scontrol_show_job_says(rec: RestRecording) -> None:
    records = [r for r in re.split(r"(?=(?<!\S)JobId=)", rec.text) if r.strip()]
    expected = PC.parse_key_values(records[0])
    shown = replayed_client(rec).show_job(rec.argv[-1])
    assert shown and shown == {k: expected[k] for k in shown}
