"""Tests for txdilation.path.dead_path: the RTO, probes, verdicts (Clock-driven) and the
kernel's word (tcp_info, on a real loopback socket)."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial import unittest

from txdilation.path.dead_path import (
    INITIAL_RTO,
    MAX_RTO,
    MIN_RTO,
    STANDBY_MIN_RTO,
    STANDBY_PROBE_WAIT,
    DeadPathDetector,
    RttEstimator,
)
from txdilation.wire.reasons import Cause, LinkLoss


class RttEstimatorTests(unittest.SynchronousTestCase):
    """RFC 6298 smoothing, the floor and the ceiling."""

    def test_initial_floor_and_cap(self) -> None:
        """The RTO starts at INITIAL_RTO and stays within MIN_RTO..MAX_RTO whatever is sampled."""
        rtt = RttEstimator()
        self.assertEqual(rtt.rto, INITIAL_RTO)
        rtt.sample(0.001)
        self.assertEqual(rtt.rto, MIN_RTO)
        for _ in range(50):
            rtt.sample(100.0)
        self.assertEqual(rtt.rto, MAX_RTO)

    def test_smoothing(self) -> None:
        """Samples are smoothed as RFC 6298 says (first: srtt=r, rttvar=r/2); negatives ignored."""
        rtt = RttEstimator()
        rtt.sample(2.0)
        self.assertEqual((rtt.srtt, rtt.rttvar), (2.0, 1.0))
        self.assertEqual(rtt.rto, 6.0)
        rtt.sample(2.0)
        self.assertAlmostEqual(rtt.rttvar, 0.75)
        rtt.sample(-1.0)  # ignored
        self.assertEqual(rtt.samples, 2)


class Harness:
    """A detector on a Clock, recording probes and verdicts; ``kernel`` is its answer."""

    def __init__(self, kernel: bool | None = None) -> None:
        self.clock = Clock()
        self.probes: list[float] = []
        self.dead: list[tuple[float, LinkLoss]] = []
        self.kernel = kernel
        self.paused = False
        self.d = DeadPathDetector(
            self.clock,
            send_probe=lambda: self.probes.append(self.clock.seconds()),
            on_dead=lambda why: self.dead.append((self.clock.seconds(), why)),
            kernel_alive=lambda within: self.kernel,
            reading_paused=lambda: self.paused,
        )

    def stream(self, until: float, *, acked_after: float | None, step: float = 0.01) -> None:
        """Write one record every ``step`` until ``until``, each ACKed ``acked_after`` later
        (never, when None)."""
        seqnum = self.d.sent_log.writes[-1][0] + 1 if self.d.sent_log.writes else 0
        while self.clock.seconds() < until - 1e-9:
            self.d.sent_log.sent(seqnum)
            if acked_after is not None:
                self.clock.callLater(acked_after, self.d.acked, seqnum)
            seqnum += 1
            self.clock.advance(step)

    def run(self, seconds: float, step: float = 0.05) -> None:
        self.clock.pump([step] * int(seconds / step))


class DeadPathTests(unittest.SynchronousTestCase):
    """Probing from traffic, and the verdicts."""

    def test_live_stream_is_never_probed(self) -> None:
        """A stream whose records are acknowledged promptly is never probed nor declared dead."""
        h = Harness()
        h.stream(30.0, acked_after=0.005)
        self.assertEqual((h.probes, h.dead), ([], []))
        self.assertEqual(h.d.rtt.rto, MIN_RTO)

    def test_black_hole_under_traffic(self) -> None:
        """Records stop being acknowledged at t=10: a probe ``rto`` later, dead 1.5 ``rto``
        after the probe (2.5 s after the last acknowledged write)."""
        h = Harness()
        h.stream(10.0, acked_after=0.005)
        h.stream(15.0, acked_after=None)
        self.assertEqual(len(h.probes), 1)
        self.assertLess(abs(h.probes[0] - 11.0), 0.02)
        self.assertEqual(len(h.dead), 1)
        self.assertLess(abs(h.dead[0][0] - 12.5), 0.02)
        self.assertIn("probe unanswered", str(h.dead[0][1]))
        self.assertIs(h.dead[0][1].cause, Cause.PROBE_UNANSWERED)

    def test_sudden_two_second_delay_is_not_death(self) -> None:
        """The RTT jumps from 5 ms to 2 s: the first ACKs after the jump answer the probe, the
        samples grow the RTO, and nothing is called dead (the slow-but-alive case)."""
        h = Harness()
        h.stream(10.0, acked_after=0.005)
        h.stream(70.0, acked_after=2.0)
        self.assertEqual(h.dead, [])
        self.assertGreater(h.d.rtt.rto, 2.0)
        self.assertLessEqual(len(h.probes), 3)

    def test_pong_answers_a_probe(self) -> None:
        """A pong answers a probe: no death, and the next probe waits an RTO after the answer."""
        h = Harness()
        h.d.sent_log.sent(0)
        h.run(1.2)
        self.assertEqual(len(h.probes), 1)
        h.d.pong(0.3)
        h.run(1.0)
        self.assertEqual(h.dead, [])
        self.assertEqual(len(h.probes), 1)  # the next one waits an rto after the answer
        h.run(10.0)
        self.assertEqual(len(h.dead), 1)  # record 0 is still unacknowledged: probed, dead

    def test_idle_ping_is_a_probe(self) -> None:
        """The periodic PING of an idle link waits 3 rto for its PONG."""
        h = Harness()
        h.d.pinged()
        h.run(2.9)
        self.assertEqual(h.dead, [])
        h.d.pong(0.1)
        h.run(30.0)
        self.assertEqual(h.dead, [])
        h.d.pinged()
        h.run(3.1)
        self.assertEqual(len(h.dead), 1)
        self.assertLess(abs(h.dead[0][0] - 32.9 - 3.0), 0.06)

    def test_kernel_vouches_for_a_peer_that_does_not_read(self) -> None:
        """A peer whose application stopped reading answers nothing, but its TCP is alive:
        never dead, and probed at most once per probe timeout."""
        h = Harness(kernel=True)
        h.stream(5.0, acked_after=0.005)
        h.stream(65.0, acked_after=None, step=0.1)
        self.assertEqual(h.dead, [])
        self.assertGreater(h.d.kernel_saves, 5)
        self.assertLessEqual(len(h.probes), 60 / 2.5 + 1)
        h.kernel = False
        h.run(5.0)
        self.assertEqual(len(h.dead), 1)

    def test_paused_reading_is_not_death(self) -> None:
        """While our reading is paused the path is not declared dead; once resumed, silence is."""
        h = Harness()
        h.paused = True
        h.d.sent_log.sent(0)
        h.run(20.0)
        self.assertEqual(h.dead, [])
        h.paused = False
        h.run(5.0)
        self.assertEqual(len(h.dead), 1)

    def test_stop_and_at_most_once(self) -> None:
        """A path is declared dead at most once, and a stopped detector never declares it."""
        h = Harness()
        h.d.sent_log.sent(0)
        h.run(10.0)
        self.assertEqual(len(h.dead), 1)
        h.d.sent_log.sent(1)
        h.d.pinged()
        h.run(10.0)
        self.assertEqual(len(h.dead), 1)
        h2 = Harness()
        h2.d.sent_log.sent(0)
        h2.d.stop()
        h2.run(10.0)
        self.assertEqual((h2.probes, h2.dead, h2.clock.getDelayedCalls()), ([], [], []))


class LossReasonTests(unittest.SynchronousTestCase):
    """The Manager names each way a link is left in the telemetry vocabulary."""

    def test_reasons(self) -> None:
        """Each loss as it is made where a link dies keeps its log text and maps, by its cause
        alone, onto the telemetry's reason."""
        from txdilation.mailbox.manager_lifecycle import FOLLOWER_REPORT, LEADER_REPORT
        from txdilation.path.dead_path import unanswered
        from txdilation.path.liveness import SILENCE
        from txdilation.telemetry import LOST_REASONS
        from txdilation.telemetry.causes import LOST_REASON

        address_gone = LinkLoss(
            Cause.NETWORK_CHANGE, "network change: our address 10.2.0.2 is gone"
        )
        cases = {
            unanswered(Cause.PROBE_UNANSWERED, 1.5): (
                "probe unanswered for 1.5s",
                "probe_unanswered",
            ),
            unanswered(Cause.NETWORK_CHANGE, 1.5): (
                "network change: probe unanswered for 1.5s",
                "network_change",
            ),
            address_gone: ("network change: our address 10.2.0.2 is gone", "network_change"),
            LEADER_REPORT: ("peer report: the Leader asked to reconnect", "peer_report"),
            FOLLOWER_REPORT: (
                "peer report: the Follower says this connection is dead",
                "peer_report",
            ),
            SILENCE: ("peer silent for 1.5 ping intervals", "timeout"),
        }
        for loss, (text, reason) in cases.items():
            self.assertEqual(str(loss), text)
            self.assertEqual(LOST_REASON[loss.cause], reason)
            self.assertIn(reason, LOST_REASONS)


