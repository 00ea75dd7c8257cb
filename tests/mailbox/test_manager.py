"""The Manager and Dilator (txdilation.mailbox.manager): DILATE-n messages, roles, generations,
status, keepalive, stopping; two Dilators joined by an in-memory mailbox over real loopback TCP."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Cooperator
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from wormhole._interfaces import ISend, ITerminator
from wormhole._status import (
    ConnectedPeer,
    ConnectingPeer,
    DilationStatus,
    ReconnectingPeer,
    StoppedPeer,
)
from zope.interface import implementer
from zope.interface.verify import verifyObject

from tests.support.waits import sleep
from txdilation._stock.manager import Dilator
from txdilation.mailbox.dilate_messages import choose_version
from txdilation.mailbox.manager import Manager
from txdilation.mailbox.manager_lifecycle import (
    GENERATION_RETRY_MAX,
    GENERATION_RETRY_WITH_PEER,
    MAX_EARLY_HINTS,
)
from txdilation.path.liveness import SILENCE, normalize_ping_interval
from txdilation.semantics import STOCK, TWISTED, Semantics
from txdilation.settings import NetworkSettings, Settings
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.dilation_errors import CanOnlyDilateOnceError, OldPeerCannotDilateError
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ping, Pong

reactor: Any = _reactor
LOOPBACK = NetworkSettings("127.0.0.1", ("127.0.0.1",))


@implementer(ISend)
class MailboxPipe:
    """One side's ISend: delivers DILATE-n bodies to the peer's Dilator, checking the phase
    numbers run from 0 without gaps (optionally holding them until released)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.peer: MailboxPipe | None = None
        self.dilator: Any = None
        self.expected_phase = 0

    def send(self, phase: str, plaintext: bytes) -> None:
        self.sent.append((phase, json.loads(plaintext)))
        if self.peer is not None:
            self.peer.receive(phase, plaintext)

    def receive(self, phase: str, plaintext: bytes) -> None:
        assert phase == f"dilate-{self.expected_phase}", (phase, self.expected_phase)
        self.expected_phase += 1
        self.dilator.received_dilate(plaintext)


@implementer(ITerminator)
class RecordingTerminator:
    def __init__(self) -> None:
        self.stopped: Deferred[None] = Deferred()

    def stoppedD(self) -> None:
        self.stopped.callback(None)

    def stoppedRC(self) -> None: ...
    def stoppedM(self) -> None: ...
    def stoppedN(self) -> None: ...
    def stopped(self) -> None: ...
    def close(self, mood: str) -> None: ...


class ImmediateQueue:
    """An eventual queue that does not wait (stock's ``EventualQueue`` calls on a later turn):
    for synchronous tests of what the answer is, not of when it comes."""

    def eventually(self, f: Any, *args: Any) -> None:
        f(*args)


def make_pair(eventual_queue: Any = None) -> tuple[Any, ...]:
    """Two Dilators wired through in-memory mailboxes, with deterministic roles."""
    pipes = MailboxPipe(), MailboxPipe()
    pipes[0].peer, pipes[1].peer = pipes[1], pipes[0]
    terminators = RecordingTerminator(), RecordingTerminator()
    dilators = []
    for pipe, term in zip(pipes, terminators, strict=True):
        d = Dilator(reactor, eventual_queue, Cooperator(), ["ged"])
        verifyObject(ITerminator, term)
        d.wire(pipe, term)
        pipe.dilator = d
        dilators.append(d)
    return pipes, terminators, dilators


class EchoProtocol(Protocol):
    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


class Collector(Protocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.waiting: list[tuple[int, Deferred[bytes]]] = []
        self.lost: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)
        total = b"".join(self.received)
        for n, d in list(self.waiting):
            if len(total) >= n:
                self.waiting.remove((n, d))
                d.callback(total)

    def wait_for(self, n: int) -> Deferred[bytes]:
        d: Deferred[bytes] = Deferred()
        self.waiting.append((n, d))
        self.dataReceived(b"")
        return d

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)


