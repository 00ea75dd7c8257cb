"""End-to-end tests of txdilation.subchannels.multiplexer: two Multiplexers over an in-memory record
link.

The link (``txdilation.testing.fakes.RecordLink``) delivers only when pumped and can be dropped
with records in flight, like a dead TCP connection; a Clock runs the coalesced ACKs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.error import ConnectionDone, NoProtocol
from twisted.internet.interfaces import (
    IListeningPort,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.subchannels.test_subchannel import HalfProtocol, RecordingProtocol
from txdilation.durable.inbound import ACK_DELAY
from txdilation.semantics import STOCK, TWISTED, Semantics
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.subchannels.subchannel import SubchannelAddress
from txdilation.telemetry import Telemetry, TrafficStats
from txdilation.testing.fakes import FakePushProducer, RecordLink, record_sink
from txdilation.wire.contracts import IMultiplexer
from txdilation.wire.dilation_errors import (
    AlreadyClosedError,
    OldPeerCannotDilateError,
    WormholeClosedError,
)
from txdilation.wire.limits import RECORD_OVERHEAD
from txdilation.wire.records import Ack, Close, Data, Open
from txdilation.wire.roles import FOLLOWER, LEADER


class RecordingFactory(Factory):
    """Builds ``protocol_class`` instances and remembers them (and the address given)."""

    def __init__(self, protocol_class: type = RecordingProtocol) -> None:
        self.protocol_class = protocol_class
        self.built: list[RecordingProtocol] = []
        self.addresses: list[object] = []
        self.started = self.stopped = 0

    def buildProtocol(self, addr: object) -> RecordingProtocol:
        protocol = self.protocol_class()
        protocol.factory = self
        self.built.append(protocol)
        self.addresses.append(addr)
        return protocol

    def doStart(self) -> None:
        self.started += 1

    def doStop(self) -> None:
        self.stopped += 1


class RefusingFactory(Factory):
    def buildProtocol(self, addr: object) -> None:
        return None


class FakeManager:
    """What a subchannel's ``_manager`` points at (magic-wormhole's tests read _connection)."""

    _connection = None


def synchronously(f: Any, *args: Any) -> None:
    """An ``eventually`` that does not wait: these tests pin L4/L5 mechanics, and read
    connect()/listen() results at once (``EventualTests`` pins the real, later-turn, order)."""
    f(*args)


class Pair:
    """A Leader and a Follower Multiplexer, linked and dilated (TWISTED semantics unless
    told otherwise: most tests here pin what those fixes do)."""

    def __init__(
        self,
        leader_kw: dict | None = None,
        follower_kw: dict | None = None,
        clock: Clock | None = None,
        semantics: Semantics = TWISTED,
    ) -> None:
        self.clock = clock if clock is not None else Clock()
        self.leader_manager, self.follower_manager = FakeManager(), FakeManager()
        self.leader = Multiplexer(
            manager=self.leader_manager,
            reactor=self.clock,
            semantics=semantics,
            eventually=synchronously,
            **(leader_kw or {}),
        )
        self.follower = Multiplexer(
            manager=self.follower_manager,
            reactor=self.clock,
            semantics=semantics,
            eventually=synchronously,
            **(follower_kw or {}),
        )
        self.leader.set_role(LEADER)
        self.follower.set_role(FOLLOWER)
        self.links: list[RecordLink] = []
        self.reconnect()
        self.leader.dilated()
        self.follower.dilated()

    @property
    def link(self) -> RecordLink:
        return self.links[-1]

    def reconnect(self) -> None:
        link = RecordLink(
            record_sink(self.leader),
            record_sink(self.follower),
            self.clock,
        )
        self.links.append(link)
        self.leader.connection_made(link.a)
        self.follower.connection_made(link.b)

    def drop(self) -> None:
        self.link.drop()
        self.leader.connection_lost()
        self.follower.connection_lost()

    def pump(self) -> None:
        self.link.pump()


def opened(test: SynchronousTestCase, mux: Multiplexer, name: str, cls: type = RecordingProtocol):
    """connect() on an already dilated multiplexer: the protocol, synchronously."""
    return test.successResultOf(mux.connector_for(name).connect(Factory.forProtocol(cls)))


def listening(
    test: SynchronousTestCase, mux: Multiplexer, name: str, cls: type = RecordingProtocol
):
    factory = RecordingFactory(cls)
    port = test.successResultOf(mux.listener_for(name).listen(factory))
    return factory, port


def received(protocol: RecordingProtocol) -> list[bytes]:
    return [e for e in protocol.events if isinstance(e, bytes)]


class EndToEndTests(SynchronousTestCase):
    """Subchannels between two multiplexers."""

    def test_interfaces(self) -> None:
        """Multiplexer provides IMultiplexer; endpoints and ports their Twisted interfaces."""
        pair = Pair()
        verifyObject(IMultiplexer, pair.leader)
        verifyObject(IStreamServerEndpoint, pair.leader.listener_for("x"))
        verifyObject(IStreamClientEndpoint, pair.leader.connector_for("x"))
        _, port = listening(self, pair.leader, "x")
        verifyObject(IListeningPort, port)
        self.assertIs(port.getHost(), pair.leader.host_address)
        self.assertIs(pair.link.a.producer, pair.leader._outbound)

    def test_both_sides_open_and_talk(self) -> None:
        """Each side opens subchannels (Leader odd scids, Follower even), data flows both ways,
        and each write() arrives as exactly one dataReceived()."""
        pair = Pair()
        at_follower, _ = listening(self, pair.follower, "chat")
        at_leader, _ = listening(self, pair.leader, "chat")
        l1 = opened(self, pair.leader, "chat")
        l2 = opened(self, pair.leader, "chat")
        f1 = opened(self, pair.follower, "chat")
        self.assertEqual([p.transport._scid for p in (l1, l2, f1)], [1, 3, 2])
        for msg in (b"one", b"", b"two", b"x" * 100_000):
            l1.transport.write(msg)
        f1.transport.write(b"from follower")
        pair.pump()
        self.assertEqual(received(at_follower.built[0]), [b"one", b"two", b"x" * 100_000])
        self.assertEqual(received(at_leader.built[0]), [b"from follower"])
        at_follower.built[0].transport.write(b"reply")
        pair.pump()
        self.assertEqual(received(l1), [b"reply"])
        self.assertEqual(at_follower.addresses, [SubchannelAddress("chat")] * 2)
        self.assertEqual(at_follower.built[1].transport.getPeer(), SubchannelAddress("chat"))
        self.assertIs(l2.transport.getHost(), l1.transport.getHost())
        self.assertIs(l1.transport._manager, pair.leader_manager)
        self.assertEqual((pair.leader.unacknowledged_records, pair.link.in_flight), (0, 0))

    def test_close_from_either_side(self) -> None:
        """Whoever calls loseConnection, both protocols get connectionLost(ConnectionDone);
        closing twice is harmless and writing after close raises."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "x")
        for closer in ("client", "server"):
            client = opened(self, pair.leader, "x")
            pair.pump()
            peer = server.built[-1]
            mine = client if closer == "client" else peer
            mine.transport.loseConnection()
            mine.transport.loseConnection()
            self.assertRaises(AlreadyClosedError, mine.transport.write, b"late")
            pair.pump()
            for p in (client, peer):
                self.assertEqual(p.events[-1], "lost")
                self.assertTrue(p.reasons[0].check(ConnectionDone))
            mine.transport.loseConnection()
        closes = pair.link.a.of_type(Close) + pair.link.b.of_type(Close)
        self.assertEqual(len(closes), 4)

    def test_half_close(self) -> None:
        """Half-closeable protocols on both ends: each direction closes on its own."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "h", HalfProtocol)
        client = opened(self, pair.leader, "h", HalfProtocol)
        client.transport.write(b"request")
        client.transport.loseWriteConnection()
        pair.pump()
        peer = server.built[0]
        self.assertEqual(peer.events, ["made", b"request", "read_lost"])
        peer.transport.write(b"response")
        peer.transport.loseWriteConnection()
        pair.pump()
        self.assertEqual(client.events, ["made", "write_lost", b"response", "read_lost", "lost"])
        self.assertEqual(peer.events[-2:], ["write_lost", "lost"])

    def test_replay_after_drop_exactly_once_in_order(self) -> None:
        """A link dropped mid-transfer: after reconnecting, every message (including those
        written while disconnected) arrives once, in order; replayed duplicates are ACKed."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        for i in range(5):
            client.transport.write(b"m%d" % i)
        pair.link.deliver_some(to_b=3)  # OPEN, m0, m1 arrive; their ACK never does
        pair.drop()
        client.transport.write(b"m5")
        client.transport.write(b"m6")
        pair.reconnect()
        self.assertEqual(
            [r.seqnum for r in pair.link.a.send_calls[0]], list(range(8))
        )  # one replay call
        pair.pump()
        self.assertEqual(received(server.built[0]), [b"m%d" % i for i in range(7)])
        self.assertEqual(pair.leader.unacknowledged_records, 0)

    def test_acks_are_coalesced(self) -> None:
        """An OPEN is ACKed at the end of its turn; twenty DATA records arriving in one turn
        cost one ACK, ACK_DELAY later."""
        pair = Pair()
        listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        pair.pump()
        self.assertEqual(pair.link.b.of_type(Ack), [Ack(0)])
        for i in range(20):
            client.transport.write(b"%d" % i)
        pair.pump()
        self.assertEqual(pair.link.b.of_type(Ack), [Ack(0)])
        self.assertEqual(pair.leader.unacknowledged_records, 20)
        pair.clock.advance(ACK_DELAY)
        pair.pump()
        self.assertEqual(pair.link.b.of_type(Ack), [Ack(0), Ack(20)])
        self.assertEqual(pair.leader.unacknowledged_records, 0)

    def test_unexpected_subprotocol_is_closed(self) -> None:
        """With expected_subprotocols, an OPEN for another name is answered with CLOSE at once
        (stock defect 1): the opener sees connectionLost, the listener builds nothing."""
        pair = Pair(follower_kw={"expected_subprotocols": ["good"]})
        factory, _ = listening(self, pair.follower, "bad")
        client = opened(self, pair.leader, "bad")
        good = opened(self, pair.leader, "good")
        pair.pump()
        self.assertEqual(client.events, ["made", "lost"])
        self.assertEqual(factory.built, [])
        self.assertEqual(good.events, ["made"])

    def test_pending_open_bound(self) -> None:
        """OPENs nobody listens on are held within max_pending_open_bytes; the newest beyond
        it is refused (its opener sees connectionLost); listening later gets the rest."""
        pair = Pair(follower_kw={"max_pending_open_bytes": 1000})
        first = opened(self, pair.leader, "later")
        first.transport.write(b"a" * 600)
        second = opened(self, pair.leader, "later")
        second.transport.write(b"b" * 600)
        pair.pump()
        self.assertEqual(second.events, ["made", "lost"])
        self.assertEqual(first.events, ["made"])
        factory, _ = listening(self, pair.follower, "later")
        self.assertEqual(len(factory.built), 1)
        self.assertEqual(received(factory.built[0]), [b"a" * 600])

    def test_stop_listening_with_stock_semantics(self) -> None:
        """STOCK semantics: listen() starts no factory and stopListening() changes nothing
        (as stock's): later OPENs still reach the factory."""
        pair = Pair(semantics=STOCK)
        factory, port = listening(self, pair.follower, "x")
        port.stopListening()
        opened(self, pair.leader, "x")
        pair.pump()
        self.assertEqual(len(factory.built), 1)
        self.assertEqual((factory.started, factory.stopped), (0, 0))

    def test_stop_listening_unregisters(self) -> None:
        """TWISTED semantics: listen() starts the factory; after stopListening (which stops
        it), later OPENs for the name are held until someone listens."""
        pair = Pair()
        factory, port = listening(self, pair.follower, "x")
        self.assertEqual(factory.started, 1)
        port.stopListening()
        port.stopListening()
        self.assertEqual(factory.stopped, 1)
        opened(self, pair.leader, "x")
        pair.pump()
        self.assertEqual(factory.built, [])
        again, _ = listening(self, pair.follower, "x")
        self.assertEqual(len(again.built), 1)

    def test_listen_twice_fails(self) -> None:
        """A second listen() on one name errbacks with ValueError."""
        pair = Pair()
        listening(self, pair.follower, "x")
        d = pair.follower.listener_for("x").listen(RecordingFactory())
        self.failureResultOf(d, ValueError)

    def test_refusing_factories(self) -> None:
        """buildProtocol returning None: connect() fails with NoProtocol (nothing sent); an
        incoming OPEN is answered with CLOSE."""
        pair = Pair()
        d = pair.leader.connector_for("x").connect(RefusingFactory())
        self.failureResultOf(d, NoProtocol)
        self.assertEqual(pair.link.a.sent, [])
        pair.follower.listener_for("x").listen(RefusingFactory())
        client = opened(self, pair.leader, "x")
        pair.pump()
        self.assertEqual(client.events, ["made", "lost"])

    def test_empty_name_is_refused_synchronously(self) -> None:
        """connector_for("") raises ValueError at once."""
        self.assertRaises(ValueError, Pair().leader.connector_for, "")


