"""txdilation.mailbox.absence on a Clock: when PeerAbsence presumes a silent peer gone."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.mailbox.absence import PeerAbsence


class AbsenceHarness:
    def __init__(self, timeout: float | None = 10.0) -> None:
        self.clock = Clock()
        self.absent: list[float] = []
        self.absence = PeerAbsence(
            self.clock, timeout, lambda: self.absent.append(self.clock.seconds())
        )


class PeerAbsenceTests(SynchronousTestCase):
    def test_counts_only_while_waiting(self) -> None:
        """Connected, nothing is counted; after the connection is lost the peer is presumed
        gone ``timeout`` seconds later, once."""
        h = AbsenceHarness()
        h.clock.advance(100)
        h.absence.waiting_for_peer(True)
        h.clock.advance(9.9)
        self.assertEqual(h.absent, [])
        h.clock.advance(0.1)
        self.assertEqual(h.absent, [110.0])
        h.absence.waiting_for_peer(True)
        h.clock.advance(100)
        self.assertEqual(h.absent, [110.0])

    def test_reconnected_in_time(self) -> None:
        """A connection made before the timeout stops the count."""
        h = AbsenceHarness()
        h.absence.waiting_for_peer(True)
        h.clock.advance(9)
        h.absence.waiting_for_peer(False)
        h.clock.advance(100)
        self.assertEqual(h.absent, [])
        self.assertFalse(h.absence.counting)

    def test_hearing_from_the_peer_restarts(self) -> None:
        """A mailbox message from the peer restarts the count in full."""
        h = AbsenceHarness()
        h.absence.waiting_for_peer(True)
        h.clock.advance(8)
        h.absence.heard_from_peer()
        h.clock.advance(8)
        self.assertEqual(h.absent, [])
        h.clock.advance(2)
        self.assertEqual(h.absent, [18.0])

    def test_our_mailbox_outage_does_not_count(self) -> None:
        """While our own mailbox connection is down nothing is counted; once it is back the
        full timeout runs again."""
        h = AbsenceHarness()
        h.absence.waiting_for_peer(True)
        h.clock.advance(5)
        h.absence.mailbox_connected(False)
        h.clock.advance(1000)
        h.absence.mailbox_connected(True)
        h.clock.advance(9.9)
        self.assertEqual(h.absent, [])
        h.clock.advance(0.1)
        self.assertEqual(h.absent, [1015.0])

    def test_disabled_and_stopped(self) -> None:
        """timeout=None never fires; stop() prevents a pending expiry."""
        never = AbsenceHarness(None)
        never.absence.waiting_for_peer(True)
        never.clock.advance(1e6)
        self.assertEqual(never.absent, [])
        h = AbsenceHarness()
        h.absence.waiting_for_peer(True)
        h.absence.stop()
        h.absence.waiting_for_peer(True)
        h.clock.advance(100)
        self.assertEqual(h.absent, [])
        self.assertEqual(h.clock.getDelayedCalls(), [])
