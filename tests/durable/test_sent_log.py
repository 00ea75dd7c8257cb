"""Tests for txdilation.durable.sent_log: one link's writes, stamped on a Clock, until the ACKs
that arrive on it retire them."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from txdilation.durable.sent_log import SentLog
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
