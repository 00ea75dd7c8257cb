"""L2 connections (txdilation.link.connection) over real loopback TCP, directly and through the real
relay."""

from __future__ import annotations

import gc
import os
import socket
import weakref
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.error import ConnectionAborted, ConnectionDone, ConnectionLost
from twisted.internet.protocol import ClientFactory, ServerFactory
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.support.harness import start_transit_relay
from txdilation.link.connection import TCP_BUFFER_SIZE, DilatedConnectionProtocol, transport_loss
from txdilation.link.framer import relay_handshake_line
from txdilation.wire.contracts import ICandidateOwner, IDilatedConnection, IRecordSink
from txdilation.wire.keys import derive_relay_token
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ack, Data, Open, Ping
from txdilation.wire.roles import FOLLOWER, LEADER, Role

reactor: Any = _reactor

CLEAN_CLOSE = LinkLoss(Cause.CLOSED, "Connection was closed cleanly.")


@implementer(IRecordSink)
class RecordingSink:
    """Collects records; fires ``lost`` when the selected connection goes away."""

    def __init__(self, expect: int) -> None:
        self.records: list[Any] = []
        self.expect = expect
        self.complete: Deferred[list[Any]] = Deferred()
        self.lost: Deferred[LinkLoss] = Deferred()

    def got_record(self, record: Any) -> None:
        self.records.append(record)
        if len(self.records) == self.expect:
            self.complete.callback(self.records)

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        self.lost.callback(reason)


@implementer(ICandidateOwner)
class SelectingOwner:
    """Selects the first candidate at once, as a Follower's connector must."""

    def __init__(self, sink: RecordingSink) -> None:
        self.sink = sink
        self.selected: Deferred[DilatedConnectionProtocol] = Deferred()
        self.failed: Deferred[LinkLoss] = Deferred()

    def candidate_ready(self, connection: Any) -> None:
        connection.events.select(self.sink)
        self.selected.callback(connection)

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        if not self.failed.called:
            self.failed.callback(reason)


class _Factory(ServerFactory, ClientFactory):
    def __init__(
        self, role: Role, key: bytes, owner: SelectingOwner, relay_line: bytes | None = None
    ) -> None:
        self.role, self.key, self.owner, self.relay_line = role, key, owner, relay_line

    def buildProtocol(self, addr: Any) -> DilatedConnectionProtocol:
        return DilatedConnectionProtocol(
            role=self.role,
            dilation_key=self.key,
            owner=self.owner,
            description=repr(addr),
            is_direct=self.relay_line is None,
            relay_line=self.relay_line,
            clock=reactor,
            handshake_timeout=10.0,
        )


RECORDS = [
    Open(seqnum=0, scid=1, subprotocol="proto"),
    Data(seqnum=1, scid=1, data=b"x" * 70000),
    Ping(b"\x00\x00\x00\x07"),
    Ack(resp_seqnum=5),
]


