"""L4 inbound: the ACK watermark, duplicate suppression, demultiplexing and read pausing.

:class:`Inbound` receives every OPEN/DATA/CLOSE from the selected connection and routes it to
a subchannel's :class:`~txdilation.durable.routes.Route` (see :class:`Delivery`). Read pausing
is the machine of :mod:`txdilation.durable.inbound_lifecycle`
(state-diagrams/inbound_lifecycle.svg); the per-record path is plain code behind its gates.

Invariants: every OPEN/DATA/CLOSE is acknowledged, duplicates too, by cumulative ACKs, when
:mod:`txdilation.durable.acks` says, only while connected; a record is processed only if
its seqnum is above the highest processed; a bad OPEN is answered with CLOSE, unknown scids
ignored; OPENs nobody listens on yet are held within ``max_pending_open_bytes``; a paused
subchannel's records wait in its own buffer, and the connection's reading pauses only above
``max_buffered_inbound_bytes`` (resumes at half); ACKs never wait on a paused subchannel. In
full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twisted.internet.interfaces import IProtocolFactory, IReactorTime
from twisted.logger import Logger

from txdilation.durable.acks import ACK_DELAY, ACK_THRESHOLD_BYTES, DelayedAck
from txdilation.durable.inbound_lifecycle import InboundCore, inbound_machine
from txdilation.durable.routes import ATTACHED, DISCARDING, PENDING, Delivery, Holdings, Route
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.dilation_errors import (
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
from txdilation.wire.records import Ack, Close, Data, Open, SequencedRecord
from txdilation.wire.roles import LEADER, Role

_log = Logger()


#: Builds the subchannel for an incoming OPEN (not started yet); None when the factory refused.
BuildSubchannel = Callable[[int, str, IProtocolFactory], "Delivery | None"]


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
        send_close: Callable[[int], object],
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
        self._core = InboundCore()
        self._machine = inbound_machine(self._core)
        self._peer_parity: int | None = None
        #: highest seqnum processed so far
        self.watermark = -1
        #: DATA payload bytes processed (each record once; replayed duplicates not counted)
        self.bytes_received = 0
        self._acks = DelayedAck(reactor, self._send_ack, ack_delay, ack_threshold_bytes)
        #: one route per subchannel, in the order they came (pending ones among them)
        self._routes: dict[int, Route] = {}
        self._holdings = Holdings()
        self._listeners: dict[str, IProtocolFactory] = {}
        self._answered: set[int] = set()  # scids we sent CLOSE for without a subchannel

    @property
    def pending_bytes(self) -> int:
        """What is held for subchannels nobody listens on yet (their OPENs included)."""
        return self._holdings.pending

    @property
    def buffered_bytes(self) -> int:
        """What is held for subchannels that paused (or still deliver what they held)."""
        return self._holdings.buffered

    def set_role(self, role: Role) -> None:
        """Our role is known: the peer opens odd scids if we are Follower, even if Leader."""
        self._peer_parity = 0 if role is LEADER else 1

    # --- lifecycle ---

    def connection_made(self, connection: IDilatedConnection) -> None:
        """Acknowledge on ``connection`` from now on (paused at once if we are over the bound)."""
        self._acks.restart()
        self._machine.connection_made(connection)

    def connection_lost(self) -> None:
        """No connection: no ACKs until the next one (a pending one is dropped)."""
        self._machine.connection_lost()
        self._acks.cancel()

    def stop(self) -> list[Delivery]:
        """Forget every route and listener; return the subchannels still open. Idempotent."""
        self._machine.stop()
        self._acks.cancel()
        live = [r.delivery for r in self._routes.values() if r.delivery is not None]
        for route in self._routes.values():
            route.forget()
        self._routes.clear()
        self._listeners.clear()
        return live

    # --- the record path (plain code) ---

    def receive(self, record: SequencedRecord) -> None:
        """An OPEN, DATA or CLOSE of a type the caller did not look at (tests): its handler."""
        if isinstance(record, Data):
            self.got_data(record)
        elif isinstance(record, Open):
            self.got_open(record)
        else:
            self.got_close(record)

    def got_data(self, record: Data) -> None:
        """One DATA record: acknowledge it, deliver it if new (the byte path)."""
        if self._core.stopped:
            return
        size = len(record.data)
        if self._core.connection is not None:
            self._acks.data(size)
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
            self._acks.soon()
        if record.seqnum <= self.watermark:
            return False
        self.watermark = record.seqnum
        return True

    def _send_ack(self) -> None:
        connection = self._core.connection
        if connection is not None:
            connection.send_record(Ack(self.watermark))

    def _on_data(self, scid: int, data: bytes) -> None:
        route = self._routes.get(scid)
        if route is None:
            if scid not in self._answered:
                self._warn(DataForMissingSubchannelError(f"DATA for unknown subchannel {scid}"))
            return
        state = route.state
        delivery = route.delivery
        if state is ATTACHED and not route.held and delivery is not None:
            delivery.remote_data(data)
        elif state is DISCARDING:
            pass
        elif state is PENDING:
            route.hold(data)
            self._enforce_pending_bound()
        else:  # paused, or still delivering what it held: behind that
            before = self._holdings.buffered
            route.hold(data)
            self._buffered_changed(before)

    def _on_close(self, scid: int) -> None:
        route = self._routes.get(scid)
        if route is None:
            if scid in self._answered:
                self._answered.discard(scid)
            else:
                self._warn(CloseForMissingSubchannelError(f"CLOSE for unknown subchannel {scid}"))
        elif route.holds_all or route.holding:
            route.hold(None)
        else:
            route.attached().remote_close()

    def _on_open(self, scid: int, subprotocol: str) -> None:
        if scid in self._routes or scid in self._answered:
            self._warn(DuplicateOpenError(f"duplicate OPEN for subchannel {scid}"))
            return
        if scid == 0 or (self._peer_parity is not None and scid % 2 != self._peer_parity):
            self._warn(DilationProtocolError(f"OPEN with a scid the peer may not use: {scid}"))
            self._answer_close(scid)
            return
        if self._expected is not None and subprotocol not in self._expected:
            offered = ", ".join(sorted(self._expected)) or "none"
            self._warn(
                UnexpectedSubprotocol(
                    f"refused a subchannel the peer opened for {subprotocol!r} (OPEN {scid}): "
                    f"not an expected subprotocol here (expected: {offered})"
                )
            )
            self._answer_close(scid)
            return
        route = self._routes[scid] = Route(scid, subprotocol, self._holdings)
        factory = self._listeners.get(subprotocol)
        if factory is not None:
            self._connect(route, factory)
            return
        self._enforce_pending_bound()

    def _answer_close(self, scid: int) -> None:
        self._answered.add(scid)
        self._send_close(scid)

    def _enforce_pending_bound(self) -> None:
        while self._holdings.pending > self._max_pending:
            route = self._newest_pending()
            if route is None:
                return
            scid = route.scid
            del self._routes[scid]
            route.forget()
            self._log.warn(
                "too much held for subchannels nobody listens on: refusing subchannel {scid} "
                "({subprotocol!r})",
                scid=scid,
                subprotocol=route.subprotocol,
            )
            self._answer_close(scid)

    def _newest_pending(self) -> Route | None:
        for route in reversed(self._routes.values()):
            if route.state is PENDING:
                return route
        return None

    def _warn(self, error: Exception) -> None:
        self._log.warn("{error}", error=str(error), error_type=type(error).__name__)

    # --- subchannels: creation, listeners ---

    def _connect(self, route: Route, factory: IProtocolFactory) -> None:
        """Build the subchannel for pending ``route`` and deliver what it held."""
        try:
            delivery = self._build(route.scid, route.subprotocol, factory)
        except Exception:
            self._log.failure("building a protocol for {name!r} failed", name=route.subprotocol)
            delivery = None
        if delivery is None:
            del self._routes[route.scid]
            route.forget()
            self._answer_close(route.scid)
            return
        route.attach(delivery)
        delivery.start()
        route.drain()

    def add_local(self, scid: int, delivery: Delivery) -> None:
        """Route records for ``scid`` (a subchannel we opened) to ``delivery``."""
        self._answered.discard(scid)
        self._routes[scid] = Route(scid, "", self._holdings, delivery)

    def listen(self, subprotocol: str, factory: IProtocolFactory) -> None:
        """Build a protocol with ``factory`` for each OPEN of ``subprotocol``, held ones first.

        :raises ValueError: when someone already listens on ``subprotocol``.
        """
        if subprotocol in self._listeners:
            raise ValueError(f"already listening for subprotocol {subprotocol!r}")
        self._listeners[subprotocol] = factory
        before = self._holdings.buffered
        waiting = [
            r for r in self._routes.values() if r.state is PENDING and r.subprotocol == subprotocol
        ]
        for route in waiting:
            self._connect(route, factory)
        self._buffered_changed(before)

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
        if route is not None:
            route.pause()

    def resume_subchannel(self, scid: int) -> None:
        """Deliver to ``scid`` again; what it held goes out on a later reactor turn, in order."""
        route = self._attached(scid)
        if route is not None:
            route.resume()
            self._schedule_drain(route)

    def discard_subchannel(self, scid: int) -> None:
        """``scid`` wants no more data: drop what it holds and later DATA (a CLOSE still goes)."""
        route = self._attached(scid)
        if route is None:
            return
        before = self._holdings.buffered
        route.discard()
        self._schedule_drain(route)
        self._buffered_changed(before)

    def subchannel_closed(self, scid: int, *, expect_close: bool) -> None:
        """``scid`` is closed: forget it. ``expect_close``: the peer's CLOSE is still to come."""
        route = self._attached(scid)
        if route is None:
            return
        before = self._holdings.buffered
        del self._routes[scid]
        route.forget()
        self._buffered_changed(before)
        if expect_close:
            self._answered.add(scid)

    def _attached(self, scid: int) -> Route | None:
        """The route of subchannel ``scid`` (None for unknown scids and held OPENs)."""
        route = self._routes.get(scid)
        return route if route is not None and route.state is not PENDING else None

    def _schedule_drain(self, route: Route) -> None:
        if route.holding and route.drain_call is None:
            route.drain_call = self._reactor.callLater(0, self._drain_later, route)

    def _drain_later(self, route: Route) -> None:
        route.drain_call = None
        before = self._holdings.buffered
        route.drain()
        self._buffered_changed(before)

    def _buffered_changed(self, before: int) -> None:
        """What paused subchannels hold went from ``before`` to now: past the bound, or back
        under half of it, the machine hears so (it keeps whether reading is paused; a
        crossing it already follows is a no-op there)."""
        now = self._holdings.buffered
        if before <= self._max_buffered < now:
            self._machine.buffer_full()
        elif now <= self._max_buffered // 2 < before:
            self._machine.buffer_drained()


__all__ = [
    "ACK_DELAY",
    "ACK_THRESHOLD_BYTES",
    "BuildSubchannel",
    "Delivery",
    "Inbound",
]
