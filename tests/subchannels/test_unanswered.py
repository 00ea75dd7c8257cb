"""The CLOSE of a subchannel that closed first (txdilation.subchannels.unanswered): a sender whose
stock receiver answered its CLOSE, lost that answer in a cut and left, hears ``connectionLost``
once there has been no link for ANSWER_TIMEOUT seconds (issue 33: it waited for the 600 s peer
timeout); one whose CLOSE was never acknowledged (its DATA was) after GONE_TIMEOUT without a
link, as a ConnectionLost; never with unacknowledged DATA, or while a link is up; to a stock
peer the CLOSE goes once the DATA before it was acknowledged; with a txdilation peer nothing
changes. One Multiplexer on a Clock; the
peer's records are handed to it directly."""

from __future__ import annotations

from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.subchannels.test_multiplexer import FakeManager, opened, synchronously
from tests.subchannels.test_subchannel import HalfProtocol, RecordingProtocol
from txdilation.durable.outbound import Outbound
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.subchannels.unanswered import ANSWER_TIMEOUT, GONE_TIMEOUT
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.records import Ack, Close, Data
from txdilation.wire.roles import LEADER

PEER_TIMEOUT = 600.0


class Sender:
    """A Leader's multiplexer with one subchannel that wrote ``b"last"`` and closed: OPEN is
    record 0, DATA 1, our CLOSE 2."""

    def __init__(
        self, test: SynchronousTestCase, protocol: type = RecordingProtocol, stock: bool = False
    ) -> None:
        self.clock = Clock()
        self.mux = Multiplexer(manager=FakeManager(), reactor=self.clock, eventually=synchronously)
        self.mux.set_role(LEADER)
        if stock:
            self.mux.peer_is_stock()
        self.connection = FakeDilatedConnection()
        self.mux.connection_made(self.connection)
        self.mux.dilated()
        self.protocol = opened(test, self.mux, "bulk", protocol)
        self.protocol.transport.write(b"last")
        if isinstance(self.protocol, HalfProtocol):
            self.protocol.transport.loseWriteConnection()
        else:
            self.protocol.transport.loseConnection()
        self.scid = self.protocol.transport._scid

    def ack(self, seqnum: int) -> None:
        self.mux.got_ack(Ack(seqnum))

    def reconnect(self) -> FakeDilatedConnection:
        self.connection = FakeDilatedConnection()
        self.mux.connection_made(self.connection)
        return self.connection


