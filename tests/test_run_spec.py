"""RunSpec: the one writer and reader of spec.json (submit, a sweep's arrays, an attempt in a holder; the rank, resume)."""

from __future__ import annotations

import json

import pytest

from roach.model.run_spec import RepoRef, RunSpec, SpecError, SweepRef

REPO = RepoRef("git@example.org:lab/proj.git", "0123456789abcdef0123456789abcdef01234567", "proj")

# What roach wrote before RunSpec existed, key for key (a job submitted by the previous release, resumed now).
OLD_SUBMIT = """{
  "version": 1,
  "target": "pkg.train:main",
  "args": {"lr": 0.1, "steps": 40},
  "run_id": "main-20261201-1",
  "name": "main",
  "cluster": "lab",
  "run_dir": "~/roach/proj/runs/main-20261201-1",
  "log_root": "~/roach/proj/slurm-logs",
  "clone_root": "~/roach_clones",
  "secrets_dir": null,
  "job_env": {"WANDB_MODE": "offline"},
  "python_path": ["src"],
  "checkpoint_every": 10,
  "checkpoint_signal": "USR1",
  "max_timeout_requeues": 3,
  "repo": {"url": "git@example.org:lab/proj.git", "commit": "0123456789abcdef0123456789abcdef01234567", "name": "proj"}
}
"""


def _plain(**kw) -> RunSpec:
    base = dict(
        target="pkg.train:main",
        args={"lr": 0.1, "steps": 40},
        run_id="main-20261201-1",
        name="main",
        cluster="lab",
        run_dir="~/roach/proj/runs/main-20261201-1",
        log_root="~/roach/proj/slurm-logs",
        clone_root="~/roach_clones",
        job_env={"WANDB_MODE": "offline"},
        python_path=["src"],
        checkpoint_every=10,
        repo=REPO,
    )
    return RunSpec(**{**base, **kw})


def test_a_submit_spec_is_written_key_for_key_as_before():
    assert json.loads(_plain().to_json()) == json.loads(OLD_SUBMIT)
    assert list(json.loads(_plain().to_json())) == list(json.loads(OLD_SUBMIT))  # the same order, for a reader's eye


def test_every_shape_reads_back_as_written():
    sweep = _plain(
        run_id="sw-1", run_dir="~/runs", args={}, sweep=SweepRef("sw-1", 100, "~/runs"), grid=[{"lr": 1}, {"lr": 2}]
    )
    inside = _plain(max_timeout_requeues=0, holder=4242, attempt=3)
    for spec in (_plain(), sweep, inside, _plain(checkpoint_every_s=30.0, secrets_dir="~/.secrets")):
        assert RunSpec.from_json(spec.to_json()) == spec
    assert json.loads(inside.to_json())["holder"] == 4242
    assert "sweep" not in json.loads(_plain().to_json()) and "holder" not in json.loads(_plain().to_json())


def test_an_older_spec_without_the_optional_keys_takes_their_defaults():
    old = {k: v for k, v in json.loads(OLD_SUBMIT).items() if k in ("version", "target", "args", "run_id", "run_dir")}
    spec = RunSpec.from_json(json.dumps(old))
    assert (spec.checkpoint_signal, spec.max_timeout_requeues, spec.job_env, spec.python_path) == ("USR1", 3, {}, [])


def test_a_sweep_task_is_its_own_run():
    sweep = _plain(
        run_id="sw-1", run_dir="~/runs/", args={}, sweep=SweepRef("sw-1", 100, "~/runs/"), grid=[{"lr": 1}, {"lr": 2}]
    )
    t = sweep.task(1)
    assert (t.run_id, t.run_dir, t.args, t.sweep, t.grid) == ("sw-1-101", "~/runs/sw-1-101", {"lr": 2}, None, None)
    assert _plain().task(5) == _plain()  # a plain run's spec as it is
    with pytest.raises(SpecError, match="array task 2 is outside this array's 2 runs"):
        sweep.task(2)


@pytest.mark.parametrize(
    "text, said",
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"version": 2, "target": "a:b", "run_id": "r", "run_dir": "d"}', "version 2; this roach reads version 1"),
        ('{"version": 1, "target": "a:b", "run_dir": "d"}', "lacks or mistypes 'run_id'"),
    ],
)
def test_a_spec_a_rank_cannot_read_says_what_is_wrong(text, said):
    with pytest.raises(SpecError, match=said):
        RunSpec.from_json(text)
