"""
Durability under faults: two peer processes (tests/support/peer.py, stock 0.24 or txdilation)
through the real mailbox server and transit relay, with a fault-injection proxy
(tests/support/faults.py) in front of the transit relay (relay variant: both peers ``--no-listen
--relay PROXY``) or in front of a txdilation peer's listener (direct variant: it listens on a fixed
port and advertises the proxy's port, the other peer ``--no-listen``), in three pairings:
txdilation Leader with a stock Follower, stock Leader with a txdilation Follower, and
txdilation on both sides. Roles are forced with ``--side``.

Scenarios: transfers in both directions at once with the link cut every 250 ms (SHA-256 of
each stream checked against the seed); subchannels opened, written and closed while the link
is down; a black-holed link (nothing forwarded, nothing closed) left for a new generation
within 2 x ping_interval; the mailbox server restarted mid-transfer while the link is cut; and
the peer closing its wormhole (our side reaches StoppedPeer). The 256 MiB transfers are in
``CutTransferSlowTests``.

Each test records its figures (tests/support/figures.py) when ``TXDILATION_FIGURES`` is set; the
table in docs/reliability.md is rendered from them (tests/support/render_figures.py).

What stock cannot do is part of the expectations, not papered over: a stock Leader never
retries a generation whose connections were cut during their handshake, so against a stock
Leader the proxy only cuts connections that are past it: that have carried more bytes each way
than any handshake does (``HANDSHAKE_BYTES``; an age would be a race: a connection to the relay
waits there for the other peer's, and a loaded machine is slow); a stock Leader only notices a
dead link by its own pings.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.trial import unittest

from tests.support import figures
from tests.support.faults import Every, FaultProxy, free_port, start_fault_proxy
from tests.support.harness import PeerResult, RealServersMixin, run_peer_pair, start_mailbox_server
from tests.support.peer_scenarios import collected_size, payload, stream_seed
from tests.support.waits import sleep

LEADER = "f" * 16  # the higher side leads
FOLLOWER = "0" * 16
CHUNK = 65536
CUT_INTERVAL = 0.25
# Against a stock Leader, cut only connections that carried more than this each way: more
# than the relay handshake (about 100 bytes), the prologue (48), both Noise handshake messages
# (52 each) and the KCM (21) add up to, so only links that carry records are cut.
HANDSHAKE_BYTES = 1024


def expected_stream(seed: str, total: int, chunk: int = CHUNK) -> str:
    """The SHA-256 of the stream a ``duplex`` peer sends with this seed."""
    digest = hashlib.sha256()
    index, remaining = 0, total
    while remaining > 0:
        piece = payload(seed, index, min(chunk, remaining))
        digest.update(piece)
        remaining -= len(piece)
        index += 1
    return digest.hexdigest()


def status_events(peer: PeerResult) -> list[dict[str, Any]]:
    return [e for e in peer.events if e.get("event") == "status"]


class Pairing:
    """Which implementation plays which role, and how the proxy is put between them."""

    def __init__(self, key: str, leader: str, follower: str) -> None:
        self.key = key
        self.leader = leader
        self.follower = follower

    @property
    def stock_leader(self) -> bool:
        return self.leader == "stock"

    @property
    def listener(self) -> str:
        """The role that listens behind the proxy in the direct variant (a txdilation one)."""
        return "leader" if self.leader == "txdilation" else "follower"


TXD_LEADS_STOCK = Pairing("txdilation-leads-stock", "txdilation", "stock")
STOCK_LEADS_TXD = Pairing("stock-leads-txdilation", "stock", "txdilation")
TXD_TXD = Pairing("txdilation-txdilation", "txdilation", "txdilation")


class FaultScenarios(RealServersMixin, unittest.TestCase):
    """Helpers shared by the scenario classes: the proxy, the peers' arguments, figures."""

    timeout = 120
    PAIR_TIMEOUT = 90.0

    async def proxy(self, target_port: int) -> FaultProxy:
        proxy = await start_fault_proxy(self.reactor, target_port, lifetime=self.timeout)
        self.addCleanup(proxy.stop)
        return proxy

    async def path(
        self, pairing: Pairing, variant: str, **extra: list[str]
    ) -> tuple[FaultProxy, list[str], list[str]]:
        """
        Put a proxy on the path of ``variant`` ("relay" or "direct").

        :returns: the proxy, the Leader's arguments and the Follower's (impl, side, path,
            plus ``extra["leader"]`` / ``extra["follower"]``).
        """
        roles = {"leader": ["--impl", pairing.leader, "--side", LEADER]}
        roles["follower"] = ["--impl", pairing.follower, "--side", FOLLOWER]
        if variant == "relay":
            proxy = await self.proxy(self.transit_relay.port)
            for args in roles.values():
                args += ["--no-listen", "--relay", proxy.hint]
        else:
            listen_port = free_port()
            proxy = await self.proxy(listen_port)
            for role, args in roles.items():
                if role == pairing.listener:
                    args += ["--listen-port", str(listen_port), "--hint-port", str(proxy.port)]
                else:
                    args += ["--no-listen"]
        for role, args in roles.items():
            args += extra.get(role, [])
        return proxy, roles["leader"], roles["follower"]

    async def pair(
        self, leader_args: list[str], follower_args: list[str], *, mailbox_url: str = ""
    ) -> tuple[PeerResult, PeerResult]:
        """Run the Leader (left, allocates the code) against the Follower (right)."""
        return await run_peer_pair(
            self.reactor,
            mailbox_url or self.mailbox.url,
            leader_args,
            follower_args,
            self.PAIR_TIMEOUT,
        )

    async def wait_for_traffic(self, proxy: FaultProxy, at_least: int = 1) -> None:
        """Until the proxy has forwarded ``at_least`` bytes each way (dilation is up)."""
        while min(proxy.stats.bytes_up, proxy.stats.bytes_down) < at_least:
            await sleep(0.02)

    def cutter(self, pairing: Pairing, proxy: FaultProxy, interval: float = CUT_INTERVAL) -> Every:
        """Cut the link every ``interval`` seconds until stopped (bounded by the test)."""
        carried = HANDSHAKE_BYTES if pairing.stock_leader else 0
        every = Every(
            self.reactor,
            interval,
            lambda: proxy.cut(carried=carried),
            duration=self.PAIR_TIMEOUT,
        )
        self.addCleanup(every.stop)
        return every

    def record(self, pairing: Pairing, proxy: FaultProxy | None = None, **values: float) -> None:
        if proxy is not None:
            values.setdefault("cuts_survived", proxy.stats.cuts)
            values.setdefault("connections_cut", proxy.stats.connections_cut)
        figures.record(self.id(), pairing.key, scenarios_run=1, **values)

    # --- scenarios ---

    async def cut_duplex(self, pairing: Pairing, variant: str, total: int) -> None:
        """Both peers send ``total`` bytes at once while the proxy cuts the link every 250 ms;
        each stream arrives whole and in order (SHA-256 against the seed)."""
        common = ["--scenario", "duplex", "--total", str(total), "--chunk", str(CHUNK)]
        seed = f"cuts-{pairing.key}-{variant}"
        common += ["--seed", seed]
        proxy, leader_args, follower_args = await self.path(
            pairing, variant, leader=common, follower=common
        )
        every = self.cutter(pairing, proxy)
        try:
            leader, follower = await self.pair(leader_args, follower_args)
        finally:
            every.stop()
        from_leader = expected_stream(stream_seed(seed, True), total)
        from_follower = expected_stream(stream_seed(seed, False), total)
        self.assertEqual(leader.result["sent_sha256"], from_leader)
        self.assertEqual(follower.result["received_sha256"], from_leader)
        self.assertEqual(follower.result["sent_sha256"], from_follower)
        self.assertEqual(leader.result["received_sha256"], from_follower)
        self.assertEqual(leader.result["subchannels"], 1)
        self.assertEqual(follower.result["subchannels"], 1)
        self.assertGreaterEqual(proxy.stats.cuts, 2, "the transfer outran the cuts")
        self.record(pairing, proxy, bytes_verified=2 * total)

    async def subchannels_while_down(self, pairing: Pairing, variant: str, opener: str) -> None:
        """The link goes down (connections cut, new ones held) for 3 s; meanwhile ``opener``
        opens, writes and closes 6 subchannels; after the link is back the other peer gets
        each one's bytes whole, in the order opened, and the closes complete."""
        count = 6
        seed = f"down-{pairing.key}"
        roles = {
            "leader": ["--scenario", "collect", "--count", str(count), "--seed", seed],
            "follower": ["--scenario", "collect", "--count", str(count), "--seed", seed],
        }
        roles[opener][1] = "open-while-down"
        proxy, leader_args, follower_args = await self.path(pairing, variant, **roles)
        run = defer.ensureDeferred(self.pair(leader_args, follower_args))
        await self.wait_for_traffic(proxy)
        await sleep(0.5)
        self.assertGreaterEqual(proxy.down(), 1)
        await sleep(3.0)
        proxy.up()
        leader, follower = await run
        opened, collected = (leader, follower) if opener == "leader" else (follower, leader)
        self.assertEqual(opened.result["opened"], count)
        self.assertNotEqual(opened.result["status_at_open"], "ConnectedPeer")
        self.assertNotEqual(opened.result["status_after_close"], "ConnectedPeer")
        sizes = [collected_size(i) for i in range(count)]
        want = [hashlib.sha256(payload(seed, i, sizes[i])).hexdigest() for i in range(count)]
        self.assertEqual(collected.result["digests"], want)
        self.assertEqual(collected.result["bytes"], sizes)
        self.record(pairing, proxy, bytes_verified=sum(sizes))

    async def black_hole(
        self,
        pairing: Pairing,
        variant: str,
        *,
        leader_interval: float = 1.0,
        follower_interval: float = 1.0,
    ) -> dict[str, float]:
        """Echo traffic flows; the proxy black-holes the link (stops forwarding, closes
        nothing); the side that notices first leaves it, a new generation starts and the
        echoes resume, all well before TCP would time out.

        :returns: seconds from the black hole until the first side noticed (``noticed``) and
            until the Leader started a new generation (``new_generation``).
        """
        common = ["--seed", f"hole-{pairing.key}", "--duration", "7", "--count", "1"]
        leader = ["--scenario", "echo-steady", "--ping-interval", str(leader_interval)]
        follower = ["--scenario", "echo-server", "--ping-interval", str(follower_interval)]
        proxy, leader_args, follower_args = await self.path(
            pairing, variant, leader=[*leader, *common], follower=[*follower, *common]
        )
        run = defer.ensureDeferred(self.pair(leader_args, follower_args))
        await self.wait_for_traffic(proxy, 8192)
        await sleep(1.0)
        holed_at = time.time()
        self.assertGreaterEqual(proxy.blackhole(), 1)
        leader, follower = await run
        noticed = min(
            e["t"]
            for peer in (leader, follower)
            for e in status_events(peer)
            if e["t"] > holed_at and e["peer"] != "ConnectedPeer"
        )
        generation_before = max(
            (e["generation"] for e in status_events(leader) if e["t"] <= holed_at), default=0
        )
        new_generation = min(
            e["t"]
            for e in status_events(leader)
            if e["t"] > holed_at and e["generation"] > generation_before
        )
        self.assertGreater(leader.result["exchanges"], 20)
        shortest = min(leader_interval, follower_interval)
        timings = {"noticed": noticed - holed_at, "new_generation": new_generation - holed_at}
        self.record(
            pairing,
            proxy,
            black_holes_survived=1,
            worst_dead_link_detection_intervals=round(timings["noticed"] / shortest, 3),
            bytes_verified=2 * 512 * leader.result["exchanges"],
        )
        return timings

    async def mailbox_restart(self, pairing: Pairing, variant: str) -> None:
        """A throttled transfer both ways; the mailbox server stops, the link is cut while it
        is down, the server restarts on the same port with the same database: the peers
        find each other again and both streams complete."""
        db = str(Path(tempfile.mkdtemp(prefix="txdilation-mailbox-")) / "channel.sqlite")
        mailbox = await start_mailbox_server(self.reactor, channel_db=db)
        self.addCleanup(lambda: mailbox_box[0].stop())
        mailbox_box = [mailbox]
        total = 12 << 20
        seed = f"restart-{pairing.key}"
        common = ["--scenario", "duplex", "--total", str(total), "--seed", seed]
        proxy, leader_args, follower_args = await self.path(
            pairing, variant, leader=common, follower=common
        )
        proxy.throttle(3_000_000)
        run = defer.ensureDeferred(self.pair(leader_args, follower_args, mailbox_url=mailbox.url))
        await self.wait_for_traffic(proxy, 2 << 20)
        await mailbox.stop()
        await sleep(0.3)
        self.assertGreaterEqual(proxy.cut(), 1)
        await sleep(2.0)
        mailbox_box[0] = await start_mailbox_server(self.reactor, channel_db=db, port=mailbox.port)
        leader, follower = await run
        self.assertEqual(
            follower.result["received_sha256"], expected_stream(stream_seed(seed, True), total)
        )
        self.assertEqual(
            leader.result["received_sha256"], expected_stream(stream_seed(seed, False), total)
        )
        self.record(pairing, proxy, mailbox_restarts_survived=1, bytes_verified=2 * total)

    async def peer_closes(self, pairing: Pairing, closer: str) -> float:
        """The ``closer`` closes its wormhole after an echo; the other (txdilation) peer keeps
        its own open and must reach StoppedPeer.

        :returns: seconds from losing the link to StoppedPeer.
        """
        scenarios = {"leader": "await-peer-close", "follower": "await-peer-close"}
        scenarios[closer] = "close-first"
        watcher = "follower" if closer == "leader" else "leader"
        impl = {"leader": pairing.leader, "follower": pairing.follower}
        self.assertEqual(impl[watcher], "txdilation")
        extra = {role: ["--scenario", scenarios[role]] for role in scenarios}
        # the watcher's scenario counts its subchannel's connectionLost: with stock's semantics
        # (the default) a peer's close delivers none, so it runs with Twisted's
        extra[watcher] += ["--peer-timeout", "3", "--semantics", "twisted"]
        _proxy, leader_args, follower_args = await self.path(pairing, "relay", **extra)
        leader, follower = await self.pair(leader_args, follower_args)
        watched = follower if watcher == "follower" else leader
        self.assertEqual(watched.result["subchannels_ended"], 1)
        self.assertEqual(watched.result["echoed"], 1)
        statuses = [e["peer"] for e in status_events(watched)]
        self.assertEqual(statuses[-1], "StoppedPeer")
        self.record(pairing)
        return float(watched.result["seconds_to_stopped"])