class DilatedPairBase(TestCase):
    """Two real Managers, real TCP on 127.0.0.1, DILATE messages through an in-memory pipe."""

    timeout = 30

    def setUp(self) -> None:
        os.environ["TXDILATION_LISTEN_INTERFACE"] = "127.0.0.1"
        os.environ["TXDILATION_HINT_ADDRESSES"] = "127.0.0.1"

    @inlineCallbacks
    def dilate_pair(self, status: list[list[DilationStatus]] | None = None, **kwargs: Any) -> Any:
        pipes, terms, dilators = make_pair()
        key = os.urandom(32)
        apis = []
        for i, d in enumerate(dilators):
            d.got_key(key)
            d.got_wormhole_versions({"can-dilate": ["ged"]})
            on_status = status[i].append if status is not None else None
            apis.append(d.dilate(status_update=on_status, **kwargs))
        self._terms = terms
        self.addCleanup(self.stop_all, dilators, terms)
        yield apis[0].when_dilated()
        yield apis[1].when_dilated()
        return pipes, dilators, apis

    @inlineCallbacks
    def stop_all(self, dilators: list[Dilator], terms: Any) -> Any:
        for d in dilators:
            d.stop()
        for t in terms:
            yield t.stopped


class InMemoryMailboxTests(DilatedPairBase):
    """Dilation, subchannels, reconnection and close between two in-process Managers."""

    @inlineCallbacks
    def test_dilate_open_echo_and_message_order(self) -> Any:
        """Both sides dilate; each sends exactly one 'please' (with use-version "ged") and one
        direct 'connection-hints' first; a subchannel opened by one side echoes at the other."""
        pipes, _dilators, apis = yield self.dilate_pair()
        for pipe in pipes:
            kinds = [body["type"] for _, body in pipe.sent]
            self.assertEqual(kinds[0], "please")
            self.assertEqual(pipe.sent[0][1]["use-version"], "ged")
            self.assertEqual(len(pipe.sent[0][1]["side"]), 16)
            self.assertIn("connection-hints", kinds)
            self.assertEqual(
                [p for p, _ in pipe.sent], [f"dilate-{i}" for i in range(len(pipe.sent))]
            )
        apis[0].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[1].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"hello")
        client.transport.write(b" world")
        got = yield client.wait_for(11)
        self.assertEqual(got, b"hello world")

    @inlineCallbacks
    def test_reconnect_after_drop_keeps_subchannel(self) -> Any:
        """Dropping the L2 connection makes the Leader send 'reconnect', the Follower answer one
        'reconnecting', and a new generation carry on the same subchannel with nothing lost."""
        status: list[list[DilationStatus]] = [[], []]
        pipes, dilators, apis = yield self.dilate_pair(status=status)
        apis[0].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[1].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"one")
        yield client.wait_for(3)
        manager = dilators[1]._manager
        first = manager.connection
        first.disconnect()
        client.transport.write(b"two")  # queued while the link is down, or sent then replayed
        got = yield client.wait_for(6)
        self.assertEqual(got, b"onetwo")
        self.assertIsNot(manager.connection, first)
        self.assertFalse(client.lost.called)
        leader = 0 if dilators[0]._manager.role.value == "LEADER" else 1
        follower = 1 - leader
        self.assertEqual([b["type"] for _, b in pipes[leader].sent].count("reconnect"), 1)
        self.assertEqual([b["type"] for _, b in pipes[follower].sent].count("reconnecting"), 1)
        self.assertNotIn("reconnect", [b["type"] for _, b in pipes[follower].sent])
        for updates in status:
            gens = [s.generation for s in updates]
            self.assertEqual(gens, sorted(gens))
            self.assertEqual(max(gens), 2)
            kinds = [type(s.peer_connection) for s in updates]
            self.assertIn(ReconnectingPeer, kinds)
            self.assertEqual(kinds[-1], ConnectedPeer)

    @inlineCallbacks
    def close_with_a_subchannel_open(self, semantics: Semantics) -> Any:
        """Dilate a pair with ``semantics``, open one subchannel, stop both Dilators (what
        w.close() does). Returns (client, server protocol, statuses)."""
        status: list[list[DilationStatus]] = [[], []]
        _pipes, terms, dilators = make_pair()
        key = os.urandom(32)
        apis = []
        for i, d in enumerate(dilators):
            d.got_key(key)
            d.got_wormhole_versions({"can-dilate": ["ged"]})
            apis.append(d.dilate(status_update=status[i].append, semantics=semantics))
        yield apis[0].when_dilated()
        server_protocols: list[Collector] = []

        class ServerFactory(Factory):
            def buildProtocol(self, addr: Any) -> Collector:
                p = Collector()
                server_protocols.append(p)
                return p

        apis[0].listener_for("x").listen(ServerFactory())
        client = yield apis[1].connector_for("x").connect(Factory.forProtocol(Collector))
        client.transport.write(b"hi")
        while not server_protocols:
            yield sleep(0.01)
        dilators[1].stop()
        yield terms[1].stopped
        dilators[0].stop()
        dilators[1].stop()  # twice is harmless
        yield terms[0].stopped
        return client, server_protocols[0], status

    @inlineCallbacks
    def test_close_delivers_connection_lost_and_stopped_status(self) -> Any:
        """TWISTED semantics: stopping the Dilator (what w.close() does) delivers
        connectionLost to open subchannel protocols on both sides, by the time both Dilators
        report stopped, and ends with StoppedPeer (stock defect 3)."""
        client, server, status = yield self.close_with_a_subchannel_open(TWISTED)
        self.assertTrue(client.lost.called)
        self.assertTrue(server.lost.called)
        for statuses in status:
            self.assertIsInstance(statuses[-1].peer_connection, StoppedPeer)

    @inlineCallbacks
    def test_close_with_stock_semantics_delivers_nothing(self) -> Any:
        """STOCK semantics (the drop-in's default): the same close ends both sides with
        StoppedPeer and delivers no connectionLost, as stock does. Checked when both Dilators
        report stopped, with no wait: the TWISTED test above shows connectionLost is delivered
        by then when the semantics ask for it, so a wrongly delivered one would be seen."""
        client, server, status = yield self.close_with_a_subchannel_open(STOCK)
        self.assertFalse(client.lost.called)
        self.assertFalse(server.lost.called)
        for statuses in status:
            self.assertIsInstance(statuses[-1].peer_connection, StoppedPeer)


