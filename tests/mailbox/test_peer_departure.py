"""Knowing when the peer is gone, and reconnecting as soon as either side notices a dead link:
txdilation's 'closing' and 'link-lost' extensions, the peer timeout for peers that cannot say
they left, and their wire safety. Two Managers through the in-memory mailbox of
tests/mailbox/test_manager.py over real loopback TCP, or one Manager on a MemoryReactorClock."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import inlineCallbacks
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import (
    Connected,
    ConnectedPeer,
    DilationStatus,
    Disconnected,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)

from tests.support.waits import sleep
from txdilation._stock import manager as stock_manager
from txdilation._stock.manager import Dilator
from txdilation.mailbox.dilate_messages import CLOSING, EXTENSIONS, LINK_LOST
from txdilation.mailbox.manager import Manager
from txdilation.semantics import STOCK, TWISTED, Semantics
from txdilation.settings import ReconnectPolicy, Settings
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.dilation_errors import WormholeClosedError
from txdilation.wire.reasons import Cause, LinkLoss

from .test_manager import (
    LOOPBACK,
    Collector,
    DilatedPairBase,
    EchoProtocol,
    MailboxPipe,
    clock_manager,
    make_pair,
    reactor,
)

LEADER_SIDE, FOLLOWER_SIDE = "f" * 16, "0" * 16


def kinds(pipe: MailboxPipe) -> list[str]:
    return [body["type"] for _, body in pipe.sent]


def role_index(dilators: list[Dilator], role: str) -> int:
    return next(i for i, d in enumerate(dilators) if d._manager.role.value == role)


class ClosingAnnouncementTests(DilatedPairBase):
    """A txdilation peer that closes its wormhole says so; we stop instead of reconnecting."""

    @inlineCallbacks
    def closing_pair(self, closer_role: str) -> Any:
        status: list[list[DilationStatus]] = [[], []]
        # TWISTED semantics: the stayer's subchannel protocol hears that the peer left
        pipes, dilators, apis = yield self.dilate_pair(status=status, semantics=TWISTED)
        closer = role_index(dilators, closer_role)
        stayer = 1 - closer
        apis[closer].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[stayer].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"hello")
        yield client.wait_for(5)
        terms = [d._T for d in dilators]
        terms[closer].close("happy")  # what stock's Boss does on w.close()
        self.assertEqual(kinds(pipes[closer])[-1], "closing")
        dilators[closer].stop()  # the Terminator does this once the mailbox closed
        yield terms[closer].stopped
        yield client.lost  # the stayer's subchannel ends: the peer is gone
        return pipes, dilators, status, closer, stayer

    def assert_stopped_without_reconnecting(
        self, pipes: Any, dilators: Any, status: Any, stayer: int
    ) -> None:
        updates = status[stayer]
        self.assertIsInstance(updates[-1].peer_connection, StoppedPeer)
        peers = [type(s.peer_connection) for s in updates]
        self.assertNotIn(ReconnectingPeer, peers[peers.index(ConnectedPeer) :])
        self.assertNotIn("reconnect", kinds(pipes[stayer]))
        self.assertNotIn("reconnecting", kinds(pipes[stayer]))
        self.assertIsNone(dilators[stayer]._manager.connector)

    @inlineCallbacks
    def test_leader_closes(self) -> Any:
        """The Leader closes: the Follower's open subchannel gets connectionLost and its status
        ends at StoppedPeer, with no reconnection attempted (stock defect 12)."""
        pipes, dilators, status, _closer, stayer = yield self.closing_pair("LEADER")
        self.assert_stopped_without_reconnecting(pipes, dilators, status, stayer)

    @inlineCallbacks
    def test_follower_closes(self) -> Any:
        """The Follower closes: the Leader does not send 'reconnect' but stops (StoppedPeer)."""
        pipes, dilators, status, _closer, stayer = yield self.closing_pair("FOLLOWER")
        self.assert_stopped_without_reconnecting(pipes, dilators, status, stayer)

    @inlineCallbacks
    def test_closing_while_link_down(self) -> Any:
        """The peer closes while the link is down (the Leader waits for 'reconnecting'): the
        Leader stops at once instead of waiting forever, and new connect() calls fail."""
        pipes, dilators, apis = yield self.dilate_pair()
        leader = role_index(dilators, "LEADER")
        follower = 1 - leader
        # hold the Follower's 'reconnecting' answer: the Leader sits in 'disconnected'
        held: list[tuple[str, bytes]] = []
        pipes[follower].peer = None
        original_send = pipes[follower].send

        def hold(phase: str, plaintext: bytes) -> None:
            original_send(phase, plaintext)
            held.append((phase, plaintext))

        pipes[follower].send = hold  # type: ignore[method-assign]
        dilators[leader]._manager.connection.abort()
        while "reconnect" not in kinds(pipes[leader]):
            yield sleep(0.01)
        dilators[follower]._T.close("happy")
        self.assertEqual(kinds(pipes[follower])[-1], "closing")
        for phase, plaintext in held:
            pipes[leader].receive(phase, plaintext)
        manager = dilators[leader]._manager
        self.assertIsInstance(manager.status.peer_connection, StoppedPeer)
        self.assertIsNone(manager.connector)
        d = apis[leader].connector_for("late").connect(Factory.forProtocol(Collector))
        yield self.assertFailure(d, WormholeClosedError)


class LinkLostTests(DilatedPairBase):
    """A Follower with a short ping interval gets the Leader to reconnect at once."""

    @inlineCallbacks
    def test_follower_notices_first(self) -> Any:
        """Leader ping_interval 60 s, Follower 0.4 s, link black-holed: the Follower gives
        the link up (its liveness allows at most 2 x 0.4 s of silence; when that fires on the
        real reactor depends on the load: the bound is tests/path/test_liveness.py's, on
        a Clock) and says 'link-lost'; the Leader drops the connection at once and a new
        generation carries the subchannel on, long before the Leader's own liveness (90 s)
        would have noticed."""
        pipes, terms, dilators = make_pair()
        self.addCleanup(self.stop_all, dilators, terms)
        key = os.urandom(32)
        for d in dilators:
            d.got_key(key)
            d.got_wormhole_versions({"can-dilate": ["ged"]})
        # the sides stock's tests force through make_side: dilators[0] leads
        self.patch(stock_manager, "make_side", iter([LEADER_SIDE, FOLLOWER_SIDE]).__next__)
        apis = [dilators[0].dilate(ping_interval=60), dilators[1].dilate(ping_interval=0.4)]
        yield apis[0].when_dilated()
        yield apis[1].when_dilated()
        leader, follower = 0, 1
        self.assertEqual(role_index(dilators, "FOLLOWER"), follower)
        apis[leader].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[follower].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"before")
        yield client.wait_for(6)
        self.assertLessEqual(dilators[follower]._manager.link.silence_limit, 2 * 0.4)
        leader_limit = dilators[leader]._manager.link.silence_limit
        firsts = [d._manager.connection for d in dilators]
        for conn in firsts:
            conn.transport.pauseProducing()
        started = reactor.seconds()
        while dilators[leader]._manager.connection is firsts[leader]:
            yield sleep(0.01)
        self.assertLess(reactor.seconds() - started, leader_limit)
        sent = [body for _, body in pipes[follower].sent]
        self.assertIn({"type": "link-lost", "generation": 0}, sent)
        after = kinds(pipes[follower])[kinds(pipes[follower]).index("link-lost") :]
        self.assertEqual(after.count("reconnecting"), 1)
        client.transport.write(b"after")
        got = yield client.wait_for(11)
        self.assertEqual(got, b"beforeafter")


def _manager(
    side: str,
    timeout: float | None = 10.0,
    semantics: Semantics = STOCK,
    status_update: Any = None,
) -> tuple[Manager, MailboxPipe, Any]:
    pipe = MailboxPipe()
    m, clock = clock_manager(
        pipe,
        side,
        status_update=status_update,
        initial_mailbox_status=WormholeStatus(mailbox_connection=Connected("ws://x")),
        settings=Settings(network=LOOPBACK, policy=ReconnectPolicy(timeout), semantics=semantics),
    )
    m.got_dilation_key(b"k" * 32)
    m.got_wormhole_versions({"can-dilate": ["ged"]})
    return m, pipe, clock


def please(side: str, extensions: list[str] | None = None) -> bytes:
    body: dict[str, Any] = {"type": "please", "side": side, "use-version": "ged"}
    if extensions is not None:
        body["extensions"] = extensions
    return json.dumps(body).encode()


class FakeConnection:
    """Stands in for a selected L2 connection (only what the Manager calls)."""

    description = "->fake"
    is_direct = True
    reading_paused = False

    def __init__(self) -> None:
        self.failed: list[LinkLoss] = []
        self.aborted = False
        self.records: list[Any] = []

    def send_record(self, record: Any) -> None:
        self.records.append(record)

    def send_records(self, records: Any) -> None:
        self.records.extend(records)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        pass

    def unregisterProducer(self) -> None:
        pass

    def fail(self, reason: LinkLoss) -> None:
        self.failed.append(reason)

    def abort(self) -> None:
        self.aborted = True

    def disconnect(self) -> None:
        pass


class ExtensionWireTests(SynchronousTestCase):
    """What goes on the wire, and only to peers that said they understand it."""

    def test_please_lists_extensions(self) -> None:
        """Our 'please' carries the extensions list next to the keys stock reads."""
        _m, pipe, _clock = _manager(LEADER_SIDE)
        self.assertEqual(
            pipe.sent[0][1],
            {
                "type": "please",
                "side": LEADER_SIDE,
                "use-version": "ged",
                "extensions": list(EXTENSIONS),
            },
        )

    def test_no_closing_to_a_stock_peer(self) -> None:
        """A peer whose 'please' has no extensions (stock) is never sent 'closing'; one that
        lists it gets it exactly once."""
        m, pipe, _clock = _manager(LEADER_SIDE)
        m.received_dilation_message(please(FOLLOWER_SIDE))
        m.announce_closing()
        self.assertNotIn("closing", kinds(pipe))
        m2, pipe2, _clock2 = _manager(LEADER_SIDE)
        m2.received_dilation_message(please(FOLLOWER_SIDE, [CLOSING]))
        m2.announce_closing()
        m2.announce_closing()
        self.assertEqual(kinds(pipe2).count("closing"), 1)

    def test_closing_before_dilation_started_is_not_sent(self) -> None:
        """Before our own 'please' went out there is nothing to announce."""
        pipe = MailboxPipe()
        m = Manager(pipe, LEADER_SIDE, None, MemoryReactorClock(), None, None, ["ged"], 30.0,
                    None, False, None, settings=Settings(network=LOOPBACK))  # fmt: skip
        m.announce_closing()
        self.assertEqual(pipe.sent, [])

    def test_terminator_close_is_wrapped_once(self) -> None:
        """Dilator.wire wraps the Terminator's close so the announcement comes first, and
        wiring twice does not wrap twice."""
        calls: list[str] = []

        class Terminator:
            def close(self, mood: str) -> None:
                calls.append(f"close {mood}")

            def stoppedD(self) -> None:
                pass

        class Sender:
            def send(self, phase: str, body: bytes) -> None:
                calls.append(json.loads(body)["type"])

        from wormhole._interfaces import ISend, ITerminator
        from zope.interface import directlyProvides

        t, s = Terminator(), Sender()
        directlyProvides(t, ITerminator)
        directlyProvides(s, ISend)
        d = Dilator(MemoryReactorClock(), None, None, ["ged"])
        d.wire(s, t)
        d.wire(s, t)
        d.got_key(b"k" * 32)
        d.got_wormhole_versions({"can-dilate": ["ged"]})
        d.dilate()
        d.received_dilate(please(FOLLOWER_SIDE, list(EXTENSIONS)))
        t.close("happy")
        self.assertEqual(calls[-2:], ["closing", "close happy"])
        self.assertEqual(calls.count("close happy"), 1)

    def test_link_lost_only_for_the_current_generation(self) -> None:
        """The Leader drops its connection for 'link-lost' naming the current generation,
        and ignores a stale generation, a non-number, and the message as a Follower."""
        m, _pipe, _clock = _manager(LEADER_SIDE)
        m.received_dilation_message(please(FOLLOWER_SIDE, list(EXTENSIONS)))
        conn = FakeConnection()
        m.multiplexer.set_role = lambda role: None  # type: ignore[method-assign]
        m.events.connection_made(m.connector_reports.link_for(conn))
        for stale in (b'{"type": "link-lost", "generation": 3}',
                      b'{"type": "link-lost", "generation": true}',
                      b'{"type": "link-lost"}'):  # fmt: skip
            m.received_dilation_message(stale)
        self.assertEqual(conn.failed, [])
        m.received_dilation_message(b'{"type": "link-lost", "generation": 0}')
        self.assertEqual(len(conn.failed), 1)
        f, _fpipe, _fclock = _manager(FOLLOWER_SIDE)
        f.received_dilation_message(please(LEADER_SIDE, list(EXTENSIONS)))
        fconn = FakeConnection()
        f.events.connection_made(f.connector_reports.link_for(fconn))
        f.received_dilation_message(b'{"type": "link-lost", "generation": 0}')
        self.assertEqual(fconn.failed, [])
        self.assertIn(LINK_LOST, EXTENSIONS)


class PeerTimeoutTests(SynchronousTestCase):
    """A peer that cannot say it left (stock, crashed) is given up after the peer timeout."""

    def test_gives_up_after_timeout(self) -> None:
        """Connecting and hearing nothing for peer_timeout: StoppedPeer, the connector is
        stopped and (TWISTED semantics; stock's never fires it) when_dilated fails."""
        statuses: list[DilationStatus] = []
        m, _pipe, clock = _manager(LEADER_SIDE, semantics=TWISTED, status_update=statuses.append)
        when = m.api.when_dilated()
        m.received_dilation_message(please(FOLLOWER_SIDE))
        clock.advance(9.9)
        self.assertNotIsInstance(m.status.peer_connection, StoppedPeer)
        clock.advance(0.1)
        self.assertIsInstance(statuses[-1].peer_connection, StoppedPeer)
        self.assertIsNone(m.connector)
        clock.advance(0)  # (answers come on a later turn)
        self.failureResultOf(when)
        m.stop()
        self.successResultOf(m.when_stopped())

    def test_peer_messages_and_mailbox_outage(self) -> None:
        """A message from the peer restarts the count; our mailbox being down pauses it."""
        m, _pipe, clock = _manager(LEADER_SIDE)
        m.received_dilation_message(please(FOLLOWER_SIDE))
        clock.advance(8)
        m.received_dilation_message(b'{"type": "connection-hints", "hints": []}')
        clock.advance(8)
        m.mailbox_status(WormholeStatus(mailbox_connection=Disconnected()))
        clock.advance(100)
        self.assertNotIsInstance(m.status.peer_connection, StoppedPeer)
        m.mailbox_status(WormholeStatus(mailbox_connection=Connected("ws://x")))
        clock.advance(9.9)
        self.assertNotIsInstance(m.status.peer_connection, StoppedPeer)
        clock.advance(0.2)
        self.assertIsInstance(m.status.peer_connection, StoppedPeer)
        m.stop()

    def test_never_while_connected(self) -> None:
        """While a connection is selected the peer timeout does not run; losing it starts
        the count."""
        m, _pipe, clock = _manager(LEADER_SIDE)
        m.received_dilation_message(please(FOLLOWER_SIDE))
        conn = FakeConnection()
        link = m.connector_reports.link_for(conn)
        m.events.connection_made(link)
        link.stop()  # the fake never answers pings
        clock.advance(1000)
        self.assertIsInstance(m.status.peer_connection, ConnectedPeer)
        link.connection_lost(conn, LinkLoss(Cause.DROPPED, "cut"))  # type: ignore[arg-type]
        clock.advance(10)
        self.assertIsInstance(m.status.peer_connection, StoppedPeer)
        m.stop()

    def test_disabled(self) -> None:
        """peer_timeout None (TXDILATION_PEER_TIMEOUT=0): never given up."""
        m, _pipe, clock = _manager(LEADER_SIDE, timeout=None)
        m.received_dilation_message(please(FOLLOWER_SIDE))
        clock.advance(1e6)
        self.assertNotIsInstance(m.status.peer_connection, StoppedPeer)
        m.stop()

    def test_policy_from_environment(self) -> None:
        """TXDILATION_PEER_TIMEOUT: empty means 600 s, 0 means never, junk is refused."""
        self.assertEqual(ReconnectPolicy.from_environ({}).peer_timeout, 600.0)
        self.assertEqual(
            ReconnectPolicy.from_environ({"TXDILATION_PEER_TIMEOUT": " 2.5 "}).peer_timeout, 2.5
        )
        self.assertIsNone(
            ReconnectPolicy.from_environ({"TXDILATION_PEER_TIMEOUT": "0"}).peer_timeout
        )
        for bad in ("soon", "-1"):
            self.assertRaises(
                ValueError, ReconnectPolicy.from_environ, {"TXDILATION_PEER_TIMEOUT": bad}
            )


class RecordingBoss:
    """Stands in for stock's Boss: records the application's close (what ``w.close()``
    calls), which the stock-facing Dilator wraps."""

    def __init__(self) -> None:
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


class CloseFlushTests(DilatedPairBase):
    """Closing our wormhole while the link is down does not lose what the peer has not
    acknowledged: stock's Boss closes the mailbox before the Dilation stops (and drops the
    peer's DILATE messages), so without waiting the link could never be made again. Found in
    fault runs: a txdilation receiver answered a stock sender's subchannel CLOSE and closed
    its wormhole as the link was cut; its CLOSE was dropped and the stock sender, which never
    gives up on a peer, waited for it for ever."""

    @inlineCallbacks
    def test_close_waits_for_the_last_records(self) -> Any:
        """The closer's subchannel answers the stayer's data with a CLOSE just as the link is
        cut, and its application closes the wormhole: the close (Boss.close) is held until
        the stayer acknowledged that CLOSE over a new connection, and the stayer's protocol
        gets its connectionLost (stock semantics: only the CLOSE delivers it)."""
        _pipes, dilators, apis = yield self.dilate_pair(semantics=STOCK)
        closer, stayer = 0, 1
        boss = RecordingBoss()
        dilators[closer]._hold_close(boss)
        served: list[Collector] = []

        def build() -> Collector:
            served.append(Collector())
            return served[-1]

        apis[closer].listener_for("x").listen(Factory.forProtocol(build))
        client = yield apis[stayer].connector_for("x").connect(Factory.forProtocol(Collector))
        client.transport.write(b"last words")
        while not served or b"".join(served[0].received) != b"last words":
            yield sleep(0.01)
        manager = dilators[closer]._manager
        first = manager.connection
        first.abort()  # the link is cut...
        served[0].transport.loseConnection()  # ...as the closer answers with its CLOSE...
        boss.close()  # ...and its application closes the wormhole (w.close())
        self.assertEqual(boss.closes, 0)  # held: the stayer has not acknowledged the CLOSE
        yield client.lost
        while boss.closes == 0:
            yield sleep(0.01)
        self.assertEqual(boss.closes, 1)
        self.assertIsNot(manager.connection, first)
        self.assertEqual(manager.multiplexer.unacknowledged_records, 0)

    def test_nothing_to_wait_for(self) -> None:
        """A close with nothing unacknowledged, or before any connection, is not held."""
        d = Dilator(MemoryReactorClock(), None, None, ["ged"])
        self.assertIsNone(d.when_flushed(5))
        m, _pipe, clock = _started_leader()
        self.assertIsNone(m_dilator_flush(m, clock))

    def test_gives_up_after_the_timeout(self) -> None:
        """A link that does not come back: the close waits the timeout, then goes on, saying
        how many records the peer never acknowledged."""
        m, _pipe, clock = _started_leader()
        link = m.connector_reports.link_for(FakeDilatedConnection("first"))
        m.connector_reports.connector_connection_made(link, 1)
        m.multiplexer.connector_for("x").connect(Factory.forProtocol(Collector))
        clock.advance(0)
        link.connection_lost(link, LinkLoss(Cause.DROPPED, "cut"))
        d = m_dilator_flush(m, clock)
        assert d is not None
        results: list[int] = []
        d.addCallback(results.append)
        clock.advance(4.9)
        self.assertEqual(results, [])
        clock.advance(0.2)
        self.assertEqual(results, [1])  # the OPEN was never acknowledged
        m.stop()


def _started_leader() -> tuple[Manager, MailboxPipe, MemoryReactorClock]:
    pipe = MailboxPipe()
    m, clock = clock_manager(pipe, LEADER_SIDE)
    m.got_dilation_key(b"k" * 32)
    m.got_wormhole_versions({"can-dilate": ["ged"]})
    m.received_dilation_message(please(FOLLOWER_SIDE, list(EXTENSIONS)))
    return m, pipe, clock


def m_dilator_flush(m: Manager, clock: MemoryReactorClock) -> Any:
    """``Dilator.when_flushed(5)`` for a Dilator whose Manager is ``m``."""
    d = Dilator(clock, None, None, ["ged"])
    d._manager = m
    return d.when_flushed(5)
