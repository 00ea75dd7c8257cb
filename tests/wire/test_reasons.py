"""Tests for txdilation.wire.reasons: a typed loss reason, and every cause mapped by the
consumers that decide on it."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txdilation.telemetry import LOST_REASONS
from txdilation.telemetry.causes import LOST_REASON
from txdilation.wire.reasons import Cause, LinkLoss


class LinkLossTests(SynchronousTestCase):
    def test_text_is_the_message(self) -> None:
        """str() of a loss is its message (what the log lines show); equal losses compare
        equal and hash alike (a value, not an identity)."""
        loss = LinkLoss(Cause.SILENT, "nothing heard for 45 s")
        self.assertEqual(str(loss), "nothing heard for 45 s")
        self.assertEqual(loss, LinkLoss(Cause.SILENT, "nothing heard for 45 s"))
        self.assertEqual(len({loss, LinkLoss(Cause.SILENT, "nothing heard for 45 s")}), 1)
        self.assertNotEqual(loss, LinkLoss(Cause.DROPPED, "nothing heard for 45 s"))

    def test_every_cause_has_a_telemetry_reason(self) -> None:
        """The loss telemetry maps every cause onto its vocabulary (none left to 'other' by
        omission)."""
        for cause in Cause:
            self.assertIn(LOST_REASON[cause], LOST_REASONS)
