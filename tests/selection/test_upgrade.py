"""
``selection.upgrade``: when a relayed link's connectors dial direct hints again.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.upgrade import (
    FIRST_RETRIES,
    SLOW_AFTER,
    SLOW_RETRY,
    STEADY_RETRY,
    RetrySchedule,
)


def times(schedule: RetrySchedule, until: float) -> list[float]:
    """Every dial time from the origin up to ``until`` (relative to the origin)."""
    found = []
    now = schedule.origin
    while True:
        now = schedule.next_after(now)
        if now - schedule.origin > until:
            return found
        found.append(round(now - schedule.origin, 6))


class RetryScheduleTests(SynchronousTestCase):
    def test_quick_first_then_steady_then_slow(self) -> None:
        """Quick retries first, then every STEADY_RETRY s, then every SLOW_RETRY s."""
        grid = times(RetrySchedule(100.0), SLOW_AFTER + 2 * SLOW_RETRY)
        self.assertEqual(grid[:3], [0.5, 1.5, 3.5])
        steady = [b - a for a, b in itertools.pairwise(grid[2:]) if b <= SLOW_AFTER]
        self.assertTrue(steady and all(abs(g - STEADY_RETRY) < 1e-9 for g in steady), steady)
        self.assertEqual(grid[-2:], [SLOW_AFTER + SLOW_RETRY, SLOW_AFTER + 2 * SLOW_RETRY])
        self.assertLessEqual(max(b - a for a, b in itertools.pairwise(grid)), SLOW_RETRY + 1)

    def test_restart_brings_the_quick_retries_back(self) -> None:
        """A network change restarts the grid at that moment."""
        schedule = RetrySchedule(0.0)
        schedule.restart(500.0)
        self.assertEqual(schedule.next_after(500.0), 500.0 + FIRST_RETRIES[0])

    def test_quick_phase(self) -> None:
        """The quick first retries last up to the last of them, from the origin or a
        restart."""
        schedule = RetrySchedule(100.0)
        self.assertTrue(schedule.quick(100.0 + sum(FIRST_RETRIES) + 0.01))  # a late timer
        self.assertFalse(schedule.quick(schedule.next_after(100.0 + sum(FIRST_RETRIES))))
        schedule.restart(500.0)
        self.assertTrue(schedule.quick(500.1))

    @given(
        origin=st.floats(0, 1e6, allow_nan=False),
        asks=st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=20),
    )
    def test_two_peers_agree_whenever_they_ask(self, origin: float, asks: list[float]) -> None:
        """Any two schedules with one origin give the same time for the same moment, strictly
        after it, on one grid: peers that selected together dial together."""
        a, b = RetrySchedule(origin), RetrySchedule(origin)
        grid = set(times(RetrySchedule(origin), 1100.0))
        for ask in sorted(asks):
            now = origin + ask
            t = a.next_after(now)
            self.assertEqual(t, b.next_after(now))
            self.assertGreater(t, now)
            self.assertIn(round(t - origin, 6), grid)
