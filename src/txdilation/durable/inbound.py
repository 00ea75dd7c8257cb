"""L4 inbound: the ACK watermark, duplicate suppression, demultiplexing and read pausing.

:class:`Inbound` receives every OPEN/DATA/CLOSE from the selected connection and routes it to
a subchannel (anything with ``remote_data``/``remote_close``, see :class:`Delivery`).

Invariants:

- every OPEN/DATA/CLOSE is acknowledged, duplicates too; ACKs are cumulative and delayed: one
  ``Ack(highest processed seqnum)`` goes out ``ack_delay`` (:data:`ACK_DELAY`, 5 ms) after the
  first record it covers, or at the end of the reactor turn in which an OPEN or CLOSE arrived,
  the DATA bytes it covers reached ``ack_threshold_bytes`` (:data:`ACK_THRESHOLD_BYTES`, 1 MiB),
  or a record arrived after ``ack_delay`` without an ACK going out (the link was quiet: a lone
  record's ACK is not delayed, so a sender timing its round trips by our ACKs, see
  ``durable.window``, measures the path, not our delay; a reply written in that turn leaves in
  the same send), whichever comes first. So a sender never waits more than ``ack_delay`` for
  an ACK, and never at all while it has ``ack_threshold_bytes`` in flight (under any sender's
  window: ours is at least ``DEFAULT_IN_FLIGHT_FLOOR``, 2 MiB, see ``durable.window``; stock
  has none). ACKs are sent only while connected: a connection lost with an ACK pending drops it
  (the peer replays what we did not acknowledge on the next connection, and that replay is
  acknowledged);
- a record is processed only if its seqnum is above the highest processed one (start -1);
- an OPEN with scid 0, the wrong parity for the peer's role, or a name outside
  ``expected_subprotocols`` is answered with CLOSE; a duplicate OPEN is logged and ignored;
  DATA/CLOSE for an unknown scid are logged and ignored (quietly for a scid we answered with
  CLOSE: the peer's own CLOSE is expected there);
- an OPEN for a name nobody listens on yet is held with its DATA/CLOSE until someone listens;
  all held OPENs together stay under ``max_pending_open_bytes`` (the newest are answered with
  CLOSE);
- a paused subchannel gets nothing delivered; its records wait, in order, in its own buffer.
  Only when paused subchannels together hold more than ``max_buffered_inbound_bytes`` is the
  whole connection's reading paused, until they are back under half of it. ACK processing is
  never affected by a paused subchannel.

The read-pausing lifecycle (``idle``, ``idle_throttled``, ``reading``, ``throttled``,
``stopped``) is the module-level Automat machine ``inbound_machine``; the per-record path is
plain code.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall, IProtocolFactory, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.errors import (
    CloseForMissingSubchannelError,
    DataForMissingSubchannelError,
    DilationProtocolError,
    DuplicateOpenError,
    UnexpectedSubprotocol,
)
from txdilation.wire.limits import (
    DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
    DEFAULT_MAX_PENDING_OPEN_BYTES,
)
from txdilation.wire.records import Ack, Close, Data, Open, Record, SequencedRecord
from txdilation.wire.roles import LEADER, Role

#: seconds an ACK waits for more records to cover (one ACK per batch, not per TCP read)
ACK_DELAY = 0.005
#: received DATA bytes not yet acknowledged at which the ACK goes out at the end of the turn
ACK_THRESHOLD_BYTES = 2**20

_log = Logger(namespace="txdilation.durable.inbound")


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


#: Builds the subchannel for an incoming OPEN (not started yet); None when the factory refused.
BuildSubchannel = Callable[[int, str, IProtocolFactory], "Delivery | None"]


@dataclass(eq=False, slots=True)
class _Route:
    scid: int
    subprotocol: str
    delivery: Delivery | None = None  # None while waiting for a listener
    #: what waits for delivery (None marks the peer's CLOSE); made on first use, because an
    #: empty deque costs ~600 bytes and most subchannels never hold anything
    held: deque[bytes | None] | None = None
    held_bytes: int = 0
    paused: bool = False
    discarding: bool = False
    drain_call: IDelayedCall | None = None

    @property
    def pending_cost(self) -> int:
        return 9 + len(self.subprotocol.encode("utf-8")) + self.held_bytes


class _InboundInputs(TypingProtocol):
    """Lifecycle inputs of :class:`Inbound` (connection and read throttling)."""

    def connection_made(self, connection: IDilatedConnection) -> None:
        "A connection was selected."

    def connection_lost(self) -> None:
        "The connection is gone."

    def buffer_full(self) -> None:
        "Paused subchannels hold more than the bound: stop reading the connection."

    def buffer_drained(self) -> None:
        "They are back under half of the bound: read again."

    def stop(self) -> None:
        "The wormhole is closing."


@dataclass
class _InboundCore:
    connection: IDilatedConnection | None = None
    stopped: bool = False


def _build_inbound_machine() -> TypeMachine[_InboundInputs, _InboundCore]:
    b = TypeMachineBuilder(_InboundInputs, _InboundCore)
    idle = b.state("idle")
    idle_throttled = b.state("idle_throttled")
    reading = b.state("reading")
    throttled = b.state("throttled")
    stopped = b.state("stopped")
    I = _InboundInputs  # noqa: E741 (a short alias keeps the transition table readable)

    @idle.upon(I.connection_made).to(reading)
    @reading.upon(I.connection_made).to(reading)
    def read_from(m: _InboundInputs, c: _InboundCore, connection: IDilatedConnection) -> None:
        c.connection = connection

    @idle_throttled.upon(I.connection_made).to(throttled)
    @throttled.upon(I.connection_made).to(throttled)
    def hold_reading(m: _InboundInputs, c: _InboundCore, connection: IDilatedConnection) -> None:
        c.connection = connection
        connection.pause_reading()

    @reading.upon(I.buffer_full).to(throttled)
    def pause_reading(m: _InboundInputs, c: _InboundCore) -> None:
        assert c.connection is not None
        c.connection.pause_reading()

    @throttled.upon(I.buffer_drained).to(reading)
    def resume_reading(m: _InboundInputs, c: _InboundCore) -> None:
        assert c.connection is not None
        c.connection.resume_reading()

    @reading.upon(I.connection_lost).to(idle)
    @throttled.upon(I.connection_lost).to(idle_throttled)
    def forget_connection(m: _InboundInputs, c: _InboundCore) -> None:
        c.connection = None

    idle.upon(I.buffer_full).to(idle_throttled).returns(None)
    idle_throttled.upon(I.buffer_drained).to(idle).returns(None)

    for state in (idle, idle_throttled, reading, throttled):

        @state.upon(I.stop).to(stopped)
        def finish(m: _InboundInputs, c: _InboundCore) -> None:
            c.connection = None
            c.stopped = True

    # Harmless repeats (the facade only reports threshold crossings, but a lost connection can
    # be reported twice), and everything after stop (documented as ignored).
    for state in (idle, idle_throttled):
        state.upon(I.connection_lost).loop().returns(None)
    for state in (idle_throttled, throttled):
        state.upon(I.buffer_full).loop().returns(None)
    for state in (idle, reading):
        state.upon(I.buffer_drained).loop().returns(None)
    stopped.upon(I.connection_made).loop().returns(None)
    for event in (I.connection_lost, I.buffer_full, I.buffer_drained, I.stop):
        stopped.upon(event).loop().returns(None)
    return b.build()


inbound_machine = _build_inbound_machine()


class Inbound:
    """The receiving half of L4 and the demultiplexer (see the module docstring).

    :param reactor: schedules the delayed ACK and the delivery of records a resumed
        subchannel was holding (``callLater(0, ...)``).
    :param send_close: answers an OPEN we refuse with CLOSE (through the durable queue).
    :param build: builds the subchannel for an accepted OPEN.
    :param expected_subprotocols: when given, any other name is answered with CLOSE.
    :param ack_delay: seconds an ACK may wait for more records (see the module docstring).
    :param ack_threshold_bytes: DATA bytes after which the ACK waits no longer than the turn.
    """

    def __init__(
        self,
        *,
        reactor: IReactorTime,
        send_close: Callable[[int], None],
        build: BuildSubchannel,
        expected_subprotocols: Iterable[str] | None = None,
        max_pending_open_bytes: int = DEFAULT_MAX_PENDING_OPEN_BYTES,
        max_buffered_inbound_bytes: int = DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
        ack_delay: float = ACK_DELAY,
        ack_threshold_bytes: int = ACK_THRESHOLD_BYTES,
        log: Logger | None = None,
    ) -> None:
        self._reactor = reactor
        self._send_close = send_close
        self._build = build
        self._expected = None if expected_subprotocols is None else frozenset(expected_subprotocols)
        self._max_pending = max_pending_open_bytes
        self._max_buffered = max_buffered_inbound_bytes
        self._log = log if log is not None else _log
        self._core = _InboundCore()
        self._machine = inbound_machine(self._core)
        self._peer_parity: int | None = None
        #: highest seqnum processed so far
        self.watermark = -1
        #: DATA payload bytes processed (each record once; replayed duplicates not counted)
        self.bytes_received = 0
        self._ack_delay = ack_delay
        self._ack_threshold = ack_threshold_bytes
        self._ack_call: IDelayedCall | None = None
        self._last_ack_at = 0.0  # when the last ACK went out (or the connection came)
        self._ack_soon = False  # the pending ACK goes out at the end of this turn
        self._unacked_bytes = 0  # DATA bytes received since the last ACK went out
        self._routes: dict[int, _Route] = {}
        self._pending: dict[int, _Route] = {}  # routes waiting for a listener, oldest first
        self._listeners: dict[str, IProtocolFactory] = {}
        self._answered: set[int] = set()  # scids we sent CLOSE for without a subchannel
        self.pending_bytes = 0
        self.buffered_bytes = 0
        self._over = False

    def set_role(self, role: Role) -> None:
        """Our role is known: the peer opens odd scids if we are Follower, even if Leader."""
        self._peer_parity = 0 if role is LEADER else 1

    # --- lifecycle ---

    def connection_made(self, connection: IDilatedConnection) -> None:
        """Acknowledge on ``connection`` from now on (paused at once if we are over the bound)."""
        self._last_ack_at = self._reactor.seconds()
        self._machine.connection_made(connection)

    def connection_lost(self) -> None:
        """No connection: no ACKs until the next one (a pending one is dropped)."""
        self._machine.connection_lost()
        self._cancel_ack()

    def stop(self) -> list[Delivery]:
        """Forget every route and listener; return the subchannels still open. Idempotent."""
        self._machine.stop()
        self._cancel_ack()
        live = []
        for route in self._routes.values():
            if route.drain_call is not None:
                route.drain_call.cancel()
            if route.delivery is not None:
                live.append(route.delivery)
        self._routes.clear()
        self._pending.clear()
        self._listeners.clear()
        self.pending_bytes = self.buffered_bytes = 0
        return live

    # --- the record path (plain code) ---

    def record_handlers(self) -> dict[type[Record], Callable[[Any], None]]:
        """The handler of each record type this half takes (the selected link's table)."""
        return {Data: self.got_data, Open: self.got_open, Close: self.got_close}

    def receive(self, record: SequencedRecord) -> None:
        """One OPEN, DATA or CLOSE whose type the caller did not look at (tests, tools): the
        same as calling its handler."""
        self.record_handlers()[type(record)](record)

    def got_data(self, record: Data) -> None:
        """One DATA record: acknowledge it, deliver it if new (the byte path)."""
        if self._core.stopped:
            return
        size = len(record.data)
        if self._core.connection is not None:
            self._unacked_bytes += size
            self._schedule_ack(self._unacked_bytes >= self._ack_threshold)
        if record.seqnum > self.watermark:
            self.watermark = record.seqnum
            self.bytes_received += size
            self._on_data(record.scid, record.data)

    def got_open(self, record: Open) -> None:
        """One OPEN record: acknowledge it at the end of the turn, process it if new."""
        if self._is_new(record):
            self._on_open(record.scid, record.subprotocol)

    def got_close(self, record: Close) -> None:
        """One CLOSE record: acknowledge it at the end of the turn, process it if new."""
        if self._is_new(record):
            self._on_close(record.scid)

    def _is_new(self, record: Open | Close) -> bool:
        if self._core.stopped:
            return False
        if self._core.connection is not None:
            self._schedule_ack(True)
        if record.seqnum <= self.watermark:
            return False
        self.watermark = record.seqnum
        return True

    def _schedule_ack(self, soon: bool) -> None:
        call = self._ack_call
        if call is None:
            if not soon and self._reactor.seconds() - self._last_ack_at >= self._ack_delay:
                soon = True  # the link was quiet: this record's round trip is not delayed
            self._ack_soon = soon
            self._ack_call = self._reactor.callLater(0 if soon else self._ack_delay, self._send_ack)
        elif soon and not self._ack_soon:
            self._ack_soon = True
            call.reset(0)

    def _send_ack(self) -> None:
        self._ack_call = None
        self._unacked_bytes = 0
        self._last_ack_at = self._reactor.seconds()
        connection = self._core.connection
        if connection is not None:
            connection.send_record(Ack(self.watermark))

    def _cancel_ack(self) -> None:
        if self._ack_call is not None:
            self._ack_call.cancel()
            self._ack_call = None
        self._unacked_bytes = 0

    def _on_data(self, scid: int, data: bytes) -> None:
        route = self._routes.get(scid)
        if route is None:
            if scid not in self._answered:
                self._warn(DataForMissingSubchannelError(f"DATA for unknown subchannel {scid}"))
        elif route.discarding:
            pass
        elif route.delivery is None:
            self._hold(route, data)
            self.pending_bytes += len(data)
            self._enforce_pending_bound()
        elif route.paused or route.held:
            self._hold(route, data)
            self.buffered_bytes += len(data)
            self._check_buffered()
        else:
            route.delivery.remote_data(data)

    def _on_close(self, scid: int) -> None:
        route = self._routes.get(scid)
        if route is None:
            if scid in self._answered:
                self._answered.discard(scid)
            else:
                self._warn(CloseForMissingSubchannelError(f"CLOSE for unknown subchannel {scid}"))
        elif route.delivery is None or route.paused or route.held:
            if route.held is None:
                route.held = deque()
            route.held.append(None)
        else:
            route.delivery.remote_close()

    def _on_open(self, scid: int, subprotocol: str) -> None:
        if scid in self._routes or scid in self._answered:
            self._warn(DuplicateOpenError(f"duplicate OPEN for subchannel {scid}"))
            return
        if scid == 0 or (self._peer_parity is not None and scid % 2 != self._peer_parity):
            self._warn(DilationProtocolError(f"OPEN with a scid the peer may not use: {scid}"))
            self._answer_close(scid)
            return
        if self._expected is not None and subprotocol not in self._expected:
            self._warn(UnexpectedSubprotocol(f"OPEN {scid} for unexpected {subprotocol!r}"))
            self._answer_close(scid)
            return
        route = self._routes[scid] = _Route(scid, subprotocol)
        factory = self._listeners.get(subprotocol)
        if factory is not None:
            self._connect(route, factory)
            return
        self._pending[scid] = route
        self.pending_bytes += route.pending_cost
        self._enforce_pending_bound()

    def _hold(self, route: _Route, data: bytes) -> None:
        if route.held is None:
            route.held = deque()
        route.held.append(data)
        route.held_bytes += len(data)

    def _answer_close(self, scid: int) -> None:
        self._answered.add(scid)
        self._send_close(scid)

    def _enforce_pending_bound(self) -> None:
        while self.pending_bytes > self._max_pending and self._pending:
            scid, route = self._pending.popitem()  # the newest
            del self._routes[scid]
            self.pending_bytes -= route.pending_cost
            self._log.warn(
                "too much held for subchannels nobody listens on: refusing subchannel {scid} "
                "({subprotocol!r})",
                scid=scid,
                subprotocol=route.subprotocol,
            )
            self._answer_close(scid)

    def _warn(self, error: Exception) -> None:
        self._log.warn("{error}", error=repr(error))

    # --- subchannels: creation, listeners ---

    def _connect(self, route: _Route, factory: IProtocolFactory) -> None:
        try:
            delivery = self._build(route.scid, route.subprotocol, factory)
        except Exception:
            self._log.failure("building a protocol for {name!r} failed", name=route.subprotocol)
            delivery = None
        if delivery is None:
            self._forget(route)
            self._answer_close(route.scid)
            return
        route.delivery = delivery
        delivery.start()
        self._drain(route)

    def add_local(self, scid: int, delivery: Delivery) -> None:
        """Route records for ``scid`` (a subchannel we opened) to ``delivery``."""
        self._answered.discard(scid)
        self._routes[scid] = _Route(scid, "", delivery)

    def listen(self, subprotocol: str, factory: IProtocolFactory) -> None:
        """Build a protocol with ``factory`` for each OPEN of ``subprotocol``, held ones first.

        :raises ValueError: when someone already listens on ``subprotocol``.
        """
        if subprotocol in self._listeners:
            raise ValueError(f"already listening for subprotocol {subprotocol!r}")
        self._listeners[subprotocol] = factory
        waiting = [r for r in self._pending.values() if r.subprotocol == subprotocol]
        for route in waiting:
            del self._pending[route.scid]
            self.pending_bytes -= route.pending_cost
            self.buffered_bytes += route.held_bytes
            self._connect(route, factory)
        self._check_buffered()

    def is_listening(self, subprotocol: str) -> bool:
        """True when a factory is registered for ``subprotocol``."""
        return subprotocol in self._listeners

    def unlisten(self, subprotocol: str) -> None:
        """Stop building protocols for ``subprotocol``; later OPENs are held again."""
        self._listeners.pop(subprotocol, None)

    # --- subchannels: read pausing and closing ---

    def pause_subchannel(self, scid: int) -> None:
        """Deliver nothing more to ``scid`` until :meth:`resume_subchannel`."""
        route = self._attached(scid)
        if route is not None and not route.discarding:
            route.paused = True

    def resume_subchannel(self, scid: int) -> None:
        """Deliver to ``scid`` again; what it held goes out on a later reactor turn, in order."""
        route = self._attached(scid)
        if route is not None:
            route.paused = False
            self._schedule_drain(route)

    def discard_subchannel(self, scid: int) -> None:
        """``scid`` wants no more data: drop what it holds and later DATA (a CLOSE still goes)."""
        route = self._attached(scid)
        if route is None:
            return
        closed = bool(route.held and route.held[-1] is None)
        self.buffered_bytes -= route.held_bytes
        route.held_bytes = 0
        route.held = deque([None]) if closed else None
        route.paused = False
        route.discarding = True
        self._schedule_drain(route)
        self._check_buffered()

    def subchannel_closed(self, scid: int, *, expect_close: bool) -> None:
        """``scid`` is closed: forget it. ``expect_close``: the peer's CLOSE is still to come."""
        route = self._attached(scid)
        if route is None:
            return
        self._forget(route)
        self._check_buffered()
        if expect_close:
            self._answered.add(scid)

    def _attached(self, scid: int) -> _Route | None:
        """The route of subchannel ``scid`` (None for unknown scids and held OPENs)."""
        route = self._routes.get(scid)
        return route if route is not None and route.delivery is not None else None

    def _forget(self, route: _Route) -> None:
        del self._routes[route.scid]
        self.buffered_bytes -= route.held_bytes
        route.held = None
        route.held_bytes = 0
        if route.drain_call is not None:
            route.drain_call.cancel()
            route.drain_call = None

    def _schedule_drain(self, route: _Route) -> None:
        if route.held and route.drain_call is None:
            route.drain_call = self._reactor.callLater(0, self._drain_later, route)

    def _drain_later(self, route: _Route) -> None:
        route.drain_call = None
        self._drain(route)
        self._check_buffered()

    def _drain(self, route: _Route) -> None:
        while route.held and not route.paused and self._routes.get(route.scid) is route:
            assert route.delivery is not None
            item = route.held.popleft()
            if item is None:
                route.delivery.remote_close()
            else:
                route.held_bytes -= len(item)
                self.buffered_bytes -= len(item)
                route.delivery.remote_data(item)

    def _check_buffered(self) -> None:
        if not self._over and self.buffered_bytes > self._max_buffered:
            self._over = True
            self._machine.buffer_full()
        elif self._over and self.buffered_bytes <= self._max_buffered // 2:
            self._over = False
            self._machine.buffer_drained()


__all__ = [
    "ACK_DELAY",
    "ACK_THRESHOLD_BYTES",
    "DEFAULT_MAX_BUFFERED_INBOUND_BYTES",
    "DEFAULT_MAX_PENDING_OPEN_BYTES",
    "BuildSubchannel",
    "Delivery",
    "Inbound",
]
