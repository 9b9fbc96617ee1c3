"""Running a command on a cluster's login host with the system ``ssh``, over one multiplexed connection.

``ssh <alias>`` with the user's own config is all it needs. Every call adds ``BatchMode=yes`` (never a
prompt), a ``ConnectTimeout``, and ``ControlMaster=auto`` with a socket in a private (0700) directory:
the first call opens one connection that stays up for ``ControlPersist`` seconds and every later call of
any roach process rides on it, so a monitoring round costs no new handshake.

This is the only place in roach that builds a shell string: the argument list is quoted once per
argument (``shlex.quote``); the cluster's ``remote_setup`` lines (trusted configuration, such as
``module load slurm``) run before it, then ``export`` lines for the environment. The remote login shell
must be POSIX (sh, bash, zsh, dash).

Politeness is code, not advice: a *new* connection (the master is not up) is never attempted sooner than
``min_interval_s`` after the previous attempt; after a failure before authentication (connection
refused, reset, timed out, name not resolved) the transport refuses every call, without touching the
network, until ``backoff_s`` has passed, then allows exactly one attempt; if that fails it backs off again.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from roach.errors import TransportError
from roach.scheduler.transport import PINNED_ENV, Result

SSH_FAILED = 255  # ssh's own exit status when it (not the remote command) failed
# The patterns below are compiled on first use (re's cache), not at import: most commands never look at ssh.
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# ssh binds <dir>/<40 hex chars>.<16 random chars> before renaming it: 58 more characters than the directory,
# and a Unix socket path must stay under 104 bytes (macOS; 108 on Linux).
_MAX_SOCKET_DIR = 45

# ssh's stderr when it could not reach or keep a connection to the host (no authentication happened).
_CONNECT = (
    r"(?i)kex_exchange_identification|banner exchange|Connection refused|Connection timed out|Operation timed out|"
    r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution|"
    r"Connection closed by|Connection reset by|closed by remote host|No route to host|Network is unreachable|"
    r"read from master failed|mux_client_request_session|client_loop:|packet_write_wait|Connection to \S+ closed"
)
_AUTH = r"(?i)Permission denied|Too many authentication failures|Authentication failed|no mutual signature"
_HOSTKEY = r"(?i)Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|host key .* is not known"
_CONFIG = (
    r"(?i)Bad configuration option|bad configuration options|Can't open user config file|"
    r"Bad owner or permissions|Unsupported option|garbage at end of line|no argument after keyword"
)


class SSHConnectError(TransportError):
    """ssh could not reach (or lost) the login host before any command ran: a reason to back off."""

    def __init__(self, message: str, argv: Sequence[str] = (), hint: str | None = None, *, retry_at: float):
        super().__init__(message, argv, hint)
        self.retry_at = retry_at  # on the transport's clock: the first moment another attempt is allowed


class SSHBackingOff(SSHConnectError):
    """Raised at once, without touching the network, while the transport backs off after a failure."""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def remote_command(argv: Sequence[str], env: Mapping[str, str] = {}, setup: Sequence[str] = ()) -> str:
    """The one shell string sent to the remote login shell: setup lines, exports, then ``argv`` quoted.

    Every argument is quoted exactly once; environment values are quoted; setup lines are trusted
    configuration and pass unchanged.
    """
    if not argv:
        raise TransportError("empty command", argv)
    parts = [line.strip().rstrip(";") for line in setup if line.strip()]
    for key, value in {**env, **PINNED_ENV}.items():
        if not re.match(_ENV_NAME, key):
            raise TransportError(
                f"invalid environment variable name {key!r} for a remote command",
                argv,
                hint="names are letters, digits and underscores, not starting with a digit",
            )
        parts.append(f"export {key}={shlex.quote(str(value))}")
    parts.append(" ".join(shlex.quote(str(a)) for a in argv))
    return "; ".join(parts)


def default_control_dir() -> Path:
    """``$XDG_RUNTIME_DIR/roach-ssh`` when that is a private directory of ours, else ``/tmp/roach-ssh-<uid>``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            st = os.stat(runtime)
            if st.st_uid == os.getuid() and not st.st_mode & 0o077:
                return Path(runtime) / "roach-ssh"
        except OSError:
            pass
    return Path("/tmp") / f"roach-ssh-{os.getuid()}"  # not $TMPDIR: on macOS that is too long for a socket