class FlowControlTests(SynchronousTestCase):
    """Per-subchannel read pausing (stock defect 2), the connection bound, outbound bound."""

    def test_paused_subchannel_does_not_stall_others_or_acks(self) -> None:
        """A paused subchannel receives nothing (its data waits); another subchannel still
        gets its data, and ACKs still flow (the sender's queue empties)."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "x")
        a, b = opened(self, pair.leader, "x"), opened(self, pair.leader, "x")
        pair.pump()
        slow, fast = server.built
        slow.transport.pauseProducing()
        a.transport.write(b"to slow")
        b.transport.write(b"to fast")
        pair.pump()
        self.assertEqual((received(slow), received(fast)), ([], [b"to fast"]))
        pair.clock.advance(ACK_DELAY)
        pair.pump()
        self.assertEqual(pair.leader.unacknowledged_records, 0)
        self.assertFalse(pair.link.b.reading_paused)
        slow.transport.resumeProducing()
        pair.pump()
        self.assertEqual(received(slow), [b"to slow"])

    def test_small_window_acked_without_the_delay(self) -> None:
        """With a small outbound window (max_unacked_bytes 400), a quarter of it received
        is ACKed at the end of the turn, not after ACK_DELAY, so such a peer does not wait
        the delay once per window; below a quarter the ACK still waits."""
        kw = {"max_unacked_bytes": 400}
        pair = Pair(leader_kw=kw, follower_kw=kw)
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        pair.pump()
        pair.clock.advance(0)  # the OPEN's ACK, at the end of the turn
        pair.pump()
        client.transport.write(b"a" * 50)  # soon after it: this one waits for ACK_DELAY
        pair.pump()
        pair.clock.advance(0)
        pair.pump()
        self.assertEqual(pair.leader.unacknowledged_records, 1)  # delayed
        client.transport.write(b"b" * 100)  # 150 bytes > 400 // 4 unacknowledged
        pair.pump()
        pair.clock.advance(0)
        pair.pump()
        self.assertEqual(pair.leader.unacknowledged_records, 0)
        self.assertEqual(received(server.built[0]), [b"a" * 50, b"b" * 100])

    def test_connection_reading_paused_only_past_the_bound(self) -> None:
        """Only when paused subchannels hold more than max_buffered_inbound_bytes does the
        follower stop reading the connection; resuming drains and reading resumes."""
        pair = Pair(follower_kw={"max_buffered_inbound_bytes": 1000})
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        pair.pump()
        server.built[0].transport.pauseProducing()
        client.transport.write(b"a" * 800)
        pair.pump()
        self.assertFalse(pair.link.b.reading_paused)
        client.transport.write(b"b" * 800)
        client.transport.write(b"c" * 10)
        pair.pump()
        self.assertTrue(pair.link.b.reading_paused)
        self.assertEqual(pair.link.in_flight, 1)  # "c" waits in the socket
        server.built[0].transport.resumeProducing()
        pair.pump()
        self.assertFalse(pair.link.b.reading_paused)
        self.assertEqual(received(server.built[0]), [b"a" * 800, b"b" * 800, b"c" * 10])

    def test_outbound_bound_pauses_producers(self) -> None:
        """Unacked bytes above max_unacked_bytes pause registered producers (writers without
        one are not blocked); ACKs bring them back under half and the producers resume."""
        pair = Pair(leader_kw={"max_unacked_bytes": 1000})
        listening(self, pair.follower, "x")
        streamer, chatter = opened(self, pair.leader, "x"), opened(self, pair.leader, "x")
        producer = FakePushProducer()
        streamer.transport.registerProducer(producer, True)
        chatter.transport.write(b"z" * 1200)
        self.assertTrue(producer.paused)
        chatter.transport.write(b"still allowed")
        pair.pump()
        self.assertFalse(producer.paused)
        chatter.transport.loseConnection()
        pair.pump()
        streamer.transport.loseConnection()
        pair.pump()
        self.assertTrue(producer.stopped)


class LifecycleTests(SynchronousTestCase):
    """Waiting for dilation, failing it, and stopping (stock defect 3)."""

    def make(self, semantics: Semantics = TWISTED) -> Multiplexer:
        self.clock = Clock()
        mux = Multiplexer(
            manager=FakeManager(),
            reactor=self.clock,
            semantics=semantics,
            eventually=synchronously,
        )
        mux.set_role(LEADER)
        return mux

    def test_connect_and_listen_wait_for_dilation(self) -> None:
        """Before dilated() nothing is opened; afterwards the waiting calls proceed."""
        mux = self.make()
        connecting = mux.connector_for("x").connect(RecordingFactory())
        listen = mux.listener_for("x").listen(RecordingFactory())
        self.assertNoResult(connecting)
        self.assertNoResult(listen)
        link = RecordLink(lambda r: None, lambda r: None)
        mux.connection_made(link.a)
        mux.dilated()
        protocol = self.successResultOf(connecting)
        self.assertEqual(protocol.events, ["made"])
        self.assertEqual(link.a.sent, [Open(0, 1, "x")])
        self.successResultOf(listen)
        self.successResultOf(mux.when_dilated())

    def test_cancel_connect_before_dilation(self) -> None:
        """A connect() cancelled while waiting fails with CancelledError and opens nothing."""
        mux = self.make()
        factory = RecordingFactory()
        d = mux.connector_for("x").connect(factory)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        mux.dilated()
        self.assertEqual(factory.built, [])
        self.assertEqual(mux.traffic_stats().records_sent, 0)

    def test_stop_closes_everything(self) -> None:
        """stop() with TWISTED semantics: every open subchannel protocol gets connectionLost,
        pending connect/listen and when_dilated errback with WormholeClosedError; twice is
        harmless; later calls fail."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        pair.pump()
        waiting = self.make()
        pending = [
            waiting.connector_for("x").connect(RecordingFactory()),
            waiting.listener_for("x").listen(RecordingFactory()),
            waiting.when_dilated(),
        ]
        for mux in (pair.leader, pair.follower, waiting):
            mux.stop("closed by the app")
            mux.stop("again")
        for protocol in (client, server.built[0]):
            self.assertEqual(protocol.events, ["made", "lost"])
            self.assertTrue(protocol.reasons[0].check(ConnectionDone))
        for d in pending:
            self.failureResultOf(d, WormholeClosedError)
        self.assertEqual(server.stopped, 1)
        self.failureResultOf(pair.leader.connector_for("x").connect(Factory()), WormholeClosedError)
        self.failureResultOf(pair.leader.listener_for("y").listen(Factory()), WormholeClosedError)
        record_sink(pair.leader)(Data(99, 2, b"late"))
        pair.leader.connection_made(pair.link.a)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_stop_with_stock_semantics(self) -> None:
        """stop() with STOCK semantics: open protocols hear nothing and pending Deferreds
        never fire (as in stock, where fowl's latent connectionLost bug stays asleep), while
        everything is still released: later records and calls are ignored or refused."""
        pair = Pair(semantics=STOCK)
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        pair.pump()
        waiting = self.make(STOCK)
        pending = [
            waiting.connector_for("x").connect(RecordingFactory()),
            waiting.listener_for("x").listen(RecordingFactory()),
            waiting.when_dilated(),
        ]
        for mux in (pair.leader, pair.follower, waiting):
            mux.stop("closed by the app")
        for protocol in (client, server.built[0]):
            self.assertEqual(protocol.events, ["made"])
        for d in pending:
            self.assertNoResult(d)
            d.cancel()  # still cancellable
            self.failureResultOf(d, CancelledError)
        self.assertEqual((server.started, server.stopped), (0, 0))
        self.failureResultOf(pair.leader.connector_for("x").connect(Factory()), WormholeClosedError)
        record_sink(pair.leader)(Data(99, 2, b"late"))
        self.assertEqual(client.events, ["made"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_fail_dilation(self) -> None:
        """fail_dilation(f): waiting and later when_dilated/connect/listen errback with f."""
        mux = self.make()
        early = mux.when_dilated()
        mux.fail_dilation(Failure(OldPeerCannotDilateError()))
        self.failureResultOf(early, OldPeerCannotDilateError)
        self.failureResultOf(mux.when_dilated(), OldPeerCannotDilateError)
        self.failureResultOf(mux.connector_for("x").connect(Factory()), OldPeerCannotDilateError)
        mux.stop("bye")
        self.failureResultOf(mux.when_dilated(), WormholeClosedError)

    def test_set_role(self) -> None:
        """set_role is idempotent for one role; changing it is a ValueError."""
        mux = self.make()
        mux.set_role(LEADER)
        self.assertRaises(ValueError, mux.set_role, FOLLOWER)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from(["wait", "cancel", "dilated", "fail", "stop"]), max_size=25))
    def test_random_lifecycle(self, ops: list[str]) -> None:
        """Any order of inputs: no exception, each waiter fires exactly once as soon as an
        outcome is known, with the first outcome (WormholeClosedError once stopped)."""
        mux = self.make()
        waiters: list[tuple[Deferred[None], list, bool]] = []
        outcome = None
        stopped = False
        for op in ops:
            if op == "wait":
                d = mux.when_dilated()
                results: list = []
                d.addBoth(results.append)
                waiters.append((d, results, stopped))
            elif op == "cancel" and waiters:
                waiters[-1][0].cancel()
            elif op == "dilated":
                mux.dilated()
                outcome = outcome or "dilated"
            elif op == "fail":
                mux.fail_dilation(Failure(OldPeerCannotDilateError()))
                outcome = outcome or "failed"
            elif op == "stop":
                mux.stop("stop")
                outcome = outcome or "stopped"
                stopped = True
        for _, results, after_stop in waiters:
            if outcome is None:
                self.assertLessEqual(len(results), 1)
                continue
            self.assertEqual(len(results), 1)
            result = results[0]
            if isinstance(result, Failure) and result.check(CancelledError):
                continue
            expected = "stopped" if after_stop else outcome
            if expected == "dilated":
                self.assertIsNone(result)
            elif expected == "failed":
                self.assertTrue(result.check(OldPeerCannotDilateError))
            else:
                self.assertTrue(result.check(WormholeClosedError))


