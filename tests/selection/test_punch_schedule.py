"""The punched-dial policy (selection.punch_schedule), I/O-free: which TTL each dial's first SYN
gets, what the expiry probe's verdict changes, when a failed dial is made again, and how a
failure is classified."""

from __future__ import annotations

import errno
import random

from twisted.internet.error import (
    ConnectBindError,
    ConnectError,
    ConnectionRefusedError,
    TimeoutError,
)
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.punch import PUNCH_RETRY_DELAY, PUNCH_WINDOW
from txdilation.selection.punch_schedule import (
    CROSSING_SPACING,
    LOW_TTL_HOLD,
    LOW_TTLS,
    REFUSED_BURST,
    REFUSED_SPACING,
    SYN_RETRANSMISSION,
    Outcome,
    PunchPlan,
    Verdict,
    outcome_of,
    refused_delay,
)


def plan() -> PunchPlan:
    return PunchPlan(started=100.0, rng=random.Random(7))


def refused_plan(verdict: Verdict | None = Verdict.SURVIVES) -> PunchPlan:
    """A plan whose first (normal) dial was refused at once, the probe's ``verdict`` known."""
    p = plan()
    if verdict is not None:
        p.probed(verdict)
    assert p.dial(100.0) is None
    assert p.again(Outcome.REFUSED, 100.0) is not None
    return p


class TTLTests(SynchronousTestCase):
    def test_first_dial_normal_low_ttls_after_a_refusal(self) -> None:
        """The first dial has the system's TTL whatever the probe says (against a NAT that
        drops, that is all it takes); once refused, dials cycle through LOW_TTLS, smallest
        first (2: one home router), if a low-TTL connect survives here."""
        p = plan()
        p.probed(Verdict.SURVIVES)
        self.assertIsNone(p.dial(100.0))
        self.assertIsNone(p.last_ttl)
        p.again(Outcome.REFUSED, 100.001)
        ttls = [p.dial(100.1 + i * 0.01) for i in range(2 * len(LOW_TTLS))]
        self.assertEqual(ttls, [*LOW_TTLS, *LOW_TTLS])
        self.assertEqual(LOW_TTLS[0], 2)
        self.assertEqual(p.last_ttl, LOW_TTLS[-1])

    def test_probe_verdicts(self) -> None:
        """After a refusal, only a probe whose low-TTL connect survived allows low TTLs; one
        that was aborted or that reached a host means the system's TTL for every dial. Until
        the verdict is known, the next dial waits for it."""
        for verdict, low in (
            (Verdict.SURVIVES, True),
            (Verdict.ABORTED, False),
            (Verdict.REACHED, False),
        ):
            with self.subTest(verdict=verdict):
                p = refused_plan(None)
                self.assertTrue(p.wants_verdict)
                p.probed(verdict)
                self.assertFalse(p.wants_verdict)
                self.assertEqual(p.dial(100.1) is not None, low)
        self.assertFalse(plan().wants_verdict)  # not refused: dials at once

    def test_expired_dial_gives_low_ttls_up_and_dials_at_once(self) -> None:
        """A low-TTL dial aborted by its expiry (the kernel gave the socket up): the next dial
        is at once, with the system's TTL, and so is every later one."""
        p = refused_plan()
        self.assertEqual(p.dial(100.1), 2)
        self.assertEqual(p.again(Outcome.EXPIRED, 100.101), 0.0)
        self.assertIsNone(p.dial(100.101))
        p.probed(Verdict.SURVIVES)
        self.assertIsNone(p.dial(100.2))
        self.assertFalse(p.wants_verdict)

    def test_a_ttl_that_reached_too_far_is_not_used_again(self) -> None:
        """A low-TTL dial refused before its SYN's retransmission (that SYN itself reached the
        peer's NAT), or whose expiry is reported for a TTL above the smallest, keeps later low
        TTLs below it; a refusal of the retransmission (the peer had not dialled yet) does
        not."""
        p = refused_plan()
        self.assertEqual(p.dial(100.0), 2)
        p.again(Outcome.REFUSED, 100.0 + SYN_RETRANSMISSION + 0.01)  # the retransmission's
        self.assertEqual(p.dial(102.0), 3)
        p.again(Outcome.REFUSED, 102.001)  # at once: TTL 3 reached the peer's NAT
        self.assertEqual([p.dial(102.1 + i) for i in range(3)], [2, 2, 2])
        p = refused_plan()
        self.assertEqual(p.dial(100.0), 2)
        p.again(Outcome.REFUSED, 101.1)
        self.assertEqual(p.dial(101.2), 3)
        self.assertEqual(p.again(Outcome.EXPIRED, 101.201), 0.0)  # reported beyond our NAT
        self.assertEqual([p.dial(101.3 + i) for i in range(2)], [2, 2])
        self.assertTrue(p.low_ttl)

    def test_a_low_ttl_try_is_held_for_its_retransmission(self) -> None:
        """A low-TTL try is left connecting for LOW_TTL_HOLD (past the kernel's SYN
        retransmission) before another try of the hint replaces it; a normal try is not
        held."""
        self.assertGreater(LOW_TTL_HOLD, SYN_RETRANSMISSION)
        p = refused_plan()
        self.assertEqual(p.dial(100.0), 2)
        self.assertTrue(p.holds(100.0 + SYN_RETRANSMISSION))
        self.assertFalse(p.holds(100.0 + LOW_TTL_HOLD))
        q = refused_plan(Verdict.ABORTED)
        self.assertIsNone(q.dial(100.0))
        self.assertFalse(q.holds(100.1))


