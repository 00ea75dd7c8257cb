"""L5: the one object the Manager drives for L4 and L5 (``IMultiplexer``).

:class:`Multiplexer` wires :class:`~txdilation.durable.outbound.Outbound` (seqnums, durable queue,
producers), :class:`~txdilation.durable.inbound.Inbound` (ACKs, dedup, demultiplexing, read pausing)
and the :class:`~txdilation.subchannels.subchannel.SubChannel` objects, gives the selected link
its record handlers (:meth:`Multiplexer.record_handlers`), and hands out the application's
endpoints (``txdilation.subchannels.endpoints``): ``listener_for(name)`` and
``connector_for(name)``.

Invariants:

- scids: Leader 1, 3, 5, ...; Follower 2, 4, 6, ...; never 0, never reused;
- ``connect()`` and ``listen()`` wait for ``dilated()`` (as stock does); they errback with
  the dilation failure (e.g. ``OldPeerCannotDilateError``) or ``WormholeClosedError`` when the
  wormhole fails or closes first, and can be cancelled while they wait;
- like stock's (which go through its eventual queue), ``when_dilated()``, ``connect()`` and
  ``listen()`` fire on a later reactor turn than the event that decides them, even when
  dilation happened long before: an application's callbacks never run inside ours, and what
  it does right after asking runs before the answer (fowl's tests rely on that order);
- ``stop()`` closes every open subchannel and stops every listening port; per the
  :class:`~txdilation.semantics.Semantics` it also delivers ``connectionLost`` to the open
  subchannels' protocols and errbacks every pending ``when_dilated``/``connect``/``listen``
  (stock does neither; those Deferreds then never fire). It is idempotent and every later
  input is ignored (``connect``/``listen`` called afterwards fail with ``WormholeClosedError``);
- no application callback runs inside an Automat input (Deferreds fire after the machine
  moved), so an application may call back into us from any callback;
- given the session's :class:`~txdilation.telemetry.Telemetry`, every subchannel (ours and the
  peer's) is reported opened when its protocol is built and closed (payload bytes in/out) once
  its ``connectionLost`` ran; :meth:`Multiplexer.traffic_stats` samples the L4 counters (OPEN,
  DATA and CLOSE records, DATA payload bytes; received ones counted once, duplicates of a
  replay not at all), at the cost of an int add or two per record.

The dilation lifecycle (``waiting``, ``dilated``, ``failed``, ``stopped``) is the module-level
Automat machine ``multiplexer_machine``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from typing import Protocol as TypingProtocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.defer import Deferred, fail, succeed
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

from txdilation.durable.inbound import (
    ACK_THRESHOLD_BYTES,
    DEFAULT_MAX_BUFFERED_INBOUND_BYTES,
    DEFAULT_MAX_PENDING_OPEN_BYTES,
    Inbound,
)
from txdilation.durable.outbound import DEFAULT_MAX_UNACKED_BYTES, RECORD_OVERHEAD, Outbound
from txdilation.semantics import STOCK, Semantics
from txdilation.subchannels.endpoints import (
    SubchannelConnectorEndpoint,
    SubchannelListenerEndpoint,
    SubchannelListeningPort,
)
from txdilation.subchannels.subchannel import SubChannel, SubchannelAddress, _WormholeAddress
from txdilation.telemetry import Telemetry, TrafficStats
from txdilation.wire.contracts import IDilatedConnection, IMultiplexer
from txdilation.wire.errors import WormholeClosedError
from txdilation.wire.limits import DEFAULT_MAX_RECORD_SIZE
from txdilation.wire.records import Record
from txdilation.wire.roles import LEADER, Role

_log = Logger(namespace="txdilation.subchannels.multiplexer")

T = TypeVar("T")

#: Delay between steps of the default cooperator (Twisted's own default): a positive delay, so
#: that a Clock's ``advance(0)`` in tests never spins on it.
_COOPERATOR_DELAY = 0.00000001


class _DilationInputs(TypingProtocol):
    """Lifecycle inputs of the multiplexer. Those returning Deferreds hand them to the facade,
    which fires them after the transition (never inside it)."""

    def wait(self) -> Deferred[None]:
        "A Deferred that fires when dilated (at once if already)."

    def dilated(self) -> list[Deferred[None]]:
        "The first connection was selected: return the waiters to fire."

    def fail(self, failure: Failure) -> list[Deferred[None]]:
        "Dilation cannot happen: return the waiters to errback with ``failure``."

    def stop(self) -> list[Deferred[None]]:
        "The wormhole is closing: return the waiters to errback with WormholeClosedError."


@dataclass
class _DilationCore:
    waiters: list[Deferred[None]] = field(default_factory=list)

    def take_waiters(self) -> list[Deferred[None]]:
        waiters, self.waiters = self.waiters, []
        return waiters


def _nothing(m: _DilationInputs, c: _DilationCore) -> list[Deferred[None]]:
    return []


def _nothing_failed(m: _DilationInputs, c: _DilationCore, failure: Failure) -> list[Deferred[None]]:
    return []


def _nothing_failed_twice(
    m: _DilationInputs, c: _DilationCore, first: Failure, failure: Failure
) -> list[Deferred[None]]:
    return []


def _build_multiplexer_machine() -> TypeMachine[_DilationInputs, _DilationCore]:
    b = TypeMachineBuilder(_DilationInputs, _DilationCore)
    waiting = b.state("waiting")
    dilated = b.state("dilated")
    failed = b.state("failed", lambda m, c, failure: failure)
    stopped = b.state("stopped")
    I = _DilationInputs  # noqa: E741 (a short alias keeps the transition table readable)

    @waiting.upon(I.wait).loop()
    def new_waiter(m: _DilationInputs, c: _DilationCore) -> Deferred[None]:
        def cancel(d: Deferred[None]) -> None:
            if d in c.waiters:
                c.waiters.remove(d)

        d: Deferred[None] = Deferred(cancel)
        c.waiters.append(d)
        return d

    @waiting.upon(I.dilated).to(dilated)
    @waiting.upon(I.stop).to(stopped)
    def release_waiters(m: _DilationInputs, c: _DilationCore) -> list[Deferred[None]]:
        return c.take_waiters()

    @waiting.upon(I.fail).to(failed)
    def fail_waiters(
        m: _DilationInputs, c: _DilationCore, failure: Failure
    ) -> list[Deferred[None]]:
        return c.take_waiters()

    @dilated.upon(I.wait).loop()
    def already_dilated(m: _DilationInputs, c: _DilationCore) -> Deferred[None]:
        return succeed(None)

    @failed.upon(I.wait).loop()
    def already_failed(m: _DilationInputs, c: _DilationCore, failure: Failure) -> Deferred[None]:
        return fail(failure)

    @stopped.upon(I.wait).loop()
    def already_stopped(m: _DilationInputs, c: _DilationCore) -> Deferred[None]:
        return fail(WormholeClosedError("the wormhole is closed"))

    # Documented no-ops: a repeated or late dilated()/fail() (the first outcome stands), stop()
    # after dilation or failure (no waiters left), anything after stop.
    dilated.upon(I.dilated).loop()(_nothing)
    dilated.upon(I.fail).loop()(_nothing_failed)
    dilated.upon(I.stop).to(stopped)(_nothing)
    # (Automat passes a data state's data to behaviours leaving it even with nodata=True.)
    failed.upon(I.dilated).loop()(_nothing_failed)
    failed.upon(I.fail).loop()(_nothing_failed_twice)
    failed.upon(I.stop).to(stopped)(_nothing_failed)
    stopped.upon(I.dilated).loop()(_nothing)
    stopped.upon(I.fail).loop()(_nothing_failed)
    stopped.upon(I.stop).loop()(_nothing)
    return b.build()


multiplexer_machine = _build_multiplexer_machine()


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
        self._lifecycle = multiplexer_machine(_DilationCore())
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

    def connection_made(self, connection: IDilatedConnection) -> None:
        """Use ``connection``: replay everything unacked (one send_records), then go on."""
        if self._stopped:
            return
        self._outbound.connection_made(connection)
        self._inbound.connection_made(connection)

    def may_send_pong(self) -> bool:
        """Whether the Manager may answer a PING now (see ``Outbound.may_send_pong``)."""
        return self._outbound.may_send_pong()

    def connection_lost(self) -> None:
        """The connection is gone: queue from now on."""
        self._outbound.connection_lost()
        self._inbound.connection_lost()

    def record_handlers(self) -> dict[type[Record], Callable[[Any], None]]:
        """Record type -> handler for every record L4 takes: OPEN, DATA and CLOSE to Inbound,
        ACK to Outbound (the selected link dispatches each received record once through it)."""
        return {**self._inbound.record_handlers(), **self._outbound.record_handlers()}

    def when_acknowledged(self) -> Deferred[None]:
        """Fires once the peer acknowledged every record sent so far (see
        ``Outbound.when_acknowledged``)."""
        return self._outbound.when_acknowledged()

    def dilated(self) -> None:
        """The first connection was selected: waiting connect()/listen() go on."""
        for d in self._lifecycle.dilated():
            d.callback(None)

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
        return self._later(self._lifecycle.wait())

    def fail_dilation(self, f: Failure) -> None:
        """Dilation cannot happen (e.g. OldPeerCannotDilateError): errback every waiter."""
        for d in self._lifecycle.fail(f):
            d.errback(f)

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

    def stop(self, reason: str) -> None:
        """The wormhole is closing (idempotent): see the module docstring."""
        if self._stopped:
            return
        self._stopped = True
        waiters = self._lifecycle.stop()
        live = self._inbound.stop()
        self._outbound.stop()
        lost = Failure(ConnectionDone(f"wormhole closed: {reason}"))  # type: ignore[no-untyped-call]
        for subchannel in live:
            subchannel.abandon(lost)
        for port in list(self._ports):
            port.stopListening()
        if self._semantics.close_fails_waiters:
            for d in waiters:
                d.errback(WormholeClosedError(reason))

    def listener_for(self, name: str) -> SubchannelListenerEndpoint:
        """IStreamServerEndpoint for incoming subchannels named ``name``."""
        return SubchannelListenerEndpoint(self, name)

    def connector_for(self, name: str) -> SubchannelConnectorEndpoint:
        """IStreamClientEndpoint opening subchannels named ``name``.

        :raises ValueError: when ``name`` is empty.
        """
        return SubchannelConnectorEndpoint(self, name)

    # --- used by the endpoints ---

    def _open(self, name: str, factory: IProtocolFactory) -> IProtocol:
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

    def _listen(self, name: str, factory: IProtocolFactory) -> SubchannelListeningPort:
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

    def _unlisten(self, port: SubchannelListeningPort) -> None:
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
        )


__all__ = ["Multiplexer"]