def no_delay(transport: Any) -> bool:
    """Whether ``transport``'s socket has TCP_NODELAY set (asked of the kernel)."""
    return bool(transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


class _RefusingNoDelay(StringTransport):
    """A transport whose socket refuses TCP_NODELAY (as a UNIX socket does)."""

    def setTcpNoDelay(self, enabled: bool) -> None:
        raise OSError(95, "Operation not supported")


class TuneTransportTests(SynchronousTestCase):
    def test_transports_without_tcp_options_are_left_alone(self) -> None:
        """A transport without ``setTcpNoDelay`` or buffer sizes (an in-memory one), or whose
        socket refuses TCP_NODELAY, still connects: the L2 connection sends its prologue."""
        for transport in (StringTransport(), _RefusingNoDelay()):
            conn = DilatedConnectionProtocol(
                role=LEADER,
                dilation_key=os.urandom(32),
                owner=SelectingOwner(RecordingSink(1)),
                description="memory",
                is_direct=True,
                relay_line=None,
                clock=Clock(),
            )
            conn.makeConnection(transport)
            self.assertTrue(transport.value().startswith(b"Magic-Wormhole Dilation Handshake"))


class DirectLinkTests(TestCase):
    timeout = 20

    @inlineCallbacks
    def connect_pair(self, leader_key: bytes, follower_key: bytes) -> Any:
        leader = SelectingOwner(RecordingSink(len(RECORDS)))
        follower = SelectingOwner(RecordingSink(len(RECORDS)))
        port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
            _Factory(LEADER, leader_key, leader)
        )
        self.addCleanup(port.stopListening)
        yield TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port).connect(
            _Factory(FOLLOWER, follower_key, follower)
        )
        return leader, follower

    @inlineCallbacks
    def test_records_flow_both_ways_after_kcm(self) -> Any:
        """Leader and Follower complete prologue, Noise and KCM over real TCP, then exchange
        records (one larger than a Noise message) intact and in order, both ways."""
        key = os.urandom(32)
        leader, follower = yield self.connect_pair(key, key)
        lconn, fconn = yield DeferredList(
            [leader.selected, follower.selected], fireOnOneErrback=True
        ).addCallback(lambda results: [r[1] for r in results])
        verifyObject(IDilatedConnection, lconn)
        lconn.send_records(RECORDS)
        for r in RECORDS:
            fconn.send_record(r)
        got_at_follower = yield follower.sink.complete
        got_at_leader = yield leader.sink.complete
        self.assertEqual(got_at_follower, RECORDS)
        self.assertEqual(got_at_leader, RECORDS)
        fconn.disconnect()
        reason = yield leader.sink.lost
        self.assertIsInstance(reason, LinkLoss)

    @inlineCallbacks
    def test_tcp_tuned(self) -> Any:
        """Each L2 connection (the dialing and the accepting side) sets TCP_NODELAY on its
        socket and raises its TCP transport's read/buffer size and send limit to
        TCP_BUFFER_SIZE (Twisted's 64 KiB is less than one 64 KiB record), and 64 records of
        64 KiB written at once arrive intact and in order."""
        key = os.urandom(32)
        leader, follower = yield self.connect_pair(key, key)
        lconn, fconn = yield DeferredList(
            [leader.selected, follower.selected], fireOnOneErrback=True
        ).addCallback(lambda results: [r[1] for r in results])
        for conn in (lconn, fconn):
            self.assertEqual(conn.transport.bufferSize, TCP_BUFFER_SIZE)
            self.assertEqual(conn.transport.SEND_LIMIT, TCP_BUFFER_SIZE)
            self.assertTrue(no_delay(conn.transport))
        follower.sink.expect = 64
        records = [Data(seqnum=i, scid=1, data=os.urandom(65536)) for i in range(64)]
        lconn.send_records(records)
        got = yield follower.sink.complete
        self.assertEqual(got, records)
        fconn.disconnect()
        yield leader.sink.lost

    @inlineCallbacks
    def test_wrong_key_fails_handshake_and_closes(self) -> Any:
        """A Follower with a different dilation key never gets a connection: the Leader drops
        the handshake and both sides report the candidate as failed."""
        leader, follower = yield self.connect_pair(os.urandom(32), os.urandom(32))
        reasons = yield DeferredList([leader.failed, follower.failed], fireOnOneErrback=True)
        self.assertFalse(leader.selected.called or follower.selected.called)
        self.assertIn("NoiseError", str(reasons[1][1]) + str(reasons[0][1]))


class RelayLinkTests(TestCase):
    timeout = 20

    @inlineCallbacks
    def test_records_flow_through_real_transit_relay(self) -> Any:
        """Both sides connect out to the real transit relay with the sided handshake; after
        'ok' the L2 handshake runs end to end through it and records arrive intact. Both
        sides' sockets to the relay have TCP_NODELAY."""
        relay = yield Deferred.fromCoroutine(start_transit_relay(reactor))
        self.addCleanup(relay.stop)
        key = os.urandom(32)
        token = derive_relay_token(key)
        leader = SelectingOwner(RecordingSink(len(RECORDS)))
        follower = SelectingOwner(RecordingSink(len(RECORDS)))
        for role, owner, side in ((LEADER, leader, "f" * 16), (FOLLOWER, follower, "0" * 16)):
            yield TCP4ClientEndpoint(reactor, "127.0.0.1", relay.port).connect(
                _Factory(role, key, owner, relay_handshake_line(token, side))
            )
        lconn = yield leader.selected
        fconn = yield follower.selected
        self.assertFalse(lconn.is_direct)
        self.assertTrue(no_delay(lconn.transport) and no_delay(fconn.transport))
        fconn.send_records(RECORDS)
        got = yield leader.sink.complete
        self.assertEqual(got, RECORDS)
        lconn.abort()
        yield follower.sink.lost


