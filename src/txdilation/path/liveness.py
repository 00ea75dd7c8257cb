"""L3: is the selected link alive? PINGs, PONGs and the round-trip time.

:class:`Liveness` (both roles, one per selected link): it ticks every quarter of the ping
interval, sends a PING every fourth tick (the first one a quarter interval after selection),
and calls ``on_silent`` once six ticks in a row saw nothing arrive (between 1.5 and 1.75
intervals of silence), so a dead path is left within 2 x ping_interval, without waiting for
TCP's own timeout. Any record counts as a sign of life (the owner bumps ``received``), and a
connection whose reading we paused ourselves is never called silent.

:class:`PingTracker` (one per dilated wormhole, shared by its successive links): the ids of our
own PINGs with their send times (for the RTT), and the application's PINGs (stock's
``Manager.send_ping(ping_id, on_pong)``), which stay outstanding across links as in stock.

Both are plain objects; time comes from the reactor passed in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txdilation.wire.reasons import Cause, LinkLoss

__all__ = [
    "DEFAULT_PING_INTERVAL",
    "SILENCE",
    "SILENT_TICKS",
    "TICKS_PER_INTERVAL",
    "Liveness",
    "PingTracker",
    "normalize_ping_interval",
]

TICKS_PER_INTERVAL = 4
SILENT_TICKS = 6  # 1.5 ping intervals
DEFAULT_PING_INTERVAL = 30.0

SILENCE: Final = LinkLoss(Cause.SILENT, "peer silent for 1.5 ping intervals")
"""Why a link that :class:`Liveness` found silent is given up."""


def normalize_ping_interval(ping_interval: float | int | None) -> float:
    """``None``/0 mean the default (30 s, as stock); ints are accepted; negatives are errors."""
    if ping_interval is None or ping_interval == 0:
        return DEFAULT_PING_INTERVAL
    if isinstance(ping_interval, bool) or not isinstance(ping_interval, int | float):
        raise TypeError(f"ping_interval must be a number, not {ping_interval!r}")
    if ping_interval < 0:
        raise ValueError(f"ping_interval must be positive, not {ping_interval!r}")
    return float(ping_interval)


_log = Logger()


class Liveness:
    """Pings the peer and notices a silent link (see the module docstring).

    :param clock: the reactor's time.
    :param interval: the ping interval in seconds.
    :param send_ping: called with nothing to send one PING.
    :param on_silent: called once when the link has been silent too long (the ticking stops
        then).
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
        """Seconds of silence after which the link is given up (at the latest)."""
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


class PingTracker:
    """Our PINGs (for the RTT) and the application's (stock's ``send_ping``).

    Invariants: our ids count up from 0 (mod 2**32), the last 16 are remembered with their send
    times; an application ping id is outstanding from ``app_ping`` until its PONG, and an id
    still outstanding is refused (stock asserts); ``on_pong`` exceptions are logged.
    """

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._next = 0
        self._ours: deque[tuple[bytes, float]] = deque(maxlen=16)
        self._theirs: dict[bytes, tuple[Callable[[float], object] | None, float]] = {}
        self.last_rtt: float | None = None

    def next_ping(self) -> bytes:
        """The id of our next PING (its send time is remembered)."""
        ping_id = (self._next % 2**32).to_bytes(4, "big")
        self._next += 1
        self._ours.append((ping_id, self._clock.seconds()))
        return ping_id

    def app_ping(self, ping_id: bytes, on_pong: Callable[[float], object] | None) -> bytes:
        """Register the application's PING ``ping_id`` (stock's ``send_ping`` rules).

        :raises TypeError: when ``ping_id`` is not bytes (stock's record encoding fails the same
            way: fowld passes an int, and stock reports that error to it).
        :raises ValueError: when ``ping_id`` is not 4 bytes long.
        :raises AssertionError: when ``ping_id`` still waits for its PONG (as stock).
        """
        if not isinstance(ping_id, bytes):
            raise TypeError(f"can't concat {type(ping_id).__name__} to bytes")
        if len(ping_id) != 4:
            raise ValueError(f"ping_id must be 4 bytes, not {len(ping_id)}")
        if ping_id in self._theirs:
            raise AssertionError("Duplicate ping_id")
        self._theirs[ping_id] = (on_pong, self._clock.seconds())
        return ping_id

    def pong(self, ping_id: bytes) -> float | None:
        """A PONG arrived: call the application's ``on_pong(rtt)`` if it was its ping, and
        return the RTT if it answered one of ours (None otherwise)."""
        now = self._clock.seconds()
        theirs = self._theirs.pop(ping_id, None)
        if theirs is not None and theirs[0] is not None:
            try:
                theirs[0](now - theirs[1])
            except Exception:
                _log.failure("the on_pong callback given to send_ping() raised")
        for sent_id, sent_at in self._ours:
            if sent_id == ping_id:
                self.last_rtt = now - sent_at
                return self.last_rtt
        return None