class LivenessTests(DilatedPairBase):
    """Keepalive on both roles over real TCP (stock defects 5 and 6)."""

    @inlineCallbacks
    def test_both_roles_ping_and_measure_rtt(self) -> Any:
        """Leader and Follower both ping every ping_interval (an int is accepted) and
        measure the round trip from the Pong: a time that passed while the test waited (when
        the first Pong comes depends on the machine's load, not asserted here; the schedule of
        pings is tests/path/test_liveness.py's, on a Clock)."""
        started = reactor.seconds()
        _pipes, dilators, _apis = yield self.dilate_pair(ping_interval=1)
        while any(d._manager.last_rtt is None for d in dilators):
            yield sleep(0.01)
        waited = reactor.seconds() - started
        for d in dilators:
            self.assertGreaterEqual(d._manager.last_rtt, 0)
            self.assertLessEqual(d._manager.last_rtt, waited)

    @inlineCallbacks
    def test_black_holed_link_is_abandoned_within_two_intervals(self) -> Any:
        """A link that silently stops delivering (both ends stop reading, nothing is closed)
        is given up by its own liveness, which allows it at most 2 x ping_interval of silence
        (when that fires on the real reactor depends on the machine's load: the bound itself
        is tests/path/test_liveness.py's, on a Clock; the detection time is
        benchmarks/recovery.py's figure); a new generation is made, and a subchannel opened
        before carries data again."""
        interval = 0.4
        _pipes, dilators, apis = yield self.dilate_pair(ping_interval=interval)
        apis[0].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[1].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"before")
        yield client.wait_for(6)
        for d in dilators:
            self.assertLessEqual(d._manager.link.silence_limit, 2 * interval)
        firsts = [d._manager.connection for d in dilators]
        for conn in firsts:
            conn.transport.pauseProducing()  # black hole: no bytes are read any more
        while all(d._manager.connection is firsts[i] for i, d in enumerate(dilators)):
            yield sleep(0.01)
        client.transport.write(b"after")
        got = yield client.wait_for(11)
        self.assertEqual(got, b"beforeafter")
        for i, d in enumerate(dilators):
            self.assertIsNot(d._manager.connection, firsts[i])


