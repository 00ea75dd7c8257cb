"""Interop matrix: txdilation against stock magic-wormhole 0.24 and against itself, each peer
in its own process through the real mailbox server and transit relay, in both roles, direct
and relay-only (the scenarios are in tests/test_stock_interop_harness.py)."""

from __future__ import annotations

from twisted.trial import unittest

from tests.harness import RealServersMixin
from tests.test_stock_interop_harness import InteropScenariosMixin


class StockLeftTxdilationRight(InteropScenariosMixin, RealServersMixin, unittest.TestCase):
    """Left peer stock, right peer txdilation (roles are set per scenario with --side)."""

    left_impl = "stock"
    right_impl = "txdilation"


class TxdilationLeftStockRight(InteropScenariosMixin, RealServersMixin, unittest.TestCase):
    """Left peer txdilation, right peer stock."""

    left_impl = "txdilation"
    right_impl = "stock"


class TxdilationBothSides(InteropScenariosMixin, RealServersMixin, unittest.TestCase):
    """txdilation on both sides."""

    left_impl = "txdilation"
    right_impl = "txdilation"
