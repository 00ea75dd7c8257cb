"""
Mixed pairs never stall (issue 33): a stock peer and a txdilation peer in real processes, the
real mailbox server and transit relay, a 20 MB/s fault proxy on the path cutting at the first
handshake, mid-stream or at the close (``tests.support.mixed``), each direction, each leading.

Layer: interop tests (real processes). A bounded sample of ``benchmarks/mixed_pairs.py``, which
counts failures over hundreds of runs and prints the table (docs/reliability.md, "Mixed
pairs"): each run here must end ``ok`` (every byte, digests equal), its sender within 5 s of
the receiver's last acknowledgement, and the txdilation peer in the role the run expects (a
Follower where the stock side was made to lead, the Leader where nobody forced a side).
Before issue 33, the first case stalled in most runs (a stock Leader never retries a
generation whose connections were cut in their handshake, and the txdilation Follower could
not start one) and the second often waited for the 600 s peer timeout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.trial import unittest

from tests.support.harness import RealServersMixin
from tests.support.mixed import Cell, run_mixed

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # benchmarks/ is a top-level package of the checkout
    sys.path.insert(0, str(REPO_ROOT))

RUN_TIMEOUT = 45.0
TOTAL = 8 << 20
SENDER_ENDS_WITHIN = 5.0  # seconds after the receiver's last acknowledgement


@pytest.mark.slow
@pytest.mark.interop
class MixedPairTests(RealServersMixin, unittest.TestCase):
    """One transfer per test, through the fault proxy (see the module docstring)."""

    timeout = RUN_TIMEOUT + 30

    async def transfer(self, cell: Cell) -> None:
        outcome = await run_mixed(
            self.reactor,
            self.mailbox.url,
            self.transit_relay.port,
            cell,
            total=TOTAL,
            timeout=RUN_TIMEOUT,
            seed=f"mixed-{self.id()}",
        )
        self.assertEqual(outcome.outcome, "ok", outcome.problems)
        self.assertIsNotNone(outcome.sender_lag)
        self.assertLessEqual(outcome.sender_lag, SENDER_ENDS_WITHIN)
        expected_role = "follower" if cell.leader == "stock" else "leader"
        self.assertEqual(outcome.txdilation_role, expected_role)

    def run_cell(self, *args: str) -> Any:
        return defer.ensureDeferred(self.transfer(Cell(*args)))

    def test_stock_leader_cut_in_its_first_handshake(self) -> None:
        """Stock sends, stock leads, every connection cut in its handshake for 3 s: the
        txdilation Follower gets the stock Leader to try again (issue 33's stall)."""
        return self.run_cell("stock", "stock", "handshake")

    def test_stock_leader_receiver_leaves_at_the_close(self) -> None:
        """txdilation sends to a stock Leader, the link cut as the receiver answers our CLOSE
        and leaves: the sender ends in seconds (issue 33: the 600 s peer timeout)."""
        return self.run_cell("txdilation", "stock", "close")

    def test_txdilation_leads_a_stock_sender_through_cuts(self) -> None:
        """Stock sends, txdilation leads (nobody forced a side), cuts every 250 ms."""
        return self.run_cell("stock", "txdilation", "all")

    def test_txdilation_leads_to_a_stock_receiver_cut_in_the_handshake(self) -> None:
        """txdilation sends and leads, every first handshake cut: it starts generations."""
        return self.run_cell("txdilation", "txdilation", "handshake")

    def test_txdilation_sender_leads_stock_receiver_leaving(self) -> None:
        """txdilation sends and leads, the cut at the stock receiver's close."""
        return self.run_cell("txdilation", "txdilation", "close")

    def test_stock_sender_leads_mid_stream_direct(self) -> None:
        """Direct path (the proxy in front of the txdilation Follower's listener): stock
        sends and leads, established links cut every 250 ms."""
        return self.run_cell("stock", "stock", "stream", "direct")

    def test_stock_leader_direct_cut_in_its_first_handshake(self) -> None:
        """Direct path, stock receiver leading, the first handshakes cut: the Follower's
        hints again make the stock Leader dial its listener again."""
        return self.run_cell("txdilation", "stock", "handshake", "direct")


class TableTests(unittest.SynchronousTestCase):
    """benchmarks/mixed_pairs.py's table: what counts as a failure, and who led."""

    def test_failures_roles_and_lags(self) -> None:
        """A stall and an unconfirmed run both count as failed, each in its column; the
        worst sender lag is over the runs that had one; roles are counted where nobody
        forced a side, and the make_side comparison is given as a share."""
        from benchmarks.mixed_pairs import table

        cell = {"sender": "txdilation", "leader": "txdilation", "moment": "close", "path": "relay"}

        def run(outcome: str, lag: float | None, role: str) -> dict[str, Any]:
            return {
                "kind": "run",
                "load": 0,
                "cell": cell,
                "outcome": outcome,
                "seconds": 3.0,
                "sender_lag": lag,
                "txdilation_role": role,
            }

        records = [
            run("ok", 0.5, "leader"),
            run("ok", 2.5, "leader"),
            run("stall", None, "follower"),
            run("unconfirmed", None, "leader"),
            {"kind": "roles", "choices": 1000, "txdilation_leads": 999},
        ]
        text = table(records)
        self.assertIn(
            "| txdilation -> stock | not forced | close | 0 | relay | 4 | 3 | 2 | 1 | 1 | 0 | "
            "2.50 | 3.0 |",
            text,
        )
        self.assertIn("txdilation leads 999 of 1000 (99.9%)", text)
        self.assertIn("follower: 1, leader: 3", text)
