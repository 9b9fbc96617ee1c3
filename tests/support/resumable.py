"""The module-scoped ``repo``, ``store`` and ``roots`` of the modules whose tests share one repository holding
``pkg.resumable`` (tests/jobs/resumable.py): import the three fixtures into the module."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.records.store import Store
from tests.support.gitrepo import GitRepo, repo_in_tmp
from tests.support.stores import roots_under, store_at

RESUMABLE = (Path(__file__).parents[1] / "jobs" / "resumable.py").read_text()


@pytest.fixture(scope="module")
def repo(request: pytest.FixtureRequest) -> GitRepo:
    """The module's repository holding pkg.resumable, in SHARED_TMP/roach-<module>-* (test_hold: roach-hold-*), left
    there for a post-mortem of a failure."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return repo_in_tmp(f"roach-{name}-", {"pkg/__init__.py": "", "pkg/resumable.py": RESUMABLE})


@pytest.fixture(scope="module")
def store(repo: GitRepo) -> Store:
    """The store the module's tests share, beside the module's repository."""
    return store_at(repo.base)


@pytest.fixture(scope="module")
def roots(repo: GitRepo) -> dict[str, str]:
    """submit()'s log_root and clone_root beside the module's repository."""
    return roots_under(repo.base)