class ReconnectPropertyTests(SynchronousTestCase):
    """Random traffic, partial deliveries and dropped links: nothing lost, duplicated or
    reordered, in either direction."""

    @settings(max_examples=150, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.sampled_from(["to_follower", "to_leader", "pump", "drop", "turn"]),
                st.tuples(st.just("some"), st.integers(0, 4), st.integers(0, 4)),
            ),
            max_size=40,
        )
    )
    def test_every_message_once_in_order(self, ops: list) -> None:
        """After the dust settles each side received exactly what the other wrote."""
        pair = Pair()
        server, _ = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        sent_to_follower: list[bytes] = []
        sent_to_leader: list[bytes] = []
        connected = True
        for op in ops:
            if op == "to_follower":
                msg = b"L%d" % len(sent_to_follower)
                client.transport.write(msg)
                sent_to_follower.append(msg)
            elif op == "to_leader" and server.built:
                msg = b"F%d" % len(sent_to_leader)
                server.built[0].transport.write(msg)
                sent_to_leader.append(msg)
            elif op == "pump" and connected:
                pair.pump()
            elif op == "drop":
                if connected:
                    pair.drop()
                else:
                    pair.reconnect()
                connected = not connected
            elif op == "turn":
                pair.clock.advance(0)
            elif isinstance(op, tuple) and connected:
                pair.link.deliver_some(to_b=op[1], to_a=op[2])
        if not connected:
            pair.reconnect()
        pair.pump()
        pair.clock.advance(ACK_DELAY)  # the last delayed ACKs
        pair.pump()
        self.assertEqual(received(server.built[0]), sent_to_follower)
        self.assertEqual(received(client), sent_to_leader)
        self.assertEqual(pair.leader.unacknowledged_records, 0)
        self.assertEqual(pair.follower.unacknowledged_records, 0)


