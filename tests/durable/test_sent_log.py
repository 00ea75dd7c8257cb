"""Tests for txdilation.durable.sent_log: one link's writes, stamped on a Clock, until the ACKs
that arrive on it retire them; and the one record Outbound feeds and its in-flight window
reads (a batch's first and last seqnum, ACKs from any link, an Outbound without a link's
log)."""

from __future__ import annotations

from twisted.internet.task import Clock, Cooperator
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txdilation.durable.outbound import Outbound
from txdilation.durable.sent_log import SentLog
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.contracts import ISentLog


class SentLogTests(SynchronousTestCase):
    """Noting writes, retiring them by ACKs, closing."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.notified = 0
        self.log = SentLog(self.clock, on_write=self._wrote)

    def _wrote(self) -> None:
        self.notified += 1

    def test_provides_the_interface_l4_writes_to(self) -> None:
        """A SentLog is what Outbound takes as a link's log (``ISentLog``)."""
        self.assertTrue(verifyObject(ISentLog, self.log))

    def test_writes_are_stamped_and_retired_oldest_first(self) -> None:
        """Each write is kept with its time and announced once; an ACK retires the writes it
        covers and gives the newest one's time (the round trip's start), or None when it
        covers none."""
        self.log.sent(2)
        self.clock.advance(1.0)
        self.log.sent(5)
        self.clock.advance(1.0)
        self.log.sent(9)
        self.assertEqual(list(self.log.writes), [(2, 0.0), (5, 1.0), (9, 2.0)])
        self.assertEqual(self.notified, 3)
        self.assertIsNone(self.log.retire(1))
        self.assertEqual(self.log.retire(6), 1.0)  # 2 and 5: the newest was written at 1.0
        self.assertEqual(list(self.log.writes), [(9, 2.0)])
        self.assertIsNone(self.log.retire(6))  # an old ACK again: nothing left to retire
        self.assertEqual(self.log.retire(100), 2.0)
        self.assertEqual(list(self.log.writes), [])

    def test_closed_log_notes_nothing(self) -> None:
        """After close() the log holds nothing and ignores later writes (a stopped
        detector is not told of them)."""
        self.log.sent(0)
        self.log.close()
        self.log.close()
        self.log.sent(1)
        self.assertEqual(list(self.log.writes), [])
        self.assertEqual(self.notified, 1)
        self.assertIsNone(self.log.retire(10))


class OneRecordTests(SynchronousTestCase):
    """Outbound notes each write once, in the link's log; its window's samples start at the
    times the log noted."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.out = Outbound(
            cooperator=Cooperator(scheduler=lambda step: self.clock.callLater(0, step)),
            clock=self.clock,
            in_flight_floor=1000,
        )
        self.log = SentLog(self.clock)

    def test_one_record_one_entry_one_stamp(self) -> None:
        """A record written at once is one entry of the link's log, and the window's sample
        starts at its stamp: its ACK 0.25 s later is a 0.25 s round trip."""
        self.out.connection_made(FakeDilatedConnection(), self.log)
        self.clock.advance(3.0)
        self.out.send_data(1, b"x" * 100)
        self.assertEqual(list(self.log.writes), [(0, 3.0)])
        self.clock.advance(0.25)
        self.out.handle_ack(0)
        self.assertEqual(self.out.window.min_rtt, 0.25)

    def test_batch_noted_by_last_sampled_from_first(self) -> None:
        """A replayed batch is one entry under its last seqnum (the link retires it once an
        ACK covers all of it); the window's marker is its first record, so an ACK for that
        one alone ends the sample, while the link still waits for the rest."""
        for _ in range(3):
            self.out.send_data(1, b"x" * 100)
        self.clock.advance(1.0)
        conn = FakeDilatedConnection()
        self.out.connection_made(conn, self.log)
        self.assertEqual([r.seqnum for r in conn.sent], [0, 1, 2])
        self.assertEqual(list(self.log.writes), [(2, 1.0)])
        self.clock.advance(0.5)
        self.out.handle_ack(0)
        self.assertEqual(self.out.window.min_rtt, 0.5)
        self.assertFalse(self.out.window.sampling)
        self.assertIsNone(self.log.retire(0))  # the link's own ACK for 0: the batch stays
        self.assertEqual(self.log.retire(2), 1.0)

    def test_acks_from_any_link_end_a_sample_only_the_links_retire_its_log(self) -> None:
        """Outbound takes the peer's ACKs from whichever link carried them: they end the
        window's sample (the peer's progress) but leave the link's log alone; only the
        link's own ACKs (its dead-path detector calls retire) retire its writes."""
        self.out.connection_made(FakeDilatedConnection(), self.log)
        self.out.send_data(1, b"x" * 100)
        self.clock.advance(0.1)
        self.out.handle_ack(0)  # e.g. on the link being replaced
        self.assertEqual(self.out.window.min_rtt, 0.1)
        self.assertEqual(list(self.log.writes), [(0, 0.0)])
        self.assertIs(self.out.sent_log, self.log)

    def test_without_a_links_log_outbound_keeps_its_own(self) -> None:
        """Given no link's log (tests, a connection without a link), Outbound notes its
        writes in a log of its own, which every ACK retires (it holds only what is in
        flight), and its window still samples from it; a new connection gets a new one."""
        self.out.connection_made(FakeDilatedConnection())
        own = self.out.sent_log
        assert isinstance(own, SentLog)
        self.out.send_data(1, b"x" * 100)
        self.out.send_data(1, b"x" * 100)
        self.assertEqual(list(own.writes), [(0, 0.0), (1, 0.0)])
        self.clock.advance(0.2)
        self.out.handle_ack(0)
        self.assertEqual(list(own.writes), [(1, 0.0)])
        self.assertEqual(self.out.window.min_rtt, 0.2)
        self.out.handle_ack(1)
        self.assertEqual(list(own.writes), [])
        self.out.connection_lost()
        self.assertIsNone(self.out.sent_log)
        self.out.connection_made(FakeDilatedConnection())
        self.assertIsNot(self.out.sent_log, own)
