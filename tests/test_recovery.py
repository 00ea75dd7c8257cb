"""Recovery in seconds (issue 14), in Linux network namespaces: each test builds its own hosts
(``a`` and ``b`` routed to each other, the real mailbox server and transit relay on a third
network), streams 1 KiB every 10 ms from ``a`` to ``b`` over the direct path, applies a fault,
and asserts the delivery gap (a generous bound: the machine is shared; the figure is printed)
and that every record arrived exactly once, in order. The runs are ``benchmarks.recovery``'s
(docs/recovery-figures.md has the medians over 5 runs).

Skipped only where namespaces cannot be created (under ``CI=true`` that fails instead).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from twisted.trial import unittest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.recovery import PAIRINGS, fault_run, idle_run, slow_run, stall_run  # noqa: E402

from tests.support.netns import require_namespaces  # noqa: E402

#: the asserted bound on a delivery gap whose target is 3 s (5 s after an address change)
GAP_BOUND = 10.0
#: the same between two txdilation peers, whose links move to their warm standby path
#: (target 1 s median, 1.5 s worst; generous: the machine is shared)
STANDBY_GAP_BOUND = 4.0
ADDRESS_GAP_BOUND = 15.0
#: the idle case's ping interval, and the slack on "noticed within one interval"
IDLE_PING = 10.0
IDLE_SLACK = 8.0


class RecoverySlowTests(unittest.TestCase):
    """Black hole under traffic, address change, idle death, slow but alive."""

    timeout = 150

    def setUp(self) -> None:
        from twisted.internet import reactor

        require_namespaces()
        self.reactor: Any = reactor

    async def _fault(self, case: str, pairing: str, cap: float = 30.0) -> dict[str, Any]:
        record = await fault_run(self.reactor, case, PAIRINGS[pairing], None, cap, 0)
        print(f"\n{case} {pairing}: {record}")
        self.assertNotIn("error", record)
        self.assertEqual(record["path_before"], "direct", record)
        self.assertTrue(record["recovered"], record)
        self.assertTrue(record["exactly_once"], record)
        self.assertEqual(record["duplicates"], 0, record)
        self.assertEqual(record["missing"], 0, record)
        return record

    async def test_black_hole_sender_leads(self) -> None:
        """tx sender leading a tx receiver: the path dies under traffic, and the link moves
        to the standby through the relay (kept warm beside the direct link) within about a
        second at the default 30 s ping interval (it took 50 s before issue 14, 2.8 s before
        issue 31)."""
        record = await self._fault("blackhole", "tx-tx-sender-leads")
        self.assertLess(record["gap"], STANDBY_GAP_BOUND)
        self.assertEqual(record["path_after"], "relay")

    async def test_black_hole_receiver_leads(self) -> None:
        """The tx receiver leads: whichever side notices first moves, and its MOVED ping on
        the standby moves the other."""
        record = await self._fault("blackhole", "tx-tx-receiver-leads")
        self.assertLess(record["gap"], STANDBY_GAP_BOUND)
        self.assertEqual(record["path_after"], "relay")

    async def test_black_hole_tx_leads_stock_receiver(self) -> None:
        """A tx Leader sending to a stock receiver notices and reconnects: stock follows."""
        record = await self._fault("blackhole", "tx-leads-stock-receiver")
        self.assertLess(record["gap"], GAP_BOUND)

    async def test_address_change(self) -> None:
        """The sending (leading) host moves: its link and its mailbox WebSocket are dropped
        at once, and the peers meet again from the new address (88 s before)."""
        record = await self._fault("address", "tx-tx-sender-leads", cap=60.0)
        self.assertLess(record["gap"], ADDRESS_GAP_BOUND)

    async def test_idle_death_noticed_on_both_sides(self) -> None:
        """An idle link that dies is noticed within one ping interval (plus slack) by both
        sides: the periodic PING is a probe (1.65 intervals before)."""
        record = await idle_run(self.reactor, PAIRINGS["tx-tx-sender-leads"], IDLE_PING, 60.0, 0)
        print(f"\nidle: {record}")
        self.assertNotIn("error", record)
        for side in ("leader_noticed", "follower_noticed"):
            self.assertIsNotNone(record[side], record)
            self.assertLess(record[side], IDLE_PING + IDLE_SLACK, record)

    async def test_slow_but_alive_is_kept(self) -> None:
        """2 s of delay appear on the sender's packets while it streams: never torn down,
        nothing lost or duplicated."""
        record = await slow_run(self.reactor, PAIRINGS["tx-tx-sender-leads"], 0, watch=12.0)
        print(f"\nslow: {record}")
        self.assertNotIn("error", record)
        self.assertEqual(record["sender_reconnections"], 0, record)
        self.assertEqual(record["receiver_reconnections"], 0, record)
        self.assertTrue(record["exactly_once"], record)

    async def test_receiver_not_reading_is_kept(self) -> None:
        """The receiver's application reads nothing for 12 s while 16 MiB are sent (its L4
        buffers 4 MiB, then it stops reading the connection: records and probes go unanswered,
        but its TCP is alive): never torn down, every byte delivered.
        (``benchmarks.recovery --cases stall`` measures 60 s, and a stock receiver.)"""
        pairing = PAIRINGS["tx-tx-sender-leads"]
        record = await stall_run(self.reactor, pairing, 0, stall=12.0, size=16 * 2**20)
        print(f"\nstall: {record}")
        self.assertTrue(record["completed"], record)
        self.assertTrue(record["same_bytes"], record)
        self.assertEqual(record["sender_reconnections"], 0, record)
        self.assertEqual(record["receiver_reconnections"], 0, record)