class TelemetryTests(SynchronousTestCase):
    """Traffic counters and subchannel records for telemetry (Telemetry on the pair's Clock)."""

    def setUp(self) -> None:
        self.records: dict[str, list[dict]] = {"leader": [], "follower": []}
        clock = Clock()
        kw = {
            side: {"telemetry": Telemetry(clock, sink=self.records[side].append)}
            for side in self.records
        }
        self.pair = Pair(kw["leader"], kw["follower"], clock=clock)

    def settle(self) -> None:
        """Deliver everything and let every (possibly delayed) ACK go out and arrive."""
        self.pair.pump()
        self.pair.clock.advance(1.0)
        self.pair.pump()

    def events(self, side: str, kind: str) -> list[dict]:
        return [r for r in self.records[side] if r["event"] == kind]

    def test_counters_count_each_record_once_across_a_replay(self) -> None:
        """Records and DATA payload bytes, sent and received, are counted once each even when
        a lost connection makes the queue replay them (the replayed bytes are counted as
        retransmitted, the duplicates the receiver gets are not received twice); every record
        ends up acked and nothing stays queued."""
        pair = self.pair
        listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        client.transport.write(b"one")
        client.transport.write(b"two")
        self.settle()
        client.transport.write(b"three")
        client.transport.write(b"four")
        pair.link.deliver_some(to_b=1)  # "three" arrives, its ACK does not
        pair.drop()
        pair.reconnect()
        self.settle()
        leader, follower = pair.leader.traffic_stats(), pair.follower.traffic_stats()
        self.assertEqual(
            leader,
            TrafficStats(
                records_sent=5,
                bytes_sent=15,
                records_acked=5,
                bytes_retransmitted=len(b"threefour"),
                records_received=0,
                bytes_received=0,
                queue_bytes=0,
            ),
        )
        self.assertEqual((follower.records_received, follower.bytes_received), (5, 15))
        self.assertEqual((follower.records_sent, follower.bytes_retransmitted), (0, 0))

    def test_queue_bytes_while_unacknowledged(self) -> None:
        """queue_bytes is what waits for an ACK (records with their headers)."""
        client = opened(self, self.pair.leader, "x")
        client.transport.write(b"12345")
        stats = self.pair.leader.traffic_stats()
        self.assertEqual(stats.queue_bytes, (RECORD_OVERHEAD + 1) + (RECORD_OVERHEAD + 5))
        self.assertEqual((stats.records_sent, stats.records_acked), (2, 0))

    def test_subchannels_opened_and_closed_with_bytes(self) -> None:
        """Both sides record the subchannel opened (initiator on the opener's side only) and,
        once closed, its payload bytes in and out and how long it was open."""
        pair = self.pair
        factory, _port = listening(self, pair.follower, "x")
        client = opened(self, pair.leader, "x")
        client.transport.write(b"hello")
        self.settle()
        server = factory.built[0]
        server.transport.write(b"back at you")
        self.settle()
        pair.clock.advance(2.5)
        client.transport.loseConnection()
        self.settle()
        for side, initiator, bytes_in, bytes_out in (
            ("leader", True, 11, 5),
            ("follower", False, 5, 11),
        ):
            (opened_record,) = self.events(side, "subchannel_opened")
            (closed_record,) = self.events(side, "subchannel_closed")
            self.assertEqual((opened_record["scid"], opened_record["initiator"]), (1, initiator))
            self.assertEqual(
                (closed_record["scid"], closed_record["bytes_in"], closed_record["bytes_out"]),
                (1, bytes_in, bytes_out),
            )
            self.assertEqual(closed_record["duration_s"], 2.5 + 2.0)

    def test_stop_closes_open_subchannels(self) -> None:
        """Subchannels still open when the wormhole stops are recorded closed, once."""
        client = opened(self, self.pair.leader, "x")
        client.transport.write(b"abc")
        self.pair.leader.stop("done")
        self.pair.leader.stop("again")
        (closed_record,) = self.events("leader", "subchannel_closed")
        self.assertEqual((closed_record["bytes_in"], closed_record["bytes_out"]), (0, 3))


