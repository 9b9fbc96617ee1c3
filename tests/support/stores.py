"""A test's own store and submit roots, made one way for the conftest fixtures and the modules' own."""

from __future__ import annotations

from pathlib import Path

from roach.records.store import Store


def store_at(base: Path) -> Store:
    """The store ``base/store.sqlite`` (opened on first use)."""
    return Store(base / "store.sqlite")


def roots_under(base: Path) -> dict[str, str]:
    """``log_root`` and ``clone_root`` under ``base``, as submit()'s keyword arguments."""
    return {"log_root": str(base / "logs"), "clone_root": str(base / "clones")}
