"""Shared: the contracts between txdilation's layers (zope.interface, checked with verifyObject).

Who provides what: :class:`IDilatedConnection`, one L2 connection
(``link.connection.DilatedConnectionProtocol``); :class:`ICandidateOwner`, the L3 race that
owns candidates (``selection.connector.Connector``); :class:`IRecordSink`, the L3 selected link
that dispatches received records (``path.selected_link.SelectedLink``); :class:`ISentLog`, one
link's sequenced writes until its ACKs retire them (``durable.sent_log.SentLog``);
:class:`IRecordReceiver` / :class:`IMultiplexer`, L4 and L5 as the L1 Manager drives them
(``subchannels.multiplexer.Multiplexer``). The layers: docs/architecture.md.

Writing, a record goes from L4 to the connection itself (noted in the ``ISentLog``); reading,
from the connection to its ``IRecordSink`` and on to the ``IRecordReceiver``. Only these
interfaces cross the layer boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.interfaces import (
    IPushProducer,
    IReactorFDSet,
    IReactorTCP,
    IReactorThreads,
    IReactorTime,
)
from zope.interface import Attribute, Interface

from txdilation.wire.reasons import LinkLoss
from txdilation.wire.records import Ack, Close, Data, Open, Ping, Record


class IDilationReactor(IReactorTime, IReactorTCP, IReactorFDSet, IReactorThreads):
    """What a dilated wormhole asks of its reactor: the clock, TCP (listening and dialling),
    file descriptors (address and route changes) and a thread pool (address discovery).

    A type, not a check: a real reactor provides all of these, tests pass a
    ``MemoryReactorClock`` or a ``Clock`` to what uses the clock alone, and nothing verifies that
    a reactor declares this interface. Code that needs only the clock takes an ``IReactorTime``.
    """


class IDilatedConnection(Interface):
    """A selected L2 connection, as the manager and the multiplexer see it.

    Invariants: records are sent in call order; nothing is sent after ``disconnect()`` or
    ``abort()``; ``send_record`` on a connection whose transport is gone is a silent no-op
    (the durable queue, not the connection, owns retransmission).
    """

    description = Attribute("str: how this connection was made, e.g. '->tcp:127.0.0.1:4001'")
    is_direct = Attribute("bool: False when it goes through a transit relay")
    reading_paused = Attribute("bool: True between pause_reading() and resume_reading()")

    def send_record(record: Record) -> None:
        """Encode, encrypt, frame and write one record."""

    def send_records(records: Iterable[Record]) -> None:
        """Like send_record for each of an iterable of records, with one transport write."""

    def registerProducer(producer: IPushProducer, streaming: bool) -> None:
        """Register a producer with the underlying TCP transport (it pauses/resumes it)."""

    def unregisterProducer() -> None:
        """Undo registerProducer."""

    def pause_reading() -> None:
        """Stop reading from the socket (whole-connection inbound back-pressure)."""

    def resume_reading() -> None:
        """Resume reading from the socket."""

    def disconnect() -> None:
        """Close politely (loseConnection). The record sink hears connection_lost later."""

    def abort() -> None:
        """Close at once (abortConnection): for dead paths and protocol violations."""

    def fail(reason: LinkLoss) -> None:
        """Close at once, as ``abort()``, because of ``reason`` (logged once; the first reason
        given is the one the record sink hears in ``connection_lost``)."""


class IRecordSink(Interface):
    """Where a selected L2 connection delivers what it receives (the selected link)."""

    def got_record(record: Record) -> None:
        """One parsed record (never KCM before selection; a later KCM is a violation)."""

    def connection_lost(connection: IDilatedConnection, reason: LinkLoss) -> None:
        """The selected connection is gone, because of ``reason``. Called exactly once."""


class IRecordReceiver(Interface):
    """What takes the OPEN, DATA, CLOSE, ACK and PING records a selected link receives (L4:
    the multiplexer). Each is called once per record, in the order the records arrived."""

    def got_open(record: Open) -> None:
        """The peer opened a subchannel (or replayed its OPEN)."""

    def got_data(record: Data) -> None:
        """One DATA record (the byte path: new or replayed)."""

    def got_close(record: Close) -> None:
        """The peer closed a subchannel (or replayed its CLOSE)."""

    def got_ack(record: Ack) -> None:
        """The peer acknowledged every record up to ``record.resp_seqnum``."""

    def answer_ping(connection: IDilatedConnection, record: Ping) -> None:
        """The peer's PING arrived on ``connection``: answer it there (a PONG), unless
        back-pressure says not now (the one owner of that decision)."""


class ISentLog(Interface):
    """Where L4 notes its writes to one link, as it writes them to the link's connection
    (``durable.sent_log.SentLog``, which the link's dead-path detector reads)."""

    def sent(seqnum: int) -> float:
        """Sequenced records up to ``seqnum`` (a write's last) were written to the link now:
        returns the time noted (the in-flight window's sample starts then)."""


class ICandidateOwner(Interface):
    """What an L2 connection reports to before it is selected (the Connector)."""

    def candidate_ready(connection: Any) -> None:
        """KCM exchange reached the point where this connection may be selected.

        Follower: the Leader's KCM arrived (the Follower must select synchronously, so that
        records arriving in the same read are delivered). Leader: the Follower's KCM arrived.
        """

    def candidate_failed(connection: Any, reason: LinkLoss) -> None:
        """The connection closed or failed before it was selected, because of ``reason``."""


class IMultiplexer(IRecordReceiver):
    """L4/L5 as the manager drives it (implemented by multiplexer.Multiplexer); the selected
    link delivers its records to it (``IRecordReceiver``)."""

    def set_role(role: Any) -> None:
        """Our role is known (decides scid parity). Called once, before connection_made."""

    def connection_made(connection: IDilatedConnection, log: ISentLog | None = None) -> None:
        """A connection was selected: replay unacked records in order first, then go on;
        each write is noted in ``log`` (the selected link's), when given."""

    def connection_lost() -> None:
        """The selected connection is gone; queue from now on."""

    def when_acknowledged() -> Any:
        """A Deferred firing once the peer acknowledged every record sent so far."""

    def stop(reason: str) -> None:
        """The wormhole is closing: every subchannel protocol gets connectionLost, every
        pending connect()/listen() Deferred errbacks. Idempotent."""

    def listener_for(name: str) -> object:
        """IStreamServerEndpoint for incoming subchannels named ``name``."""

    def connector_for(name: str) -> object:
        """IStreamClientEndpoint opening subchannels named ``name``."""