class CutTransferTests(FaultScenarios):
    """Both directions at once, the link cut every 250 ms (64 MiB each way)."""

    TOTAL = 64 << 20

    @defer.inlineCallbacks
    def test_txdilation_leads_stock_relay(self) -> Any:
        """txdilation Leader, stock Follower, through the relay: every connection, in its
        handshake or not, is reset every 250 ms; both streams arrive intact."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_LEADS_STOCK, "relay", self.TOTAL))

    @defer.inlineCallbacks
    def test_stock_leads_txdilation_direct(self) -> Any:
        """stock Leader, txdilation Follower listening behind the proxy: connections past
        their handshake are reset every 250 ms; both streams arrive intact."""
        yield defer.ensureDeferred(self.cut_duplex(STOCK_LEADS_TXD, "direct", self.TOTAL))

    @defer.inlineCallbacks
    def test_txdilation_both_direct(self) -> Any:
        """txdilation on both sides, direct, the Leader listening behind the proxy."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_TXD, "direct", self.TOTAL))


@pytest.mark.slow
class CutTransferSlowTests(FaultScenarios):
    """256 MiB each way at once, the link cut every 250 ms: each pairing direct and relay."""

    TOTAL = 256 << 20
    timeout = 600
    PAIR_TIMEOUT = 560.0

    @defer.inlineCallbacks
    def test_txdilation_leads_stock_direct(self) -> Any:
        """txdilation Leader listening behind the proxy, stock Follower: 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_LEADS_STOCK, "direct", self.TOTAL))

    @defer.inlineCallbacks
    def test_stock_leads_txdilation_relay(self) -> Any:
        """stock Leader, txdilation Follower, through the relay: 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(STOCK_LEADS_TXD, "relay", self.TOTAL))

    @defer.inlineCallbacks
    def test_txdilation_both_relay(self) -> Any:
        """txdilation on both sides through the relay: 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_TXD, "relay", self.TOTAL))

    @defer.inlineCallbacks
    def test_txdilation_leads_stock_relay(self) -> Any:
        """txdilation Leader, stock Follower, through the relay (every connection cut, in
        its handshake or not): 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_LEADS_STOCK, "relay", self.TOTAL))

    @defer.inlineCallbacks
    def test_stock_leads_txdilation_direct(self) -> Any:
        """stock Leader, txdilation Follower listening behind the proxy: 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(STOCK_LEADS_TXD, "direct", self.TOTAL))

    @defer.inlineCallbacks
    def test_txdilation_both_direct(self) -> Any:
        """txdilation on both sides, the Leader listening behind the proxy: 2 x 256 MiB."""
        yield defer.ensureDeferred(self.cut_duplex(TXD_TXD, "direct", self.TOTAL))


class SubchannelsWhileDownTests(FaultScenarios):
    """Subchannels opened, written and closed while the link is down."""

    @defer.inlineCallbacks
    def test_txdilation_leader_opens_stock_collects_relay(self) -> Any:
        """txdilation Leader opens while down; a stock Follower receives them, through the
        relay."""
        yield defer.ensureDeferred(self.subchannels_while_down(TXD_LEADS_STOCK, "relay", "leader"))

    @defer.inlineCallbacks
    def test_stock_leader_opens_txdilation_collects_direct(self) -> Any:
        """A stock Leader opens while down; the txdilation Follower (listening behind the
        proxy) receives them in order once the link is back."""
        yield defer.ensureDeferred(self.subchannels_while_down(STOCK_LEADS_TXD, "direct", "leader"))

    @defer.inlineCallbacks
    def test_txdilation_both_follower_opens_relay(self) -> Any:
        """txdilation on both sides: the Follower opens while down, through the relay."""
        yield defer.ensureDeferred(self.subchannels_while_down(TXD_TXD, "relay", "follower"))


SLACK = 0.5  # seconds allowed for process scheduling on a loaded machine


class BlackHoleTests(FaultScenarios):
    """A link that silently stops (nothing forwarded, nothing closed), ping_interval 1 s."""

    @defer.inlineCallbacks
    def test_txdilation_leader_notices_relay(self) -> Any:
        """txdilation Leader, stock Follower (which never pings): the Leader notices within
        2 x ping_interval and starts a new generation at once; the echoes resume."""
        timings = yield defer.ensureDeferred(self.black_hole(TXD_LEADS_STOCK, "relay"))
        self.assertLessEqual(timings["noticed"], 2.0 + SLACK)
        self.assertLessEqual(timings["new_generation"], 2.0 + SLACK)

    @defer.inlineCallbacks
    def test_txdilation_follower_notices_direct(self) -> Any:
        """stock Leader, txdilation Follower: the Follower notices within 2 x ping_interval
        (a stock Follower never would); a new generation starts once the stock Leader's own
        pings notice (stock cannot be told sooner), still far from TCP's timeout."""
        timings = yield defer.ensureDeferred(self.black_hole(STOCK_LEADS_TXD, "direct"))
        self.assertLessEqual(timings["noticed"], 2.0 + SLACK)
        self.assertLessEqual(timings["new_generation"], 4.0 + SLACK)

    @defer.inlineCallbacks
    def test_txdilation_follower_with_shorter_interval_direct(self) -> Any:
        """txdilation both sides, Leader ping_interval 30 s, Follower 1 s: the Follower
        notices first and its 'link-lost' makes the Leader start a new generation within
        2 x the Follower's interval (the Leader alone would take 45 s or more)."""
        timings = yield defer.ensureDeferred(
            self.black_hole(TXD_TXD, "direct", leader_interval=30.0, follower_interval=1.0)
        )
        self.assertLessEqual(timings["noticed"], 2.0 + SLACK)
        self.assertLessEqual(timings["new_generation"], 2.0 + SLACK)


