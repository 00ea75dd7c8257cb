"""txdilation.path.liveness on a Clock: when Liveness pings and when it gives up."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.path.liveness import Liveness


def run_timers(clock: Clock, until: float) -> None:
    """Run every timer due before ``until``, each exactly at its time."""
    while clock.getDelayedCalls():
        due = min(c.getTime() for c in clock.getDelayedCalls())
        if due > until:
            break
        clock.advance(due - clock.seconds())


class LivenessHarness:
    def __init__(self, interval: float = 1.0) -> None:
        self.clock = Clock()
        self.pings: list[float] = []
        self.silent: list[float] = []
        self.paused = False
        self.liveness = Liveness(
            self.clock,
            interval,
            send_ping=lambda: self.pings.append(self.clock.seconds()),
            on_silent=lambda: self.silent.append(self.clock.seconds()),
            reading_paused=lambda: self.paused,
        )


class LivenessTests(SynchronousTestCase):
    def test_pings_every_interval_from_a_quarter(self) -> None:
        """With traffic flowing, the first PING goes a quarter interval after selection and
        then one every interval; the connection is never called silent."""
        h = LivenessHarness(2.0)
        for _ in range(40):
            h.clock.advance(0.25)
            h.liveness.received += 1
        self.assertEqual(h.pings, [0.5, 2.5, 4.5, 6.5, 8.5])
        self.assertEqual(h.silent, [])

    def test_silence_is_noticed_after_one_and_a_half_intervals(self) -> None:
        """Nothing ever arrives: the connection is given up 1.5 intervals after selection,
        once, and the ticking stops."""
        h = LivenessHarness(1.0)
        h.clock.pump([0.25] * 40)
        self.assertEqual(h.silent, [1.5])
        self.assertEqual(h.clock.getDelayedCalls(), [])

    @settings(max_examples=200, deadline=None)
    @given(last=st.floats(min_value=0.0, max_value=20.0), interval=st.sampled_from([0.4, 1, 30]))
    def test_dead_path_left_within_two_intervals(self, last: float, interval: float) -> None:
        """Whenever the last record arrived, the connection is given up between 1.5 and 2
        intervals of silence after it (the bound docs/reliability.md promises)."""
        h = LivenessHarness(interval)
        h.clock.advance(last * interval)
        h.liveness.received += 1
        run_timers(h.clock, until=last * interval + 10 * interval)
        self.assertEqual(len(h.silent), 1)
        silence = h.silent[0] - last * interval
        self.assertGreaterEqual(silence, 1.5 * interval - 1e-9)
        self.assertLessEqual(silence, 1.75 * interval + 1e-9)
        self.assertLessEqual(silence, h.liveness.silence_limit + 1e-9)

    def test_paused_reading_is_not_silence(self) -> None:
        """While we paused reading ourselves, no arrivals is not silence."""
        h = LivenessHarness(1.0)
        h.paused = True
        h.clock.pump([0.25] * 40)
        self.assertEqual(h.silent, [])
        h.paused = False
        h.clock.pump([0.25] * 7)
        self.assertEqual(len(h.silent), 1)

    def test_stop(self) -> None:
        """stop() cancels the ticking (twice is harmless)."""
        h = LivenessHarness(1.0)
        h.liveness.stop()
        h.liveness.stop()
        self.assertEqual(h.clock.getDelayedCalls(), [])
