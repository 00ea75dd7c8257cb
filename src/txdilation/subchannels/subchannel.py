"""L5: one subchannel, the ITransport an application protocol sees.

A :class:`SubChannel` is created with its protocol already built (:meth:`SubChannel.start`
connects them); it writes through L4's outbound half and receives through its inbound half.
Lifecycle: :data:`~txdilation.subchannels.subchannel_lifecycle.subchannel_machine`
(state-diagrams/subchannel_lifecycle.svg), whose inputs return the steps this facade performs
with the machine at rest; writes and deliveries are plain code behind its two gates.

Invariants: one ``write()`` is one DATA record is one ``dataReceived()`` at the peer; a write
after our close or over the peer's record limit raises at once; where stock's behaviour is a
defect, :class:`~txdilation.semantics.Semantics` decides; full-close and half-close protocols
close as in stock; ``connectionLost`` at most once; the protocol's and its producer's
exceptions close this subchannel only; ``on_closed`` exactly once, right after
``connectionLost``. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol

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

from txdilation.semantics import STOCK, Semantics
from txdilation.subchannels.subchannel_lifecycle import (
    OPEN,
    OPEN_HALF,
    Finished,
    ReadLost,
    Refused,
    RegisterProducer,
    SendClose,
    Steps,
    StopProducer,
    SubchannelCore,
    SubchannelEvents,
    WriteLost,
    subchannel_machine,
)
from txdilation.subchannels.unanswered import Closes
from txdilation.wire.dilation_errors import (
    AlreadyClosedError,
    HalfCloseUsedOnNonHalfCloseable,
    NormalCloseUsedOnHalfCloseable,
    UnexpectedSubprotocol,
)
from txdilation.wire.limits import DEFAULT_MAX_RECORD_SIZE, RECORD_OVERHEAD

#: The largest ``write()`` by default: its DATA record (9 bytes more) must not exceed the largest
#: record a txdilation peer accepts by default (``TXDILATION_MAX_RECORD_SIZE``).
MAX_WRITE_LENGTH = DEFAULT_MAX_RECORD_SIZE - RECORD_OVERHEAD

_log = Logger()


@implementer(IAddress)
class _WormholeAddress:
    """``getHost()`` of every subchannel of one dilated wormhole (one instance per wormhole)."""

    def __repr__(self) -> str:
        return "<_WormholeAddress>"


@implementer(IAddress)
@dataclass(frozen=True, slots=True)
class SubchannelAddress:
    """``getPeer()`` of a subchannel and the ``buildProtocol`` argument: its subprotocol name."""

    subprotocol: str

    def __post_init__(self) -> None:
        if not isinstance(self.subprotocol, str):
            raise TypeError(f"subprotocol must be a str, not {type(self.subprotocol).__name__}")


class Sender(TypingProtocol):
    """What a subchannel writes through (the outbound half of L4)."""

    def send_data(self, scid: int, data: bytes) -> None: ...

    def send_close(self, scid: int) -> int: ...

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
        closes: Closes | None = None,
    ) -> None:
        self._scid = scid
        self._semantics = semantics
        self._max_write_length = max_write_length
        self._protocol = protocol
        self._peer = peer
        self._host = host
        self._manager = manager
        self._sender = sender
        self._receiver = receiver
        self._log = log if log is not None else _log
        self._on_closed = on_closed
        self._closes = closes
        #: payload bytes delivered to the protocol / accepted from it so far
        self.bytes_in = 0
        self.bytes_out = 0
        half_closeable = IHalfCloseableProtocol.providedBy(protocol)
        self._core = SubchannelCore(scid, self._log, semantics, half_closeable)
        self._machine: SubchannelEvents = subchannel_machine(
            self._core, OPEN_HALF if half_closeable else OPEN
        )

    def __repr__(self) -> str:
        return f"<SubChannel {self._scid} {self._peer.subprotocol!r}>"

    # --- performing what the machine says ---

    def _act(self, steps: Steps) -> None:
        """Perform ``steps`` in order; a protocol callback that raised closes the subchannel
        once they are done (the ``fail`` input, and what it says in turn)."""
        failures: list[Failure] = []
        for step in steps:
            match step:
                case SendClose(awaits_answer):
                    if awaits_answer and self._closes is not None:
                        self._closes.close(self._scid, self)
                    else:
                        self._sender.send_close(self._scid)
                case ReadLost():
                    self._call(_half(self._protocol).readConnectionLost, failures)
                case WriteLost():
                    self._call(_half(self._protocol).writeConnectionLost, failures)
                case Finished(reason, expect_close, deliver):
                    self._finish(reason, expect_close=expect_close, deliver=deliver)
                case RegisterProducer(producer, streaming):
                    self._sender.register_producer(self._scid, producer, streaming)  # type: ignore[arg-type]
                case StopProducer(producer):
                    try:
                        getattr(producer, "stopProducing")()  # noqa: B009 (it may be missing)
                    except Exception:
                        self._log.failure("producer {p!r}.stopProducing() failed", p=producer)
                case Refused(error):
                    raise error
        for failure in failures:
            self._act(self._machine.fail(failure))

    def _call(self, method: Callable[[], object], failures: list[Failure] | None = None) -> None:
        """Call into the protocol; if it raises, log it and close this subchannel with that
        failure (now, or once ``failures`` are taken care of)."""
        try:
            method()
        except Exception:
            failure = Failure()  # type: ignore[no-untyped-call]
            self._log.failure("subchannel {scid} protocol raised", failure, scid=self._scid)
            if failures is None:
                self._act(self._machine.fail(failure))
            else:
                failures.append(failure)

    def _finish(self, reason: Failure, *, expect_close: bool, deliver: bool) -> None:
        """Closed: forget the producer and the route, then ``connectionLost`` (when
        ``deliver``; the reason a Failure or its bare exception, per the semantics)."""
        semantics = self._semantics
        self._sender.unregister_producer(self._scid, stop=semantics.producer_stopped_on_close)
        self._receiver.subchannel_closed(self._scid, expect_close=expect_close)
        if self._closes is not None:
            self._closes.closed(self._scid)
        if deliver:
            argument = reason if semantics.reason_is_failure else reason.value
            try:
                self._protocol.connectionLost(argument)  # type: ignore[arg-type]
            except Exception:
                self._log.failure("subchannel {scid} connectionLost raised", scid=self._scid)
        if self._on_closed is not None:
            self._on_closed(self._scid, self.bytes_in, self.bytes_out)

    # --- from the multiplexer / inbound ---

    def start(self) -> None:
        """Connect the protocol (``makeConnection(self)``): ``connectionMade`` runs now."""
        self._call(lambda: self._protocol.makeConnection(self))

    def answer_overdue(self, reason: Failure) -> None:
        """No link brought the answer to our CLOSE in time
        (``txdilation.subchannels.unanswered``): ``connectionLost(reason)``."""
        self._act(self._machine.answer_overdue(reason))

    def remote_data(self, data: bytes) -> None:
        """The peer's DATA: one ``dataReceived`` (dropped and logged after the peer's CLOSE)."""
        if not self._core.readable:
            self._act(self._machine.late_data())
            return
        self.bytes_in += len(data)
        self._call(lambda: self._protocol.dataReceived(data))

    def remote_close(self) -> None:
        """The peer's CLOSE."""
        self._act(self._machine.remote_close())

    def abandon(self, reason: Failure) -> None:
        """The wormhole closed: deliver ``connectionLost(reason)`` without sending anything."""
        self._act(self._machine.abandon(reason))

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
            self.bytes_out += len(data)
            self._sender.send_data(self._scid, data)

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
        self._act(self._machine.close())

    def loseWriteConnection(self) -> None:
        """Half-close: send CLOSE and deliver ``writeConnectionLost``.

        :raises HalfCloseUsedOnNonHalfCloseable: when the protocol is not half-closeable.
        :raises AlreadyClosedError: when our write side is closed already and the peer's is
            not (stock's rule; a no-op with ``idempotent_close``). Once closed, a no-op.
        """
        self._act(self._machine.close_write())

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
        self._receiver.pause_subchannel(self._scid)

    def resumeProducing(self) -> None:
        """Deliver again (held records on a later reactor turn, in order)."""
        self._receiver.resume_subchannel(self._scid)

    def stopProducing(self) -> None:
        """The protocol wants no more data. As stock: stop holding its data back (it is no
        longer paused). With ``stop_producing_closes`` (as a TCP transport): drop what is held,
        deliver nothing more and close our side (no errors)."""
        if not self._semantics.stop_producing_closes:
            self._receiver.resume_subchannel(self._scid)
            return
        self._receiver.discard_subchannel(self._scid)
        core = self._core
        if core.writable:  # (then neither close is refused)
            self._act(self._machine.close_write() if core.half_closeable else self._machine.close())

    # --- IConsumer: the protocol's producer feeds our writes ---

    def registerProducer(self, producer: IProducer, streaming: bool) -> None:
        """Let L4 pause/resume ``producer`` with the connection (and its own queue bound).

        On a closed subchannel nothing is registered: the producer is ignored, as stock does, or
        stopped at once (as a TCP transport does) with ``producer_stopped_on_close``.

        :raises ValueError: when a producer is already registered.
        """
        self._act(self._machine.register_producer(producer, streaming))

    def unregisterProducer(self) -> None:
        """Forget the registered producer (no-op if none)."""
        self._sender.unregister_producer(self._scid)


def _half(protocol: IProtocol) -> IHalfCloseableProtocol:
    return IHalfCloseableProtocol(protocol)


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