class NetwatchTests(unittest.SynchronousTestCase):
    """Local addresses, and a watcher on a Clock (nothing to watch: it stays quiet)."""

    def test_address_is_local(self) -> None:
        """Loopback is local, TEST-NET is not, an unparsable address counts as local."""
        from txdilation.path.netwatch import address_is_local

        self.assertTrue(address_is_local("127.0.0.1"))
        self.assertFalse(address_is_local("192.0.2.77"))  # TEST-NET-1: never ours
        self.assertTrue(address_is_local("not an address"))  # unknown: nothing dropped

    def test_subscribe_on_a_clock(self) -> None:
        """Subscribing starts a watcher per clock; unsubscribing (twice is fine) removes it."""
        from txdilation.path import netwatch

        clock = Clock()
        unsubscribe = netwatch.subscribe(clock, lambda: None)
        self.assertIsNotNone(netwatch._watchers[clock].watcher)
        unsubscribe()
        unsubscribe()
        self.assertNotIn(clock, netwatch._watchers)
        self.assertEqual(clock.getDelayedCalls(), [])


class StandbyTimeoutTests(unittest.SynchronousTestCase):
    """Shorter, round-trip-based timeouts while a standby path is ready."""

    def test_black_hole_noticed_in_half_a_second(self) -> None:
        """With a standby ready and a fast path, a black hole under a stream is noticed
        STANDBY_MIN_RTO + STANDBY_PROBE_WAIT after the first unacknowledged record (2.5 s
        without a standby)."""
        h = Harness()
        h.d.standby_ready = True
        h.stream(5.0, acked_after=0.002)
        hole = h.clock.seconds()
        h.stream(hole + 2.0, acked_after=None)
        self.assertEqual(len(h.dead), 1)
        noticed = h.dead[0][0] - hole
        self.assertLess(abs(noticed - (STANDBY_MIN_RTO + STANDBY_PROBE_WAIT)), 0.03, noticed)

    def test_round_trip_sets_the_timeout(self) -> None:
        """A slower path (150 ms each way, jittering) waits longer than the floor: no probe
        while the ACKs come, whatever their jitter."""
        h = Harness()
        h.d.standby_ready = True
        for i in range(300):
            h.d.sent_log.sent(i)
            h.clock.callLater(0.3 + (i % 7) * 0.02, h.d.acked, i)
            h.clock.advance(0.01)
        h.run(2.0)
        self.assertEqual((h.probes, h.dead), ([], []))

    def test_record_after_an_answered_ping(self) -> None:
        """A record written while the timer still waits for an answered periodic probe's
        deadline (3 s away) is checked at its own deadline, not then."""
        h = Harness()
        h.d.standby_ready = True
        h.stream(2.0, acked_after=0.002)
        h.d.pinged()
        h.d.pong(0.001)
        hole = h.clock.seconds()
        h.stream(hole + 1.0, acked_after=None)
        self.assertEqual(len(h.dead), 1)
        self.assertLess(h.dead[0][0] - hole, 0.6)