class EventualTests(SynchronousTestCase):
    """when_dilated/connect/listen answer on a later reactor turn, as stock's do (through its
    eventual queue), never inside the call or inside the event that decides them."""

    def test_answers_come_on_a_later_turn_in_order(self) -> None:
        """Asked before and after dilation, the answers come only once the clock turns, in
        the order they were asked; connect() sends nothing and builds nothing until then."""
        clock = Clock()
        mux = Multiplexer(manager=FakeManager(), reactor=clock)
        mux.set_role(LEADER)
        order: list[str] = []
        mux.when_dilated().addCallback(lambda _: order.append("before"))
        mux.dilated()
        self.assertEqual(order, [])
        mux.when_dilated().addCallback(lambda _: order.append("after"))
        factory = RecordingFactory(RecordingProtocol)
        connecting = mux.connector_for("x").connect(factory)
        self.assertEqual((order, factory.built), ([], []))
        self.assertEqual(mux.unacknowledged_records, 0)
        clock.advance(0)
        self.assertEqual(order, ["before", "after"])
        self.assertEqual(len(factory.built), 1)
        self.assertIs(self.successResultOf(connecting), factory.built[0])

    def test_failure_also_comes_later_and_cancel_works(self) -> None:
        """fail_dilation errbacks on a later turn; a cancelled wait ends at once."""
        clock = Clock()
        mux = Multiplexer(manager=FakeManager(), reactor=clock)
        failing = mux.when_dilated()
        cancelled = mux.when_dilated()
        mux.fail_dilation(Failure(OldPeerCannotDilateError()))
        self.assertNoResult(failing)
        cancelled.cancel()
        self.failureResultOf(cancelled, CancelledError)
        clock.advance(0)
        self.failureResultOf(failing, OldPeerCannotDilateError)
