"""L5: one subchannel, the ITransport an application protocol sees.

A :class:`SubChannel` is created with its protocol already built; :meth:`SubChannel.start`
connects them (``makeConnection``). It writes through the outbound half of L4 and receives
through the inbound half (which may hold its records while it is paused).

Invariants:

- one ``write()`` is one DATA record is one ``dataReceived()`` at the peer (an empty write is
  an empty record, as in stock, unless the semantics say otherwise); ``write()`` after our side
  closed raises :class:`AlreadyClosedError`; a write whose record the peer would refuse (over
  its ``max_record_size``, by default 64 MiB) raises ``ValueError`` at once, instead of being
  queued and then dropping every connection it is replayed on;
- what the application sees where stock's behaviour is a defect whose fix could break it
  follows :class:`~txdilation.semantics.Semantics` (stock's by default): the type of the
  ``connectionLost`` reason (a bare ``ConnectionDone()`` as in stock, or a Failure), whether a
  repeated close raises :class:`AlreadyClosedError` (stock) or is a no-op, whether a
  half-closeable protocol ends with ``connectionLost``, what ``stopProducing()`` does, whether
  the registered producer is stopped on close, whether the wormhole's close delivers
  ``connectionLost``;
- full-close protocols: the peer's CLOSE is answered with CLOSE, then ``connectionLost``;
  after our own CLOSE (state ``closing``) DATA is still delivered until the peer's CLOSE;
- protocols providing ``IHalfCloseableProtocol``: the peer's CLOSE delivers
  ``readConnectionLost()``; ``loseWriteConnection()`` sends CLOSE and delivers
  ``writeConnectionLost()``. ``loseConnection()`` on them is refused with
  :class:`NormalCloseUsedOnHalfCloseable` (stock's rule);
- ``connectionLost`` is delivered at most once; exceptions raised by the protocol are logged
  and close this subchannel only (we send CLOSE if we had not), never the connection below;
  calls on the application's producer are guarded the same way (a producer lacking an
  optional method, or raising, is logged, never fatal);
- ``bytes_in`` / ``bytes_out`` count the payload bytes delivered to the protocol and accepted
  from it (one int add per record); ``on_closed(scid, bytes_in, bytes_out)``, when given, is
  called exactly once, right after ``connectionLost``.

The lifecycle is the module-level Automat machine ``subchannel_machine`` (states ``open``,
``closing``, ``open_half``, ``read_closed``, ``write_closed``, ``closed``). Writes and
deliveries are plain code guarded by flags the machine's behaviours maintain; refusals are
raised by the facade before any input reaches the machine, so that an input the machine runs
later (Automat postpones reentrant inputs) never raises into an unrelated caller.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol

import attrs
from automat import TypeMachine, TypeMachineBuilder
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import (
    IAddress,
    IConsumer,
    IHalfCloseableProtocol,
    IProducer,
    IProtocol,
    IPullProducer,
    IPushProducer,
    ITransport,
)
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.durable.outbound import RECORD_OVERHEAD
from txdilation.semantics import STOCK, Semantics
from txdilation.wire.errors import (
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
    UnexpectedSubprotocol,
)
from txdilation.wire.limits import DEFAULT_MAX_RECORD_SIZE
from txdilation.wire.machines import TypedState

#: The largest ``write()`` by default: its DATA record (9 bytes more) must not exceed the largest
#: record a txdilation peer accepts by default (``TXDILATION_MAX_RECORD_SIZE``).
MAX_WRITE_LENGTH = DEFAULT_MAX_RECORD_SIZE - RECORD_OVERHEAD

_log = Logger(namespace="txdilation.subchannels.subchannel")


@implementer(IAddress)
class _WormholeAddress:
    """``getHost()`` of every subchannel of one dilated wormhole (one instance per wormhole)."""

    def __repr__(self) -> str:
        return "<_WormholeAddress>"


@implementer(IAddress)
@attrs.frozen
class SubchannelAddress:
    """``getPeer()`` of a subchannel and the ``buildProtocol`` argument: its subprotocol name."""

    subprotocol: str = attrs.field(validator=attrs.validators.instance_of(str))


class Sender(TypingProtocol):
    """What a subchannel writes through (the outbound half of L4)."""

    def send_data(self, scid: int, data: bytes) -> None: ...

    def send_close(self, scid: int) -> None: ...

    def register_producer(
        self, key: Hashable, producer: IPushProducer | IPullProducer, streaming: bool
    ) -> None: ...

    def unregister_producer(self, key: Hashable, *, stop: bool = False) -> None: ...


class Receiver(TypingProtocol):
    """What a subchannel reads through (the inbound half of L4)."""

    def pause_subchannel(self, scid: int) -> None: ...

    def resume_subchannel(self, scid: int) -> None: ...

    def discard_subchannel(self, scid: int) -> None: ...

    def subchannel_closed(self, scid: int, *, expect_close: bool) -> None: ...


class _SubchannelInputs(TypingProtocol):
    """Lifecycle inputs of one subchannel."""

    def remote_close(self) -> None:
        "The peer's CLOSE."

    def close(self) -> None:
        "The application's loseConnection()."

    def close_write(self) -> None:
        "The application's loseWriteConnection()."

    def abandon(self, reason: Failure) -> None:
        "The wormhole is closing: connectionLost(reason), nothing sent."

    def fail(self, reason: Failure) -> None:
        "The protocol raised: close this subchannel with that failure."


@dataclass(slots=True)
class _SubchannelCore:
    scid: int
    protocol: IProtocol
    sender: Sender
    receiver: Receiver
    log: Logger
    semantics: Semantics = STOCK
    readable: bool = True
    writable: bool = True
    closed: bool = False
    bytes_in: int = 0
    bytes_out: int = 0
    on_closed: Callable[[int, int, int], object] | None = None

    def send_close(self) -> None:
        self.writable = False
        self.sender.send_close(self.scid)

    def call_protocol(self, m: _SubchannelInputs, method: Callable[[], object]) -> None:
        try:
            method()
        except Exception:
            failure = Failure()  # type: ignore[no-untyped-call]
            self.log.failure("subchannel {scid} protocol raised", failure, scid=self.scid)
            m.fail(failure)

    def done(self) -> Failure:
        """A clean close (``ConnectionDone()``, as stock's has no message)."""
        return Failure(ConnectionDone())  # type: ignore[no-untyped-call]

    def finish(self, reason: Failure, *, expect_close: bool, deliver: bool = True) -> None:
        """Closed: forget the producer and the route, then ``connectionLost`` (when
        ``deliver``; the reason a Failure or its bare exception, per the semantics)."""
        self.readable = self.writable = False
        self.closed = True
        self.sender.unregister_producer(self.scid, stop=self.semantics.producer_stopped_on_close)
        self.receiver.subchannel_closed(self.scid, expect_close=expect_close)
        if deliver:
            argument = reason if self.semantics.reason_is_failure else reason.value
            try:
                self.protocol.connectionLost(argument)  # type: ignore[arg-type]
            except Exception:
                self.log.failure("subchannel {scid} connectionLost raised", scid=self.scid)
        if self.on_closed is not None:
            self.on_closed(self.scid, self.bytes_in, self.bytes_out)

    def finish_half(self) -> None:
        """Both directions of a half-closeable protocol are closed."""
        deliver = self.semantics.half_close_ends_with_connection_lost
        self.finish(self.done(), expect_close=False, deliver=deliver)


def _half(protocol: IProtocol) -> IHalfCloseableProtocol:
    return IHalfCloseableProtocol(protocol)


_State = TypedState[_SubchannelInputs, _SubchannelCore]


def _build_subchannel_machine() -> tuple[
    TypeMachine[_SubchannelInputs, _SubchannelCore], _State, _State
]:
    b = TypeMachineBuilder(_SubchannelInputs, _SubchannelCore)
    open_ = b.state("open")
    closing = b.state("closing")
    open_half = b.state("open_half")
    read_closed = b.state("read_closed")
    write_closed = b.state("write_closed")
    closed = b.state("closed")
    I = _SubchannelInputs  # noqa: E741 (a short alias keeps the transition table readable)

    # --- full-close protocols ---

    @open_.upon(I.remote_close).to(closed)
    def answer_close(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.send_close()
        c.finish(c.done(), expect_close=False)

    @open_.upon(I.close).to(closing)
    def start_closing(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.send_close()

    @closing.upon(I.remote_close).to(closed)
    def closed_by_peer(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.finish(c.done(), expect_close=False)

    # --- half-closeable protocols ---

    @open_half.upon(I.remote_close).to(read_closed)
    def read_side_closed(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.readable = False
        c.call_protocol(m, _half(c.protocol).readConnectionLost)

    @open_half.upon(I.close_write).to(write_closed)
    def write_side_closed(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.send_close()
        c.call_protocol(m, _half(c.protocol).writeConnectionLost)

    @read_closed.upon(I.close_write).to(closed)
    def both_sides_closed(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.send_close()
        c.call_protocol(m, _half(c.protocol).writeConnectionLost)
        c.finish_half()

    @write_closed.upon(I.remote_close).to(closed)
    def both_sides_closed_by_peer(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.readable = False
        c.call_protocol(m, _half(c.protocol).readConnectionLost)
        c.finish_half()

    @read_closed.upon(I.remote_close).loop()
    def second_close(m: _SubchannelInputs, c: _SubchannelCore) -> None:
        c.log.warn("subchannel {scid}: second CLOSE from the peer ignored", scid=c.scid)

    # --- endings shared by both kinds ---

    for state in (open_, closing, open_half, read_closed, write_closed):

        @state.upon(I.abandon).to(closed)
        def abandoned(m: _SubchannelInputs, c: _SubchannelCore, reason: Failure) -> None:
            deliver = c.semantics.close_delivers_connection_lost
            c.finish(reason, expect_close=False, deliver=deliver)

    @open_.upon(I.fail).to(closed)
    @open_half.upon(I.fail).to(closed)
    def failed_while_open(m: _SubchannelInputs, c: _SubchannelCore, reason: Failure) -> None:
        c.send_close()
        c.finish(reason, expect_close=True)

    @closing.upon(I.fail).to(closed)
    @write_closed.upon(I.fail).to(closed)
    def failed_after_our_close(m: _SubchannelInputs, c: _SubchannelCore, reason: Failure) -> None:
        c.finish(reason, expect_close=True)

    @read_closed.upon(I.fail).to(closed)
    def failed_after_their_close(m: _SubchannelInputs, c: _SubchannelCore, reason: Failure) -> None:
        c.send_close()
        c.finish(reason, expect_close=False)

    # --- documented rejections and repeats (no-ops here; the facade raises where stock did) ---
    # close_write on a full-close protocol: HalfCloseUsedOnNonHalfCloseable (facade).
    # close on a half-closeable protocol: NormalCloseUsedOnHalfCloseable (facade; a no-op with
    # idempotent_close once our write side is closed). close/close_write after our CLOSE:
    # AlreadyClosedError (facade) or, with idempotent_close, a no-op. Anything after closed:
    # a no-op.
    open_.upon(I.close_write).loop().returns(None)
    closing.upon(I.close).loop().returns(None)
    closing.upon(I.close_write).loop().returns(None)
    open_half.upon(I.close).loop().returns(None)
    read_closed.upon(I.close).loop().returns(None)
    write_closed.upon(I.close).loop().returns(None)
    write_closed.upon(I.close_write).loop().returns(None)
    for event in (I.remote_close, I.close, I.close_write):
        closed.upon(event).loop().returns(None)
    closed.upon(I.abandon).loop().returns(None)
    closed.upon(I.fail).loop().returns(None)
    return b.build(), open_, open_half


subchannel_machine, _OPEN, _OPEN_HALF = _build_subchannel_machine()


@implementer(ITransport, IPushProducer, IConsumer)
class SubChannel:
    """One subchannel: ITransport + IPushProducer (our reading) + IConsumer (our writing).

    :param scid: the subchannel id (its parity says who opened it).
    :param protocol: the application protocol, already built; see :meth:`start`.
    :param peer: ``getPeer()``, the subprotocol name.
    :param host: ``getHost()``, shared by all subchannels of the wormhole.
    :param sender: the outbound half of L4.
    :param receiver: the inbound half of L4.
    :param manager: opaque, kept as ``_manager`` (magic-wormhole's tests reach
        ``transport._manager._connection``).
    :param max_write_length: the largest ``write()`` accepted.
    :param on_closed: called as ``on_closed(scid, bytes_in, bytes_out)`` once it closed.
    :param semantics: what the application sees where stock's behaviour is a defect.
    """

    def __init__(
        self,
        scid: int,
        protocol: IProtocol,
        *,
        peer: SubchannelAddress,
        host: IAddress,
        sender: Sender,
        receiver: Receiver,
        manager: object = None,
        log: Logger | None = None,
        max_write_length: int = MAX_WRITE_LENGTH,
        on_closed: Callable[[int, int, int], object] | None = None,
        semantics: Semantics = STOCK,
    ) -> None:
        self._scid = scid
        self._semantics = semantics
        self._max_write_length = max_write_length
        self._protocol = protocol
        self._peer = peer
        self._host = host
        self._manager = manager
        self._half_closeable = IHalfCloseableProtocol.providedBy(protocol)
        self._core = _SubchannelCore(
            scid,
            protocol,
            sender,
            receiver,
            log if log is not None else _log,
            semantics,
            on_closed=on_closed,
        )
        initial = _OPEN_HALF if self._half_closeable else _OPEN
        self._machine = subchannel_machine(self._core, initial)

    def __repr__(self) -> str:
        return f"<SubChannel {self._scid} {self._peer.subprotocol!r}>"

    @property
    def bytes_in(self) -> int:
        """Payload bytes delivered to the protocol so far."""
        return self._core.bytes_in

    @property
    def bytes_out(self) -> int:
        """Payload bytes the protocol wrote so far."""
        return self._core.bytes_out

    # --- from the multiplexer / inbound ---

    def start(self) -> None:
        """Connect the protocol (``makeConnection(self)``): ``connectionMade`` runs now."""
        self._core.call_protocol(self._machine, lambda: self._protocol.makeConnection(self))

    def remote_data(self, data: bytes) -> None:
        """The peer's DATA: one ``dataReceived`` (dropped and logged after the peer's CLOSE)."""
        core = self._core
        if not core.readable:
            if not core.closed:
                core.log.warn("subchannel {scid}: DATA after the peer's CLOSE", scid=self._scid)
            return
        core.bytes_in += len(data)
        core.call_protocol(self._machine, lambda: self._protocol.dataReceived(data))

    def remote_close(self) -> None:
        """The peer's CLOSE."""
        self._machine.remote_close()

    def abandon(self, reason: Failure) -> None:
        """The wormhole closed: deliver ``connectionLost(reason)`` without sending anything."""
        self._machine.abandon(reason)

    # --- ITransport ---

    def write(self, data: bytes) -> None:
        """Send ``data`` as one DATA record (``b""`` too, as stock does, unless the semantics
        say ``empty_write_sends_nothing``).

        :raises TypeError: when ``data`` is not bytes.
        :raises ValueError: when ``data`` is longer than ``max_write_length`` (by default
            :data:`MAX_WRITE_LENGTH`, 64 MiB less 9 bytes).
        :raises AlreadyClosedError: after ``loseConnection``/``loseWriteConnection`` or close.
        """
        if not isinstance(data, bytes):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        if not self._core.writable:
            raise AlreadyClosedError("write not allowed on closed subchannel")
        if len(data) > self._max_write_length:
            raise ValueError(f"a single write is limited to {self._max_write_length} bytes")
        if data or not self._semantics.empty_write_sends_nothing:
            core = self._core
            core.bytes_out += len(data)
            core.sender.send_data(self._scid, data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        """``write(b"".join(data))``: still one record."""
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        """Send CLOSE; ``connectionLost`` follows the peer's CLOSE.

        :raises NormalCloseUsedOnHalfCloseable: for an IHalfCloseableProtocol (use
            ``loseWriteConnection``; with ``idempotent_close`` only while its write side is
            open, a no-op afterwards).
        :raises AlreadyClosedError: when we sent CLOSE and the peer has not answered yet
            (stock's rule; a no-op with ``idempotent_close``). Once closed, a no-op.
        """
        core = self._core
        if self._half_closeable:
            if core.writable or not self._semantics.idempotent_close:
                raise NormalCloseUsedOnHalfCloseable()
            return
        self._refuse_repeated_close("loseConnection")
        self._machine.close()

    def loseWriteConnection(self) -> None:
        """Half-close: send CLOSE and deliver ``writeConnectionLost``.

        :raises HalfCloseUsedOnNonHalfCloseable: when the protocol is not half-closeable.
        :raises AlreadyClosedError: when our write side is closed already and the peer's is
            not (stock's rule; a no-op with ``idempotent_close``). Once closed, a no-op.
        """
        if not self._half_closeable:
            raise HalfCloseUsedOnNonHalfCloseable()
        self._refuse_repeated_close("loseWriteConnection")
        self._machine.close_write()

    def _refuse_repeated_close(self, what: str) -> None:
        core = self._core
        if not core.writable and not core.closed and not self._semantics.idempotent_close:
            raise AlreadyClosedError(f"{what} not allowed on closed subchannel")

    @property
    def disconnecting(self) -> bool:
        """True once our side stopped writing (as on a TCP transport, which Twisted's
        ``LineReceiver`` and friends consult)."""
        return not self._core.writable

    def getHost(self) -> IAddress:
        """The wormhole's address (the same object for every subchannel of one wormhole)."""
        return self._host

    def getPeer(self) -> SubchannelAddress:
        """``SubchannelAddress(subprotocol)``."""
        return self._peer

    # --- IPushProducer: the protocol throttles what we deliver to it ---

    def pauseProducing(self) -> None:
        """Deliver no more data to the protocol until ``resumeProducing``."""
        self._core.receiver.pause_subchannel(self._scid)

    def resumeProducing(self) -> None:
        """Deliver again (held records on a later reactor turn, in order)."""
        self._core.receiver.resume_subchannel(self._scid)

    def stopProducing(self) -> None:
        """The protocol wants no more data. As stock: stop holding its data back (it is no
        longer paused). With ``stop_producing_closes`` (as a TCP transport): drop what is held,
        deliver nothing more and close our side (no errors)."""
        core = self._core
        if not self._semantics.stop_producing_closes:
            core.receiver.resume_subchannel(self._scid)
            return
        core.receiver.discard_subchannel(self._scid)
        if core.writable:
            if self._half_closeable:
                self._machine.close_write()
            else:
                self._machine.close()

    # --- IConsumer: the protocol's producer feeds our writes ---

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        """Let L4 pause/resume ``producer`` with the connection (and its own queue bound).

        On a closed subchannel nothing is registered: the producer is ignored, as stock does, or
        stopped at once (as a TCP transport does) with ``producer_stopped_on_close``.

        :raises ValueError: when a producer is already registered.
        """
        if self._core.closed:
            if self._semantics.producer_stopped_on_close:
                try:
                    getattr(producer, "stopProducing")()  # noqa: B009 (it may be missing)
                except Exception:
                    self._core.log.failure("producer {p!r}.stopProducing() failed", p=producer)
            return
        self._core.sender.register_producer(self._scid, producer, streaming)  # type: ignore[arg-type]

    def unregisterProducer(self) -> None:
        """Forget the registered producer (no-op if none)."""
        self._core.sender.unregister_producer(self._scid)


__all__ = [
    "MAX_WRITE_LENGTH",
    "AlreadyClosedError",
    "HalfCloseUsedOnNonHalfCloseable",
    "NormalCloseUsedOnHalfCloseable",
    "Receiver",
    "Sender",
    "SubChannel",
    "SubchannelAddress",
    "UnexpectedSubprotocol",
]