class LateCheckTests(unittest.SynchronousTestCase):
    """A verdict found by a check that came late (the host was busy) waits once more."""

    def test_late_check_waits_once_more(self) -> None:
        """The reactor ran nothing for a second: the probe's deadline passed meanwhile, and
        its answer may be unread; the verdict waits one more probe timeout, and comes then
        if nothing answered."""
        h = Harness()
        h.d.standby_ready = True
        h.stream(2.0, acked_after=0.002)
        h.d.sent_log.sent(10_000)
        h.clock.advance(STANDBY_MIN_RTO + 0.01)  # the data probe
        self.assertEqual(len(h.probes), 1)
        h.clock.advance(1.0)  # far past its deadline: a late check
        self.assertEqual(h.dead, [])
        h.clock.advance(STANDBY_PROBE_WAIT + 0.01)
        self.assertEqual(len(h.dead), 1)

    def test_answer_read_after_a_late_check(self) -> None:
        """The answer, read right after the late check, keeps the path."""
        h = Harness()
        h.d.standby_ready = True
        h.stream(2.0, acked_after=0.002)
        h.d.sent_log.sent(10_000)
        h.clock.advance(STANDBY_MIN_RTO + 0.01)
        h.clock.advance(1.0)
        h.d.acked(10_000)
        h.run(2.0)
        self.assertEqual(h.dead, [])
