"""One HTTP request to slurmrestd, with the user's JWT: its JSON answer, or the error it means.

The standard library's ``http.client`` only. The data versions are chosen once per API from ``GET /openapi/v3``:
the highest of those slurmrestd offers that roach reads (:data:`KNOWN`). A token about to expire is renewed
before a request where its source can make one, else the request is refused with the fix; the token goes in
the ``X-SLURM-USER-*`` headers and nowhere else.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from roach.errors import ParseError, SlurmError, SlurmTransientError, TransportError, UsageError
from roach.scheduler.client import error_hint
from roach.scheduler.rest.token import TokenSource, token_claims


class DataVersion(str, Enum):
    """The OpenAPI data versions roach reads, oldest first: Slurm 22.05 offers v0.0.36 to v0.0.38, 24.11 v0.0.40 to
    v0.0.42, 26.05 v0.0.42 to v0.0.45."""

    V0_0_38 = "v0.0.38"
    V0_0_42 = "v0.0.42"

    @property
    def number(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.value[1:].split("."))


KNOWN = tuple(DataVersion)
_VERSION_PATH = re.compile(r"^/slurm(db)?/(v\d+\.\d+\.\d+)/")
# slurmrestd's answers to a token it (401) or slurmctld behind it (26.05: 511, "Protocol authentication error") refused
TOKEN_REFUSED = frozenset({401, 511})
RENEW_BEFORE_S = 60  # a token with less left than this is renewed (or refused) before a request


@dataclass(frozen=True)
class Answer:
    """slurmrestd's answer: its HTTP status, its JSON body, and its clock when it answered (the Date header)."""

    status: int
    body: dict[str, Any]
    now: datetime


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), or None if it has none or cannot be read."""
    exp = token_claims(token).get("exp")
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def offered_versions(spec: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The data versions an OpenAPI document's paths offer: (slurm's, slurmdb's)."""
    ctld: set[str] = set()
    dbd: set[str] = set()
    for path in spec.get("paths", {}):
        m = _VERSION_PATH.match(path)
        if m:
            (dbd if m[1] else ctld).add(m[2])
    return ctld, dbd


def choose_version(offered: set[str], what: str, url: str) -> DataVersion:
    """The highest known version in ``offered``; refuse naming both lists when there is none."""
    both = [v for v in KNOWN if v.value in offered]
    if not both:
        have = ", ".join(sorted(offered)) or "none"
        raise UsageError(
            f"slurmrestd at {url} offers {what} data versions {have}; roach reads {', '.join(v.value for v in KNOWN)}",
            hint="reach this cluster by ssh (or locally) instead of rest_url, or ask its administrators which "
            "OpenAPI plugins slurmrestd loads (-s)",
        )
    return max(both, key=lambda v: v.number)


