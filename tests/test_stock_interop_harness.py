"""
Interop scenarios between two peer processes through the real mailbox server and transit relay.

Layer: interop tests (tests/support/peer.py peers, tests/support/harness.py servers). Today both
peers run STOCK magic-wormhole, which proves the harness; ``InteropScenariosMixin`` is written so
the same scenarios run with txdilation on either side by subclassing with other ``left_impl`` /
``right_impl`` values (and, for behaviour txdilation fixes, other ``EXPECTED_CLOSE_DELIVERS``).

Roles are forced with ``--side``: the higher dilation side is the Leader. Every payload is
generated from a seed and checked by SHA-256 inside the peers; the tests check the counts, the
digests, the path actually used (direct or relay, from the dilation status) and the roles.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from twisted.internet import defer
from twisted.trial import unittest

from tests.support.harness import PeerResult, RealServersMixin, run_peer_pair
from tests.support.peer_scenarios import SETTLE_SECONDS, payload

LEADER = "f" * 16  # the higher side leads
FOLLOWER = "0" * 16
SIZES = [1, 1000, 65519, 65520, 5 << 20]  # around the 65519-byte Noise split, up to 5 MiB
PAIR_TIMEOUT = 25.0


def _csv(values: list[Any]) -> str:
    return ",".join(str(v) for v in values)


def _first_connection(peer: PeerResult) -> str:
    """The hint description of the first connection the peer's dilation status reported."""
    for e in peer.events:
        if e.get("event") == "status" and e.get("peer") == "ConnectedPeer":
            return str(e["hint_description"])
    raise AssertionError(f"no ConnectedPeer status\n{peer.tail()}")


