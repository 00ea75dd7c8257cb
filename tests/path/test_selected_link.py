"""The selected link (txdilation.path.selected_link) alone, on a Clock over a fake connection:
the record dispatch, PING/PONG, liveness, dead-path detection, network changes, and its end."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock, Cooperator
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from txdilation.durable.outbound import Outbound
from txdilation.path.liveness import PingTracker
from txdilation.path.selected_link import MOVED, STANDBY_PING_INTERVAL, SelectedLink
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.contracts import IDilatedConnection, IRecordReceiver, IRecordSink, ISentLog
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import KCM, Ack, Close, Data, Open, Ping, Pong

INTERVAL = 4.0


class Owner:
    """What the link reports to: its losses (with the reason) and its silences."""

    def __init__(self) -> None:
        self.lost: list[tuple[SelectedLink, LinkLoss]] = []
        self.silent: list[SelectedLink] = []
        self.moved: list[SelectedLink] = []

    def link_lost(self, link: SelectedLink, reason: LinkLoss) -> None:
        self.lost.append((link, reason))

    def link_silent(self, link: SelectedLink) -> None:
        self.silent.append(link)

    def standby_used(self, link: SelectedLink) -> None:
        self.moved.append(link)


@implementer(IRecordReceiver)
class Receiver:
    """An L4 that keeps every record it is given, in order."""

    def __init__(self, handled: list[Any]) -> None:
        self.handled = handled
        self.pong_allowed = True

    def got_open(self, record: Open) -> None:
        self.handled.append(record)

    def got_data(self, record: Data) -> None:
        self.handled.append(record)

    def got_close(self, record: Close) -> None:
        self.handled.append(record)

    def got_ack(self, record: Ack) -> None:
        self.handled.append(record)

    def answer_ping(self, connection: IDilatedConnection, record: Ping) -> None:
        if self.pong_allowed:
            connection.send_record(Pong(record.ping_id))


class Harness:
    def __init__(
        self,
        pong_allowed: bool = True,
        interval: float = INTERVAL,
        standby: bool = False,
        leads: bool = True,
    ) -> None:
        self.clock = Clock()
        self.connection = FakeDilatedConnection("->tcp:127.0.0.1:4001")
        self.owner = Owner()
        self.handled: list[Any] = []
        self.alive: list[float | None] = []
        self.pings = PingTracker(self.clock)
        self.receiver = Receiver(self.handled)
        self.receiver.pong_allowed = pong_allowed
        self.link = SelectedLink(
            self.connection,
            owner=self.owner,
            receiver=self.receiver,
            pings=self.pings,
            clock=self.clock,
            ping_interval=interval,
            on_alive=self.alive.append,
            standby=standby,
            leads=leads,
        )

    def pings_sent(self) -> list[Ping]:
        return [r for r in self.connection.sent if isinstance(r, Ping)]


class DispatchTests(SynchronousTestCase):
    def test_provides_the_sink_and_a_log(self) -> None:
        """The link is the record sink of its connection, and L4 notes its writes in the
        link's log (the link is not on the write path)."""
        h = Harness()
        self.assertTrue(verifyObject(IRecordSink, h.link))
        self.assertTrue(verifyObject(ISentLog, h.link.sent_log))
        self.assertTrue(verifyObject(IRecordReceiver, h.receiver))

    def test_each_record_to_its_handler_once(self) -> None:
        """DATA, OPEN, CLOSE and ACK go to L4, in order, once; a record type nobody takes
        after selection (KCM) is dropped; any record is a sign of life, with its time kept."""
        h = Harness()
        records = [Open(0, 1, b"x"), Data(1, 1, b"d"), Ack(1), Close(2, 1)]
        h.clock.advance(2.5)
        for record in records:
            h.link.got_record(record)
        self.assertEqual(h.handled, records)
        self.assertEqual(h.link.last_received_at, 2.5)
        sent = list(h.connection.sent)
        h.link.got_record(KCM())
        self.assertEqual(h.handled, records)
        self.assertEqual(h.connection.sent, sent)

    def test_ping_answered_and_pong_measured(self) -> None:
        """A PING is answered with a PONG (only while one may be written) and reported alive
        without an RTT; the PONG of our own PING gives the RTT."""
        h = Harness()
        h.link.got_record(Ping(b"abcd"))
        self.assertEqual(h.connection.of_type(Pong), [Pong(b"abcd")])
        h.receiver.pong_allowed = False
        h.link.got_record(Ping(b"efgh"))
        self.assertEqual(h.connection.of_type(Pong), [Pong(b"abcd")])
        h.clock.advance(INTERVAL / 4)  # our first PING goes out
        ping = h.pings_sent()[0]
        h.clock.advance(0.5)
        h.link.got_record(Pong(ping.ping_id))
        self.assertEqual(h.alive, [None, None, 0.5])
        self.assertEqual(h.pings.last_rtt, 0.5)

    def test_sequenced_writes_are_noted_for_the_dead_path(self) -> None:
        """L4 writes to the connection itself and notes each write (a record, a replayed
        batch) in the link's log: unacknowledged ones are probed after an RTO."""
        h = Harness()
        outbound = Outbound(cooperator=Cooperator(scheduler=h.clock.callLater), clock=h.clock)
        outbound.send_data(1, b"a")  # queued: no connection yet
        outbound.connection_made(h.connection, h.link.sent_log)  # a batch (the replay)
        outbound.send_data(1, b"b")
        outbound.send_data(1, b"c")
        self.assertEqual([len(call) for call in h.connection.send_calls], [1, 1, 1])
        self.assertEqual([seqnum for seqnum, _ in h.link.sent_log.writes], [0, 1, 2])
        self.assertEqual(h.link.dead_path.probes, 0)
        h.clock.advance(1.0)  # INITIAL_RTO: nothing acknowledged
        self.assertEqual(h.link.dead_path.probes, 1)
        h.link.got_record(Ack(2))  # answers the probe: nothing more to probe
        h.clock.advance(5.0)
        self.assertEqual(h.link.dead_path.probes, 1)
        self.assertIsNone(h.connection.failed_reason)


