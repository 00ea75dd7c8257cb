"""L5: the one object the Manager drives for L4 and L5 (``IMultiplexer``).

:class:`Multiplexer` wires :class:`~txdilation.durable.outbound.Outbound`,
:class:`~txdilation.durable.inbound.Inbound` and the subchannels, takes the selected link's
records (``IRecordReceiver``) and hands out the application's endpoints
(``txdilation.subchannels.app_endpoints``).

Invariants: scids are Leader odd, Follower even, never 0 or reused; ``connect()``,
``listen()`` and ``when_dilated()`` wait for dilation (a
:class:`~txdilation.wire.waiting.OneShot`) and fire on a later reactor turn, as stock's do;
no application callback runs inside an Automat input; ``stop()`` is idempotent, closes every
subchannel and port and, per the :class:`~txdilation.semantics.Semantics`, fails the waiters;
each subchannel is reported opened and closed to telemetry. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionDone, NoProtocol
from twisted.internet.interfaces import (
    IProtocol,
    IProtocolFactory,
    IReactorTime,
)
from twisted.internet.task import Cooperator
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.durable.inbound import ACK_THRESHOLD_BYTES, Inbound
from txdilation.durable.outbound import Outbound
from txdilation.semantics import STOCK, Semantics
from txdilation.subchannels.app_endpoints import (
    SubchannelConnectorEndpoint,
    SubchannelListenerEndpoint,
    SubchannelListeningPort,
)
from txdilation.subchannels.subchannel import SubChannel, SubchannelAddress, _WormholeAddress
from txdilation.subchannels.unanswered import Closes
from txdilation.telemetry import Telemetry, TrafficStats
from txdilation.wire.contracts import IDilatedConnection, IMultiplexer, ISentLog
from txdilation.wire.dilation_errors import WormholeClosedError
from txdilation.wire.limits import (
    DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
    DEFAULT_MAX_PENDING_OPEN_BYTES,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_MAX_UNACKED_BYTES,
    RECORD_OVERHEAD,
)
from txdilation.wire.records import Ack, Close, Data, Open, Ping
from txdilation.wire.roles import LEADER, Role
from txdilation.wire.waiting import OneShot

_log = Logger()

T = TypeVar("T")

#: Delay between steps of the default cooperator (Twisted's own default): a positive delay, so
#: that a Clock's ``advance(0)`` in tests never spins on it.
_COOPERATOR_DELAY = 0.00000001


@implementer(IMultiplexer)
class Multiplexer:
    """L4/L5 for one dilated wormhole, driven by the manager (see ``IMultiplexer``).

    :param manager: opaque; stored on every subchannel as ``_manager``.
    :param reactor: for ACK coalescing, delayed deliveries and the default cooperator.
    :param cooperator: drives pull producers; default: one scheduled on ``reactor``.
    :param expected_subprotocols: when given, an OPEN for any other name is answered with CLOSE.
    :param max_unacked_bytes: queued outbound bytes above which producers are paused.
    :param max_pending_open_bytes: bound on what is held for names nobody listens on yet.
    :param max_buffered_inbound_bytes: bound on what paused subchannels hold before the whole
        connection's reading is paused.
    :param max_record_size: the largest record the peer is assumed to accept (our own
        ``TXDILATION_MAX_RECORD_SIZE``): a subchannel ``write()`` whose record would be larger
        raises ValueError instead of making the peer drop every connection it is sent on.
    :param telemetry: the session's telemetry, told about subchannels opening and closing.
    :param semantics: what the application sees where stock's behaviour is a defect.
    :param eventually: ``eventually(f, *args)`` calls ``f(*args)`` on a later reactor turn, in
        order (stock's ``EventualQueue.eventually``); default: ``reactor.callLater(0, ...)``.
    """

    def __init__(
        self,
        *,
        manager: object,
        reactor: IReactorTime,
        cooperator: Cooperator | None = None,
        expected_subprotocols: Iterable[str] | None = None,
        max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES,
        max_pending_open_bytes: int = DEFAULT_MAX_PENDING_OPEN_BYTES,
        max_buffered_inbound_bytes: int = DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        log: Logger | None = None,
        telemetry: Telemetry | None = None,
        semantics: Semantics = STOCK,
        eventually: Callable[..., object] | None = None,
    ) -> None:
        self._manager = manager
        self._semantics = semantics
        self._eventually = (
            eventually
            if eventually is not None
            else lambda f, *args: reactor.callLater(0, f, *args)
        )
        self._telemetry = telemetry
        self._on_subchannel_closed = telemetry.subchannel_closed if telemetry else None
        self._max_write_length = max_record_size - RECORD_OVERHEAD
        self._log = log if log is not None else _log
        if cooperator is None:
            cooperator = Cooperator(
                scheduler=lambda step: reactor.callLater(_COOPERATOR_DELAY, step)
            )
        self._host = _WormholeAddress()
        self._outbound = Outbound(
            cooperator=cooperator,
            clock=reactor,
            max_unacked_bytes=max_unacked_bytes,
            log=self._log,
        )
        self._inbound = Inbound(
            reactor=reactor,
            send_close=self._outbound.send_close,
            build=self._build_incoming,
            expected_subprotocols=expected_subprotocols,
            max_pending_open_bytes=max_pending_open_bytes,
            max_buffered_inbound_bytes=max_buffered_inbound_bytes,
            # the peer's window is unknown; assume it is like ours, so that a small one is not
            # left waiting ACK_DELAY per window for our ACK
            ack_threshold_bytes=min(ACK_THRESHOLD_BYTES, max(1, max_unacked_bytes // 4)),
            log=self._log,
        )
        self._closes = Closes(reactor, self._outbound)
        self._dilation: OneShot[None] = OneShot()
        self._role: Role | None = None
        self._next_scid = 0
        self._ports: list[SubchannelListeningPort] = []
        self._stopped = False

    @property
    def host_address(self) -> _WormholeAddress:
        """``getHost()`` of every subchannel of this wormhole."""
        return self._host

    # --- IMultiplexer: driven by the manager ---

    def set_role(self, role: Role) -> None:
        """Decide scid parity. Call once, before ``connection_made``.

        :raises ValueError: when called again with the other role.
        """
        if self._role is None:
            self._role = role
            self._next_scid = 1 if role is LEADER else 2
            self._inbound.set_role(role)
        elif role is not self._role:
            raise ValueError(f"role already set to {self._role!r}")

    def connection_made(self, connection: IDilatedConnection, log: ISentLog | None = None) -> None:
        """Use ``connection`` (its writes noted in ``log``): replay everything unacked, go on."""
        if self._stopped:
            return
        self._outbound.connection_made(connection, log)
        self._inbound.connection_made(connection)
        self._closes.link_up()

    def answer_ping(self, connection: IDilatedConnection, record: Ping) -> None:
        """The PONG, gated by back-pressure (see ``Outbound.answer_ping``)."""
        self._outbound.answer_ping(connection, record)

    def connection_lost(self) -> None:
        """The connection is gone: queue from now on."""
        self._outbound.connection_lost()
        self._inbound.connection_lost()
        self._closes.link_down()

    # --- IRecordReceiver (the selected link's records): OPEN, DATA, CLOSE to Inbound ---

    def got_open(self, record: Open) -> None:
        self._inbound.got_open(record)

    def got_data(self, record: Data) -> None:
        self._inbound.got_data(record)

    def got_close(self, record: Close) -> None:
        self._inbound.got_close(record)

    def got_ack(self, record: Ack) -> None:
        self._outbound.got_ack(record)

    def peer_is_stock(self) -> None:
        """The peer runs stock's Dilation: a subchannel that closes first sends its CLOSE once
        its DATA was acknowledged, and the answer to an acknowledged CLOSE that no link brings
        is given up on (``txdilation.subchannels.unanswered``)."""
        self._closes.peer_is_stock()

    def when_acknowledged(self) -> Deferred[None]:
        """Fires once the peer acknowledged every record sent so far (see
        ``Outbound.when_acknowledged``)."""
        return self._outbound.when_acknowledged()

    def dilated(self) -> None:
        """The first connection was selected: waiting connect()/listen() go on (the first
        outcome stands: later calls, and calls after ``stop``, change nothing)."""
        if not self._stopped:
            self._dilation.fire(None)

    def _later(self, d: Deferred[T]) -> Deferred[T]:
        """``d``'s outcome, delivered through ``eventually`` (a later turn); cancelling the
        result cancels ``d``."""
        later: Deferred[T] = Deferred(lambda _: d.cancel())

        def deliver(result: T | Failure) -> None:
            if later.called:  # cancelled meanwhile
                return
            if isinstance(result, Failure):
                later.errback(result)
            else:
                later.callback(result)

        def relay(result: T | Failure) -> None:
            self._eventually(deliver, result)

        d.addBoth(relay)
        return later

    def when_dilated(self) -> Deferred[None]:
        """Fires (on a later turn) when dilated; errbacks on ``fail_dilation`` or ``stop``
        before that."""
        if self._stopped:
            return self._later(fail(WormholeClosedError("the wormhole is closed")))
        return self._later(self._dilation.when_fired())

    def fail_dilation(self, f: Failure) -> None:
        """Dilation cannot happen (e.g. OldPeerCannotDilateError): errback every waiter (unless
        dilated or stopped already)."""
        if not self._stopped:
            self._dilation.fire(f)

    def traffic_stats(self) -> TrafficStats:
        """The session's cumulative traffic counters, all connections together (telemetry).

        Records are OPEN/DATA/CLOSE (each sent record counted once, however often replayed;
        each received one once, duplicates not at all); bytes are DATA payload bytes;
        ``queue_bytes`` is what waits for the peer's ACK now (records with their headers).
        """
        out = self._outbound
        return TrafficStats(
            records_sent=out.next_seqnum,
            bytes_sent=out.bytes_sent,
            records_acked=out.records_acked,
            bytes_retransmitted=out.bytes_retransmitted,
            # the peer numbers its records 0, 1, 2, ... and each is processed once, in order
            records_received=self._inbound.watermark + 1,
            bytes_received=self._inbound.bytes_received,
            queue_bytes=out.queued_bytes,
        )

    @property
    def unacknowledged_records(self) -> int:
        """OPEN/DATA/CLOSE records queued or sent but not yet acknowledged by the peer."""
        return self._outbound.queued_records

    def stop(self, reason: str, lost: Failure | None = None) -> None:
        """The wormhole is closing (idempotent): see the module docstring.

        :param lost: what open subchannels' protocols get in ``connectionLost`` (with the
            semantics that deliver it); None: ``ConnectionDone("wormhole closed: REASON")``.
            An application built on top (e.g. pairing, when the peer restarted) passes its own
            reason, so that its protocols can tell an ending from a clean close.
        """
        if self._stopped:
            return
        self._stopped = True
        live = self._inbound.stop()
        self._outbound.stop()
        self._closes.stop()
        if lost is None:
            lost = Failure(ConnectionDone(f"wormhole closed: {reason}"))  # type: ignore[no-untyped-call]
        for subchannel in live:
            subchannel.abandon(lost)
        for port in list(self._ports):
            port.stopListening()
        if self._semantics.close_fails_waiters:  # (otherwise they never fire, as stock's)
            self._dilation.fire(Failure(WormholeClosedError(reason)))  # type: ignore[no-untyped-call]

    def listener_for(self, name: str) -> SubchannelListenerEndpoint:
        """IStreamServerEndpoint for incoming subchannels named ``name``."""
        return SubchannelListenerEndpoint(self, name)

    def connector_for(self, name: str) -> SubchannelConnectorEndpoint:
        """IStreamClientEndpoint opening subchannels named ``name``.

        :raises ValueError: when ``name`` is empty.
        """
        return SubchannelConnectorEndpoint(self, name)

    # --- used by the endpoints (SubchannelSource) ---

    def open_subchannel(self, name: str, factory: IProtocolFactory) -> IProtocol:
        """Send OPEN for a new subchannel and connect the protocol ``factory`` builds for it.

        :raises WormholeClosedError: once stopped.
        :raises NoProtocol: when the factory returns None.
        """
        if self._stopped:
            raise WormholeClosedError("the wormhole is closed")
        protocol = factory.buildProtocol(SubchannelAddress(name))
        if protocol is None:
            raise NoProtocol()
        scid = self._next_scid
        self._next_scid += 2
        subchannel = self._subchannel(scid, name, protocol)
        self._inbound.add_local(scid, subchannel)
        self._outbound.send_open(scid, name)
        subchannel.start()
        return protocol

    def listen_subchannel(self, name: str, factory: IProtocolFactory) -> SubchannelListeningPort:
        """Accept the peer's subchannels named ``name`` with ``factory`` (held OPENs first).

        :raises WormholeClosedError: once stopped.
        :raises ValueError: when someone already listens on ``name``.
        """
        if self._stopped:
            raise WormholeClosedError("the wormhole is closed")
        if self._inbound.is_listening(name):
            raise ValueError(f"already listening for subprotocol {name!r}")
        starts = self._semantics.factory_start_stop
        if starts:
            factory.doStart()
        port = SubchannelListeningPort(
            self,
            name,
            factory,
            unlisten=self._semantics.stop_listening_stops,
            stop_factory=starts,
        )
        self._ports.append(port)
        self._inbound.listen(name, factory)
        return port

    def unlisten(self, port: SubchannelListeningPort) -> None:
        """``port`` stopped listening: later OPENs for its name are held again."""
        self._ports.remove(port)
        self._inbound.unlisten(port.subprotocol)

    def _build_incoming(self, scid: int, name: str, factory: IProtocolFactory) -> SubChannel | None:
        protocol = factory.buildProtocol(SubchannelAddress(name))
        if protocol is None:
            return None
        return self._subchannel(scid, name, protocol)

    def _subchannel(self, scid: int, name: str, protocol: IProtocol) -> SubChannel:
        telemetry = self._telemetry
        if telemetry is not None:
            initiator = self._role is not None and scid % 2 == self._next_scid % 2
            telemetry.subchannel_opened(scid, initiator)
        return SubChannel(
            scid,
            protocol,
            peer=SubchannelAddress(name),
            host=self._host,
            sender=self._outbound,
            receiver=self._inbound,
            manager=self._manager,
            log=self._log,
            max_write_length=self._max_write_length,
            on_closed=self._on_subchannel_closed,
            semantics=self._semantics,
            closes=self._closes,
        )


__all__ = ["Multiplexer"]
