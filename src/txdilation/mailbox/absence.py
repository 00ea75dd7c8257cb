"""L1: how long to wait for a peer that says nothing (:class:`PeerAbsence`).

One per dilated wormhole: while we have no connection to the peer, it counts the time during
which our own mailbox connection is up and the peer says nothing in the mailbox; after
``timeout`` seconds of that it calls ``on_absent`` (the peer is presumed gone: it closed its
wormhole without telling us, or crashed). Hearing from the peer restarts the count; our mailbox
going down pauses it (restarting in full once it is back), so our own outage never makes us
give up. ``timeout=None`` disables it. A plain object around one ``IDelayedCall``; time comes
from the reactor passed in.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime

from txdilation.wire.timer import RestartableTimer

__all__ = ["PeerAbsence"]


class PeerAbsence:
    """Gives up on a peer that stays silent while we cannot reach it (module docstring).

    :param clock: the reactor's time.
    :param timeout: seconds of counted silence before ``on_absent``; None: never.
    :param on_absent: called at most once.
    """

    def __init__(
        self, clock: IReactorTime, timeout: float | None, on_absent: Callable[[], None]
    ) -> None:
        self._timeout = timeout
        self._on_absent = on_absent
        self._waiting = False
        self._mailbox_up = True
        self._done = False
        self._timer = RestartableTimer(clock, self._expired)

    @property
    def counting(self) -> bool:
        """True while the countdown runs."""
        return self._timer.pending

    def waiting_for_peer(self, waiting: bool) -> None:
        """We lost (True) or got (False) a connection to the peer."""
        self._waiting = waiting
        self._rearm()

    def mailbox_connected(self, up: bool) -> None:
        """Our own mailbox connection went up or down."""
        if up != self._mailbox_up:
            self._mailbox_up = up
            self._rearm()

    def heard_from_peer(self) -> None:
        """The peer sent something: start counting afresh."""
        if self._timer.pending:
            self._rearm()

    def stop(self) -> None:
        """Never call ``on_absent`` (idempotent)."""
        self._done = True
        self._rearm()

    def _rearm(self) -> None:
        self._timer.cancel()
        if self._timeout is not None and self._waiting and self._mailbox_up and not self._done:
            self._timer.start(self._timeout)

    def _expired(self) -> None:
        self._done = True
        self._on_absent()