class InteropScenariosMixin:
    """
    The interop scenarios, for a trial TestCase that also uses ``RealServersMixin``.

    ``left_impl`` / ``right_impl`` choose each peer's implementation; the left peer allocates
    the code. ``EXPECTED_CLOSE_DELIVERS`` says, per implementation, whether ``w.close()``
    closes the subchannels still open (``connectionLost`` delivered to their protocols).
    """

    left_impl: ClassVar[str] = "stock"
    right_impl: ClassVar[str] = "stock"
    #: txdilation's peers run with its default semantics, stock's: no connectionLost at close
    #: (TWISTED's, which delivers it, is pinned by tests/test_semantics.py)
    EXPECTED_CLOSE_DELIVERS: ClassVar[dict[str, bool]] = {"stock": False, "txdilation": False}
    timeout = 2 * PAIR_TIMEOUT

    mailbox: Any
    transit_relay: Any
    reactor: Any

    async def pair(
        self, left: list[str], right: list[str], *, left_side: str, right_side: str
    ) -> tuple[PeerResult, PeerResult]:
        """Run the pair with this class's implementations and sides; checks the sides took."""
        results = await run_peer_pair(
            self.reactor,
            self.mailbox.url,
            ["--impl", self.left_impl, "--side", left_side, *left],
            ["--impl", self.right_impl, "--side", right_side, *right],
            PAIR_TIMEOUT,
        )
        for peer, side in zip(results, (left_side, right_side), strict=True):
            self.assertEqual(peer.event("side"), {"event": "side", "side": side}, peer.tail())
            self.assertIsNotNone(peer.event("dilated"), peer.tail())
            self.assertIsNotNone(peer.event("closed"), peer.tail())
        return results

    def relay_args(self) -> list[str]:
        """Peer arguments for relay-only dilation: no listener, the real relay's hint."""
        return ["--no-listen", "--relay", self.transit_relay.hint]

    def assert_direct(self, left: PeerResult, right: PeerResult) -> None:
        """One loopback TCP connection, seen outbound from one end and inbound from the other;
        between two txdilation peers, which dial from their listening port (hole punching),
        the dials may also cross as a TCP simultaneous open: one connection both ends dialed."""
        descriptions = sorted(d[:16] for d in (_first_connection(left), _first_connection(right)))
        expected = [["->tcp:127.0.0.1:", "<-tcp:127.0.0.1:"]]
        if self.left_impl == self.right_impl == "txdilation":
            expected.append(["->tcp:127.0.0.1:", "->tcp:127.0.0.1:"])
        self.assertIn(descriptions, expected)

    def assert_relayed(self, left: PeerResult, right: PeerResult) -> None:
        """Both ends connected outbound to the transit relay, and only to it."""
        expected = f"->relay:{self.transit_relay.hint}"
        self.assertEqual([_first_connection(left), _first_connection(right)], [expected] * 2)

    def assert_echoed(self, client: dict[str, Any], server: dict[str, Any], count: int) -> None:
        """Every message came back whole, one dataReceived per write, on every subchannel."""
        self.assertEqual(client["opened"], count)
        self.assertEqual(client["messages"], count * len(SIZES))
        self.assertEqual(client["bytes"], count * sum(SIZES))
        self.assertEqual(client["max_chunks_per_message"], 1)
        self.assertEqual(server["served"], count)
        self.assertEqual(
            (server["messages"], server["bytes"]), (count * len(SIZES), count * sum(SIZES))
        )

    async def echo(
        self, *, server_side: str, client_side: str, extra: list[str]
    ) -> tuple[PeerResult, PeerResult]:
        """echo-server (left) and echo-client (right): 3 subchannels, every SIZES message."""
        common = ["--count", "3", "--sizes", _csv(SIZES), *extra]
        left, right = await self.pair(
            ["--scenario", "echo-server", *common],
            ["--scenario", "echo-client", *common],
            left_side=server_side,
            right_side=client_side,
        )
        self.assert_echoed(right.result, left.result, 3)
        return left, right

    @defer.inlineCallbacks
    def test_echo_direct_server_leads(self) -> Any:
        """Direct: 3 subchannels, 1 B to 5 MiB each way, Follower opens, Leader echoes."""
        left, right = yield defer.ensureDeferred(
            self.echo(server_side=LEADER, client_side=FOLLOWER, extra=[])
        )
        self.assert_direct(left, right)

    @defer.inlineCallbacks
    def test_echo_direct_client_leads_half_close_two_names(self) -> Any:
        """Direct, roles swapped: Leader opens on two subprotocol names and half-closes."""
        extra = ["--half-close", "--subprotocols", "echo,chat"]
        left, right = yield defer.ensureDeferred(
            self.echo(server_side=FOLLOWER, client_side=LEADER, extra=extra)
        )
        self.assertTrue(right.result["half_close"])
        self.assert_direct(left, right)

    @defer.inlineCallbacks
    def test_echo_relay_only_server_leads(self) -> Any:
        """Relay only (no_listen on both sides): the echo scenario through the real relay."""
        left, right = yield defer.ensureDeferred(
            self.echo(server_side=LEADER, client_side=FOLLOWER, extra=self.relay_args())
        )
        self.assert_relayed(left, right)

    @defer.inlineCallbacks
    def test_echo_relay_only_client_leads_half_close(self) -> Any:
        """Relay only, roles swapped, half-closing client."""
        extra = [*self.relay_args(), "--half-close"]
        left, right = yield defer.ensureDeferred(
            self.echo(server_side=FOLLOWER, client_side=LEADER, extra=extra)
        )
        self.assert_relayed(left, right)

    @defer.inlineCallbacks
    def test_both_sides_open_subchannels(self) -> Any:
        """Both peers listen and open 2 subchannels each at the same time."""
        args = ["--scenario", "echo-both", "--count", "2", "--sizes", _csv(SIZES)]
        left, right = yield defer.ensureDeferred(
            self.pair(args, args, left_side=LEADER, right_side=FOLLOWER)
        )
        for peer, other in ((left, right), (right, left)):
            self.assert_echoed(peer.result["client"], other.result["server"], 2)

    @defer.inlineCallbacks
    def test_bulk_stream_follower_to_leader(self) -> Any:
        """8 MiB through a push producer arrives whole: both digests equal the expected one."""
        total, chunk = 8 << 20, 65536
        args = ["--total", str(total), "--chunk", str(chunk), "--seed", "bulk"]
        left, right = yield defer.ensureDeferred(
            self.pair(
                ["--scenario", "bulk-recv", *args],
                ["--scenario", "bulk-send", *args],
                left_side=LEADER,
                right_side=FOLLOWER,
            )
        )
        expected = hashlib.sha256()
        for index in range(total // chunk):
            expected.update(payload("bulk", index, chunk))
        self.assertEqual(right.result["sha256"], expected.hexdigest())
        self.assertEqual(left.result["sha256"], expected.hexdigest())
        self.assertEqual((left.result["bytes"], left.result["subchannels"]), (total, 1))

    @defer.inlineCallbacks
    def test_close_with_subchannels_open(self) -> Any:
        """
        Each side closes its wormhole with a subchannel open, the Follower first. Whether the
        open subchannel's protocol then gets connectionLost is pinned per implementation
        (stock: never, a stock defect txdilation fixes only with TWISTED semantics; these
        peers use the default, stock's). A first closer that closes its
        subchannels may get its CLOSE to the second peer before the link goes (a race), so
        the second peer may already have seen connectionLost before its own close.
        """
        left, right = yield defer.ensureDeferred(
            self.pair(
                ["--scenario", "close-first", "--sizes", "100"],
                ["--scenario", "close-second"],
                left_side=FOLLOWER,
                right_side=LEADER,
            )
        )
        closes_first = self.EXPECTED_CLOSE_DELIVERS[self.left_impl]
        closes_second = self.EXPECTED_CLOSE_DELIVERS[self.right_impl]
        self.assertEqual(left.result["echoed"], 100)
        self.assertEqual((right.result["opened"], right.result["bytes"]), (1, 100))
        self.assertEqual(left.result["connection_lost_before_close"], 0)
        self.assertEqual(left.result["connection_lost_after_close"], int(closes_first))
        seen_before = right.result["connection_lost_before_close"]
        if not closes_first:  # nothing was closed on the wire before the second close
            self.assertEqual(seen_before, 0)
        self.assertEqual(
            right.result["connection_lost_after_close"],
            int(closes_second or seen_before == 1),
            f"{self.right_impl} after {SETTLE_SECONDS} s",
        )


class StockStockInteropTests(InteropScenariosMixin, RealServersMixin, unittest.TestCase):
    """The scenarios with stock magic-wormhole on both sides (proves the harness)."""


class OldPeerTests(RealServersMixin, unittest.TestCase):
    """A dilating peer (``dilating_impl``) against a stock peer created without dilation."""

    dilating_impl: ClassVar[str] = "stock"
    timeout = 2 * PAIR_TIMEOUT

    @defer.inlineCallbacks
    def test_old_peer_cannot_dilate(self) -> Any:
        """when_dilated() fails with OldPeerCannotDilateError; the other side offered none."""
        left, right = yield defer.ensureDeferred(
            run_peer_pair(
                self.reactor,
                self.mailbox.url,
                ["--impl", self.dilating_impl, "--scenario", "expect-old-peer"],
                ["--impl", "stock", "--scenario", "no-dilation"],
                PAIR_TIMEOUT,
            )
        )
        self.assertEqual(left.result, {"when_dilated": "OldPeerCannotDilateError"})
        self.assertEqual(right.result, {"peer_can_dilate": []})
