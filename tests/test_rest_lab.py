"""The REST client against the lab's own slurmrestd (`roach lab up --rest`): writes act, reads equal the commands'."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import pytest

from roach.errors import SlurmError, TransportError
from roach.lab import up
from roach.lab.conf_files import rest_url
from roach.lab.config import LAB_USER, LabConfig
from roach.model.job_state import JobState
from roach.model.states import PendingReason
from roach.scheduler.client import SlurmClient
from roach.scheduler.rest_client import RestClient
from roach.scheduler.rest_http import RestApi
from roach.scheduler.rest_token import TokenSource
from roach.scheduler.transport import LocalTransport, Result
from tests.conftest import wait_until

pytestmark = pytest.mark.lab

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=rest-lab\n#SBATCH --output=/dev/null\n#SBATCH --time=0:05:00\nsleep 300\n"


@dataclasses.dataclass
class Counting:
    """A transport that counts the commands it runs (the token command's runs)."""

    inner: LocalTransport
    runs: int = 0

    def run(self, argv: Sequence[str], *, input=None, timeout=None) -> Result:
        self.runs += 1
        return self.inner.run(argv, input=input, timeout=timeout)


@pytest.fixture(scope="module")
def rest_lab(lab: LabConfig) -> Iterator[LabConfig]:
    cfg = up(log=lambda *_: None, state_dir=str(lab.state), rest=True)
    yield cfg
    up(log=lambda *_: None, state_dir=str(lab.state), rest=False)


def _api(cfg: LabConfig, lifespan: int = 600) -> tuple[RestApi, Counting]:
    runs = Counting(LocalTransport(env=cfg.env(), user=LAB_USER))
    token = TokenSource(LAB_USER, ("scontrol", "token", f"lifespan={lifespan}"), transport=runs)
    return RestApi(rest_url(cfg), token), runs


@pytest.fixture
def rest(rest_lab: LabConfig) -> RestClient:
    return RestClient(LocalTransport(env=rest_lab.env(), user=LAB_USER), api=_api(rest_lab)[0])


def test_held_submission_release_and_cancel_through_rest(rest: RestClient, user_slurm: SlurmClient) -> None:
    job = rest.sbatch(["--hold"], SCRIPT)
    try:
        [held] = user_slurm.squeue(job_ids=[job])
        assert held.reason is PendingReason.JobHeldUser and held.name == "rest-lab" and held.time_limit_s == 300
        assert rest.squeue(job_ids=[job]) == [dataclasses.replace(held, elapsed_s=0)]
        rest.release(job)
        wait_until(
            "the released job to run", lambda: [r.state for r in user_slurm.squeue(job_ids=[job])] == [JobState.RUNNING]
        )
        [running] = rest.squeue(job_ids=[job])
        assert running.state is JobState.RUNNING and running.nodelist
    finally:
        rest.scancel([job])
    wait_until("the cancelled job to leave the queue", lambda: not user_slurm.squeue(job_ids=[job]))
    wait_until("its accounting through REST", lambda: [a.state for a in rest.sacct([job])] == [JobState.CANCELLED])
    assert [(a.job_id, a.state) for a in rest.sacct([job])] == [(a.job_id, a.state) for a in user_slurm.sacct([job])]


def test_an_unknown_job_is_refused_as_scancel_refuses_it(rest: RestClient) -> None:
    with pytest.raises(SlurmError) as err:
        rest.scancel([999999])
    assert "Invalid job id" in err.value.stderr and err.value.exit_code == 5


def test_a_token_about_to_expire_is_renewed_before_the_request(rest_lab: LabConfig) -> None:
    api, runs = _api(rest_lab, lifespan=120)
    client = RestClient(LocalTransport(), api=api)
    client.squeue()
    assert runs.runs == 1
    client.squeue()
    assert runs.runs == 1  # the token is kept while it lasts
    api.clock = lambda: time.time() + 90  # 30 s left: under RENEW_BEFORE_S
    client.squeue()
    assert runs.runs == 2


def test_an_unreachable_rest_url_is_a_transport_error_after_the_retries(rest_lab: LabConfig) -> None:
    api, _ = _api(rest_lab)
    closed = dataclasses.replace(api, url=rest_url(rest_lab).rsplit(":", 1)[0] + ":9")
    slept: list[float] = []
    client = RestClient(LocalTransport(), api=closed, sleep=slept.append)
    with pytest.raises(TransportError) as err:
        client.squeue()
    assert "cannot reach slurmrestd" in err.value.message and err.value.exit_code == 4
    assert len(slept) == client.retries
