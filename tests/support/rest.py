"""slurmrestd's recorded answers (tests/data/<release>/rest/), replayed to the REST client as its API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from roach.scheduler.rest.client import RestClient
from roach.scheduler.rest.request import Answer, DataVersion, RestApi
from roach.scheduler.rest.token import TokenSource
from roach.scheduler.transport import LocalTransport

DATA = Path(__file__).parent.parent / "data"


@dataclass(frozen=True)
class RestRecording:
    """One recorded read: the command's argv and output, and slurmrestd's answer of the same moment."""

    path: Path  # rest/<stem>.json

    @property
    def record(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    @property
    def argv(self) -> list[str]:
        return self.record["argv"]

    @property
    def text(self) -> str:
        return next(p for p in self.path.parent.glob(f"{self.path.stem}.*") if p.suffix != ".json").read_text()

    def __str__(self) -> str:
        return f"{self.path.parent.parent.name}-{self.path.stem}"

    def option(self, name: str) -> str | None:
        argv = self.argv
        return argv[argv.index(name) + 1] if name in argv else None


def recordings() -> list[RestRecording]:
    return [RestRecording(p) for p in sorted(DATA.glob("*/rest/*.json"))]


@dataclass
class ReplayedApi(RestApi):
    """A :class:`RestApi` whose every GET of the recorded path answers what slurmrestd answered then."""

    answers: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def versions(self) -> tuple[DataVersion, DataVersion]:
        """The version the recorded path was read in (``/slurm/v0.0.42/jobs``): both APIs'."""
        version = DataVersion(next(iter(self.answers)).split("/")[2])
        return version, version

    def request(self, method: str, path: str, *, query=None, body=None, notices=frozenset()) -> Answer:
        rec = self.answers[path]
        return Answer(200, rec["body"], datetime.fromisoformat(rec["now"]))


def replayed_client(rec: RestRecording, user: str = "roachlab") -> RestClient:
    record = rec.record
    api = ReplayedApi(
        "http://recorded.invalid", TokenSource(user, file=Path("/nonexistent")), answers={record["path"]: record}
    )
    return RestClient(LocalTransport(), retries=0, api=api)