class VersionAndArgumentTests(SynchronousTestCase):
    def test_choose_version_prefers_my_order(self) -> None:
        """The shared version ranked highest in MY list wins; no overlap gives None."""
        self.assertEqual(choose_version(["b", "a"], ["a", "b"]), "b")
        self.assertIsNone(choose_version(["ged"], ["1"]))
        self.assertIsNone(choose_version(["ged"], "ged"))

    def test_ping_interval_accepts_ints(self) -> None:
        """ping_interval: ints work (stock defect 4), None/0 mean 30 s, negatives refused."""
        self.assertEqual(normalize_ping_interval(5), 5.0)
        self.assertEqual(normalize_ping_interval(None), 30.0)
        self.assertEqual(normalize_ping_interval(0), 30.0)
        self.assertRaises(ValueError, normalize_ping_interval, -1)
        self.assertRaises(TypeError, normalize_ping_interval, "5")

    def test_dilate_twice_raises(self) -> None:
        """A second dilate() raises CanOnlyDilateOnceError."""
        _pipes, _terms, dilators = make_pair()
        dilators[0].dilate()
        self.assertRaises(CanOnlyDilateOnceError, dilators[0].dilate)

    def test_old_peer_cannot_dilate_and_no_please(self) -> None:
        """A peer without a shared can-dilate version: when_dilated errbacks with
        OldPeerCannotDilateError and no 'please' is sent (stock defect 8)."""
        pipes, _terms, dilators = make_pair(ImmediateQueue())
        pipes[0].peer = None
        api = dilators[0].dilate()
        d = api.when_dilated()
        dilators[0].got_key(os.urandom(32))
        dilators[0].got_wormhole_versions({"can-dilate": ["1"]})
        self.failureResultOf(d, OldPeerCannotDilateError)
        self.assertEqual(pipes[0].sent, [])

    def test_no_can_dilate_at_all(self) -> None:
        """A peer whose versions lack can-dilate entirely is an old peer too."""
        _pipes, _terms, dilators = make_pair(ImmediateQueue())
        api = dilators[0].dilate()
        d = api.when_dilated()
        dilators[0].got_wormhole_versions({})
        self.failureResultOf(d, OldPeerCannotDilateError)


def clock_manager(
    sender: Any,
    side: str,
    *,
    settings: Settings | None = None,
    status_update: Any = None,
    **kwargs: Any,
) -> tuple[Manager, MemoryReactorClock]:
    """A Manager on a MemoryReactorClock with test defaults (30 s pings; ``settings``, by
    default the loopback network); ``kwargs`` add Manager keyword arguments."""
    clock = MemoryReactorClock()
    m = Manager(
        sender,
        side,
        None,
        clock,
        None,
        Cooperator(scheduler=lambda f: clock.callLater(0, f)),
        ["ged"],
        30.0,
        None,
        False,
        status_update,
        settings=settings if settings is not None else Settings(network=LOOPBACK),
        **kwargs,
    )
    return m, clock


def _manager(
    role_side: str, status_update: Any = None
) -> tuple[Manager, MailboxPipe, MemoryReactorClock]:
    pipe = MailboxPipe()
    m, clock = clock_manager(pipe, role_side, status_update=status_update)
    return m, pipe, clock


MESSAGES = [
    b'{"type": "please", "side": "8888888888888888", "use-version": "ged"}',
    b'{"type": "please", "side": "8888888888888888"}',
    b'{"type": "connection-hints", "hints": [{"type": "direct-tcp-v1", '
    b'"hostname": "127.0.0.1", "port": 1}]}',
    b'{"type": "connection-hints", "hints": "bogus"}',
    b'{"type": "reconnect"}',
    b'{"type": "reconnecting"}',
    b'{"type": "dance"}',
    b'{"no-type": 1}',
    b"[1, 2]",
    b"not json",
    b"\xff\xfe",
]


