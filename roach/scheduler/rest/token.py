"""Where a REST cluster's JWT comes from: a command (``scontrol token``, here or over SSH) or a file of mode 600.

The token is a secret: it lives in this process's memory only. No error, log line or record carries it, and
a command's output is never quoted in an error (it may hold the token).
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roach.errors import SlurmError, UsageError
from roach.scheduler.transport import Transport

DEFAULT_LIFESPAN_S = 1800  # scontrol token's own default
_TOKEN = re.compile(r"(?:^|\s)(?:SLURM_JWT=)?([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)\s*$")


def read_token(text: str, where: str) -> str:
    """The JWT in ``text``: ``SLURM_JWT=<token>`` (what ``scontrol token`` prints) or the bare token."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    m = _TOKEN.search(lines[-1]) if lines else None
    if not m:
        raise UsageError(
            f"{where} holds no JWT (expected SLURM_JWT=<token> or the token alone)",
            hint="write what `scontrol token lifespan=86400` prints into it",
        )
    return m[1]


def token_claims(token: str) -> dict[str, Any]:
    """A JWT's claims (its middle part), unverified: slurmctld verifies; roach reads the expiry and the user."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def check_token_file(path: Path) -> None:
    """Refuse a token file anyone but its owner may read or write, or that is not a file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(
            f"the token file {path} does not exist",
            hint=f"(umask 077; scontrol token lifespan=86400 > {path}) on a host that has Slurm's commands",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"the token file {path} is not a file", hint="give token_file the path of a file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise UsageError(
            f"the token file {path} has mode {mode:o}: others may read or change the token",
            hint=f"chmod 600 {path}",
        )


@dataclass
class TokenSource:
    """A user's JWT for slurmrestd: read from ``file``, or printed by ``command`` run through ``transport``.
    ``user`` None: the user the token names (its ``sun`` claim)."""

    user: str | None
    command: tuple[str, ...] = ()
    file: Path | None = None
    transport: Transport | None = field(default=None, repr=False)
    _token: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if bool(self.command) == (self.file is not None):
            raise UsageError(
                "a REST cluster needs exactly one source of its token",
                hint="set token_command (e.g. scontrol token lifespan=3600) or token_file (a file of mode 600)",
            )

    @property
    def renewable(self) -> bool:
        """Whether a fresh token can be had without the user: a command makes one."""
        return bool(self.command)

    def token(self) -> str:
        if self._token is None:
            self._token = self._read()
        return self._token

    def renew(self) -> str:
        """A fresh token (the command run again); the file's is read again, in case the user renewed it."""
        self._token = None
        return self.token()

    def user_name(self) -> str:
        """The user the requests are made as: the one given, else the one the token names."""
        if self.user:
            return self.user
        name = token_claims(self.token()).get("sun")
        if not isinstance(name, str) or not name:
            raise UsageError(
                "the JWT names no user (no sun claim)", hint="make it with `scontrol token`, which names its user"
            )
        return name

    def headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user_name(), "X-SLURM-USER-TOKEN": self.token()}

    def _read(self) -> str:
        if self.file is not None:
            check_token_file(self.file)
            return read_token(self.file.read_text(errors="replace"), f"the token file {self.file}")
        return self._run(self.command)

    def _run(self, argv: Sequence[str]) -> str:
        if self.transport is None:
            raise UsageError("token_command needs a host to run on", hint="give the cluster an ssh alias or run here")
        res = self.transport.run(list(argv), timeout=60)
        if not res.ok:
            # stderr names the failure (no token is printed there); stdout is never shown
            raise SlurmError(argv, res.returncode, res.stderr, hint=_command_hint(res.stderr))
        return read_token(res.stdout, f"what `{' '.join(argv)}` printed")


def _command_hint(stderr: str) -> str:
    if "AuthAltTypes" in stderr or "jwt" in stderr.lower():
        return "the cluster's Slurm hands out no JWT (AuthAltTypes=auth/jwt is not set): ask its administrators"
    return "run the token_command by hand to see why it fails, or write a token into a token_file of mode 600"


def token_source(
    user: str,
    command: Sequence[str] | None,
    file: str | os.PathLike[str] | None,
    transport: Transport | None,
) -> TokenSource:
    """The token source clusters.toml names (``token_command`` or ``token_file``)."""
    return TokenSource(user, tuple(command or ()), Path(file).expanduser() if file else None, transport)
