"""Meeting again after a meeting failed by itself, later and later (no I/O but the timer).

Layer: pairing glue. The first retry comes after :data:`FIRST` seconds, each next one 1.5 times
later, at most :data:`MAXIMUM`; :meth:`Backoff.reset` (a meeting succeeded) starts over.
Invariant: at most one retry is scheduled at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["FIRST", "MAXIMUM", "Backoff"]

FIRST: Final = 1.0
MAXIMUM: Final = 60.0


class Backoff:
    """See the module docstring."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._failures = 0
        self._call: IDelayedCall | None = None

    @property
    def waiting(self) -> bool:
        """A retry is scheduled."""
        return self._call is not None

    def later(self, action: Callable[[], object]) -> None:
        """One more failure: run ``action`` after the next delay (unless one is scheduled)."""
        self._failures += 1
        if self._call is not None:
            return

        def run() -> None:
            self._call = None
            action()

        delay = min(MAXIMUM, FIRST * 1.5 ** (self._failures - 1))
        self._call = self._clock.callLater(delay, run)

    def reset(self) -> None:
        """A success: the next failure waits :data:`FIRST` again."""
        self._failures = 0

    def cancel(self) -> None:
        """Drop the scheduled retry."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()
