"""Regression: the outbound queue is written in batches while the transport takes them, so
ACKs and PONGs never wait behind a whole replay (txdilation.durable.outbound.WRITE_BATCH_BYTES).

Found by tests/test_durability.py: with both peers replaying tens of MiB after each link cut,
every ACK sat behind the replay in the transport buffer, the next cut came first, nothing was
ever acknowledged, and the transfer livelocked."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock, Cooperator
from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.outbound import RECORD_OVERHEAD, WRITE_BATCH_BYTES, Outbound
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.records import Ack, Data, Record

PIECE = 65536


class BufferingConnection(FakeDilatedConnection):
    """Like a TCP transport: once more than ``buffer_size`` bytes wait unsent, the registered
    producer is paused (synchronously, inside the write); ``drain()`` empties the buffer and
    resumes it."""

    def __init__(self, buffer_size: int = 64 * 1024) -> None:
        super().__init__()
        self.buffer_size = buffer_size
        self.buffered = 0
        self.paused = False

    def send_records(self, records: Any) -> None:
        batch: list[Record] = list(records)
        super().send_records(batch)
        self.buffered += sum(len(r.data) if isinstance(r, Data) else 4 for r in batch)
        if self.buffered > self.buffer_size and not self.paused and self.producer is not None:
            self.paused = True
            self.producer.pauseProducing()

    def drain(self) -> None:
        self.buffered = 0
        if self.paused and self.producer is not None:
            self.paused = False
            self.producer.resumeProducing()


def queued_outbound(pieces: int) -> Outbound:
    clock = Clock()
    out = Outbound(cooperator=Cooperator(scheduler=lambda f: clock.callLater(0, f)), clock=clock)
    for i in range(pieces):
        out.send_data(1, bytes([i % 256]) * PIECE)
    return out


class ReplayBatchTests(SynchronousTestCase):
    def test_replay_waits_for_the_transport(self) -> None:
        """40 queued 64 KiB records: a new connection gets one batch (at most
        WRITE_BATCH_BYTES) and then nothing until its buffer drains; an ACK written meanwhile
        goes out right behind that batch; draining repeatedly delivers everything once, in
        seqnum order."""
        out = queued_outbound(40)
        conn = BufferingConnection()
        out.connection_made(conn)
        self.assertEqual(len(conn.send_calls), 1)
        first = conn.send_calls[0]
        self.assertLessEqual(len(first) * (PIECE + RECORD_OVERHEAD), WRITE_BATCH_BYTES)
        conn.send_record(Ack(7))  # what Inbound does on its own
        self.assertEqual(conn.sent[len(first)], Ack(7))
        for _ in range(100):
            if not conn.paused:
                break
            conn.drain()
        data = [r for r in conn.sent if isinstance(r, Data)]
        self.assertEqual([r.seqnum for r in data], list(range(40)))
        for batch in conn.send_calls:
            payload = sum(len(r.data) + RECORD_OVERHEAD for r in batch if isinstance(r, Data))
            self.assertLessEqual(payload, WRITE_BATCH_BYTES)

    def test_new_records_queue_behind_the_replay(self) -> None:
        """Records written while the replay is still going are sent after it, in order."""
        out = queued_outbound(10)
        conn = BufferingConnection()
        out.connection_made(conn)
        out.send_data(1, b"new")
        while conn.paused:
            conn.drain()
        data = [r for r in conn.sent if isinstance(r, Data)]
        self.assertEqual([r.seqnum for r in data], list(range(11)))
        self.assertEqual(data[-1].data, b"new")

    def test_a_single_large_record_still_goes(self) -> None:
        """A record bigger than a batch is sent on its own (a batch holds at least one)."""
        clock = Clock()
        out = Outbound(
            cooperator=Cooperator(scheduler=lambda f: clock.callLater(0, f)), clock=clock
        )
        out.send_data(1, b"x" * (2 * WRITE_BATCH_BYTES))
        out.send_data(1, b"y")
        conn = BufferingConnection()
        out.connection_made(conn)
        self.assertEqual([len(c) for c in conn.send_calls], [1])
        conn.drain()
        self.assertEqual([r.seqnum for r in conn.sent], [0, 1])
