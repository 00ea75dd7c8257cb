"""Bounded memory: the outbound backlog, a paused reader, pending OPENs, a 1 GiB transfer.

Pinned:

- with writers that honour IProducer/IConsumer, unacknowledged plus unsent outbound data stays
  under ``max_unacked_bytes`` (default 64 MiB, ``TXDILATION_MAX_UNACKED_BYTES``) plus one write,
  however long the link is down, and everything arrives once it is back;
- a receiver that pauses reading holds at most ``max_buffered_inbound_bytes`` plus one read
  before the whole connection stops reading; the link stays up meanwhile (liveness and ACKs do
  not depend on the reader), and everything arrives once it reads again;
- a single write larger than the largest record the peer accepts is refused at once;
- a peer that opens subchannels nobody listens on makes us hold at most
  ``max_pending_open_bytes``; the rest are answered with CLOSE;
- (slow) a 1 GiB transfer between two peer processes to a reader that first stalls, then reads
  slowly: the SHA-256 matches, the sender's backlog never exceeds the bound, and both
  processes' peak RSS (``VmHWM``) stays far below what was sent.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import TestCase
from zope.interface import implementer

from tests.support.harness import RealServersMixin, run_peer_pair
from tests.support.hostile import (
    LOWEST_SIDE,
    Mailbox,
    RogueMailbox,
    record_figures,
    rogue_follower_selected,
    use_environment,
)
from tests.support.waits import sleep, wait_until
from tests.test_stock_interop_harness import FOLLOWER, LEADER
from txdilation.durable.window import DEFAULT_IN_FLIGHT_FLOOR
from txdilation.link import connection as l2
from txdilation.settings import Limits
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.wire.limits import (
    DEFAULT_MAX_PENDING_OPEN_BYTES,
    DEFAULT_MAX_UNACKED_BYTES,
    RECORD_OVERHEAD,
)
from txdilation.wire.records import Ack, Close, Data, Open

MiB = 2**20
CHUNK = 65536
#: The most one TCP read can bring (the L2 layer may raise Twisted's 64 KiB per recv).
ONE_READ = max(getattr(l2, "TCP_BUFFER_SIZE", 0), 65536)


@implementer(IPushProducer)
class Writer(Protocol):
    """Writes ``total`` bytes in CHUNK writes, honouring pauseProducing (a well-behaved app)."""

    def __init__(self, reactor: Any, total: int) -> None:
        self._reactor = reactor
        self.remaining = total
        self.paused = False
        self._scheduled = False
        self.digest = hashlib.sha256()
        self.written = 0

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.registerProducer(self, True)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self.paused and self.remaining > 0:
            self._scheduled = True
            self._reactor.callLater(0, self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        for _ in range(8):
            if self.paused or self.remaining <= 0:
                break
            piece = self.written.to_bytes(8, "big") * (CHUNK // 8)
            piece = piece[: min(CHUNK, self.remaining)]
            self.remaining -= len(piece)
            self.written += len(piece)
            self.digest.update(piece)
            self.transport.write(piece)  # type: ignore[union-attr]
        self._schedule()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._schedule()

    def stopProducing(self) -> None:
        self.paused = True
        self.remaining = 0


class Reader(Protocol):
    """Hashes what arrives; ``pause()``/``resume()`` throttle its subchannel."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.bytes = 0
        self.first: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.digest.update(data)
        self.bytes += len(data)
        if not self.first.called:
            self.first.callback(None)


def multiplexer_of(api: Any) -> Multiplexer:
    """The multiplexer of ``api``'s dilation (through stock's ``_manager`` seam)."""
    mux: Multiplexer = api._manager.multiplexer
    return mux


def queued_bytes(api: Any) -> int:
    """What ``api``'s side holds until the peer acknowledges it (records with their headers)."""
    return multiplexer_of(api).traffic_stats().queue_bytes


def inbound_of(api: Any) -> Any:
    return multiplexer_of(api)._inbound


