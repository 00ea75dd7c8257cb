"""Tests of txdilation.session.splice: a local connection and a subchannel joined both ways.

The subchannel side is real (txdilation.testing.memory: the real L4/L5 over an in-memory link);
the local side is a StringTransport that can half-close, standing in for a TCP transport.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionLost
from twisted.internet.protocol import Factory, connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.subchannels.test_subchannel import HalfProtocol
from tests.testing.test_memory import Collecting, received
from txdilation.semantics import TWISTED
from txdilation.session.splice import Splice
from txdilation.testing.memory import MemoryDilationPair


class HalfCloseStringTransport(StringTransport):
    """A StringTransport with TCP's half-close: loseWriteConnection() tells the protocol."""

    write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True
        self.protocol.writeConnectionLost()

    def write(self, data: bytes) -> None:
        assert not self.write_closed, "write after loseWriteConnection"
        super().write(data)


class Prebuilt(Factory):
    def __init__(self, protocol: object) -> None:
        self.protocol_ = protocol

    def buildProtocol(self, addr: object) -> object:
        return self.protocol_


class SpliceTests(SynchronousTestCase):
    """An outbound splice (a local connection carried to the peer) over a memory pair."""

    def setUp(self, **options: object) -> None:
        self.clock = Clock()
        # the session's subchannels have TWISTED semantics (txdilation.session.library.SEMANTICS)
        self.pair = MemoryDilationPair(self.clock, semantics=TWISTED, **options)
        self.peers = Collecting(HalfProtocol)
        listening = self.pair.b.listener_for("svc").listen(self.peers)
        self.pair.flush()  # (listen() answers on a later turn, as a real wormhole's does)
        self.successResultOf(listening)
        self.splice = Splice(7, "svc", "outbound", self.clock)
        self.ended: list[Splice] = []
        self.splice.ended.addCallback(self.ended.append)
        self.local = HalfCloseStringTransport()
        self.local.protocol = self.splice.local
        self.splice.local.makeConnection(self.local)

    def open_channel(self) -> HalfProtocol:
        connecting = self.pair.a.connector_for("svc").connect(Prebuilt(self.splice.channel))
        self.pair.flush()  # (connect() answers on a later turn too)
        self.successResultOf(connecting)
        self.pair.flush()
        return self.peers.built[0]

    def test_waits_paused_then_joins(self) -> None:
        """The local connection is paused until the subchannel exists, then resumed, and each
        transport is registered as the other's streaming producer."""
        self.assertEqual(self.local.producerState, "paused")
        self.open_channel()
        self.assertTrue(self.splice.joined)
        self.assertEqual(self.local.producerState, "producing")
        self.assertIs(self.local.producer, self.splice.channel.transport)
        self.assertTrue(self.local.streaming)

    def test_data_both_ways_with_counts(self) -> None:
        """Local bytes reach the peer's protocol and the peer's bytes reach the local
        transport, counted in each direction."""
        peer = self.open_channel()
        self.splice.local.dataReceived(b"GET / HTTP/1.0\r\n\r\n")
        peer.transport.write(b"HTTP/1.0 200 OK\r\n")
        self.pair.flush()
        self.assertEqual(received(peer), b"GET / HTTP/1.0\r\n\r\n")
        self.assertEqual(self.local.value(), b"HTTP/1.0 200 OK\r\n")
        self.assertEqual((self.splice.bytes_to_peer, self.splice.bytes_from_peer), (18, 17))

    def test_half_close_local_first(self) -> None:
        """End of local input half-closes the subchannel (the peer reads EOF) while the peer
        can still answer; the peer's close then half-closes the local connection after its
        data, the local connection is closed, and the splice ends 'closed'."""
        peer = self.open_channel()
        self.splice.local.dataReceived(b"request")
        self.splice.local.readConnectionLost()
        self.pair.flush()
        self.assertEqual(peer.events[-1], "read_lost")
        peer.transport.write(b"response")
        peer.transport.loseWriteConnection()
        self.pair.flush()
        self.assertEqual(self.local.value(), b"response")
        self.assertTrue(self.local.write_closed)
        self.assertTrue(self.local.disconnecting)  # both directions closed: loseConnection
        self.assertIsNone(self.local.producer)
        self.assertEqual(self.ended, [])
        self.splice.local.connectionLost(connectionDone)
        self.assertEqual(self.ended, [self.splice])
        self.assertEqual(self.splice.reason, "closed")
        self.assertEqual(peer.events[-1], "lost")

    def test_half_close_peer_first(self) -> None:
        """The peer's CLOSE half-closes the local connection; the local side keeps sending
        until its own end of input, which closes the subchannel."""
        peer = self.open_channel()
        peer.transport.loseWriteConnection()
        self.pair.flush()
        self.assertTrue(self.local.write_closed)
        self.assertFalse(self.local.disconnecting)
        self.splice.local.dataReceived(b"still talking")
        self.splice.local.readConnectionLost()
        self.pair.flush()
        self.assertEqual(peer.events[-3:], [b"still talking", "read_lost", "lost"])
        self.assertTrue(self.local.disconnecting)

    def test_flow_control_from_peer(self) -> None:
        """When the local transport pauses its producer (a full socket), the peer's data is
        held in the subchannel, and delivered on resume."""
        peer = self.open_channel()
        self.local.producer.pauseProducing()
        peer.transport.write(b"held")
        self.pair.flush()
        self.assertEqual(self.local.value(), b"")
        self.local.producer.resumeProducing()
        self.pair.flush()
        self.assertEqual(self.local.value(), b"held")

    def test_local_connection_lost(self) -> None:
        """A local connection that dies closes the subchannel's write side (the peer reads
        EOF); what the peer still sends is counted as dropped; the splice ends when the peer
        closes too."""
        peer = self.open_channel()
        self.splice.local.connectionLost(Failure(ConnectionLost()))
        self.pair.flush()
        self.assertEqual(peer.events[-1], "read_lost")
        peer.transport.write(b"nobody listens")
        self.pair.flush()
        self.assertEqual(self.splice.dropped, len(b"nobody listens"))
        peer.transport.loseWriteConnection()
        self.pair.flush()
        self.assertEqual(self.ended, [self.splice])
        # a reset, not a close: the peer only got an end of input, so it is said here
        self.assertIn("non-clean fashion", self.splice.reset)

    def test_local_close_is_no_reset(self) -> None:
        """The local connection ending with an end of input, then closing, is no reset."""
        self.open_channel()
        self.splice.local.readConnectionLost()
        self.splice.local.connectionLost(connectionDone)
        self.assertEqual(self.splice.reset, "")

    def test_wormhole_closed(self) -> None:
        """When the subchannel is abandoned (the wormhole closed under it, without the peer's
        CLOSE), the splice is cut: the local connection is reset (its application reads an
        error, not an end of input that would pass a truncated stream for a whole one), and
        the splice ends at once with reason 'cut' and the cause in words."""
        self.open_channel()
        self.pair.close()
        self.assertTrue(self.local.disconnected)  # abortConnection, not loseConnection
        self.assertEqual(self.ended, [self.splice])
        self.assertEqual(self.splice.reason, "cut")
        self.assertIn("the wormhole closed under it", self.splice.detail)
        self.splice.local.connectionLost(connectionDone)
        self.assertEqual(self.ended, [self.splice])

    def test_peer_close_then_wormhole_closed(self) -> None:
        """A subchannel the peer closed normally (its CLOSE came) and whose wormhole then
        closes is not a cut: the local connection gets a normal end of input."""
        peer = self.open_channel()
        peer.transport.loseWriteConnection()
        self.pair.flush()
        self.assertTrue(self.local.write_closed)
        self.pair.close()
        self.assertFalse(self.local.disconnected)
        self.assertNotEqual(self.splice.reason, "cut")

    def test_abandon_before_the_subchannel(self) -> None:
        """A subchannel that could not be opened: the waiting local connection is closed and
        the splice ends with the given reason."""
        self.splice.abandon("open-failed")
        self.assertTrue(self.local.disconnecting)
        self.splice.local.connectionLost(connectionDone)
        self.assertEqual(self.ended, [self.splice])
        self.assertEqual(self.splice.reason, "open-failed")

    def test_end_arriving_after_abandon(self) -> None:
        """A splice abandoned before its local end connected (the open failed at once) closes
        that end as soon as it connects, instead of leaving it paused forever."""
        splice = Splice(8, "svc", "outbound", self.clock)
        splice.abandon("open-failed")
        self.assertTrue(splice.ended.called)
        local = HalfCloseStringTransport()
        local.protocol = splice.local
        splice.local.makeConnection(local)
        self.assertTrue(local.disconnecting)

    def test_cut(self) -> None:
        """cut() (a stop that cannot wait) resets the local connection and sends the peer no
        CLOSE (what was written before still arrives): the peer's side is not told the stream
        ended normally; the splice ends at once, reason 'cut', its counts final; the local
        connection's loss then closes nothing more."""
        peer = self.open_channel()
        self.splice.local.dataReceived(b"last words")
        self.splice.cut("the 30 s grace period ended")
        self.pair.flush()
        self.assertTrue(self.local.disconnected)
        self.assertEqual(self.ended, [self.splice])
        self.assertEqual(
            (self.splice.reason, self.splice.detail), ("cut", "the 30 s grace period ended")
        )
        self.assertEqual(self.splice.bytes_to_peer, len(b"last words"))
        self.splice.local.connectionLost(Failure(ConnectionLost()))
        self.pair.flush()
        self.assertEqual(peer.events, ["made", b"last words"])  # no "read_lost": no CLOSE
        self.splice.cut("again")
        self.assertEqual(self.splice.detail, "the 30 s grace period ended")
        self.pair.close()  # the wormhole closes: only now does the peer's subchannel end
        self.assertEqual(peer.events[-1], "lost")


class SpliceFlowControlTests(SpliceTests):
    """The same, with a small outbound bound, plus the local side being paused by it."""

    def setUp(self) -> None:
        super().setUp(max_unacked_bytes=100)

    def test_flow_control_to_peer(self) -> None:
        """More unacknowledged bytes than the wormhole's bound pause reading the local
        connection; the peer's ACKs resume it."""
        peer = self.open_channel()
        self.splice.local.dataReceived(b"x" * 200)
        self.assertEqual(self.local.producerState, "paused")
        self.pair.flush()
        self.assertEqual(self.local.producerState, "producing")
        self.assertEqual(received(peer), b"x" * 200)
