"""A transport that runs nothing: it answers each command from a handler and records every call.

Like httpx's ``MockTransport``: code under test takes it wherever it takes a :class:`Transport` (a
``SlurmClient``, a ``ClusterFS``, ``record_finals``), and a test then asserts on what was asked::

    t = MockTransport({"squeue": recorded_output, ("scontrol", "release"): (1, "", "Access denied")})
    SlurmClient(t).squeue()
    assert t.argvs[0][0] == "squeue"

A handler is either a callable ``handler(argv, input) -> answer`` (``argv`` a tuple of str), or a mapping
from a command prefix (a tuple, or a string split on whitespace) to an answer, the longest prefix that
matches winning. An answer is a :class:`Result` (returned as is), ``(returncode, stdout, stderr)``, a
string (stdout of a command that exited 0), or an exception, which is raised (a :class:`TransportError`
plays a host that cannot be reached). A callable that returns ``None``, or a command no key matches,
goes to ``inner`` (a real transport: the mock then records and passes through, overriding only what the
handler answers), or fails the test with :class:`UnexpectedCommand` when there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from roach.errors import TransportError
from roach.scheduler.transport import Result, Transport

Answer = Result | tuple[int, str, str] | str | BaseException
Handler = Callable[[tuple[str, ...], str | bytes | None], Answer | None]
Prefix = str | tuple[str, ...]


class UnexpectedCommand(AssertionError):
    """A command the handler has no answer for (and no inner transport to pass it to)."""


@dataclass(frozen=True)
class Call:
    """One command the transport was asked to run."""

    argv: tuple[str, ...]
    input: str | bytes | None
    timeout: float | None


def _prefix(key: Prefix) -> tuple[str, ...]:
    return tuple(key.split()) if isinstance(key, str) else tuple(key)


class MockTransport:
    """A :class:`Transport` answering from ``handler`` (see the module's docstring); ``calls`` records each run."""

    def __init__(self, handler: Handler | Mapping[Prefix, Answer] | None = None, *, inner: Transport | None = None):
        if handler is not None and not callable(handler):
            table = sorted(((_prefix(k), v) for k, v in handler.items()), key=lambda kv: -len(kv[0]))
            handler = self._table(table)
        self._handler = handler
        self.inner = inner
        self.calls: list[Call] = []

    @classmethod
    def replay(cls, answers: Iterable[Answer]) -> MockTransport:
        """Answers the n-th command with the n-th answer, whatever it is; one command more is unexpected."""
        queue = list(answers)

        def next_answer(argv: tuple[str, ...], _input: str | bytes | None) -> Answer:
            if not queue:
                raise UnexpectedCommand(f"no answer left for command {list(argv)}")
            return queue.pop(0)

        return cls(next_answer)

    @staticmethod
    def _table(table: list[tuple[tuple[str, ...], Answer]]) -> Handler:
        def lookup(argv: tuple[str, ...], _input: str | bytes | None) -> Answer | None:
            return next((answer for prefix, answer in table if argv[: len(prefix)] == prefix), None)

        return lookup

    def run(self, argv: Sequence[str], *, input: str | bytes | None = None, timeout: float | None = None) -> Result:
        args = tuple(str(a) for a in argv)  # as LocalTransport and SSHTransport take them
        self.calls.append(Call(args, input, timeout))
        if not args:
            raise TransportError("empty command", list(args))
        answer = self._handler(args, input) if self._handler is not None else None
        if answer is None:
            if self.inner is None:
                raise UnexpectedCommand(f"unexpected command {list(args)}")
            return self.inner.run(args, input=input, timeout=timeout)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Result):
            return answer
        if isinstance(answer, str):
            return Result(args, 0, answer, "")
        returncode, stdout, stderr = answer
        return Result(args, returncode, stdout, stderr)

    @property
    def argvs(self) -> list[tuple[str, ...]]:
        """The argv of every call, in order."""
        return [c.argv for c in self.calls]

    def commands(self) -> list[str]:
        """The program of every call (``argv[0]``), in order."""
        return [c.argv[0] for c in self.calls if c.argv]