class MailboxRestartTests(FaultScenarios):
    """The mailbox server goes away mid-transfer, the link is cut meanwhile, it comes back."""

    @defer.inlineCallbacks
    def test_txdilation_leads_stock_relay(self) -> Any:
        """txdilation Leader, stock Follower, relay: both 12 MiB streams complete."""
        yield defer.ensureDeferred(self.mailbox_restart(TXD_LEADS_STOCK, "relay"))

    @defer.inlineCallbacks
    def test_stock_leads_txdilation_direct(self) -> Any:
        """stock Leader, txdilation Follower, direct: both 12 MiB streams complete."""
        yield defer.ensureDeferred(self.mailbox_restart(STOCK_LEADS_TXD, "direct"))

    @defer.inlineCallbacks
    def test_txdilation_both_relay(self) -> Any:
        """txdilation on both sides, relay: both 12 MiB streams complete."""
        yield defer.ensureDeferred(self.mailbox_restart(TXD_TXD, "relay"))


class PeerCloseTests(FaultScenarios):
    """The peer closes its wormhole: our side (txdilation) reaches StoppedPeer instead of
    reconnecting forever (stock defect 12)."""

    @defer.inlineCallbacks
    def test_stock_follower_closes(self) -> Any:
        """A stock Follower closes without a word: our Leader gives it up after the peer
        timeout (3 s here) of silence, not sooner and not never."""
        seconds = yield defer.ensureDeferred(self.peer_closes(TXD_LEADS_STOCK, "follower"))
        self.assertGreaterEqual(seconds, 2.5)
        self.assertLessEqual(seconds, 3.0 + 2 * SLACK)

    @defer.inlineCallbacks
    def test_stock_leader_closes(self) -> Any:
        """A stock Leader closes: our Follower gives it up after the peer timeout."""
        seconds = yield defer.ensureDeferred(self.peer_closes(STOCK_LEADS_TXD, "leader"))
        self.assertGreaterEqual(seconds, 2.5)
        self.assertLessEqual(seconds, 3.0 + 2 * SLACK)

    @defer.inlineCallbacks
    def test_txdilation_leader_closes(self) -> Any:
        """A txdilation Leader announces its close: our Follower stops as soon as the link
        goes (well before the 3 s peer timeout)."""
        seconds = yield defer.ensureDeferred(self.peer_closes(TXD_TXD, "leader"))
        self.assertLess(seconds, 1.5)

    @defer.inlineCallbacks
    def test_txdilation_follower_closes(self) -> Any:
        """A txdilation Follower announces its close: our Leader stops without reconnecting."""
        seconds = yield defer.ensureDeferred(self.peer_closes(TXD_TXD, "follower"))
        self.assertLess(seconds, 1.5)