class UnansweredCloseTests(SynchronousTestCase):
    def test_acknowledged_close_without_a_link_ends_the_subchannel(self) -> None:
        """Everything acknowledged, our CLOSE too, then the link is cut before the answer
        came and no link returns: connectionLost(ConnectionDone) ANSWER_TIMEOUT s later (as
        for an answered close), not at the peer timeout."""
        s = Sender(self, stock=True)
        s.ack(1)
        s.ack(2)
        s.clock.advance(60)  # a live link: the answer is still to come on it
        self.assertEqual(s.protocol.events, ["made"])
        s.mux.connection_lost()
        s.clock.advance(ANSWER_TIMEOUT - 0.01)
        self.assertEqual(s.protocol.events, ["made"])
        s.clock.advance(0.01)
        self.assertEqual(s.protocol.events, ["made", "lost"])
        self.assertIsInstance(s.protocol.reasons[0], ConnectionDone)
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_late_answer_is_absorbed(self) -> None:
        """The peer's answer may still come on a later link: it is acknowledged and
        changes nothing (no second connectionLost, nothing raised)."""
        s = Sender(self, stock=True)
        s.ack(1)
        s.ack(2)
        s.mux.connection_lost()
        s.clock.advance(ANSWER_TIMEOUT)
        connection = s.reconnect()
        s.mux.got_close(Close(0, s.scid))
        s.clock.advance(1)
        self.assertEqual(s.protocol.events, ["made", "lost"])
        self.assertEqual([r.resp_seqnum for r in connection.of_type(Ack)], [0])

    def test_unacknowledged_close_is_given_up_once_the_peer_is_gone(self) -> None:
        """The peer acknowledged the DATA but not our CLOSE (a cut took that ACK, or the
        CLOSE): nothing within GONE_TIMEOUT s without a link (a stock peer still there comes
        back sooner), then connectionLost with a ConnectionLost (not a clean close: the peer
        may not have seen it). A link that comes back later still carries the CLOSE, and the
        answer is absorbed."""
        s = Sender(self, stock=True)
        s.ack(1)
        self.assertEqual(len(s.connection.of_type(Close)), 1)
        s.clock.advance(60)  # a live link: the acknowledgement may still come
        s.mux.connection_lost()
        s.clock.advance(GONE_TIMEOUT - 0.01)
        self.assertEqual(s.protocol.events, ["made"])
        s.clock.advance(0.01)
        self.assertEqual(s.protocol.events, ["made", "lost"])
        self.assertIsInstance(s.protocol.reasons[0], ConnectionLost)
        self.assertIn("acknowledged", str(s.protocol.reasons[0]))
        self.assertEqual(s.clock.getDelayedCalls(), [])
        connection = s.reconnect()
        self.assertEqual([r.scid for r in connection.of_type(Close)], [s.scid])  # replayed
        s.ack(2)
        s.mux.got_close(Close(0, s.scid))
        s.clock.advance(ANSWER_TIMEOUT * 2)
        self.assertEqual(s.protocol.events, ["made", "lost"])
        self.assertEqual([r.resp_seqnum for r in connection.of_type(Ack)], [0])

    def test_unacknowledged_data_waits_for_the_peer(self) -> None:
        """DATA the peer never acknowledged: the CLOSE is not even sent, and nothing is
        reported however long the link stays away (the peer timeout, above, decides)."""
        s = Sender(self, stock=True)
        self.assertEqual(s.connection.of_type(Close), [])
        s.mux.connection_lost()
        s.clock.advance(PEER_TIMEOUT)
        self.assertEqual(s.protocol.events, ["made"])

    def test_a_link_back_before_the_peer_is_given_up(self) -> None:
        """A link back within GONE_TIMEOUT: the wait for an unacknowledged CLOSE stops (the
        CLOSE replays on it), and a later loss starts it afresh."""
        s = Sender(self, stock=True)
        s.ack(1)
        s.mux.connection_lost()
        s.clock.advance(GONE_TIMEOUT - 1)
        s.reconnect()
        s.clock.advance(60)
        self.assertEqual(s.protocol.events, ["made"])
        s.mux.connection_lost()
        s.clock.advance(GONE_TIMEOUT - 1)
        self.assertEqual(s.protocol.events, ["made"])
        s.clock.advance(1)
        self.assertEqual(s.protocol.events, ["made", "lost"])

    def test_a_link_that_returns_stops_the_wait(self) -> None:
        """A link back within the timeout carries the replayed answer: the subchannel ends
        with it, never by the timeout; DATA before the answer is still delivered."""
        s = Sender(self, stock=True)
        s.ack(1)
        s.ack(2)
        s.mux.connection_lost()
        s.clock.advance(ANSWER_TIMEOUT / 2)
        s.reconnect()
        s.clock.advance(ANSWER_TIMEOUT)
        self.assertEqual(s.protocol.events, ["made"])
        s.mux.got_data(Data(0, s.scid, b"tail"))
        s.mux.got_close(Close(1, s.scid))
        self.assertEqual(s.protocol.events, ["made", b"tail", "lost"])
        s.mux.connection_lost()
        s.clock.advance(PEER_TIMEOUT)
        self.assertEqual(s.protocol.events, ["made", b"tail", "lost"])

    def test_half_closed_subchannel_is_never_given_up(self) -> None:
        """A half-close (loseWriteConnection) lets the peer write on for as long as it likes:
        its answer is never given up on."""
        s = Sender(self, HalfProtocol, stock=True)
        s.ack(2)
        s.mux.connection_lost()
        s.clock.advance(PEER_TIMEOUT)
        self.assertNotIn("lost", s.protocol.events)

    def test_wormhole_close_cancels_the_wait(self) -> None:
        """stop() (the wormhole closes) leaves no timer behind."""
        s = Sender(self, stock=True)
        s.ack(1)
        s.ack(2)
        s.mux.connection_lost()
        s.mux.stop("closed")
        self.assertEqual(s.clock.getDelayedCalls(), [])

    def test_between_txdilation_peers_nothing_changes(self) -> None:
        """With a txdilation peer (which holds its own close until its answer is
        acknowledged) the CLOSE goes at once and its answer is waited for as before."""
        s = Sender(self)
        self.assertEqual(len(s.connection.of_type(Close)), 1)
        s.ack(2)
        s.mux.connection_lost()
        s.clock.advance(PEER_TIMEOUT)
        self.assertEqual(s.protocol.events, ["made"])


class StockPeerTests(SynchronousTestCase):
    def test_close_waits_for_the_data_to_be_acknowledged(self) -> None:
        """To a stock peer, our CLOSE goes once the subchannel's DATA was acknowledged (so the
        peer's ACK of it leaves alone, not behind Nagle's algorithm); then as before."""
        s = Sender(self, stock=True)
        self.assertEqual(s.connection.of_type(Close), [])
        s.mux.connection_lost()  # the DATA's ACK comes on a later link, after the replay
        connection = s.reconnect()
        self.assertEqual(connection.of_type(Close), [])
        s.ack(1)
        self.assertEqual([(r.seqnum, r.scid) for r in connection.of_type(Close)], [(2, s.scid)])
        s.ack(2)
        s.mux.connection_lost()
        s.clock.advance(ANSWER_TIMEOUT)
        self.assertEqual(s.protocol.events, ["made", "lost"])

    def test_nothing_unacknowledged_sends_at_once(self) -> None:
        """A stock peer that acknowledged everything already gets the CLOSE at once."""
        s = Sender(self, stock=True)
        s.ack(1)
        self.assertEqual(len(s.connection.of_type(Close)), 1)
        other = opened(self, s.mux, "bulk")
        s.ack(3)  # its OPEN
        other.transport.loseConnection()
        self.assertEqual(len(s.connection.of_type(Close)), 2)


class WhenRetiredTests(SynchronousTestCase):
    def test_fires_once_the_record_is_acknowledged(self) -> None:
        """when_retired(n) fires when an ACK >= n arrives (at once if one did), not before,
        and never after stop()."""
        out = Outbound(cooperator=None, clock=Clock())  # type: ignore[arg-type]
        out.connection_made(FakeDilatedConnection())
        out.send_data(1, b"a")
        close = out.send_close(1)
        out.send_data(3, b"b")
        self.assertEqual(close, 1)
        fired: list[int] = []
        out.when_retired(close).addCallback(lambda _: fired.append(1))
        out.handle_ack(0)
        self.assertEqual(fired, [])
        out.handle_ack(1)
        self.assertEqual(fired, [1])
        out.when_retired(0).addCallback(lambda _: fired.append(0))
        self.assertEqual(fired, [1, 0])
        pending = out.when_retired(2)
        out.stop()
        out.handle_ack(2)
        self.assertNoResult(pending)
