"""L1: the warm standby path beside a direct link (``standby-v1``, two txdilation peers).

While the link is direct, a :class:`StandbyKeeper` keeps a second connection through the relay
handshaken and idle: a standby connector (``Purpose.STANDBY``) makes it, and it is held as a
standby ``SelectedLink`` (keepalives only, one record each way per
``selected.STANDBY_PING_INTERVAL``). While it is held, the link's dead-path detector uses its
short, round-trip-based timeouts (``standby_ready``); when the link dies the Manager moves to
it (:meth:`take`) in the same generation, make-before-break. One that goes is made again
later (:data:`RETRY_DELAYS`) while the link is direct (docs/reliability.md).

Invariants: at most one standby and one standby connector at a time, none after :meth:`drop`
(until the next :meth:`want`); both sides make theirs when their link became direct, within a
round trip of each other (the relay pairs them); never with a stock peer, over Tor, or
without a relay.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txdilation.path.selected_link import SelectedLink
from txdilation.selection.connector import Connector
from txdilation.selection.hints import Hint, RelayV1Hint

__all__ = ["MAKE_TIMEOUT", "RETRY_DELAYS", "StandbyKeeper"]

#: seconds before a standby that went (or could not be made) is made again, then doubling
RETRY_DELAYS = (2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
#: seconds a standby connector may take before it is given up (and tried again later)
MAKE_TIMEOUT = 15.0

_log = Logger()


class StandbyKeeper:
    """See the module docstring.

    :param reactor: the clock for the retries.
    :param make: builds and starts a standby connector (given the peer's relay hints).
    """

    def __init__(self, reactor: IReactorTime, make: Callable[[list[Hint]], Connector]) -> None:
        self._reactor = reactor
        self._make = make
        self._link: SelectedLink | None = None  # the direct link it stands by
        self._peer_relays: list[Hint] = []
        self.standby: SelectedLink | None = None
        self._maker: Connector | None = None
        self._retry: IDelayedCall | None = None
        self._deadline: IDelayedCall | None = None
        self._failures = 0

    @property
    def ready(self) -> bool:
        """A standby is held: the link may be left for it at once."""
        return self.standby is not None

    def want(self, link: SelectedLink, peer_hints: list[Hint]) -> None:
        """``link`` (direct) carries the wormhole now: keep a standby beside it."""
        self._link = link
        self._peer_relays = [h for h in peer_hints if isinstance(h, RelayV1Hint)]
        if self.standby is not None:
            link.dead_path.standby_ready = True
            return
        if self._maker is None and self._retry is None:
            self._start()

    def got(self, standby: SelectedLink) -> None:
        """The standby connector selected ``standby``: hold it."""
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline, self._maker = None, None
        if self._link is None:  # dropped meanwhile
            standby.abort()
            return
        if self.standby is not None:
            self.standby.abort()
        self.standby = standby
        self._failures = 0
        self._link.dead_path.standby_ready = True
        _log.info("standby path ready: {desc}", desc=standby.description)

    def lost(self, link: SelectedLink) -> bool:
        """``link`` ended; True if it was the standby (made again later)."""
        if link is not self.standby:
            return False
        self.standby = None
        if self._link is not None:
            self._link.dead_path.standby_ready = False
            self._later()
        return True

    def take(self) -> SelectedLink | None:
        """The standby, handed over to carry the wormhole (None if there is none)."""
        standby, self.standby = self.standby, None
        self._link = None
        self._stop_maker()
        self._cancel_retry()
        return standby

    def network_changed(self) -> None:
        """Our addresses changed: the standby is dropped at once if its address is gone (the
        link is never moved to it then), else probed."""
        if self.standby is not None and self.standby.network_changed():
            self.lost(self.standby)

    def drop(self) -> None:
        """No standby any more: the link is not direct, or is going (idempotent)."""
        self._link = None
        self._stop_maker()
        self._cancel_retry()
        standby, self.standby = self.standby, None
        if standby is not None:
            standby.abort()

    # --- internals ---

    def _start(self) -> None:
        self._retry = None
        if self._link is None:
            return
        self._maker = self._make(self._peer_relays)
        self._deadline = self._reactor.callLater(MAKE_TIMEOUT, self._maker_gave_up)

    def _maker_gave_up(self) -> None:
        self._deadline = None
        self._stop_maker()
        self._later()

    def _later(self) -> None:
        if self._retry is not None or self._link is None:
            return
        self._stop_maker()
        delay = RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]
        self._failures += 1
        self._retry = self._reactor.callLater(delay, self._start)

    def _stop_maker(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        maker, self._maker = self._maker, None
        if maker is not None:
            maker.events.stop()

    def _cancel_retry(self) -> None:
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