class BoundedQueueTests(TestCase):
    """Two in-process Dilators over real TCP on 127.0.0.1."""

    timeout = 60

    async def pair(self, **limits: str) -> tuple[Mailbox, list[Any]]:
        use_environment(self, **limits)
        mailbox = Mailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        apis = mailbox.dilate(ping_interval=0.5)
        for api in apis:
            await api.when_dilated()
        return mailbox, apis

    async def bulk(self, apis: list[Any], total: int) -> tuple[Reader, Writer]:
        """A Reader listening on "bulk" at apis[1] and a Writer of ``total`` bytes connected
        to it from apis[0]."""
        reader = Reader()
        await apis[1].listener_for("bulk").listen(Factory.forProtocol(lambda: reader))
        writer: Writer = (
            await apis[0]
            .connector_for("bulk")
            .connect(Factory.forProtocol(lambda: Writer(self.reactor, total)))
        )
        return reader, writer

    def test_default_bound(self) -> None:
        """The default bound on unacknowledged outbound data is 64 MiB."""
        self.assertEqual(DEFAULT_MAX_UNACKED_BYTES, 64 * MiB)
        self.assertEqual(Limits().max_unacked_bytes, 64 * MiB)

    def test_link_down_backlog_is_bounded(self) -> Any:
        """With the link down for 1.5 s (new generations held back), a writer that honours
        pauses is paused at once and writes nothing more: the backlog stays within the
        configured 2 MiB plus one write, and once the link is back all 16 MiB arrive intact."""
        return ensureDeferred(self._link_down())

    async def _link_down(self) -> None:
        bound = 2 * MiB
        mailbox, apis = await self.pair(TXDILATION_MAX_UNACKED_BYTES=str(bound))
        reader, writer = await self.bulk(apis, 16 * MiB)
        await reader.first
        held: list[Any] = []
        for d in mailbox.dilators:
            d._manager._debug_stall_connector = held.append
        apis[0]._manager.connection.abort()
        await wait_until(lambda: len(held) == 2, 5, "both new generations held back")
        written_when_down = writer.written
        peak = 0
        for _ in range(150):
            peak = max(peak, queued_bytes(apis[0]))
            await sleep(0.01)
        self.assertTrue(writer.paused)
        self.assertEqual(writer.written, written_when_down)
        self.assertLess(writer.written, 16 * MiB)
        self.assertLessEqual(peak, bound + CHUNK + RECORD_OVERHEAD)
        for d in mailbox.dilators:
            d._manager._debug_stall_connector = False
        for connector in held:
            connector.start()
        await wait_until(lambda: reader.bytes == 16 * MiB, 30, "all data after the link is back")
        self.assertEqual(reader.digest.digest(), writer.digest.digest())

    @property
    def reactor(self) -> Any:
        from twisted.internet import reactor

        return reactor

    def test_paused_reader_holds_a_bounded_amount(self) -> Any:
        """A reader that pauses its subchannel for 3 s (6 ping intervals) while 32 MiB are
        written to it: it holds at most the configured 1 MiB plus one TCP read, the sender's
        backlog stays within its 4 MiB bound (in fact within its in-flight limit, 2 MiB on
        loopback, which pauses the writer first), the connection is not replaced (liveness
        does not depend on the reader), and after resumeProducing everything arrives intact."""
        return ensureDeferred(self._paused_reader())

    async def _paused_reader(self) -> None:
        held_bound, sent_bound = MiB, 4 * MiB
        _mailbox, apis = await self.pair(
            TXDILATION_MAX_BUFFERED_INBOUND_BYTES=str(held_bound),
            TXDILATION_MAX_UNACKED_BYTES=str(sent_bound),
        )
        reader, writer = await self.bulk(apis, 32 * MiB)
        await reader.first
        assert reader.transport is not None
        reader.transport.pauseProducing()
        connections = [api._manager.connection for api in apis]
        held_peak = sent_peak = 0
        for _ in range(300):
            held_peak = max(held_peak, inbound_of(apis[1]).buffered_bytes)
            sent_peak = max(sent_peak, queued_bytes(apis[0]))
            await sleep(0.01)
        self.assertTrue(writer.paused)
        self.assertLessEqual(held_peak, held_bound + ONE_READ + CHUNK)
        self.assertGreater(held_peak, held_bound // 2)
        self.assertLessEqual(sent_peak, sent_bound + CHUNK + RECORD_OVERHEAD)
        self.assertGreater(sent_peak, min(sent_bound, DEFAULT_IN_FLIGHT_FLOOR) // 2)
        self.assertEqual([api._manager.connection for api in apis], connections)
        reader.transport.resumeProducing()
        await wait_until(lambda: reader.bytes == 32 * MiB, 30, "all data after resuming")
        self.assertEqual(reader.digest.digest(), writer.digest.digest())
        self.assertEqual([api._manager.connection for api in apis], connections)


class RecordSizeTests(TestCase):
    """A single write must fit in one record the peer accepts."""

    timeout = 30

    def test_write_over_the_record_limit_is_refused_at_once(self) -> Any:
        """With TXDILATION_MAX_RECORD_SIZE at 1 MiB on both sides, a write of 1 MiB less the
        9-byte record header arrives; one byte more raises ValueError in write() and nothing
        is sent. (Before, it was queued, and the peer dropped every connection it was replayed
        on: 57 generations in 10 s at the default 64 MiB, never delivered.)"""
        return ensureDeferred(self._oversize())

    async def _oversize(self) -> None:
        use_environment(self, TXDILATION_MAX_RECORD_SIZE=str(MiB))
        mailbox = Mailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        apis = mailbox.dilate()
        for api in apis:
            await api.when_dilated()
        reader = Reader()
        await apis[1].listener_for("big").listen(Factory.forProtocol(lambda: reader))
        client = await apis[0].connector_for("big").connect(Factory.forProtocol(Protocol))
        connection = apis[0]._manager.connection
        queued = multiplexer_of(apis[0]).unacknowledged_records
        self.assertRaises(ValueError, client.transport.write, bytes(MiB - RECORD_OVERHEAD + 1))
        self.assertEqual(multiplexer_of(apis[0]).unacknowledged_records, queued)
        client.transport.write(bytes(MiB - RECORD_OVERHEAD))
        await wait_until(lambda: reader.bytes == MiB - RECORD_OVERHEAD, 10, "the largest write")
        self.assertIs(apis[0]._manager.connection, connection)


class PendingOpenTests(TestCase):
    """A rogue peer opening subchannels nobody listens on."""

    timeout = 30

    def test_pending_opens_are_bounded(self) -> Any:
        """200 OPENs, each with 64 KiB of DATA (12.5 MiB), for a name nobody listens on:
        at most 4 MiB (the default) is held, every OPEN beyond it is answered with CLOSE, and
        a listener that comes later gets the held subchannels with their data."""
        return ensureDeferred(self._pending_opens())

    async def _pending_opens(self) -> None:
        use_environment(self)
        mailbox = RogueMailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        api = mailbox.start(LOWEST_SIDE)
        await wait_until(mailbox.ports, 10, "hints")
        raw = await rogue_follower_selected(mailbox)
        self.addCleanup(raw.abort)
        await api.when_dilated()
        seqnum = 0
        for scid in range(2, 402, 2):
            raw.send_record(Open(seqnum, scid, "nobody"))
            raw.send_record(Data(seqnum + 1, scid, bytes(CHUNK)))
            seqnum += 2
        await raw.wait_for(lambda r: isinstance(r, Ack) and r.resp_seqnum == seqnum - 1)
        self.assertLessEqual(inbound_of(api).pending_bytes, DEFAULT_MAX_PENDING_OPEN_BYTES)
        refused = [r for r in raw.records if isinstance(r, Close)]
        kept = 200 - len(refused)
        self.assertGreater(len(refused), 100)
        self.assertGreater(kept, 0)
        readers: list[Reader] = []

        def build() -> Reader:
            readers.append(Reader())
            return readers[-1]

        await api.listener_for("nobody").listen(Factory.forProtocol(build))
        await wait_until(lambda: sum(r.bytes for r in readers) == kept * CHUNK, 5, "held data")
        self.assertEqual(len(readers), kept)


@pytest.mark.slow
class SlowReaderMemorySlowTests(RealServersMixin, TestCase):
    """1 GiB between two txdilation peer processes, to a reader that stalls then reads slowly."""

    TOTAL = 1 << 30
    STALL = 4.0
    RATE = 24 * MiB  # bytes per second, well below what the sender can produce
    timeout = 170

    def test_one_gib_to_a_slow_reader(self) -> Any:
        """The receiver reads nothing for 4 s, then at most 24 MiB/s; the sender writes 1 GiB
        as fast as its producer is allowed: SHA-256 and byte count match, the sender's
        unacknowledged backlog never exceeds 64 MiB plus one write, and each process's peak
        RSS stays under a quarter of what was sent."""
        return ensureDeferred(self._one_gib())

    async def _one_gib(self) -> None:
        common = ["--impl", "txdilation", "--total", str(self.TOTAL), "--chunk", str(CHUNK)]
        receiver, sender = await run_peer_pair(
            self.reactor,
            self.mailbox.url,
            [
                *common,
                "--side",
                LEADER,
                "--scenario",
                "bulk-recv",
                "--read-stall",
                str(self.STALL),
                "--read-rate",
                str(self.RATE),
                "--linger",
                "0.5",
            ],
            [*common, "--side", FOLLOWER, "--scenario", "bulk-send"],
            self.timeout - 10,
        )
        got, sent = receiver.result, sender.result
        print(f"\n1 GiB to a slow reader: sender {sent}, receiver {got}")
        self.assertEqual(got["bytes"], self.TOTAL)
        self.assertEqual(got["sha256"], sent["sha256"])
        self.assertGreater(got["holds"], 10)
        self.assertLessEqual(sent["max_unacked_bytes"], DEFAULT_MAX_UNACKED_BYTES + CHUNK + 9)
        peaks = {"sender": sent["vm_hwm_kib"], "receiver": got["vm_hwm_kib"]}
        for who, kib in peaks.items():
            self.assertLess(kib * 1024, self.TOTAL // 4, f"{who} peak RSS {kib} KiB")
        record_figures(
            self,
            "txdilation-txdilation",
            peak_memory_mib=round(max(peaks.values()) / 1024, 1),
            bytes_verified=self.TOTAL,
            memory_test_sender_peak_mib=round(peaks["sender"] / 1024, 1),
            memory_test_receiver_peak_mib=round(peaks["receiver"] / 1024, 1),
            memory_test_seconds=sent["seconds"],
        )
