"""L2: one candidate connection, pumped from ``dataReceived`` through the I/O-free cores.

In: :class:`~txdilation.link.framer.Framer` -> :class:`~txdilation.link.noise.NoiseSession` ->
:func:`~txdilation.wire.records.parse_record`; out: record -> encode -> encrypt -> one
``writeSequence``. Lifecycle: ``l2_machine`` (:mod:`txdilation.link.connection_lifecycle`;
state-diagrams/connection_lifecycle.svg).

Invariants: only handshake messages and KCM before selection (the Leader's KCM in ``select()``),
any other order a protocol violation that drops this connection only; records that follow the
peer's KCM are held until the owner selects (:meth:`DilatedConnectionProtocol.deliver_held`);
one typed :class:`~txdilation.wire.reasons.LinkLoss` per connection, heard once; nothing
delivered once aborted; unselected after ``handshake_timeout``: aborted; no per-record logging
or copies beyond one; ``TCP_NODELAY`` and :data:`TCP_BUFFER_SIZE` reads; once lost, no cycle,
transport or sink held. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any

from twisted.internet.error import ConnectionClosed, ConnectionDone
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.link.connection_lifecycle import L2Connection, L2Core, L2Events, l2_machine
from txdilation.link.framer import (
    DEFAULT_MAX_RECORD_SIZE,
    Framer,
    PrologueReceived,
    RelayAccepted,
    max_frame_size_for_record,
)
from txdilation.link.noise import NoiseSession
from txdilation.wire.contracts import ICandidateOwner, IDilatedConnection, IRecordSink
from txdilation.wire.dilation_errors import DilationProtocolError, FramingError
from txdilation.wire.limits import DEFAULT_HANDSHAKE_TIMEOUT
from txdilation.wire.machines import inert
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import (
    KCM,
    Record,
    encode_record_parts,
    parse_record,
    parse_record_view,
)
from txdilation.wire.roles import Role

__all__ = [
    "TCP_BUFFER_SIZE",
    "DilatedConnectionProtocol",
    "transport_loss",
]

#: Bytes the TCP transport reads per ``recv`` and buffers before pausing its producer
#: (``bufferSize``), and sends per ``send`` (``SEND_LIMIT``), when it has those attributes.
TCP_BUFFER_SIZE = 2**18

_log = Logger()


def tune_transport(transport: Any) -> None:
    """Set up a connection's transport for Dilation's traffic, as far as it allows.

    - ``TCP_NODELAY``: a small record (the first DATA on a new subchannel, an interactive
      write next to a bulk stream, an ACK) goes out at once instead of waiting behind an
      unacknowledged segment for the peer's delayed ACK (Nagle's algorithm: 40 ms on Linux).
      Writes stay coalesced without Nagle: Twisted buffers every write of a reactor turn and
      sends them with one ``send`` of up to ``SEND_LIMIT`` bytes once the socket is writable,
      so a bulk stream still goes out in large segments;
    - the read size, buffer bound and send limit raised to :data:`TCP_BUFFER_SIZE`.

    A transport without ``setTcpNoDelay`` (or whose socket refuses it) is left as it is.
    """
    if getattr(transport, "bufferSize", TCP_BUFFER_SIZE) < TCP_BUFFER_SIZE:
        transport.bufferSize = TCP_BUFFER_SIZE
    if getattr(transport, "SEND_LIMIT", TCP_BUFFER_SIZE) < TCP_BUFFER_SIZE:
        transport.SEND_LIMIT = TCP_BUFFER_SIZE
    set_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        with suppress(OSError):  # not a TCP socket after all (a UNIX socket, a pipe)
            set_no_delay(True)


def _noop(*args: object) -> None:
    return None


def transport_loss(reason: Failure | None) -> LinkLoss:
    """Why a transport ended, from the reason Twisted gave ``connectionLost``: a clean close
    (``ConnectionDone``, or no reason), a lost or aborted connection (any other
    ``ConnectionClosed``), or another error; the message is Twisted's."""
    if reason is None:
        return LinkLoss(Cause.CLOSED, "closed")
    if reason.check(ConnectionDone):  # type: ignore[no-untyped-call]
        cause = Cause.CLOSED
    elif reason.check(ConnectionClosed):  # type: ignore[no-untyped-call]
        cause = Cause.DROPPED
    else:
        cause = Cause.TRANSPORT_FAILED
    return LinkLoss(cause, reason.getErrorMessage())


