"""Interop matrix: txdilation against stock magic-wormhole 0.24 and against itself, each peer
in its own process through the real mailbox server and transit relay, in both roles, direct
and relay-only (the scenarios are in tests/test_stock_interop_harness.py), plus transfers
during which the L2 connection is dropped again and again."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from twisted.internet import defer
from twisted.trial import unittest

import tests.test_stock_interop_harness as stock_harness
from tests.support.harness import PeerResult, RealServersMixin, run_peer_pair
from tests.support.peer_scenarios import payload
from tests.test_stock_interop_harness import (
    FOLLOWER,
    LEADER,
    PAIR_TIMEOUT,
    InteropScenariosMixin,
)

TOTAL, CHUNK, CUT_INTERVAL = 32 << 20, 65536, 0.05


def expected_digest(seed: str) -> str:
    digest = hashlib.sha256()
    for index in range(TOTAL // CHUNK):
        digest.update(payload(seed, index, CHUNK))
    return digest.hexdigest()


class ReconnectScenariosMixin:
    """A bulk transfer with the L2 connection dropped every few MiB by one side."""

    left_impl: ClassVar[str]
    right_impl: ClassVar[str]
    mailbox: Any
    transit_relay: Any
    reactor: Any
    timeout = 2 * PAIR_TIMEOUT

    async def cut_transfer(
        self, *, sender_side: str, cutter: str, relay: bool = False
    ) -> tuple[PeerResult, PeerResult]:
        seed = f"cut-{sender_side[0]}-{cutter}"
        common = ["--total", str(TOTAL), "--chunk", str(CHUNK), "--seed", seed]
        if relay:
            common += ["--no-listen", "--relay", self.transit_relay.hint]
        cut = ["--cut-interval", str(CUT_INTERVAL)]
        receiver_side = FOLLOWER if sender_side == LEADER else LEADER
        left, right = await run_peer_pair(
            self.reactor,
            self.mailbox.url,
            [
                "--impl",
                self.left_impl,
                "--side",
                receiver_side,
                "--scenario",
                "bulk-recv",
                "--linger",
                "1",
                *common,
                *(cut if cutter == "receiver" else []),
            ],
            [
                "--impl",
                self.right_impl,
                "--side",
                sender_side,
                "--scenario",
                "bulk-send",
                *common,
                *(cut if cutter == "sender" else []),
            ],
            PAIR_TIMEOUT,
        )
        want = expected_digest(seed)
        self.assertEqual(right.result["sha256"], want)  # type: ignore[attr-defined]
        self.assertEqual(left.result["sha256"], want)  # type: ignore[attr-defined]
        self.assertEqual(left.result["bytes"], TOTAL)  # type: ignore[attr-defined]
        cuts = (left if cutter == "receiver" else right).result["cuts"]
        self.assertGreaterEqual(cuts, 2)  # type: ignore[attr-defined]
        return left, right

    @defer.inlineCallbacks
    def test_leader_sends_leader_cuts(self) -> Any:
        """The Leader sends 32 MiB and drops the link every 50 ms: every byte arrives once,
        in order (SHA-256 of the stream), after several reconnections."""
        yield defer.ensureDeferred(self.cut_transfer(sender_side=LEADER, cutter="sender"))

    @defer.inlineCallbacks
    def test_leader_sends_follower_cuts(self) -> Any:
        """The Leader sends; the Follower (receiver) drops the link every 50 ms."""
        yield defer.ensureDeferred(self.cut_transfer(sender_side=LEADER, cutter="receiver"))

    @defer.inlineCallbacks
    def test_follower_sends_follower_cuts(self) -> Any:
        """The Follower sends and drops the link every 50 ms."""
        yield defer.ensureDeferred(self.cut_transfer(sender_side=FOLLOWER, cutter="sender"))

    @defer.inlineCallbacks
    def test_follower_sends_leader_cuts_relay_only(self) -> Any:
        """Relay only: the Follower sends, the Leader (receiver) drops the link every 50 ms;
        every reconnection goes through the real transit relay again."""
        yield defer.ensureDeferred(
            self.cut_transfer(sender_side=FOLLOWER, cutter="receiver", relay=True)
        )


class StockLeftTxdilationRight(
    ReconnectScenariosMixin, InteropScenariosMixin, RealServersMixin, unittest.TestCase
):
    """Left peer stock, right peer txdilation (roles are set per scenario with --side)."""

    left_impl = "stock"
    right_impl = "txdilation"


class TxdilationLeftStockRight(
    ReconnectScenariosMixin, InteropScenariosMixin, RealServersMixin, unittest.TestCase
):
    """Left peer txdilation, right peer stock."""

    left_impl = "txdilation"
    right_impl = "stock"


class TxdilationBothSides(
    ReconnectScenariosMixin, InteropScenariosMixin, RealServersMixin, unittest.TestCase
):
    """txdilation on both sides."""

    left_impl = "txdilation"
    right_impl = "txdilation"


class TxdilationOldPeerTests(stock_harness.OldPeerTests):
    """txdilation against a stock peer whose wormhole was created without dilation."""

    dilating_impl = "txdilation"