class ManagerInputFuzzTests(SynchronousTestCase):
    @settings(max_examples=200, deadline=None)
    @given(
        side=st.sampled_from(["0000000000000000", "ffffffffffffffff"]),
        steps=st.lists(
            st.one_of(
                st.sampled_from(MESSAGES), st.sampled_from(["key", "versions", "stop", "tick"])
            ),
            max_size=25,
        ),
    )
    def test_any_message_sequence_is_safe(self, side: str, steps: list[Any]) -> None:
        """Any order of DILATE-n messages (valid, malformed, unexpected for the role), key,
        versions, stop and time passing: no exception escapes, phases stay gapless, a
        Follower never sends 'reconnect', and each status has a non-decreasing generation."""
        m, pipe, clock = _manager(side)
        for step in steps:
            if step == "key":
                m.got_dilation_key(b"k" * 32)
            elif step == "versions":
                m.got_wormhole_versions({"can-dilate": ["ged"]})
            elif step == "stop":
                m.stop()
            elif step == "tick":
                clock.advance(31)
            else:
                m.received_dilation_message(step)
        self.assertEqual([p for p, _ in pipe.sent], [f"dilate-{i}" for i in range(len(pipe.sent))])
        kinds = [b["type"] for _, b in pipe.sent]
        self.assertLessEqual(kinds.count("please"), 1)
        if side == "0000000000000000":
            self.assertNotIn("reconnect", kinds)
        else:
            self.assertNotIn("reconnecting", kinds)
        m.stop()
        m.stop()
        self.assertTrue(self.successResultOf(m.when_stopped()) is None)
        self.assertIsInstance(m.status.peer_connection, StoppedPeer)

    def test_connecting_status_after_please(self) -> None:
        """After both 'please' messages the status says ConnectingPeer at generation 1."""
        statuses: list[DilationStatus] = []
        m, _pipe, _clock = _manager("ffffffffffffffff", status_update=statuses.append)
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        m.received_dilation_message(MESSAGES[0])
        self.assertIsInstance(statuses[-1].peer_connection, ConnectingPeer)
        self.assertEqual(statuses[-1].generation, 1)
        self.assertEqual(m.role.value, "LEADER")
        m.stop()


class LateConnectionTests(SynchronousTestCase):
    def test_second_selected_connection_is_aborted(self) -> None:
        """A connection selected while another is in use is aborted at once; the first stays
        the one in use and open."""
        m, _pipe, _clock = _manager("ffffffffffffffff")
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        m.received_dilation_message(
            b'{"type": "please", "side": "0000000000000000", "use-version": "ged"}'
        )
        first, second = FakeDilatedConnection("first"), FakeDilatedConnection("second")
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(first), 1)
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(second), 1)
        self.assertTrue(second.aborted)
        self.assertFalse(first.closed)
        self.assertIs(m.connection, first)
        m.stop()


class EarlyMessageTests(SynchronousTestCase):
    def test_hints_before_start_are_dialled(self) -> None:
        """The peer's please and hints arriving before we have the key and versions (so
        before our own please) are kept: once we start, the hint is dialled."""
        m, _pipe, clock = _manager("ffffffffffffffff")
        m.received_dilation_message(
            b'{"type": "please", "side": "0000000000000000", "use-version": "ged"}'
        )
        m.received_dilation_message(
            b'{"type": "connection-hints", "hints": [{"type": "direct-tcp-v1", '
            b'"hostname": "127.0.0.1", "port": 4321}]}'
        )
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        clock.advance(0.5)
        dialled = [(host, port) for host, port, *_ in clock.tcpClients]
        self.assertIn(("127.0.0.1", 4321), dialled)
        m.stop()

    def test_early_hints_are_bounded(self) -> None:
        """At most MAX_EARLY_HINTS hints are kept from before the start."""
        m, _pipe, _clock = _manager("ffffffffffffffff")
        m.received_dilation_message(
            b'{"type": "please", "side": "0000000000000000", "use-version": "ged"}'
        )
        hint = {"type": "direct-tcp-v1", "hostname": "127.0.0.1", "port": 1}
        for _ in range(10):
            m.received_dilation_message(
                json.dumps({"type": "connection-hints", "hints": [hint] * 50}).encode()
            )
        self.assertEqual(len(m._core.early_hints), MAX_EARLY_HINTS)
        m.stop()


