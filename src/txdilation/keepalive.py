"""L1 timers: liveness of the selected connection, and how long to wait for a silent peer.

:class:`Liveness` (both roles, one per selected connection): it ticks every quarter of the
ping interval, sends a PING every fourth tick (the first one a quarter interval after
selection), and calls ``on_silent`` once six ticks in a row saw nothing arrive (between 1.5
and 1.75 intervals of silence), so a dead path is left within 2 x ping_interval, without
waiting for TCP's own timeout. Any record counts as a sign of life (the owner bumps
``received``), and a connection whose reading we paused ourselves is never called silent.

:class:`PeerAbsence` (one per dilated wormhole): while we have no connection to the peer, it
counts the time during which our own mailbox connection is up and the peer says nothing in the
mailbox; after ``timeout`` seconds of that it calls ``on_absent`` (the peer is presumed gone:
it closed its wormhole without telling us, or crashed). Hearing from the peer restarts the
count; our mailbox going down pauses it (restarting in full once it is back), so our own
outage never makes us give up. ``timeout=None`` disables it.

Both are plain objects around one ``IDelayedCall``; time comes from the reactor passed in.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["SILENT_TICKS", "TICKS_PER_INTERVAL", "Liveness", "PeerAbsence"]

TICKS_PER_INTERVAL = 4
SILENT_TICKS = 6  # 1.5 ping intervals


class Liveness:
    """Pings the peer and notices a silent connection (see the module docstring).

    :param clock: the reactor's time.
    :param interval: the ping interval in seconds.
    :param send_ping: called with nothing to send one PING.
    :param on_silent: called once when the connection has been silent too long (the ticking
        stops then).
    :param reading_paused: returns True while we deliberately stopped reading (not silence).
    """

    def __init__(
        self,
        clock: IReactorTime,
        interval: float,
        send_ping: Callable[[], None],
        on_silent: Callable[[], None],
        reading_paused: Callable[[], bool],
    ) -> None:
        self._clock = clock
        self._tick_seconds = interval / TICKS_PER_INTERVAL
        self._send_ping = send_ping
        self._on_silent = on_silent
        self._reading_paused = reading_paused
        self.received = 0  # bumped by the owner for every record that arrives
        self._seen = 0
        self._idle_ticks = 0
        self._tick_number = 0
        self._timer: IDelayedCall | None = clock.callLater(self._tick_seconds, self._tick)

    @property
    def silence_limit(self) -> float:
        """Seconds of silence after which the connection is given up (at the latest)."""
        return (SILENT_TICKS + 1) * self._tick_seconds

    def _tick(self) -> None:
        self._timer = None
        if self.received != self._seen or self._reading_paused():
            self._seen = self.received
            self._idle_ticks = 0
        else:
            self._idle_ticks += 1
        if self._idle_ticks >= SILENT_TICKS:
            self._on_silent()
            return
        if self._tick_number % TICKS_PER_INTERVAL == 0:
            self._send_ping()
        self._tick_number += 1
        self._timer = self._clock.callLater(self._tick_seconds, self._tick)

    def stop(self) -> None:
        """Stop ticking (idempotent)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


class PeerAbsence:
    """Gives up on a peer that stays silent while we cannot reach it (module docstring).

    :param clock: the reactor's time.
    :param timeout: seconds of counted silence before ``on_absent``; None: never.
    :param on_absent: called at most once.
    """

    def __init__(
        self, clock: IReactorTime, timeout: float | None, on_absent: Callable[[], None]
    ) -> None:
        self._clock = clock
        self._timeout = timeout
        self._on_absent = on_absent
        self._waiting = False
        self._mailbox_up = True
        self._done = False
        self._timer: IDelayedCall | None = None

    @property
    def counting(self) -> bool:
        """True while the countdown runs."""
        return self._timer is not None

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
        if self._timer is not None:
            self._rearm()

    def stop(self) -> None:
        """Never call ``on_absent`` (idempotent)."""
        self._done = True
        self._rearm()

    def _rearm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if self._timeout is not None and self._waiting and self._mailbox_up and not self._done:
            self._timer = self._clock.callLater(self._timeout, self._expired)

    def _expired(self) -> None:
        self._timer = None
        self._done = True
        self._on_absent()
