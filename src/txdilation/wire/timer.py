"""Shared by every layer: the one way to keep a single timer that is started, restarted and
cancelled (a check that comes again, a deadline that moves).

:class:`RestartableTimer` holds at most one pending call of its ``fire`` callable on a clock
(the reactor, or ``twisted.internet.task.Clock`` in tests).

Invariants: at most one call is pending; :meth:`RestartableTimer.start` replaces a pending one;
``fire`` runs only from the clock, once per start, and finds the timer idle (so it may start it
again); :meth:`RestartableTimer.cancel` is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["RestartableTimer"]


class RestartableTimer:
    """One pending call of ``fire`` at most (see the module docstring).

    :param clock: the reactor's time.
    :param fire: what to call when the timer expires (no arguments).
    """

    def __init__(self, clock: IReactorTime, fire: Callable[[], object]) -> None:
        self._clock = clock
        self._fire = fire
        self._call: IDelayedCall | None = None

    @property
    def pending(self) -> bool:
        """Whether a call is pending."""
        return self._call is not None

    @property
    def due(self) -> float | None:
        """When the pending call comes (the clock's seconds), or None."""
        return self._call.getTime() if self._call is not None else None

    def start(self, delay: float) -> None:
        """Call ``fire`` in ``delay`` seconds, instead of any pending call."""
        self.cancel()
        self._call = self._clock.callLater(delay, self._expired)

    def cancel(self) -> None:
        """No pending call any more (idempotent)."""
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def _expired(self) -> None:
        self._call = None
        self._fire()