@implementer(ICandidateOwner)
class _ForgetfulOwner:
    """Selects the first candidate at once and keeps no reference to any connection."""

    def __init__(self, sink: IRecordSink) -> None:
        self.sink = sink
        self.ready = 0
        self.failed: list[LinkLoss] = []

    def candidate_ready(self, connection: Any) -> None:
        connection.events.select(self.sink)
        self.ready += 1

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        self.failed.append(reason)


@implementer(IRecordSink)
class _CountingSink:
    """Keeps the records and the loss reasons, not the connection."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.lost: list[LinkLoss] = []

    def got_record(self, record: Any) -> None:
        self.records.append(record)

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        self.lost.append(reason)


def _memory_pair(
    clock: Clock, follower_sink: IRecordSink | None = None
) -> tuple[list[DilatedConnectionProtocol], list[_ForgetfulOwner], list[StringTransport]]:
    """A Leader and a Follower L2 connection over in-memory transports, handshake done and
    selected (``exchange`` moves bytes between them); the Follower's records go to
    ``follower_sink`` when given."""
    key = os.urandom(32)
    owners = [_ForgetfulOwner(_CountingSink()), _ForgetfulOwner(follower_sink or _CountingSink())]
    conns = [
        DilatedConnectionProtocol(
            role=role, dilation_key=key, owner=owner, description=role.value, is_direct=True,
            relay_line=None, clock=clock,
        )
        for role, owner in ((LEADER, owners[0]), (FOLLOWER, owners[1]))
    ]  # fmt: skip
    transports = [StringTransport(), StringTransport()]
    for conn, transport in zip(conns, transports, strict=True):
        conn.makeConnection(transport)
    _exchange(conns, transports)
    assert [o.ready for o in owners] == [1, 1], owners
    return conns, owners, transports


def _exchange(conns: list[DilatedConnectionProtocol], transports: list[StringTransport]) -> None:
    for _ in range(6):
        for i in (0, 1):
            data = transports[i].value()
            transports[i].clear()
            if data:
                conns[1 - i].dataReceived(data)


class ReferenceCycleTests(SynchronousTestCase):
    """A lost L2 connection is freed by reference counting, without the cyclic GC."""

    def setUp(self) -> None:
        if gc.isenabled():
            gc.disable()
            self.addCleanup(gc.enable)
        gc.collect()

    def test_lost_connection_is_freed_by_refcount(self) -> None:
        """After connectionLost (selected, and still a candidate) nothing of ours keeps the
        connection alive in a cycle: with the cyclic GC off, the last outside reference going
        away frees it, with its framer buffer, Noise session and transport."""
        clock = Clock()
        conns, owners, transports = _memory_pair(clock)
        conns[0].send_records([Data(0, 1, os.urandom(200_000)), Data(1, 1, b"x")])
        _exchange(conns, transports)
        self.assertEqual(len(owners[1].sink.records), 2)
        refs = [weakref.ref(c) for c in conns] + [weakref.ref(c._noise) for c in conns]
        refs += [weakref.ref(t) for t in transports]
        for conn in conns:
            conn.connectionLost(Failure(ConnectionDone()))
        self.assertEqual([o.sink.lost for o in owners], [[CLEAN_CLOSE]] * 2)
        del conns, transports, conn
        self.assertEqual([r() for r in refs], [None] * 6)

    def test_lost_candidate_is_freed_by_refcount(self) -> None:
        """The same for a candidate lost mid-handshake (its timer cancelled)."""
        clock = Clock()
        conn = DilatedConnectionProtocol(
            role=LEADER, dilation_key=os.urandom(32), owner=_ForgetfulOwner(_CountingSink()),
            description="candidate", is_direct=True, relay_line=None, clock=clock,
        )  # fmt: skip
        conn.makeConnection(StringTransport())
        ref = weakref.ref(conn)
        conn.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])
        del conn
        self.assertIsNone(ref())

    def test_calls_after_loss_are_harmless(self) -> None:
        """Once lost (and its references dropped), a connection ignores every call: sends,
        controls, a late select and late bytes; nothing is written anywhere."""
        clock = Clock()
        conns, owners, transports = _memory_pair(clock)
        conns[0].connectionLost(Failure(ConnectionDone()))
        lost = conns[0]
        lost.send_record(Data(0, 1, b"late"))
        lost.send_records([Data(1, 1, b"later")])
        for call in (lost.disconnect, lost.abort, lost.pause_reading, lost.resume_reading):
            call()
        lost.registerProducer(object(), True)  # type: ignore[arg-type]
        lost.unregisterProducer()
        lost.events.select(_CountingSink())
        lost.events.lost("again")
        lost.dataReceived(b"\x00\x00\x00\x05hello")
        self.assertEqual(transports[0].value(), b"")
        self.assertEqual(owners[0].sink.lost, [CLEAN_CLOSE])


@implementer(IRecordSink)
class _AbortingSink(_CountingSink):
    """Aborts its connection on the first record it gets."""

    connection: DilatedConnectionProtocol | None = None

    def got_record(self, record: Any) -> None:
        super().got_record(record)
        assert self.connection is not None
        self.connection.abort()


class AbortStopsDeliveryTests(SynchronousTestCase):
    """An aborted connection delivers nothing more, even from the read in progress."""

    def test_records_after_abort_in_the_same_read_are_dropped(self) -> None:
        """Three records arrive in one read; the sink aborts on the first: it gets only that
        one, and bytes arriving before the transport reports the loss are ignored too."""
        sink = _AbortingSink()
        conns, _owners, transports = _memory_pair(Clock(), follower_sink=sink)
        sink.connection = conns[1]
        conns[0].send_records([Data(i, 1, b"record %d" % i) for i in range(3)])
        conns[1].dataReceived(transports[0].value())
        transports[0].clear()
        self.assertEqual(sink.records, [Data(0, 1, b"record 0")])
        conns[0].send_record(Data(3, 1, b"late"))
        conns[1].dataReceived(transports[0].value())
        self.assertEqual(len(sink.records), 1)
        self.assertTrue(transports[1].disconnecting)


class TransportLossTests(SynchronousTestCase):
    """The typed reason a connection's transport ended with (``transport_loss``)."""

    def test_causes_from_twisted_reasons(self) -> None:
        """A clean close (or no reason) is CLOSED, any other closed connection (lost, aborted)
        is DROPPED, any other error TRANSPORT_FAILED; the message is Twisted's, unchanged."""
        cases = [
            (Failure(ConnectionDone()), Cause.CLOSED),
            (Failure(ConnectionLost()), Cause.DROPPED),
            (Failure(ConnectionAborted()), Cause.DROPPED),
            (Failure(ValueError("TLS went wrong")), Cause.TRANSPORT_FAILED),
        ]
        for failure, cause in cases:
            self.assertEqual(transport_loss(failure), LinkLoss(cause, failure.getErrorMessage()))
        self.assertEqual(transport_loss(None), LinkLoss(Cause.CLOSED, "closed"))

    def test_first_failure_wins(self) -> None:
        """A connection dropped for a protocol error reports that reason to its owner, not
        the transport's abort that follows; a later fail() changes nothing."""
        owner = _ForgetfulOwner(_CountingSink())
        conn = DilatedConnectionProtocol(
            role=LEADER, dilation_key=os.urandom(32), owner=owner, description="candidate",
            is_direct=True, relay_line=None, clock=Clock(),
        )  # fmt: skip
        conn.makeConnection(StringTransport())
        conn.dataReceived(b"not a prologue at all, but long enough to be refused")
        conn.fail(LinkLoss(Cause.HANDSHAKE_TIMEOUT, "later"))
        conn.connectionLost(Failure(ConnectionAborted()))
        (loss,) = owner.failed
        self.assertIs(loss.cause, Cause.PROTOCOL_ERROR)
        self.assertIn("FramingError", str(loss))