class PingFloodTests(SynchronousTestCase):
    def test_pongs_do_not_pile_up_toward_a_peer_that_does_not_read(self) -> None:
        """A peer sending PINGs while its connection's transport has paused us (it is not
        reading) gets one PONG for that pause, not one per PING; once the transport resumes
        us, PINGs are answered again."""
        m, _pipe, _clock = _manager("ffffffffffffffff")
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        m.received_dilation_message(
            b'{"type": "please", "side": "0000000000000000", "use-version": "ged"}'
        )
        connection = FakeDilatedConnection()
        link = m.connector_reports.link_for(connection)
        m.connector_reports.connector_connection_made(link, 1)
        assert connection.producer is not None
        connection.producer.pauseProducing()
        for i in range(10_000):
            link.got_record(Ping(i.to_bytes(4, "big")))
        self.assertEqual(len(connection.of_type(Pong)), 1)
        connection.producer.resumeProducing()
        link.got_record(Ping(b"last"))
        self.assertEqual(connection.of_type(Pong)[-1], Pong(b"last"))
        m.stop()


class LineReceiverOnSubchannelTests(DilatedPairBase):
    """Twisted's line-oriented protocols work over subchannels (they read
    ``transport.disconnecting``, which stock's subchannels lack)."""

    @inlineCallbacks
    def test_line_receiver_round_trip(self) -> Any:
        """A LineReceiver client and server exchange lines over a subchannel, and
        ``disconnecting`` turns True after loseConnection()."""
        from twisted.protocols.basic import LineReceiver

        got: Deferred[bytes] = Deferred()

        class Server(LineReceiver):
            def lineReceived(self, line: bytes) -> None:
                self.sendLine(line.upper())

        class Client(LineReceiver):
            def lineReceived(self, line: bytes) -> None:
                got.callback(line)

        _pipes, _dilators, apis = yield self.dilate_pair()
        apis[0].listener_for("lines").listen(Factory.forProtocol(Server))
        client = yield apis[1].connector_for("lines").connect(Factory.forProtocol(Client))
        self.assertFalse(client.transport.disconnecting)
        client.sendLine(b"hello")
        line = yield got
        self.assertEqual(line, b"HELLO")
        client.transport.loseConnection()
        self.assertTrue(client.transport.disconnecting)


