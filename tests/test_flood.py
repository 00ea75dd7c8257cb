"""A connection flood at a real peer's listener, in Linux network namespaces (issue 14, item 4).

The ``flood`` case of ``benchmarks/recovery.py``, run once with the listener's cap lowered so
that the flood overflows it: a third host opens 600 connections within a second at the
txdilation Leader's fixed listen port, half of them writing 64 bytes of garbage, while the
real peer's packets are dropped; then a second flood starts and the real peer is let through.
Pinned: no connection is refused or left waiting outside the accept queue, every garbage
connection is closed within the watch (5 s), the listener holds no more idle ones than its cap
(the oldest were closed), and the real peer dilates and echoes during the second flood.
Timing figures are the benchmark's (docs/baseline-figures.md); here the bounds are generous.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.support.netns import require_namespaces

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # benchmarks/ is a top-level package of the checkout
    sys.path.insert(0, str(REPO_ROOT))

COUNT = 600
CAP = 64


class FloodNamespaceSlowTests(TestCase):
    """One flood run in namespaces (about 25 s)."""

    timeout = 150

    def setUp(self) -> None:
        require_namespaces()

    def test_flood_with_a_small_cap(self) -> Deferred[None]:
        """600 connections in 1 s against a cap of 64: none refused or never accepted, all
        garbage ones closed within 5 s, at most 64 idle ones still open then (the rest closed,
        oldest first), and the real peer gets in during the second flood."""
        return Deferred.fromCoroutine(self._flood())

    async def _flood(self) -> None:
        from benchmarks.recovery import PAIRINGS, flood_run
        from twisted.internet import reactor

        record: dict[str, Any] = await flood_run(
            reactor, PAIRINGS["tx-tx-sender-leads"], COUNT, 1.0, 0, max_unauthenticated=CAP
        )
        alone = record["flood"]
        self.assertEqual(alone["attempted"], COUNT)
        self.assertEqual(
            (alone["refused"], alone["errors"], alone["never_connected"]), (0, 0, 0), alone
        )
        self.assertEqual(alone["connected"], COUNT)
        garbage, idle = alone["garbage"], alone["idle"]
        self.assertEqual(garbage["connected"], COUNT // 2)
        self.assertEqual(garbage["open_after_watch"], 0, alone)
        self.assertEqual(idle["connected"], COUNT // 2)
        self.assertLessEqual(idle["open_after_watch"], CAP, alone)
        self.assertGreaterEqual(idle["closed_within_watch"], COUNT // 2 - CAP, alone)
        self.assertTrue(record["real_peer_in"], record)
        self.assertLess(record["real_peer_after"], 30.0, record)
