"""The signals that tell a run to checkpoint and leave: USR1 before the wall clock, TERM on preemption.

The handler only records what arrived; the run acts on it at its next step boundary, where the state
is consistent. Libraries that install their own handlers (NCCL takes USR1) are countered by
:meth:`SignalHandler.rearm`, which the run calls every step.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


def parse_signal(name: str | int | signal.Signals) -> signal.Signals:
    """``"USR1"``, ``"SIGUSR1"`` or ``10`` as a :class:`signal.Signals`; an error lists the valid names."""
    if isinstance(name, signal.Signals):
        return name
    if isinstance(name, int):
        return signal.Signals(name)
    key = name.upper()
    key = key if key.startswith("SIG") else "SIG" + key
    try:
        return signal.Signals[key]
    except KeyError:
        valid = ", ".join(
            s.name.removeprefix("SIG") for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
        )
        raise ValueError(f"unknown signal {name!r} (valid: {valid})") from None


@dataclass
class SignalHandler:
    """Records the first checkpoint signal that arrives; ``on_catch`` is told at once (for the log)."""

    signals: tuple[signal.Signals, ...] = (signal.SIGUSR1, signal.SIGTERM)
    on_catch: Callable[[signal.Signals], None] | None = None
    clock: Callable[[], float] = time.monotonic
    caught: signal.Signals | None = None
    caught_at: float | None = None
    received: list[signal.Signals] = field(default_factory=list)

    def install(self) -> None:
        for sig in self.signals:
            signal.signal(sig, self._handle)

    def rearm(self) -> list[signal.Signals]:
        """Reinstall our handler wherever another one replaced it; returns the signals re-armed."""
        replaced = [sig for sig in self.signals if signal.getsignal(sig) != self._handle]
        for sig in replaced:
            signal.signal(sig, self._handle)
        return replaced

    def _handle(self, signum: int, frame: object) -> None:
        sig = signal.Signals(signum)
        self.received.append(sig)
        if self.caught is not None:
            return  # the first signal decides; a later TERM (Slurm ending the step) changes nothing
        self.caught, self.caught_at = sig, self.clock()
        if self.on_catch is not None:
            self.on_catch(sig)

    @classmethod
    def for_names(cls, names: Iterable[str], **kw) -> SignalHandler:
        return cls(signals=tuple(dict.fromkeys(parse_signal(n) for n in names)), **kw)
