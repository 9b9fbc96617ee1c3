"""Shared fixtures: the real lab cluster, Slurm clients as root and as the lab's unprivileged user."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from roach.lab.config import LAB_USER, LabConfig
from roach.launch import poller
from roach.records.store import Store
from roach.scheduler.client import SlurmClient
from roach.scheduler.transport import LocalTransport
from tests.support import scheduling
from tests.support.gitrepo import GitRepo
from tests.support.labs import NO_LAB_DIR, SHARED_TMP, choose_lab, settle_layout, share_job_venv
from tests.support.stores import roots_under, store_at
from tests.support.watch import Clock, FakeCluster

T = TypeVar("T")

# Every temporary directory of the suite (tmp_path too) lies where each of the lab's nodes sees it: not in /tmp.
tempfile.tempdir = str(SHARED_TMP)
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(SHARED_TMP))

# Every cluster lookup reads the user's clusters.toml: the tests must not see the developer's own file.
# A test that needs one sets $ROACH_CLUSTERS_TOML itself (monkeypatch), over this missing file.
os.environ["ROACH_CLUSTERS_TOML"] = os.path.join(tempfile.mkdtemp(prefix="roach-tests-"), "no-clusters.toml")

# Under pytest-xdist each worker has a lab of its own (tests/support/labs.py); $ROACH_LAB_DIR names it from here on.
LAB_CHOICE = choose_lab()


# Each wait's timeout is what the wait needs on an idle 2-core machine; a CI machine shared with other work can
# be slower, and a wait that times out only costs time when the test is failing anyway.
WAIT_SLACK = float(os.environ.get("ROACH_TEST_WAIT_SLACK", "2"))


def slack(seconds: float) -> float:
    """A timeout a test gives roach's own waits (``Job.wait``), with the same slack as :func:`wait_until`."""
    return seconds * WAIT_SLACK


