"""L4 inbound: one route per subchannel, as aioquic keeps one receiver per stream.

A :class:`Route` is what :class:`~txdilation.durable.inbound.Inbound` knows of one subchannel:
its life (:class:`RouteState`: PENDING, ATTACHED, PAUSED, DISCARDING, FORGOTTEN), what it holds
back and the drain call that delivers it. What all routes hold is one :class:`Holdings`, which
only the routes change: ``pending`` (nobody listens yet; bounded by ``max_pending_open_bytes``)
and ``buffered`` (paused or draining; past ``max_buffered_inbound_bytes`` reading pauses).

Invariants: a route holds data only while PENDING, PAUSED, or ATTACHED with items still to
deliver; its held bytes are counted in ``pending`` while PENDING and in ``buffered`` otherwise,
and in neither once FORGOTTEN; items are delivered in the order they arrived, the peer's CLOSE
(held as ``None``) last; a DISCARDING route holds nothing but that CLOSE; a FORGOTTEN route
delivers nothing more (its drain call is cancelled).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Protocol as TypingProtocol

from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

__all__ = [
    "ATTACHED",
    "DISCARDING",
    "FORGOTTEN",
    "PAUSED",
    "PENDING",
    "Delivery",
    "Holdings",
    "Route",
    "RouteState",
]


class Delivery(TypingProtocol):
    """What a route delivers to: a subchannel, seen from below."""

    def start(self) -> None:
        "Connect the protocol (makeConnection); may pause, close or fail reentrantly."

    def remote_data(self, data: bytes) -> None:
        "One DATA record's payload."

    def remote_close(self) -> None:
        "The peer's CLOSE."

    def abandon(self, reason: Failure) -> None:
        "The wormhole closed (Inbound only hands these back from stop())."


class RouteState(Enum):
    """Where a route is in its life (docs/module-notes.md draws its transitions)."""

    PENDING = "pending"  # nobody listens on its name yet: everything is held
    ATTACHED = "attached"  # delivered to its subchannel (held items first)
    PAUSED = "paused"  # its subchannel paused: everything is held
    DISCARDING = "discarding"  # its subchannel wants no more data (a CLOSE still goes)
    FORGOTTEN = "forgotten"  # gone


# Module-level names for the states: the per-record path compares with these (an Enum's class
# attribute lookup costs several times a global's).
PENDING, ATTACHED, PAUSED, DISCARDING, FORGOTTEN = RouteState


@dataclass(slots=True)
class Holdings:
    """What every route holds back together, in bytes (see the module docstring)."""

    pending: int = 0
    buffered: int = 0


class Route:
    """One subchannel's inbound route (see the module docstring)."""

    __slots__ = (
        "_holdings",
        "delivery",
        "drain_call",
        "held",
        "held_bytes",
        "scid",
        "state",
        "subprotocol",
    )

    def __init__(
        self, scid: int, subprotocol: str, holdings: Holdings, delivery: Delivery | None = None
    ) -> None:
        self.scid = scid
        self.subprotocol = subprotocol
        self._holdings = holdings
        #: what it delivers to (None while PENDING)
        self.delivery = delivery
        self.state = PENDING if delivery is None else ATTACHED
        #: what waits for delivery (None marks the peer's CLOSE); made on first use, because
        #: an empty deque costs ~600 bytes and most subchannels never hold anything (read it,
        #: change it only through the methods below)
        self.held: deque[bytes | None] | None = None
        self.held_bytes = 0
        self.drain_call: IDelayedCall | None = None
        if delivery is None:
            holdings.pending += self.pending_cost

    def __repr__(self) -> str:
        return f"<Route {self.scid} {self.subprotocol!r} {self.state.value}>"

    @property
    def pending_cost(self) -> int:
        """What it counts in ``Holdings.pending`` while PENDING: its OPEN and what it holds."""
        return 9 + len(self.subprotocol.encode("utf-8")) + self.held_bytes

    @property
    def holds_all(self) -> bool:
        """Everything that comes is held (PENDING or PAUSED), not delivered."""
        return self.state is PENDING or self.state is PAUSED

    @property
    def delivers(self) -> bool:
        """What it holds is delivered (ATTACHED, or DISCARDING: the peer's CLOSE)."""
        return self.state is ATTACHED or self.state is DISCARDING

    @property
    def holding(self) -> bool:
        """Something waits for delivery (data, or the peer's CLOSE)."""
        return bool(self.held)

    @property
    def holds_close(self) -> bool:
        """The last item it holds is the peer's CLOSE."""
        return bool(self.held) and self.held[-1] is None  # type: ignore[index]

    def hold(self, item: bytes | None) -> None:
        """Hold ``item`` (DATA's payload, or None for the peer's CLOSE) behind what it holds."""
        if self.held is None:
            self.held = deque()
        self.held.append(item)
        if item is not None:
            self.held_bytes += len(item)
            if self.state is PENDING:
                self._holdings.pending += len(item)
            else:
                self._holdings.buffered += len(item)

    def attach(self, delivery: Delivery) -> None:
        """Someone listens now (PENDING -> ATTACHED): what it holds counts as buffered."""
        self._holdings.pending -= self.pending_cost
        self._holdings.buffered += self.held_bytes
        self.delivery = delivery
        self.state = ATTACHED

    def attached(self) -> Delivery:
        """The subchannel it delivers to (attached: ATTACHED, PAUSED or DISCARDING)."""
        delivery = self.delivery
        assert delivery is not None, f"route {self.scid} is not attached"
        return delivery

    def pause(self) -> None:
        """Hold everything from now on (not once it discards)."""
        if self.state is ATTACHED:
            self.state = PAUSED

    def resume(self) -> None:
        """Deliver again (what it holds, on its drain)."""
        if self.state is PAUSED:
            self.state = ATTACHED

    def discard(self) -> None:
        """Drop what it holds and any later DATA; the peer's CLOSE, held or not, still goes."""
        closed = self.holds_close
        self._holdings.buffered -= self.held_bytes
        self.held_bytes = 0
        self.held = deque([None]) if closed else None
        self.state = DISCARDING

    def forget(self) -> None:
        """Gone: nothing it holds is delivered or counted any more."""
        if self.state is PENDING:
            self._holdings.pending -= self.pending_cost
        elif self.state is not FORGOTTEN:
            self._holdings.buffered -= self.held_bytes
        self.held = None
        self.held_bytes = 0
        self.state = FORGOTTEN
        if self.drain_call is not None:
            self.drain_call.cancel()
            self.drain_call = None

    def drain(self) -> None:
        """Deliver what it holds, in order, until it pauses or is forgotten."""
        while self.holding and self.delivers:
            assert self.delivery is not None
            item = self.take()
            if item is None:
                self.delivery.remote_close()
            else:
                self.delivery.remote_data(item)

    def take(self) -> bytes | None:
        """The next item to deliver (it leaves the holdings); only while :attr:`holding`."""
        assert self.held is not None
        item = self.held.popleft()
        if item is not None:
            self.held_bytes -= len(item)
            self._holdings.buffered -= len(item)
        return item