_CLOSED: L2Events = inert(L2Events)
_DETACHED: L2Connection = inert(L2Connection)  # what a lost connection's core drives


@implementer(IDilatedConnection)
class DilatedConnectionProtocol(Protocol):
    """One L2 connection (a Twisted protocol); see the module docstring for its invariants."""

    def __init__(
        self,
        *,
        role: Role,
        dilation_key: bytes,
        owner: ICandidateOwner,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        clock: IReactorTime,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        self.role = role
        self.description = description
        self.is_direct = is_direct
        self._relay_line = relay_line
        self._clock = clock
        self._max_record_size = max_record_size
        self._handshake_timeout = handshake_timeout
        self._framer = Framer(role, expect_relay=relay_line is not None)
        self._noise = NoiseSession(role, dilation_key)
        self._sink: IRecordSink | None = None
        self._on_frame: Callable[[memoryview], None] = self._frame_too_early
        self.reading_paused = False
        self._failed_reason: LinkLoss | None = None
        self._reading = True  # False once failed or aborted: later bytes are not looked at
        self._core = L2Core(self, role, owner)
        self.events: L2Events = l2_machine(self._core)

    def __repr__(self) -> str:
        return f"<DilatedConnectionProtocol {self.role.value} {self.description}>"

    # --- Twisted Protocol ---

    def connectionMade(self) -> None:
        tune_transport(self.transport)
        self._core.timer = self._clock.callLater(self._handshake_timeout, self._timed_out)
        if self._relay_line is not None:
            self.events.connected_via_relay()
        else:
            self.events.connected_directly()

    def dataReceived(self, data: bytes) -> None:
        if not self._reading:
            return  # dropped or aborted already: whatever still arrives is ignored
        framer = self._framer
        try:
            framer.receive_data(data)
            while self._reading:
                if framer.framing:  # from now on only frames: the tight loop
                    next_frame = framer.next_frame
                    while self._reading:
                        payload = next_frame()
                        if payload is None:
                            return
                        self._on_frame(payload)
                    return
                event = framer.next_event()
                if event is None:
                    return
                if type(event) is PrologueReceived:
                    self.events.prologue_received()
                elif type(event) is RelayAccepted:
                    self.events.relay_accepted()
        except DilationProtocolError as e:
            self.fail(LinkLoss(Cause.PROTOCOL_ERROR, f"{type(e).__name__}: {e}"))

    def connectionLost(self, reason: Failure | None = None) -> None:
        why = self._failed_reason or transport_loss(reason)
        self.transport = None
        self.events.lost(why)
        # Break the cycles (protocol -> machine -> core -> protocol, the bound frame handler)
        # and drop the sink: a dead connection, its buffers and its Noise session are freed
        # by reference counting as soon as nobody else holds it, not at the next full GC.
        # Every input of the ``closed`` state is a no-op, and so is every one of inert's.
        self.events = _CLOSED
        self._core.connection = _DETACHED
        self._on_frame = _noop
        self._sink = None

    # --- what the lifecycle machine has the connection do ---

    def send_relay_line(self) -> None:
        """Ask the transit relay to connect us to the peer."""
        assert self._relay_line is not None
        self._write(self._relay_line)

    def send_prologue(self) -> None:
        """Send our prologue (connected directly, or the relay answered ``ok``)."""
        self._write(self._framer.our_prologue)

    def start_handshake(self) -> None:
        """The peer's prologue arrived: read Noise handshake messages, send ours if we start."""
        self._on_frame = self._frame_handshake
        message = self._noise.start()
        if message is not None:
            self._write_frame(message)

    def await_kcm(self) -> None:
        """The handshake completed: read records (only a KCM is accepted before selection)."""
        self._on_frame = self._frame_before_selection

    def deliver_to(self, sink: IRecordSink) -> None:
        """Selected: every record received from now on goes to ``sink``."""
        self._sink = sink
        self._on_frame = self._frame_selected

    # --- frame handlers, swapped as the connection moves on ---

    def _frame_too_early(self, payload: memoryview) -> None:
        raise FramingError("frame before the handshake could start")

    def _frame_handshake(self, payload: memoryview) -> None:
        reply = self._noise.receive_handshake(payload)
        if reply is not None:
            self._write_frame(reply)
        self._framer.set_max_frame_size(max_frame_size_for_record(self._max_record_size))
        self.events.handshake_completed()

    def _frame_before_selection(self, payload: memoryview) -> None:
        record = parse_record(self._noise.decrypt(payload))
        if type(record) is not KCM:
            held = self._core.held
            if held is None:
                raise DilationProtocolError(f"{type(record).__name__} record before selection")
            held.append(record)  # the peer selected us (or may): keep it for after select()
            return
        # The machine settles first; then the owner hears of it, so that its select() is no
        # re-entrant input queued behind records it causes to be sent.
        if self.events.kcm_received():
            self._core.owner.candidate_ready(self)

    def _frame_selected(self, payload: memoryview) -> None:
        record = parse_record_view(self._noise.decrypt_view(payload))
        if type(record) is KCM:
            raise DilationProtocolError("KCM on an already selected connection")
        sink = self._sink
        assert sink is not None
        sink.got_record(record)

    def deliver_held(self) -> None:
        """Hand the sink the records that followed the peer's KCM before we were selected, in
        order. Call once the owner has taken this connection (after ``select``)."""
        held, self._core.held = self._core.held, None
        sink = self._sink
        for record in held or ():
            if not self._reading or sink is not self._sink:
                return  # aborted meanwhile: an abandoned connection delivers nothing
            assert sink is not None
            sink.got_record(record)

    # --- sending ---

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _write_frame(self, payload: bytes) -> None:
        if self.transport is not None:
            self.transport.writeSequence(Framer.frame(payload))

    def _encrypted(self, record: Record) -> list[bytes]:
        """``record`` encoded, encrypted and framed: the pieces for ``writeSequence``."""
        head, body = encode_record_parts(record)
        return Framer.frame_pieces(self._noise.encrypt_pieces(head, body))

    def send_record(self, record: Record) -> None:
        """Encode, encrypt, frame and write one record (no-op once closed).

        A record the Noise session cannot encrypt (no handshake yet, or the session failed)
        drops this connection instead of raising into the caller.
        """
        try:
            parts = self._encrypted(record)
        except DilationProtocolError as e:
            self.fail(LinkLoss(Cause.PROTOCOL_ERROR, f"cannot send {type(record).__name__}: {e}"))
            return
        if self.transport is not None:
            self.transport.writeSequence(parts)

    def send_records(self, records: Iterable[Record]) -> None:
        """Send several records with one ``writeSequence``."""
        if self.transport is None:
            return
        parts: list[bytes] = []
        encrypted = self._encrypted
        try:
            for record in records:
                parts += encrypted(record)
        except DilationProtocolError as e:
            self.fail(LinkLoss(Cause.PROTOCOL_ERROR, f"cannot send records: {e}"))
            return
        if parts:
            self.transport.writeSequence(parts)

    # --- IDilatedConnection controls ---

    @property
    def _tcp(self) -> Any:
        """The TCP transport (ITCPTransport + IProducer + IConsumer) while open, else None."""
        return self.transport

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        if self._tcp is not None:
            self._tcp.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        if self._tcp is not None:
            self._tcp.unregisterProducer()

    def pause_reading(self) -> None:
        if self._tcp is not None:
            self.reading_paused = True
            self._tcp.pauseProducing()

    def resume_reading(self) -> None:
        if self._tcp is not None:
            self.reading_paused = False
            self._tcp.resumeProducing()

    def disconnect(self) -> None:
        """Close politely (stock's name; magic-wormhole's tests call it)."""
        if self._tcp is not None:
            self._tcp.loseConnection()

    def abort(self) -> None:
        """Close at once, without waiting for buffered data or TCP timeouts. No record is
        delivered after this, not even one already received in the same read."""
        self._reading = False
        if self._tcp is not None:
            self._tcp.abortConnection()

    @property
    def prologue_received(self) -> bool:
        """True once the peer's prologue arrived intact (the listener's flood cap closes
        connections without one first)."""
        return self._framer.framing

    def fail(self, reason: LinkLoss) -> None:
        """Drop this connection because of ``reason`` (logged once; the first reason is the
        one the owner or sink hears)."""
        if self._failed_reason is None:
            self._failed_reason = reason
            _log.info(
                "dropping L2 connection {desc}: {reason}",
                desc=self.description,
                reason=reason.message,
                cause=reason.cause.value,
            )
        self.abort()

    def _timed_out(self) -> None:
        self._core.timer = None
        self.fail(
            LinkLoss(Cause.HANDSHAKE_TIMEOUT, f"not selected within {self._handshake_timeout:g}s")
        )
