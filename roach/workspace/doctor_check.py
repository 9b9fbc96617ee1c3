"""One `roach doctor` check: whether a prerequisite holds, what was found, and what to do when it does not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from roach.errors import RoachError


@dataclass(frozen=True)
class Check:
    """One prerequisite: whether it holds, what was found, and what to do when it does not."""

    name: str
    ok: bool
    detail: str
    hint: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def attempt(name: str, fn: Callable[[], Check]) -> Check:
    """Run one check; a roach error on the way is that check failing, with the error's message and hint."""
    try:
        return fn()
    except RoachError as err:
        return Check(name, False, err.message, err.hint)
