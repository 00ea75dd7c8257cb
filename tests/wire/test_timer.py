"""Tests for txdilation.wire.timer: RestartableTimer on a Clock (started, restarted, cancelled,
started again from its own callback)."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.wire.timer import RestartableTimer


class RestartableTimerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.fired: list[float] = []
        self.timer = RestartableTimer(self.clock, lambda: self.fired.append(self.clock.seconds()))

    def test_fires_once_after_the_delay(self) -> None:
        """A started timer fires once, at its delay, and is idle afterwards."""
        self.timer.start(2.0)
        self.assertEqual((self.timer.pending, self.timer.due), (True, 2.0))
        self.clock.advance(1.999)
        self.assertEqual(self.fired, [])
        self.clock.advance(0.001)
        self.assertEqual(self.fired, [2.0])
        self.assertEqual((self.timer.pending, self.timer.due), (False, None))
        self.clock.advance(10)
        self.assertEqual(self.fired, [2.0])

    def test_start_replaces_the_pending_call(self) -> None:
        """Starting again moves the deadline (earlier or later): one call, at the last one."""
        self.timer.start(5.0)
        self.timer.start(1.0)
        self.assertEqual(self.timer.due, 1.0)
        self.timer.start(3.0)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)
        self.clock.advance(2.999)
        self.assertEqual(self.fired, [])
        self.clock.advance(0.001)
        self.assertEqual(self.fired, [3.0])
        self.clock.advance(10)
        self.assertEqual(self.fired, [3.0])

    def test_cancel_is_idempotent_and_stops_the_call(self) -> None:
        """A cancelled timer never fires; cancelling an idle one does nothing."""
        self.timer.cancel()
        self.timer.start(1.0)
        self.timer.cancel()
        self.timer.cancel()
        self.assertFalse(self.timer.pending)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(5)
        self.assertEqual(self.fired, [])

    def test_the_callback_may_start_it_again(self) -> None:
        """``fire`` finds the timer idle, so a periodic check restarts it from its callback."""
        timer: RestartableTimer

        def again() -> None:
            self.fired.append(self.clock.seconds())
            if len(self.fired) < 3:
                timer.start(1.0)

        timer = RestartableTimer(self.clock, again)
        timer.start(1.0)
        self.clock.pump([1.0] * 5)
        self.assertEqual(self.fired, [1.0, 2.0, 3.0])
        self.assertFalse(timer.pending)