def _private_dir(path: Path) -> Path:
    """Create ``path`` mode 0700, or check that an existing one is ours and private (a symlink is refused)."""
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise TransportError(
            f"cannot create the SSH control directory {path}: {exc}", hint="pass control_dir= a directory you own"
        ) from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise TransportError(
            f"the SSH control directory {path} is not a directory owned by you",
            hint="remove it, or pass control_dir= a directory you own",
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


class SSHTransport:
    """Runs commands on the host ``ssh <alias>`` reaches, all over one multiplexed connection.

    ``clock`` and ``sleep`` are injectable so tests can move time; ``env`` is exported on the remote side
    (with :data:`~roach.scheduler.transport.PINNED_ENV`); ``setup`` lines run before each command.
    """

    def __init__(
        self,
        alias: str,
        *,
        config_file: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        setup: Sequence[str] = (),
        connect_timeout: int = 10,
        control_dir: str | os.PathLike[str] | None = None,
        control_persist_s: int = 600,
        min_interval_s: float = 1.0,
        backoff_s: float = 180.0,
        default_timeout: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        ssh: str = "ssh",
    ):
        if not alias or alias.startswith("-") or any(c.isspace() for c in alias):
            raise TransportError(f"invalid ssh alias {alias!r}", hint="name a Host of your ~/.ssh/config")
        self.alias = alias
        self.config_file = str(config_file) if config_file is not None else None
        self.env = dict(env or {})
        self.setup = tuple(setup)
        self.connect_timeout = int(connect_timeout)
        self.control_persist_s = int(control_persist_s)
        self.min_interval_s = float(min_interval_s)
        self.backoff_s = float(backoff_s)
        self.default_timeout = default_timeout
        self.clock = clock
        self.sleep = sleep
        self.ssh = ssh
        self._control_dir = Path(control_dir) if control_dir is not None else None
        self._lock = threading.Lock()
        self._last_attempt: float | None = None  # when a new connection was last attempted (clock)
        self._blocked_until: float | None = None  # backing off until then (clock)
        self._last_error: str | None = None

    def __repr__(self) -> str:
        cfg = f", config_file={self.config_file!r}" if self.config_file else ""
        return f"SSHTransport({self.alias!r}{cfg})"

    # -- the ssh command line --------------------------------------------------------------------------
    @property
    def control_dir(self) -> Path:
        d = self._control_dir or default_control_dir()
        if any(ch.isspace() or ch in "%\"'" for ch in str(d)):
            raise TransportError(
                f"the SSH control directory {str(d)!r} has a space, quote or %", hint="pass control_dir= a plain path"
            )
        if len(str(d)) > _MAX_SOCKET_DIR:
            raise TransportError(
                f"the SSH control directory {d} is too long for a Unix socket path",
                hint=f"pass control_dir= a path of at most {_MAX_SOCKET_DIR} characters",
            )
        return _private_dir(d)

    def ssh_options(self) -> list[str]:
        """Everything between ``ssh`` and the alias: the user's config file and roach's fixed options."""
        opts = ["-F", self.config_file] if self.config_file else []
        return opts + [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control_dir}/%C",
            "-o",
            f"ControlPersist={self.control_persist_s}",
            "-o",
            "LogLevel=ERROR",  # no banners or "Permanently added" warnings mixed into stderr
            "-o",
            "ClearAllForwardings=yes",
            # A silently dead network ends the shared connection within a minute, and with it every call on
            # it, before ssh's 120 s command timeout: a poller says the outage while the host is still gone.
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=4",
            "-T",
            "-x",
            "-a",
        ]

    def rsync_args(self, remote_rsync: str = "rsync") -> list[str]:
        """Options that make ``rsync`` use this transport's connection: ``-e 'ssh ...'`` and ``--rsync-path``.

        Call :meth:`check` first so the connection is up (and paced) before rsync rides on it.
        """
        rsh = " ".join(shlex.quote(a) for a in [self.ssh, *self.ssh_options()])
        return ["-e", rsh, f"--rsync-path={remote_rsync}"]

    def _ssh_argv(self, remote: str) -> list[str]:
        return [self.ssh, *self.ssh_options(), self.alias, remote]

    # -- running ----------------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result:
        argv = [str(a) for a in argv]
        full = self._ssh_argv(remote_command(argv, self.env, self.setup))
        timeout = timeout if timeout is not None else self.default_timeout
        with self._lock:
            if self._gate(full):  # a new connection: one at a time, so the calls waiting behind it reuse it
                return self._judge(full, self._exec(full, input, timeout))
        proc = self._exec(full, input, timeout)
        with self._lock:
            return self._judge(full, proc)

    def check(self) -> None:
        """Run ``true`` on the login host; raise :class:`TransportError` (with ssh's message) if that fails."""
        res = self.run(["true"])
        if not res.ok:
            raise TransportError(
                f"ssh {self.alias}: `true` exited {res.returncode}: {_last_line(res.stderr)}",
                res.argv,
                hint="the remote login shell or a remote_setup line fails",
            )

    def master_running(self) -> bool:
        """Whether the shared connection is up (asks the local control socket; no network)."""
        argv = [self.ssh, *self.ssh_options(), "-O", "check", self.alias]
        try:
            return subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def close(self) -> None:
        """Stop the shared connection (``ssh -O exit``); a no-op when it is not up."""
        argv = [self.ssh, *self.ssh_options(), "-O", "exit", self.alias]
        try:
            subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- politeness -------------------------------------------------------------------------------------
    def _gate(self, full: list[str]) -> bool:
        """Refuse while backing off; space new connection attempts ``min_interval_s`` apart.

        Returns whether this call will open a new connection (the shared one is not up).
        """
        now = self.clock()
        if self._blocked_until is not None:
            if now < self._blocked_until:
                wait = self._blocked_until - now
                raise SSHBackingOff(
                    f"ssh {self.alias}: not connecting for another {wait:.0f}s after the last attempt failed: "
                    f"{self._last_error}",
                    full,
                    hint=f"roach retries once after {self.backoff_s:.0f}s so as not to storm the login host; "
                    f"check `ssh {self.alias} true` yourself meanwhile",
                    retry_at=self._blocked_until,
                )
            self._blocked_until = None  # the backoff is over: exactly one attempt may go out
        if self.master_running():
            return False  # reusing the shared connection costs the host nothing
        if self._last_attempt is not None:
            wait = self._last_attempt + self.min_interval_s - now
            if wait > 0:
                self.sleep(wait)
        self._last_attempt = self.clock()
        return True

    def _exec(self, full: list[str], input: str | bytes | None, timeout: float) -> subprocess.CompletedProcess:
        binary = isinstance(input, bytes)
        try:
            return subprocess.run(
                full,
                input=input,
                capture_output=True,
                text=not binary,
                timeout=timeout,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise TransportError(
                f"command not found: {self.ssh}",
                full,
                hint="install the OpenSSH client (Debian: apt-get install openssh-client)",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TransportError(
                f"ssh {self.alias}: command timed out after {exc.timeout:.0f}s: {full[-1]}",
                full,
                hint="the login host or its Slurm controller may be overloaded; try again later",
            ) from exc
        except OSError as exc:
            raise TransportError(f"could not run {self.ssh}: {exc}", full) from exc

    def _judge(self, full: list[str], proc: subprocess.CompletedProcess) -> Result:
        out, err = proc.stdout, proc.stderr
        if isinstance(out, bytes):
            out, err = out.decode(errors="replace"), err.decode(errors="replace")
        if proc.returncode == SSH_FAILED:
            if not err.strip() and not self.master_running():
                # The shared connection died under the command (LogLevel=ERROR keeps ssh quiet about it).
                err = "Connection closed by remote host (the shared connection dropped)"
            self._raise_for_ssh(full, err)
        return Result(tuple(full), proc.returncode, out, err)

    def _raise_for_ssh(self, full: list[str], err: str) -> None:
        """Turn ssh's own failures (exit 255 and its message) into roach errors; else it was the command's 255."""
        line = _last_line(err)
        where = f"ssh {self.alias}" + (f" (config {self.config_file})" if self.config_file else "")
        if re.search(_AUTH, err):
            raise TransportError(
                f"{where}: authentication failed: {line}",
                full,
                hint="roach never prompts (BatchMode=yes): load your key into ssh-agent or name it "
                f"with IdentityFile for this Host; `ssh -o BatchMode=yes {self.alias} true` "
                "must work without a prompt",
            )
        if re.search(_HOSTKEY, err):
            raise TransportError(
                f"{where}: host key not accepted: {line}",
                full,
                hint=f"run `ssh {self.alias} true` once by hand to check and accept its host key",
            )
        if re.search(_CONNECT, err):
            self._last_error = line
            self._blocked_until = self.clock() + self.backoff_s
            if re.search(r"Could not resolve hostname|Name or service not known", err):
                cfg = f"-F {self.config_file} " if self.config_file else ""
                hint = (
                    f"is {self.alias!r} a Host in {self.config_file or '~/.ssh/config'}? "
                    f"`ssh -G {cfg}{self.alias}` shows what it resolves to"
                )
            else:
                hint = (
                    f"the login host could not be reached or dropped the connection; roach tries once more "
                    f"after {self.backoff_s:.0f}s, never in a tight loop"
                )
            raise SSHConnectError(f"{where}: cannot connect: {line}", full, hint, retry_at=self._blocked_until)
        if re.search(_CONFIG, err):
            raise TransportError(
                f"{where}: ssh configuration error: {line}", full, hint="fix the ssh config file named in the message"
            )
        # Otherwise the remote command itself exited 255: a normal result for the caller to judge.
