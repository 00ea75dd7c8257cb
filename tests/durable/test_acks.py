"""Tests for txdilation.durable.acks: when the coalesced ACK goes out, on a Clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.acks import DelayedAck


class DelayedAckTests(SynchronousTestCase):
    def make(self, delay: float = 0.005, threshold: int = 100) -> DelayedAck:
        self.clock = Clock()
        self.sent: list[float] = []
        return DelayedAck(
            self.clock, lambda: self.sent.append(self.clock.seconds()), delay, threshold
        )

    def test_one_ack_per_batch_after_the_delay(self) -> None:
        """Records within the delay share one ACK, sent the delay after the first."""
        acks = self.make()
        acks.data(10)
        self.clock.advance(0.003)
        acks.data(10)
        self.clock.advance(0.001)
        self.assertEqual(self.sent, [])
        self.clock.advance(0.001)
        self.assertEqual(self.sent, [0.005])
        acks.data(1)
        self.clock.advance(0.005)
        self.assertEqual(self.sent, [0.005, 0.01])

    def test_threshold_sends_at_the_end_of_the_turn(self) -> None:
        """Once the DATA bytes it covers reach the threshold, the ACK waits only for the
        turn's end (a 0 delay), and the count starts again after it."""
        acks = self.make(threshold=100)
        acks.data(60)
        acks.data(40)
        self.clock.advance(0)
        self.assertEqual(self.sent, [0.0])
        acks.data(60)
        self.clock.advance(0)
        self.assertEqual(self.sent, [0.0])

    def test_open_or_close_sends_at_the_end_of_the_turn(self) -> None:
        """soon() (an OPEN or CLOSE) moves a pending delayed ACK to the turn's end."""
        acks = self.make()
        acks.data(1)
        self.clock.advance(0.001)
        acks.soon()
        self.clock.advance(0)
        self.assertEqual(self.sent, [0.001])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_cancel(self) -> None:
        """cancel drops the pending ACK and what it covered."""
        acks = self.make(threshold=100)
        acks.data(90)
        acks.cancel()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        acks.data(20)  # not 110: the count started again
        self.clock.advance(0)
        self.assertEqual(self.sent, [])
        self.clock.advance(0.005)
        self.assertEqual(self.sent, [0.005])
