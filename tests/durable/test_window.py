"""Tests for txdilation.durable.window: the adaptive in-flight limit, fed by hand and by a
simulated path (time is a parameter: no clock, no I/O)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.window import GAIN, InFlightLimit

MB = 1_000_000


class Path:
    """A path of ``rtt`` seconds (no queue) and ``rate`` bytes/s at its bottleneck, driven one
    round at a time by a sender that keeps the window's limit in flight (or what it has)."""

    def __init__(self, window: InFlightLimit, rtt: float, rate: float) -> None:
        self.window, self.rtt, self.rate = window, rtt, rate
        self.now = 0.0
        self.seqnum = 0
        self.delivered = 0

    def round(self, backlog: float = float("inf")) -> None:
        """One round trip: write min(limit, backlog) bytes (the first write is the marker);
        the ACK for all of it comes back after the path's delay plus the queue at its
        bottleneck (what does not fit in one round trip at its rate)."""
        flight = min(self.window.limit, backlog)
        self.window.sent(self.seqnum, self.delivered, self.now)
        took = max(self.rtt, flight / self.rate)
        self.now += took
        self.delivered += int(flight)
        self.seqnum += 1
        self.window.acked(self.seqnum - 1, self.delivered, self.now)


class SamplingTests(SynchronousTestCase):
    """One sample: marker, round trip, delivery rate, limit."""

    def test_starts_at_the_floor_within_the_ceiling(self) -> None:
        """A new window allows ``floor`` bytes; a floor above the ceiling is the ceiling."""
        self.assertEqual(InFlightLimit(1000, ceiling=10_000).limit, 1000)
        self.assertEqual(InFlightLimit(1000, ceiling=500).limit, 500)

    def test_one_sample_sets_round_trip_rate_and_limit(self) -> None:
        """The ACK covering the marker gives rtt = now - written and rate = bytes acknowledged
        meanwhile over that time; limit = GAIN x rate x rtt when that is above the floor."""
        w = InFlightLimit(1000, ceiling=10**9)
        w.sent(0, delivered=0, now=1.0)
        self.assertTrue(w.sampling)
        w.acked(0, delivered=50_000, now=1.1)
        self.assertFalse(w.sampling)
        self.assertAlmostEqual(w.min_rtt or 0, 0.1)
        self.assertAlmostEqual(w.delivery_rate, 500_000)
        self.assertEqual(w.limit, int(GAIN * 500_000 * 0.1))

    def test_one_sample_at_a_time(self) -> None:
        """Records written while a sample is out are not markers; an ACK below the marker
        does not end the sample."""
        w = InFlightLimit(1000, ceiling=10**9)
        w.sent(5, delivered=0, now=0.0)
        w.sent(6, delivered=0, now=0.5)  # ignored
        w.acked(4, delivered=100, now=0.6)
        self.assertTrue(w.sampling)
        w.acked(6, delivered=10_000, now=1.0)
        self.assertAlmostEqual(w.min_rtt or 0, 1.0)  # timed from record 5

    def test_burst_of_acks_is_timed_from_the_ack_before_the_marker(self) -> None:
        """The rate's interval starts at the last ACK before the marker was written: ACKs
        bunched up behind a stall cannot make the path look faster than it is."""
        w = InFlightLimit(1000, ceiling=10**9)
        w.acked(-1, delivered=0, now=0.0)  # an ACK with no sample out
        w.sent(0, delivered=0, now=0.09)
        w.acked(0, delivered=1_000_000, now=0.1)
        self.assertAlmostEqual(w.delivery_rate, 10 * MB)  # over 0.1 s, not 0.01 s
        self.assertAlmostEqual(w.min_rtt or 0, 0.01)

    def test_floor_and_ceiling_bound_the_limit(self) -> None:
        """A tiny bandwidth-delay product leaves the floor; a huge one stops at the ceiling."""
        w = InFlightLimit(1000, ceiling=1_000_000)
        w.sent(0, delivered=0, now=0.0)
        w.acked(0, delivered=10, now=0.001)
        self.assertEqual(w.limit, 1000)
        w.sent(1, delivered=10, now=1.0)
        w.acked(1, delivered=10**9, now=2.0)
        self.assertEqual(w.limit, 1_000_000)

    def test_a_clock_that_did_not_move_measures_nothing(self) -> None:
        """A sample that took no time (a test clock) leaves everything as it was."""
        w = InFlightLimit(1000, ceiling=10**9)
        w.sent(0, delivered=0, now=5.0)
        w.acked(0, delivered=10**6, now=5.0)
        self.assertEqual((w.limit, w.min_rtt, w.delivery_rate), (1000, None, 0.0))
        self.assertFalse(w.sampling)

    def test_reset_forgets_the_path(self) -> None:
        """A new connection starts from the floor with no samples, and an outstanding marker
        is dropped (its ACK would come from another connection)."""
        w = InFlightLimit(1000, ceiling=10**9)
        w.sent(0, delivered=0, now=0.0)
        w.acked(0, delivered=10**6, now=0.1)
        w.sent(1, delivered=10**6, now=0.2)
        w.reset()
        self.assertEqual((w.limit, w.min_rtt, w.delivery_rate, w.sampling), (1000, None, 0, False))


class PathTests(SynchronousTestCase):
    """The limit against simulated paths."""

    def test_grows_to_twice_a_long_paths_bandwidth_delay_product(self) -> None:
        """On a 100 ms path with a 100 MB/s bottleneck (BDP 10 MB) a window starting at 2 MB
        doubles each round while the path has room, and settles at GAIN x BDP: never
        limiting the path's rate."""
        w = InFlightLimit(2 * MB, ceiling=64 * 2**20)
        path = Path(w, rtt=0.1, rate=100 * MB)
        limits = []
        for _ in range(8):
            path.round()
            limits.append(w.limit)
        self.assertEqual([round(x / MB, 3) for x in limits[:3]], [4, 8, 16])
        self.assertEqual(round(limits[-1] / MB, 3), GAIN * 10)
        self.assertAlmostEqual(w.delivery_rate, 100 * MB)

    def test_own_queue_does_not_feed_the_limit(self) -> None:
        """A receiver that is its own bottleneck on a 0.2 ms path (loopback: 500 MB/s) gets
        the floor, round after round, although every round trip but the first includes the
        queue the window itself builds: the round trip only ever falls."""
        w = InFlightLimit(2 * MB, ceiling=64 * 2**20)
        path = Path(w, rtt=0.0002, rate=500 * MB)
        path.round(backlog=1000)  # the link's first record: an OPEN, alone
        for _ in range(50):
            path.round()
        self.assertEqual(w.limit, 2 * MB)
        self.assertAlmostEqual(w.min_rtt or 0, 0.0002)

    def test_slow_start_of_an_idle_link_is_not_a_slow_path(self) -> None:
        """Small writes on an idle link measure a low rate; when bulk follows, the largest of
        the recent rates wins within a few rounds (not the average of the idle ones)."""
        w = InFlightLimit(1 * MB, ceiling=64 * 2**20)
        path = Path(w, rtt=0.05, rate=100 * MB)
        for _ in range(20):
            path.round(backlog=100)
        self.assertEqual(w.limit, 1 * MB)
        for _ in range(6):
            path.round()
        self.assertEqual(round(w.limit / MB, 3), GAIN * 5)