class EndTests(SynchronousTestCase):
    def test_loss_reported_once_and_checks_stop(self) -> None:
        """The connection's end reaches the owner once, with its typed reason; no PING is
        sent after it."""
        h = Harness()
        loss = LinkLoss(Cause.CLOSED, "Connection was closed cleanly.")
        h.link.connection_lost(h.connection, loss)
        h.link.connection_lost(h.connection, LinkLoss(Cause.DROPPED, "again"))
        self.assertEqual(h.owner.lost, [(h.link, loss)])
        h.clock.advance(10 * INTERVAL)
        self.assertEqual(h.pings_sent(), [])

    def test_silence_reported_once(self) -> None:
        """Nothing heard for 1.5 ping intervals: the owner hears it once (and decides). (A
        2 s interval: silence is noticed before the probe of the first PING times out.)"""
        h = Harness(interval=2.0)
        h.clock.pump([0.5] * 5)
        self.assertEqual(h.owner.silent, [])
        h.clock.pump([0.5])
        self.assertEqual(h.owner.silent, [h.link])
        h.clock.pump([0.5] * 8)
        self.assertEqual(h.owner.silent, [h.link])

    def test_unanswered_probe_fails_the_connection(self) -> None:
        """Records written and never acknowledged, then the probe unanswered: the connection
        is failed with a PROBE_UNANSWERED reason (the connection logs and reports it)."""
        h = Harness()
        h.link.sent_log.sent(0)  # as L4 does when it writes
        h.clock.pump([0.5] * 10)
        reason = h.connection.failed_reason
        assert reason is not None
        self.assertIs(reason.cause, Cause.PROBE_UNANSWERED)
        self.assertTrue(str(reason).startswith("probe unanswered for "), reason)
        self.assertTrue(h.connection.aborted)

    def test_stop_and_close(self) -> None:
        """stop() ends the checks (no PING later); disconnect() and abort() close the
        connection politely or at once; fail() gives the connection the reason."""
        h = Harness()
        h.link.stop()
        h.clock.advance(10 * INTERVAL)
        self.assertEqual(h.pings_sent(), [])
        h.link.disconnect()
        self.assertTrue(h.connection.disconnected)
        h.link.abort()
        self.assertTrue(h.connection.aborted)
        other = Harness()
        other.link.fail(LinkLoss(Cause.PEER_REPORT, "peer report: told"))
        self.assertEqual(
            other.connection.failed_reason, LinkLoss(Cause.PEER_REPORT, "peer report: told")
        )


