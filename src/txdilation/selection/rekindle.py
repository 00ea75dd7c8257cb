"""L3: a Follower whose stock Leader stopped trying: our hints again, and our dials again.

Stock's Leader never retries within a generation (it waits for ever in ``ConnectingPeer`` once
its first tries were lost before selection), but it does dial hints that arrive meanwhile. So
a txdilation Follower facing a stock Leader (``ConnectorSettings.rekindle``), whenever a check
finds no connection in its handshake with the peer, publishes its hints again and dials again
every hint whose dial is over (:meth:`Rekindler.start`'s ``rekindle``); its listener stays up.
The checks come :data:`REKINDLE_FIRST` seconds after the generation starts, then after twice
the last wait, up to :data:`REKINDLE_MAX` (back to :data:`REKINDLE_FIRST` after a check that
found a handshake in progress).

Invariants: one timer at most; nothing after :meth:`Rekindler.stop` (the race ended); the
owner's callbacks are only called from the timer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from twisted.internet.interfaces import IReactorTime

from txdilation.wire.timer import RestartableTimer

__all__ = ["REKINDLE_FIRST", "REKINDLE_MAX", "Rekindler"]

REKINDLE_FIRST: Final = 1.0
"""Seconds before the first check (a healthy first generation selects well before)."""
REKINDLE_MAX: Final = 4.0
"""The longest wait between two checks: a stuck stock Leader waits no longer than this."""


class Rekindler:
    """The checks of one Follower generation (see the module docstring).

    :param clock: the reactor's time.
    :param in_handshake: whether a connection of the race is in its handshake with the peer.
    :param rekindle: publish our hints again and dial again (nothing is in its handshake).
    """

    def __init__(
        self,
        clock: IReactorTime,
        in_handshake: Callable[[], bool],
        rekindle: Callable[[], None],
    ) -> None:
        self._in_handshake = in_handshake
        self._rekindle = rekindle
        self._delay = REKINDLE_FIRST
        self._timer = RestartableTimer(clock, self._check)
        self._stopped = False
        self.rekindled = 0
        """How many times the hints went out again."""

    def start(self) -> None:
        """The generation started: the first check comes in :data:`REKINDLE_FIRST` seconds."""
        if not self._stopped and not self._timer.pending:
            self._timer.start(self._delay)

    def stop(self) -> None:
        """The race ended: no more checks (idempotent)."""
        self._stopped = True
        self._timer.cancel()

    def _check(self) -> None:
        if self._stopped:
            return
        if self._in_handshake():
            self._delay = REKINDLE_FIRST
        else:
            self.rekindled += 1
            self._rekindle()
            self._delay = min(2 * self._delay, REKINDLE_MAX)
        if not self._stopped:
            self._timer.start(self._delay)