def wait_until(
    what: str,
    check: Callable[[], T],
    timeout: float = 60.0,
    every: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy; fail the test naming ``what`` on timeout, with
    what ``explain`` says of the state then (the queue, a log's tail) where one is given."""
    deadline = time.monotonic() + timeout * WAIT_SLACK
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    extra = f"\n{explain()}" if explain is not None else ""
    pytest.fail(f"timed out after {timeout * WAIT_SLACK:.0f}s waiting for {what} (last: {last!r}){extra}")


def lab_queue(slurm: SlurmClient) -> str:
    """The whole lab queue and its nodes, one line each: what a timed-out wait on the lab fails with."""
    jobs = [
        f"  {r.job_id} {r.name} {r.user} {r.state.value} {r.reason_text or ''} on {r.nodelist or '-'}"
        for r in slurm.squeue(all_users=True)
    ]
    nodes = [f"  {n.name} {n.state} gpus {n.gpus_used}/{n.gpus_total}" for n in slurm.nodes()]
    return "queue:\n" + ("\n".join(jobs) or "  (empty)") + "\nnodes:\n" + "\n".join(nodes)


@pytest.fixture(scope="session")
def lab() -> LabConfig:
    """This process's lab (tests/support/labs.py), started if it is down (idempotent; needs root), with its live
    settings at their defaults: a run stopped halfway (^C in a test that turned a setting on) must not leave the
    next run's lab set otherwise."""
    if os.geteuid() != 0:
        pytest.skip("the lab cluster needs root")
    from dataclasses import fields

    from roach.lab import up
    from roach.lab.lab import LIVE

    defaults = {f.name: f.default for f in fields(LabConfig) if f.name in LIVE}
    share_job_venv(LAB_CHOICE)
    settle_layout(LAB_CHOICE)
    where: dict[str, object] = {"state_dir": str(LAB_CHOICE.state_dir)}
    if LAB_CHOICE.port_base is not None:
        where["port_base"] = LAB_CHOICE.port_base
    if LAB_CHOICE.layout is not None:
        where["layout"] = LAB_CHOICE.layout
    return up(log=lambda *_: None, **where, **defaults)


@pytest.fixture(scope="session")
def slurm(lab: LabConfig) -> SlurmClient:
    """A Slurm client acting as root on the lab."""
    return SlurmClient(LocalTransport(env=lab.env()))


@pytest.fixture(scope="session")
def user_slurm(lab: LabConfig) -> SlurmClient:
    """A Slurm client acting as the lab's unprivileged user (root hides permission bugs)."""
    return SlurmClient(LocalTransport(env=lab.env(), user=LAB_USER))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``lab`` marker is the one sign that a test reaches the lab: a test that asks for the ``lab`` fixture
    (directly or through one that needs it) without it is an error, so ``-m 'not lab'`` never starts a lab.

    Under ``--dist loadscope`` (make test) the workers hand tests out as tests/support/scheduling.py says."""
    unmarked = [i.nodeid for i in items if "lab" in getattr(i, "fixturenames", ()) and not i.get_closest_marker("lab")]
    if unmarked:
        raise pytest.UsageError(
            "tests that use the lab without @pytest.mark.lab:\n" + "\n".join(f"  {n}" for n in unmarked)
        )
    if scheduling.scheduled(config):
        scheduling.order(items)
        scheduling.write_units(config, items)


_UNITS: list[Path] = []  # the controller's file of units, made when its first worker is configured


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """The controller names the file where the first worker writes each test's unit (tests/support/scheduling.py)."""
    if node.config.getvalue("dist") == "loadscope":
        _UNITS[:] = _UNITS or [scheduling.scopes_file()]
        node.workerinput[scheduling.SCOPES_KEY] = str(_UNITS[0])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    config.option.loadscopereorder = False  # the workers' order: slow tests first
    _UNITS[:] = _UNITS or [scheduling.scopes_file()]
    return scheduling.SlowFirst(config, log, _UNITS[0])


@pytest.fixture(autouse=True)
def lab_by_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``lab`` has this process's lab up; any other sees none, so one that reaches the lab anyway (a
    subprocess, the ``lab`` cluster's site module) fails on a missing lab instead of using another test's."""
    if request.node.get_closest_marker("lab") is not None:
        request.getfixturevalue("lab")
    else:
        monkeypatch.setenv("ROACH_LAB_DIR", NO_LAB_DIR)


@pytest.fixture(scope="session", autouse=True)
def waiters_poller_ends_with_its_wait() -> Iterator[None]:
    """A waiter's ``roach watch --serve`` ends as soon as its last reader leaves, not 30 s later: a later test on
    the same store (a module's own, waited on by a module fixture too) would share its rounds, and the jobs' ends,
    with that poller. Session-wide, so a module fixture's wait starts it so too; tests of the linger set it
    themselves."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(poller, "SERVE_LINGER_S", 0.0)
        yield


def _has_lab_tests(request: pytest.FixtureRequest) -> bool:
    return any(
        i.get_closest_marker("lab") and getattr(i, "module", None) is request.module for i in request.session.items
    )


@pytest.fixture(scope="module", autouse=True)
def lab_left_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a module's lab tests: no job of its own left queued or running, no node left drained by a test.

    A job that outlives its module holds the lab's few GPUs and makes a later module's timing wait fail for a
    reason of its own; what is found is cancelled and named in the run's output, so the leak is seen."""
    if not _has_lab_tests(request):
        yield
        return
    slurm = request.getfixturevalue("slurm")
    yield
    left = [r for r in slurm.squeue(all_users=True) if r.state.is_active]
    nodes = [n.name for n in slurm.nodes() if not n.available]
    if left or nodes:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        what = ", ".join(f"{r.job_id} {r.name} {r.state.value}" for r in left)
        if reporter is not None:
            reporter.write_line(
                f"\n{request.module.__name__} left behind: jobs [{what}] drained nodes {nodes}; cleaned", yellow=True
            )
    if left:
        slurm.scancel(sorted({r.job_id.split("_")[0] for r in left}))
        wait_until(
            "leftover jobs to leave the queue",
            lambda: not [r for r in slurm.squeue(all_users=True) if r.state.is_active],
            timeout=90,
        )
    for n in nodes:
        slurm.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], retry=False, ok_codes=(0, 1))


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory that the lab user's jobs can write to (mode 0777), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="roach-test-", dir=SHARED_TMP))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A store of the test's own, closed afterwards (modules that share one across tests define their own)."""
    with store_at(tmp_path) as s:
        yield s


@pytest.fixture
def cli_store(store: Store, monkeypatch: pytest.MonkeyPatch) -> Store:
    """``store``, which the CLI (`roach ...` in-process or in a subprocess) finds through $ROACH_STORE."""
    monkeypatch.setenv("ROACH_STORE", str(store.path))
    return store


@pytest.fixture
def roots(shared_tmp: Path) -> dict[str, str]:
    """submit()'s log_root and clone_root in a directory the lab user's jobs can write to."""
    return roots_under(shared_tmp)


@pytest.fixture
def fake() -> FakeCluster:
    """The watcher's fake cluster (tests/support/watch.py)."""
    return FakeCluster()


@pytest.fixture
def clock() -> Clock:
    """An injected clock that moves only when the test (or a watcher's sleep) moves it."""
    return Clock()


def private_store(prefix: str) -> Iterator[Path]:
    """For a module fixture: $ROACH_STORE at a store of its own while the module's tests run, never the user's."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROACH_STORE", str(d / "store.sqlite"))
        yield d / "store.sqlite"
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def jobs(user_slurm: SlurmClient) -> Iterator[list[int]]:
    """Job ids a test submits as the lab user; whatever is left of them is cancelled afterwards."""
    ids: list[int] = []
    yield ids
    if ids:
        user_slurm.scancel(ids)
        wait_until(
            "the test's jobs to leave the queue",
            lambda: not [r for r in user_slurm.squeue(job_ids=ids) if r.state.is_active],
            timeout=60,
        )


@pytest.fixture
def git_repo(shared_tmp: Path) -> GitRepo:
    """A repository of the test's own in ``shared_tmp``, nothing committed yet."""
    return GitRepo(shared_tmp)


@pytest.fixture
def repo(request: pytest.FixtureRequest, git_repo: GitRepo) -> GitRepo:
    """``git_repo`` with the requesting module's ``PKG`` (a dict of path -> file text) committed and pushed."""
    files = getattr(request.module, "PKG", None)
    if not isinstance(files, dict):
        pytest.fail(
            f"{request.module.__name__} asks for the repo fixture but defines no module-level PKG: give it"
            " PKG = {path: text, ...}, the files its tests' jobs import",
            pytrace=False,
        )
    git_repo.commit(files, "the test package")
    return git_repo