class CloseAtCutTests(FaultScenarios):
    """The receiver closes its wormhole as its link is cut, right after answering the sender's
    subchannel CLOSE (``--cut-at-close``: the answer dies in the transport's buffer). What each
    implementation does then decides whether the sender ever hears the end (issue 21)."""

    SIDES = {"leader": ["--side", LEADER], "follower": ["--side", FOLLOWER]}

    async def transfer(
        self, sender: str, receiver: str, *extra: str
    ) -> tuple[PeerResult, PeerResult]:
        common = ["--total", str(1 << 20), "--seed", "cut-at-close"]
        return await self.pair(
            ["--impl", sender, "--scenario", "bulk-send", *common, *self.SIDES["follower"], *extra],
            ["--impl", receiver, "--scenario", "bulk-recv", "--cut-at-close", *common,
             *self.SIDES["leader"]],
        )  # fmt: skip

    @defer.inlineCallbacks
    def test_txdilation_receiver_delivers_its_last_close(self) -> Any:
        """A txdilation receiver holds its close until the stock sender acknowledged its
        answering CLOSE, reconnecting to deliver it: the stock sender's subchannel ends and it
        finishes (before, the answer was dropped and the stock sender, which never gives up on
        a peer, waited for it for ever: 3 fault runs in 18)."""
        sender, receiver = yield defer.ensureDeferred(self.transfer("stock", "txdilation"))
        self.assertEqual(sender.result["bytes"], 1 << 20)
        self.assertEqual(receiver.result["bytes"], 1 << 20)

    @defer.inlineCallbacks
    def test_stock_receiver_loses_its_last_close(self) -> Any:
        """Stock's defect, shown: a stock receiver closes without its answering CLOSE (or its
        ACK) ever going out, and says nothing when it leaves. The txdilation sender cannot hear
        the end, so it does not wait on it for ever: after the peer timeout (3 s here) it
        presumes the peer gone (StoppedPeer) and, with Twisted's semantics, its subchannel ends
        (the sender finishes, later than the 3 s of silence)."""
        sender, receiver = yield defer.ensureDeferred(
            self.transfer("txdilation", "stock", "--peer-timeout", "3", "--semantics", "twisted")
        )
        self.assertEqual(receiver.result["bytes"], 1 << 20)
        self.assertEqual(status_events(sender)[-1]["peer"], "StoppedPeer")
        self.assertGreaterEqual(sender.result["seconds"], 3.0)