class RecoveredTelemetryTests(SynchronousTestCase):
    """The ``recovered`` record: what died, how it was noticed, the gap (docs/telemetry.md)."""

    def started(
        self, side: str, peer_side: str
    ) -> tuple[Manager, MemoryReactorClock, list[dict[str, Any]]]:
        """A Manager that has its key, versions and the peer's please; its telemetry list."""
        m, _pipe, clock = _manager(side)
        records: list[dict[str, Any]] = []
        m.telemetry._sinks.append(records.append)
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        please = {"type": "please", "side": peer_side, "use-version": "ged"}
        m.received_dilation_message(json.dumps(please).encode())
        return m, clock, records

    def test_leader_after_liveness(self) -> None:
        """A Leader's direct link goes silent: after the next selection, ``recovered`` says
        direct, liveness, and the gap from the last record received to the selection."""
        m, clock, records = self.started("ffffffffffffffff", "0000000000000000")
        first = FakeDilatedConnection("first")
        link = m.connector_reports.link_for(first)
        m.connector_reports.connector_connection_made(link, 1)
        clock.advance(1.0)
        link.got_record(Ping(b"ping"))
        clock.advance(10.0)
        link.connection_lost(first, SILENCE)  # type: ignore[arg-type]
        m.received_dilation_message(b'{"type": "reconnecting"}')
        clock.advance(0.5)
        second = FakeDilatedConnection("second")
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(second), 1)
        kinds = [r["event"] for r in records]
        self.assertEqual(kinds.count("recovered"), 1)
        recovered = records[kinds.index("recovered")]
        self.assertEqual(records[kinds.index("recovered") - 1]["event"], "connection_selected")
        self.assertEqual(
            {k: recovered[k] for k in ("died", "noticed_by", "gap_s", "generation")},
            {"died": "direct", "noticed_by": "liveness", "gap_s": 10.5, "generation": 2},
        )
        m.stop()

    def test_follower_told_by_the_leader(self) -> None:
        """A Follower whose link the Leader gave up ('reconnect' while it was up) records the
        loss as peer_report; with no record ever received, the gap counts from the loss."""
        m, clock, records = self.started("0000000000000000", "ffffffffffffffff")
        first = FakeDilatedConnection("first")
        link = m.connector_reports.link_for(first)
        m.connector_reports.connector_connection_made(link, 1)
        clock.advance(3.0)
        m.received_dilation_message(b'{"type": "reconnect"}')
        self.assertTrue(first.aborted)
        link.connection_lost(first, LinkLoss(Cause.DROPPED, "Connection was aborted"))  # type: ignore[arg-type]
        clock.advance(0.25)
        m.connector_reports.connector_connection_made(
            m.connector_reports.link_for(FakeDilatedConnection("second")), 1
        )
        lost = [r for r in records if r["event"] == "connection_lost"]
        self.assertEqual([r["reason"] for r in lost], ["peer_report"])
        (recovered,) = [r for r in records if r["event"] == "recovered"]
        self.assertEqual(
            (recovered["died"], recovered["noticed_by"], recovered["gap_s"]),
            ("direct", "peer_report", 0.25),
        )
        m.stop()

    def test_no_recovery_without_a_loss(self) -> None:
        """The first selection is no recovery."""
        m, _clock, records = self.started("ffffffffffffffff", "0000000000000000")
        m.connector_reports.connector_connection_made(
            m.connector_reports.link_for(FakeDilatedConnection("only")), 1
        )
        self.assertNotIn("recovered", [r["event"] for r in records])
        m.stop()


class GenerationRetryTests(SynchronousTestCase):
    """A Leader whose generations end with nothing in flight starts another: soon while the
    peer takes part (its hints come), backing off further only while it does not."""

    def reconnect_times(self, hints: bytes | None, generations: int) -> list[float]:
        """Run a Leader whose generations never connect, the peer answering each 'reconnect'
        with 'reconnecting' and then ``hints`` (none: no hints); returns when each
        'reconnect' was sent."""
        m, pipe, clock = _manager("ffffffffffffffff")
        m.got_dilation_key(b"k" * 32)
        m.got_wormhole_versions({"can-dilate": ["ged"]})
        m.received_dilation_message(
            b'{"type": "please", "side": "0000000000000000", "use-version": "ged"}'
        )
        if hints is not None:
            m.received_dilation_message(hints)
        times: list[float] = []
        while len(times) < generations and clock.seconds() < 1000:
            clock.advance(0.25)
            sent = [body["type"] for _, body in pipe.sent].count("reconnect")
            if sent > len(times):
                times.append(clock.seconds())
                m.received_dilation_message(b'{"type": "reconnecting"}')
                if hints is not None:
                    m.received_dilation_message(hints)
        m.stop()
        return times

    def test_soon_while_the_peer_takes_part(self) -> None:
        """The peer answers and sends its hints each generation, but no connection lasts
        (a network cutting every connection in its handshake, stock Follower or not): the
        next generation starts within GENERATION_RETRY_WITH_PEER (10 s), never after the
        60 s a silent peer gets (found in fault runs: no relay connection for over 60 s)."""
        times = self.reconnect_times(b'{"type": "connection-hints", "hints": []}', 9)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        self.assertEqual(len(times), 9)
        self.assertLessEqual(max(gaps), GENERATION_RETRY_WITH_PEER + 0.5, gaps)
        self.assertGreaterEqual(max(gaps), GENERATION_RETRY_WITH_PEER - 0.5, gaps)

    def test_backing_off_while_the_peer_sends_nothing(self) -> None:
        """No hints from the peer: the wait doubles up to GENERATION_RETRY_MAX (60 s)."""
        times = self.reconnect_times(None, 9)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        self.assertGreaterEqual(max(gaps), GENERATION_RETRY_MAX - 0.5, gaps)