class Transport:
    """A transport whose local address is ``host``."""

    def __init__(self, host: str) -> None:
        self.host = host

    def getHost(self) -> IPv4Address:
        return IPv4Address("TCP", self.host, 4001)


class NetworkChangeTests(SynchronousTestCase):
    def test_address_gone(self) -> None:
        """Bound to an address this host no longer has: dropped at once, NETWORK_CHANGE."""
        h = Harness()
        h.connection.transport = Transport("192.0.2.77")  # type: ignore[attr-defined]
        h.link.network_changed()
        self.assertEqual(
            h.connection.failed_reason,
            LinkLoss(Cause.NETWORK_CHANGE, "network change: our address 192.0.2.77 is gone"),
        )

    def test_probed_and_unanswered(self) -> None:
        """Bound to an address we still have: probed at once; unanswered, the connection is
        failed with NETWORK_CHANGE; an answer keeps it."""
        h = Harness()
        h.connection.transport = Transport("127.0.0.1")  # type: ignore[attr-defined]
        h.link.network_changed()
        self.assertEqual(len(h.pings_sent()), 1)
        h.clock.advance(1.5)
        self.assertEqual(
            h.connection.failed_reason,
            LinkLoss(Cause.NETWORK_CHANGE, "network change: probe unanswered for 1.5s"),
        )
        kept = Harness()
        kept.connection.transport = Transport("127.0.0.1")  # type: ignore[attr-defined]
        kept.link.network_changed()
        kept.link.got_record(Pong(kept.pings_sent()[0].ping_id))
        kept.clock.advance(1.5)
        self.assertIsNone(kept.connection.failed_reason)


class StandbyTests(SynchronousTestCase):
    """A standby link: keepalives only, the peer's move, promotion."""

    def test_only_the_leader_keeps_it_alive(self) -> None:
        """On a standby link the Leader pings every STANDBY_PING_INTERVAL, the Follower never
        (one record each way per interval, with the Follower's PONG)."""
        leader, follower = Harness(standby=True), Harness(standby=True, leads=False)
        for h in (leader, follower):
            for second in range(61):
                if second % 5 == 0:
                    h.link.got_record(Pong(b"\0\0\0\0"))  # the other side is there
                h.clock.advance(1.0)
        self.assertEqual(len(leader.pings_sent()), 60 // STANDBY_PING_INTERVAL)
        self.assertEqual(follower.pings_sent(), [])
        follower.link.got_record(Ping(b"\0\0\0\1"))
        self.assertEqual(follower.connection.sent[-1:], [Pong(b"\0\0\0\1")])
        self.assertEqual(follower.owner.moved, [])

    def test_peer_moved(self) -> None:
        """The MOVED ping, or a sequenced record or an ACK, on a standby link tells the owner
        that the peer moved there (a record is still handled); keepalives do not."""
        h = Harness(standby=True)
        h.link.got_record(Pong(b"\0\0\0\0"))
        self.assertEqual(h.owner.moved, [])
        h.link.got_record(Ping(MOVED))
        self.assertEqual(h.owner.moved, [h.link])
        h.link.got_record(Data(1, 7, b"x"))
        self.assertEqual(h.owner.moved, [h.link, h.link])
        self.assertEqual(h.handled, [Data(1, 7, b"x")])

    def test_promote(self) -> None:
        """A promoted standby is an ordinary link: both sides ping (the Follower too), and
        records no longer say anything about a move; announce_move sends the MOVED ping."""
        h = Harness(standby=True, leads=False)
        h.link.announce_move()
        self.assertEqual(h.connection.sent, [Ping(MOVED)])
        h.link.promote(INTERVAL)
        h.clock.pump([0.5] * 4)  # its first PING a quarter interval after (it never did)
        self.assertEqual(len(h.pings_sent()), 1 + 1)
        h.link.got_record(Data(1, 8, b"y"))
        self.assertEqual(h.owner.moved, [])
