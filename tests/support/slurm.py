"""A SlurmClient over a MockTransport that replays recorded answers, with its sleeps recorded instead of slept."""

from __future__ import annotations

from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport


def client(
    *answers: tuple[int, str, str], retries: int = 3, backoff_s: float = 1.0
) -> tuple[SlurmClient, MockTransport, list[float]]:
    """(the client, its transport answering each command with the next ``(returncode, stdout, stderr)``, the
    backoff sleeps it asked for)."""
    sleeps: list[float] = []
    transport = MockTransport.replay(answers)
    return SlurmClient(transport, retries=retries, backoff_s=backoff_s, sleep=sleeps.append), transport, sleeps