class RetryTests(SynchronousTestCase):
    def test_refused_then_low_ttl_dials_again_soon(self) -> None:
        """A refused dial whose next one has a low TTL (one survives here, or that is not known
        yet), and a low-TTL dial refused in its turn (its retransmission met the peer's NAT
        still closed, a second later), are made again within a couple of REFUSED_SPACING."""
        for verdict in (Verdict.SURVIVES, None):
            with self.subTest(verdict=verdict):
                p = plan()
                if verdict is not None:
                    p.probed(verdict)
                p.dial(100.0)
                delays = [p.again(Outcome.REFUSED, 100.9)]
                p.probed(Verdict.SURVIVES)
                self.assertEqual(p.dial(101.0), 2)
                delays.append(p.again(Outcome.REFUSED, 102.0))
                for delay in delays:
                    assert delay is not None
                    self.assertGreaterEqual(delay, REFUSED_SPACING)
                    self.assertLessEqual(delay, 2 * REFUSED_SPACING)

    def test_refused_normal_dial_again_within_about_a_round_trip(self) -> None:
        """Where low TTLs do not survive (only crossing SYNs get through), a dial refused after
        ``took`` seconds (a round trip to the peer's NAT) is made again after CROSSING_SPACING
        plus a random part of up to ``took``; the delays differ from one refusal to the next
        (the two peers' retries do not keep one phase)."""
        p = plan()
        p.probed(Verdict.ABORTED)
        delays = []
        for i in range(20):
            start = 100.0 + 0.2 * i  # all within the window
            self.assertIsNone(p.dial(start))
            delay = p.again(Outcome.REFUSED, start + 0.3)
            assert delay is not None
            delays.append(delay)
        for delay in delays:
            self.assertGreaterEqual(delay, CROSSING_SPACING)
            self.assertLessEqual(delay, CROSSING_SPACING + 0.3)
        self.assertGreater(len(set(delays)), 15)
        self.assertGreater(max(delays) - min(delays), 0.1)

    def test_crossing_only_plans_retry_a_near_refusal_sooner(self) -> None:
        """A plan that relies on crossing SYNs (refused, low TTLs excluded) makes a dial
        refused on a nearby network again within a couple of CROSSING_SPACING, well before
        REFUSED_SPACING: the chance that two tries cross grows with the square of their
        rate."""
        self.assertLess(2 * CROSSING_SPACING, REFUSED_SPACING)
        for verdict in (Verdict.ABORTED, Verdict.REACHED):
            with self.subTest(verdict=verdict):
                p = refused_plan(verdict)
                self.assertTrue(p.crossing_only)
                for i in range(10):
                    self.assertIsNone(p.dial(100.1 + i * 0.01))
                    delay = p.again(Outcome.REFUSED, 100.1 + i * 0.01 + 0.0001)
                    assert delay is not None
                    self.assertTrue(CROSSING_SPACING <= delay <= 2 * CROSSING_SPACING, delay)
        self.assertFalse(refused_plan(Verdict.SURVIVES).crossing_only)
        self.assertFalse(plan().crossing_only)  # not refused yet

    def test_background_bursts(self) -> None:
        """While the link is relayed (after the window), a refused try of a crossing-only plan
        is made again only within REFUSED_BURST of the schedule's last burst; other plans and
        other failures wait for the schedule's next try."""
        late = 100.0 + PUNCH_WINDOW + 10.0
        p = refused_plan(Verdict.ABORTED)
        p.dial(late)
        self.assertFalse(p.retries_in_background(Outcome.REFUSED, late))
        self.assertIsNone(p.again(Outcome.REFUSED, late))
        p.burst(late)
        self.assertTrue(p.retries_in_background(Outcome.REFUSED, late + 0.1))
        p.dial(late + 0.1)
        delay = p.again(Outcome.REFUSED, late + 0.1001)
        assert delay is not None
        self.assertLessEqual(delay, 2 * CROSSING_SPACING)
        self.assertFalse(p.retries_in_background(Outcome.FAILED, late + 0.1))
        self.assertIsNone(p.again(Outcome.FAILED, late + 0.1))
        self.assertFalse(p.retries_in_background(Outcome.REFUSED, late + REFUSED_BURST))
        self.assertIsNone(p.again(Outcome.REFUSED, late + REFUSED_BURST))
        q = refused_plan(Verdict.SURVIVES)
        q.burst(late)
        self.assertFalse(q.retries_in_background(Outcome.REFUSED, late + 0.1))

    def test_refused_delay_bounds(self) -> None:
        """A refusal on a nearby network (microseconds) still waits REFUSED_SPACING, with a
        random part of up to REFUSED_SPACING; a very slow one is capped at a second."""
        rng = random.Random(3)
        near = [refused_delay(0.0001, rng) for _ in range(200)]
        self.assertTrue(all(REFUSED_SPACING <= d <= 2 * REFUSED_SPACING for d in near))
        far = [refused_delay(30.0, rng) for _ in range(200)]
        self.assertTrue(all(REFUSED_SPACING <= d <= REFUSED_SPACING + 1.0 for d in far))

    def test_other_failures_window_and_taken(self) -> None:
        """Any other failure: again after PUNCH_RETRY_DELAY; nothing once PUNCH_WINDOW has
        passed since the first dial, nor when the connection exists already."""
        p = plan()
        p.dial(100.0)
        self.assertEqual(p.again(Outcome.FAILED, 100.2), PUNCH_RETRY_DELAY)
        self.assertIsNone(p.again(Outcome.TAKEN, 100.3))
        for outcome in Outcome:
            self.assertIsNone(p.again(outcome, 100.0 + PUNCH_WINDOW))


class OutcomeTests(SynchronousTestCase):
    def test_classification(self) -> None:
        """Refusals, expiries (host or network unreachable, only after a low-TTL SYN), an
        existing connection or an unbindable port, and the rest."""
        unreachable = ConnectError(osError=errno.EHOSTUNREACH, string="no route")
        cases = [
            (ConnectionRefusedError(), True, Outcome.REFUSED),
            (ConnectionRefusedError(), False, Outcome.REFUSED),
            (unreachable, True, Outcome.EXPIRED),
            (ConnectError(osError=errno.ENETUNREACH, string="x"), True, Outcome.EXPIRED),
            (unreachable, False, Outcome.FAILED),
            (ConnectError(osError=errno.EADDRNOTAVAIL, string="in use"), True, Outcome.TAKEN),
            (ConnectError(osError=errno.EISCONN, string="connected"), False, Outcome.TAKEN),
            (ConnectBindError(errno.EADDRINUSE, "in use"), False, Outcome.TAKEN),
            (TimeoutError(), True, Outcome.FAILED),
            (ValueError("odd"), False, Outcome.FAILED),
        ]
        for error, low, expected in cases:
            with self.subTest(error=error, low=low):
                self.assertEqual(outcome_of(Failure(error), low_ttl=low), expected)
