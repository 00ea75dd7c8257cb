"""L1: the ``DilationStatus`` an application's ``on_status_update`` sees.

:class:`StatusReporter` holds the current status (stock's ``wormhole._status.DilationStatus``)
and reports every change to the callback given to ``dilate()``.

Invariants (what consumers such as fowl rely on): ``generation`` never decreases;
``peer_connection`` only moves NoPeer -> Connecting -> Connected <-> Reconnecting ... ->
Stopped, and nothing changes it once it is ``StoppedPeer``; ``hints`` only grow (the union of
every hint tried, as stock reports them); an exception raised by the callback is logged, never
propagated (stock's breaks its state machine); every status is a :class:`TxdilationStatus`:
stock's class, naming the implementation and its version, and otherwise indistinguishable
from stock's (equality, hash, repr, attrs fields).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from wormhole._status import (
    Connected,
    ConnectedPeer,
    ConnectingPeer,
    DilationHint,
    DilationStatus,
    PeerConnection,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)

from txdilation._version import IMPLEMENTATION, __version__

__all__ = ["StatusReporter", "TxdilationStatus", "mailbox_up"]

_log = Logger()


def mailbox_up(status: WormholeStatus) -> bool:
    """Whether this wormhole status says our mailbox (rendezvous) connection is up."""
    return isinstance(status.mailbox_connection, Connected)


class TxdilationStatus(DilationStatus):  # type: ignore[misc]
    """Stock's ``DilationStatus`` as txdilation reports it: ``status.implementation`` is
    ``"txdilation"`` and ``status.implementation_version`` its version, so an application can
    tell (``getattr(status, "implementation", "magic-wormhole")``). No field is added: it
    equals, hashes, prints, converts (``attrs.asdict``) and evolves as stock's does."""

    __slots__ = ()
    implementation = IMPLEMENTATION
    implementation_version = __version__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DilationStatus):
            return NotImplemented
        return _fields(self) == _fields(other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = DilationStatus.__hash__

    def __repr__(self) -> str:
        return repr(DilationStatus(*_fields(self)))


def _fields(status: DilationStatus) -> tuple[Any, ...]:
    return tuple(getattr(status, a.name) for a in attrs.fields(DilationStatus))


class StatusReporter:
    """The current ``DilationStatus`` and its reporting (see the module docstring).

    :param callback: ``on_status_update`` (None: nobody listens).
    :param mailbox: the wormhole's status when ``dilate()`` was called.
    :param clock: the reactor's time (status times are its seconds).
    :param ping_interval: a connected peer "expires" two intervals after it was last heard.
    """

    def __init__(
        self,
        callback: Callable[[DilationStatus], object] | None,
        mailbox: WormholeStatus | None,
        clock: IReactorTime,
        ping_interval: float,
    ) -> None:
        self._callback = callback
        self._clock = clock
        self._ping_interval = ping_interval
        self._hints: set[DilationHint] = set()
        self.current: DilationStatus = TxdilationStatus(
            mailbox=mailbox or WormholeStatus(), generation=0
        )

    def mailbox(self, status: WormholeStatus) -> None:
        """Our mailbox connection's status changed."""
        self._update(mailbox=status)

    def hints(self, hints: Iterable[DilationHint]) -> None:
        """These hints are being tried."""
        self._hints.update(hints)
        self._update(hints=set(self._hints))

    def connecting(self, generation: int) -> None:
        self._peer(ConnectingPeer(int(self._clock.seconds())), generation)

    def reconnecting(self, generation: int) -> None:
        self._peer(ReconnectingPeer(int(self._clock.seconds())), generation)

    def connected(self, generation: int, description: str) -> None:
        now = self._clock.seconds()
        expires = int(now + 2 * self._ping_interval)
        self._peer(ConnectedPeer(int(now), expires, description), generation)

    def attempted(self) -> None:
        """A new attempt while (re)connecting: ``last_attempt`` is now (stock's own field)."""
        pc = self.current.peer_connection
        if isinstance(pc, ConnectingPeer | ReconnectingPeer):
            self._update(peer_connection=type(pc)(int(self._clock.seconds())))

    def stopped(self) -> None:
        self._peer(StoppedPeer(), self.current.generation)

    def alive(self) -> None:
        """The peer was just heard from (PING or PONG): push back ``expires_at``."""
        pc = self.current.peer_connection
        if isinstance(pc, ConnectedPeer):
            expires = self._clock.seconds() + 2 * self._ping_interval
            self._update(
                peer_connection=ConnectedPeer(pc.connected_at, expires, pc.hint_description)
            )

    def refresh(self) -> None:
        """Report the current status again (something shown beside it changed: the port
        mapping)."""
        self._update()

    def _peer(self, peer: PeerConnection, generation: int) -> None:
        self._update(peer_connection=peer, generation=generation)

    def _update(self, **changes: Any) -> None:
        current = self.current
        if isinstance(current.peer_connection, StoppedPeer):
            changes.pop("peer_connection", None)
        fields = {
            "mailbox": current.mailbox,
            "generation": current.generation,
            "peer_connection": current.peer_connection,
            "hints": current.hints,
            **changes,
        }
        fields["generation"] = max(fields["generation"], current.generation)
        self.current = TxdilationStatus(**fields)
        if self._callback is not None:
            try:
                self._callback(self.current)
            except Exception:
                _log.failure("on_status_update callback raised")