@dataclass
class RestApi:
    """slurmrestd at ``url`` (``http://host:port``), as the user ``token`` names."""

    url: str
    token: TokenSource
    timeout_s: float = 30.0
    clock: Any = field(default=time.time, repr=False)
    _versions: tuple[DataVersion, DataVersion] | None = field(default=None, init=False, repr=False)
    _paths: frozenset[str] = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"rest_url {self.url!r} is not an http:// or https:// URL", hint="e.g. rest_url = 'http://ctl:6820'"
            )

    # -- versions ------------------------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        return self.request("GET", "/openapi/v3").body

    def versions(self) -> tuple[DataVersion, DataVersion]:
        """(slurm's, slurmdb's) data versions this API is read in: chosen once."""
        if self._versions is None:
            spec = self.spec()
            self._paths = frozenset(p.rstrip("/") for p in spec.get("paths", {}))
            ctld, dbd = offered_versions(spec)
            self._versions = (choose_version(ctld, "slurm", self.url), choose_version(dbd, "slurmdb", self.url))
        return self._versions

    def offers(self, path: str) -> bool:
        """Whether slurmrestd's OpenAPI document lists ``path`` (as written there: ``/slurm/v0.0.45/job/{job_id}``)."""
        self.versions()
        return path.rstrip("/") in self._paths

    def ctld(self, tail: str) -> str:
        return f"/slurm/{self.versions()[0].value}/{tail}"

    def dbd(self, tail: str) -> str:
        return f"/slurmdb/{self.versions()[1].value}/{tail}"

    # -- requests ------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        notices: frozenset[int] = frozenset(),
    ) -> Answer:
        """One request; raises :class:`SlurmError` for an answer that carries errors, :class:`TransportError`
        where slurmrestd cannot be reached. ``notices``: error codes a successful answer carries that are no
        failure (a held submission's ESLURM_JOB_HELD). A token slurmrestd or slurmctld refused (revoked, or expired
        by their clock) is renewed once and the request sent again where a command makes tokens: a refused
        request did nothing, a write included."""
        try:
            return self._request(method, path, query, body, notices)
        except TokenRefused:
            if not self.token.renewable:
                raise
            self.token.renew()
            return self._request(method, path, query, body, notices)

    def _request(
        self, method: str, path: str, query: Mapping[str, str] | None, body: Any, notices: frozenset[int]
    ) -> Answer:
        argv = (f"{method} {path}",)
        status, headers, raw = self._send(method, path + (f"?{_query_text(path, query)}" if query else ""), body)
        now = _date(headers.get("Date"))
        if status in TOKEN_REFUSED:
            raise TokenRefused(argv, status, raw.decode(errors="replace"), hint=self._token_hint())
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ParseError(
                f"slurmrestd answered {method} {path} with HTTP {status} and no JSON: {raw[:200]!r}"
            ) from None
        errors = [e for e in data.get("errors", []) or [] if isinstance(e, dict) and not _notice(e, status, notices)]
        if status >= 400 or errors:
            text = "; ".join(_error_text(e) for e in errors) or f"HTTP {status}"
            if _refused_read(errors):
                raise TokenRefused(argv, status, text, hint=self._token_hint())
            cls = SlurmTransientError if status in (502, 503, 504) or _transient(text) else SlurmError
            raise cls(argv, status, text, hint=error_hint(text))
        return Answer(status, data, now)

    def _send(self, method: str, target: str, body: Any) -> tuple[int, Mapping[str, str], bytes]:
        # Loaded here, for a REST cluster's requests only: http.client brings the email package (and random), which
        # `roach status` and `ls` of every other cluster must not load at their start (tests/test_cli_imports.py).
        import http.client

        headers = {"Accept": "application/json", **self._auth()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        parts = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "", parts.port, timeout=self.timeout_s)
        try:
            conn.request(method, parts.path.rstrip("/") + target, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, dict(resp.headers.items()), resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise TransportError(
                f"cannot reach slurmrestd at {self.url}: {_reason(exc)}",
                (method, target.split("?")[0]),
                hint="check rest_url in clusters.toml and that slurmrestd runs there; `roach doctor --cluster NAME` checks it",
            ) from None
        finally:
            conn.close()

    def _auth(self) -> dict[str, str]:
        """The token's headers, renewing the token first where it is about to expire and can be renewed."""
        headers = self.token.headers()
        exp = token_expiry(headers["X-SLURM-USER-TOKEN"])
        if exp is not None and exp - self.clock() < RENEW_BEFORE_S:
            if not self.token.renewable:
                raise UsageError(
                    f"the JWT in {self.token.file} expired at {datetime.fromtimestamp(exp):%Y-%m-%d %H:%M:%S}",
                    hint=f"write a fresh one: (umask 077; scontrol token lifespan=86400 > {self.token.file}), or set "
                    "token_command in clusters.toml so roach renews it itself",
                )
            self.token.renew()
            headers = self.token.headers()
        return headers

    def _token_hint(self) -> str:
        if self.token.renewable:
            return f"slurmrestd refused the token that `{' '.join(self.token.command)}` made; run it by hand to check"
        return f"slurmrestd refused the token in {self.token.file}: write a fresh one with `scontrol token`"


class TokenRefused(SlurmError):
    """slurmrestd, or slurmctld behind it, refused the request's token."""


def _refused_read(errors: list[dict[str, Any]]) -> bool:
    """22.05 answers a read whose token slurmctld refuses with "Unspecified error" (error number -1) from a load."""
    return bool(errors) and all(
        e.get("error_number") == -1 and str(e.get("source", "")).startswith("slurm_load") for e in errors
    )


def _notice(e: Mapping[str, Any], status: int, notices: frozenset[int]) -> bool:
    return status < 400 and (e.get("error_code") in notices or e.get("error_number") in notices)


def _error_text(e: Mapping[str, Any]) -> str:
    parts = [str(e.get(k)) for k in ("error", "description") if e.get(k)]
    return ": ".join(dict.fromkeys(parts)) or json.dumps(e)


_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Resource temporarily unavailable|"
    r"Connection refused|Slurm backup controller in standby mode|Communication connection failure",
    re.IGNORECASE,
)


def _transient(text: str) -> bool:
    return bool(_TRANSIENT.search(text))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _query_text(path: str, query: Mapping[str, str]) -> str:
    """A query string as the path's data version reads it. v0.0.38 takes a list's commas percent-encoded (and
    refuses them bare); v0.0.42 refuses ``%2C`` and fails on bare commas (26.05: HTTP 500) but takes the key once
    per item (``step=1&step=2``). A flag (an empty value) is its bare name (v0.0.45 reads ``?Hold=`` as no flag)."""
    v38 = "/v0.0.38/" in path
    pairs = [
        (k, v) if v38 else (k, item) for k, v in query.items() if v != "" for item in ([v] if v38 else v.split(","))
    ]
    flags = [urllib.parse.quote(k) for k, v in query.items() if v == ""]
    return "&".join([urllib.parse.urlencode(pairs), *flags]).strip("&")


def _date(value: str | None) -> datetime:
    """The server's clock from its Date header (RFC 9110: ``Sat, 05 Dec 2026 11:30:06 GMT``), as a naive local
    time (as Slurm's commands print times); this machine's clock where there is none."""
    try:
        if value:
            when = datetime.strptime(value.strip(), "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
            return when.astimezone().replace(tzinfo=None)
    except ValueError:
        pass
    return datetime.now().replace(microsecond=0)
