"""Tests of txdilation.testing.memory: two dilated wormholes joined in memory.

The pair is what applications test their subprotocols with, so these tests pin the promises of
its docstring: the dilated-wormhole API on each end, in-order delivery on a later clock turn,
loss of what is in flight when the link drops, replay without loss or duplication when it comes
back, refusal of unexpected names, and closing.
"""

from __future__ import annotations

import os

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IStreamClientEndpoint, IStreamServerEndpoint
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

from tests.subchannels.test_subchannel import HalfProtocol, RecordingProtocol
from txdilation.semantics import STOCK, TWISTED
from txdilation.testing.memory import MemoryDilationPair
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.dilation_errors import WormholeClosedError


def received(protocol: RecordingProtocol) -> bytes:
    return b"".join(e for e in protocol.events if isinstance(e, bytes))


class Collecting(Factory):
    """Builds RecordingProtocols (or ``cls``) and keeps them."""

    def __init__(self, cls: type = RecordingProtocol) -> None:
        self.cls = cls
        self.built: list[RecordingProtocol] = []

    def buildProtocol(self, addr: object) -> RecordingProtocol:
        p = self.cls()
        p.factory = self
        self.built.append(p)
        return p


class MemoryPairTests(SynchronousTestCase):
    """A pair driven by a Clock."""

    def setUp(self) -> None:
        self.clock = Clock()

    def open(self, pair: MemoryDilationPair, name: str = "chat", cls: type = RecordingProtocol):
        """Listen on b, connect from a: (client protocol on a, factory on b)."""
        server = Collecting(cls)
        listening = pair.b.listener_for(name).listen(server)
        connecting = pair.a.connector_for(name).connect(Factory.forProtocol(cls))
        pair.flush()  # (answers come on a later turn, as from a real wormhole)
        self.successResultOf(listening)
        client = self.successResultOf(connecting)
        pair.flush()
        return client, server

    def test_api_and_dilation(self) -> None:
        """Each end offers when_dilated/listener_for/connector_for (Twisted endpoint
        interfaces); both when_dilated fire when the link first comes up, not before."""
        pair = MemoryDilationPair(self.clock, connected=False)
        verifyObject(IStreamServerEndpoint, pair.a.listener_for("x"))
        verifyObject(IStreamClientEndpoint, pair.b.connector_for("x"))
        da, db = pair.a.when_dilated(), pair.b.when_dilated()
        self.assertNoResult(da)
        self.assertFalse(pair.link_up)
        pair.restore_link()
        self.assertNoResult(da)  # on a later turn, as stock's
        pair.flush()
        self.assertIsNone(self.successResultOf(da))
        self.assertIsNone(self.successResultOf(db))
        self.assertTrue(pair.link_up)
        self.assertEqual(pair.generation, 1)
        verifyObject(IDilatedConnection, pair.a._connection)

    def test_data_both_ways_on_a_later_turn(self) -> None:
        """A write arrives as one dataReceived at the other end, only when the clock turns."""
        pair = MemoryDilationPair(self.clock)
        client, server = self.open(pair)
        client.transport.write(b"hello")
        self.assertEqual(pair.in_flight, 1)
        self.assertEqual(server.built[0].events, ["made"])
        pair.flush()
        server.built[0].transport.write(b"hi there")
        pair.flush()
        self.assertEqual(server.built[0].events, ["made", b"hello"])
        self.assertEqual(client.events, ["made", b"hi there"])
        self.assertEqual(pair.in_flight, 0)

    def test_drop_loses_in_flight_and_restore_replays_once(self) -> None:
        """Records in flight when the link drops are lost; writes made while it is down are
        queued; after restore_link everything arrives once, in order."""
        pair = MemoryDilationPair(self.clock)
        client, server = self.open(pair)
        client.transport.write(b"1")
        pair.flush()
        client.transport.write(b"2")
        client.transport.write(b"3")
        pair.drop_link()
        self.assertFalse(pair.link_up)
        self.assertIsNone(pair.a._connection)
        client.transport.write(b"4")
        pair.flush()
        self.assertEqual(received(server.built[0]), b"1")
        pair.restore_link()
        pair.flush()
        self.assertEqual(pair.generation, 2)
        self.assertEqual(server.built[0].events, ["made", b"1", b"2", b"3", b"4"])

    def test_abort_through_manager_seam(self) -> None:
        """``transport._manager._connection.abort()`` (the seam tests of real wormholes use)
        drops the link; with reconnect_after the link comes back by itself after that delay
        and the data still arrives."""
        pair = MemoryDilationPair(self.clock, reconnect_after=2.0)
        client, server = self.open(pair)
        client.transport.write(b"before")
        client.transport._manager._connection.abort()
        self.assertFalse(pair.link_up)
        self.clock.advance(1.9)
        self.assertFalse(pair.link_up)
        self.clock.advance(0.1)
        pair.flush()
        self.assertTrue(pair.link_up)
        self.assertEqual(received(server.built[0]), b"before")

    def test_half_close_passes(self) -> None:
        """loseWriteConnection on one end is readConnectionLost on the other; once both sides
        closed, both get connectionLost (TWISTED semantics; stock's never calls it)."""
        pair = MemoryDilationPair(self.clock, semantics=TWISTED)
        client, server = self.open(pair, cls=HalfProtocol)
        client.transport.write(b"request")
        client.transport.loseWriteConnection()
        pair.flush()
        peer = server.built[0]
        self.assertEqual(peer.events, ["made", b"request", "read_lost"])
        peer.transport.write(b"reply")
        peer.transport.loseWriteConnection()
        pair.flush()
        self.assertEqual(client.events, ["made", "write_lost", b"reply", "read_lost", "lost"])
        self.assertEqual(peer.events[-2:], ["write_lost", "lost"])

    def test_expected_subprotocols_refuse_others(self) -> None:
        """With expected_subprotocols for b, a subchannel a opens with another name is closed
        at once by b; an expected name works."""
        pair = MemoryDilationPair(self.clock, expected_subprotocols={"b": ["chat"]})
        server = Collecting()
        listening = pair.b.listener_for("other").listen(server)
        connecting = pair.a.connector_for("other").connect(Collecting())
        pair.flush()
        self.successResultOf(listening)
        refused = self.successResultOf(connecting)
        pair.flush()
        self.assertEqual(refused.events, ["made", "lost"])
        self.assertEqual(server.built, [])
        _, chat = self.open(pair, "chat")
        self.assertEqual(len(chat.built), 1)

    def test_default_semantics_are_stock(self) -> None:
        """Without semantics=, a pair behaves as a drop-in wormhole by default: stock's
        (connectionLost gets a bare ConnectionDone(); close delivers nothing); and as
        TXDILATION_SEMANTICS says when it is set."""
        pair = MemoryDilationPair(self.clock)
        self.assertIs(pair.semantics, STOCK)
        client, server = self.open(pair)
        server.built[0].transport.loseConnection()
        pair.flush()
        self.assertIsInstance(client.reasons[-1], ConnectionDone)
        self.patch(os, "environ", {**os.environ, "TXDILATION_SEMANTICS": "twisted"})
        self.assertIs(MemoryDilationPair(self.clock, connected=False).semantics, TWISTED)

    def test_close(self) -> None:
        """close() (TWISTED semantics) delivers connectionLost to open subchannels and fails
        later calls and pending waits with WormholeClosedError; it is idempotent and ends
        reconnecting."""
        pair = MemoryDilationPair(self.clock, reconnect_after=1.0, semantics=TWISTED)
        client, server = self.open(pair)
        pair.drop_link()
        pair.close()
        pair.close()
        self.assertEqual(client.events[-1], "lost")
        self.assertEqual(server.built[0].events[-1], "lost")
        late = pair.a.connector_for("x").connect(Collecting())
        self.clock.advance(5)
        self.failureResultOf(late, WormholeClosedError)
        self.assertFalse(pair.link_up)
        waiting = MemoryDilationPair(self.clock, connected=False, semantics=TWISTED)
        d = waiting.b.when_dilated()
        waiting.close()
        self.clock.advance(0)
        self.failureResultOf(d, WormholeClosedError)

    def test_flush_needs_a_clock(self) -> None:
        """flush() refuses a real reactor (which delivers by itself)."""
        pair = MemoryDilationPair(reactor, connected=False)
        self.assertRaises(TypeError, pair.flush)
        pair.close()


class MemoryPairReactorTests(TestCase):
    """A pair driven by the real reactor: nothing to pump."""

    timeout = 10

    async def test_round_trip_with_reactor(self) -> None:
        """An echo over the pair completes by itself on the reactor, across a drop and
        restore in the middle."""

        class Echo(RecordingProtocol):
            def dataReceived(self, data: bytes) -> None:
                super().dataReceived(data)
                self.transport.write(data)

        pair = MemoryDilationPair(reactor)
        self.addCleanup(pair.close)
        await pair.a.when_dilated()
        await pair.b.listener_for("echo").listen(Factory.forProtocol(Echo))
        got: Deferred[bytes] = Deferred()

        class Client(RecordingProtocol):
            def dataReceived(self, data: bytes) -> None:
                super().dataReceived(data)
                if received(self) == b"ping!pong!" and not got.called:
                    got.callback(received(self))

        client = await pair.a.connector_for("echo").connect(Factory.forProtocol(Client))
        client.transport.write(b"ping!")
        pair.drop_link()
        client.transport.write(b"pong!")
        reactor.callLater(0.01, pair.restore_link)
        self.assertEqual(await got, b"ping!pong!")
