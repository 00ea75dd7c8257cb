"""
Streaming scenarios for ``tests.support.peer``, to measure recovery: ``stream-send`` +
``stream-recv``.

Layer: test infrastructure, run inside a peer process (nothing here imports ``wormhole``).

The sender writes one 1 KiB record every ``--record-interval`` seconds (10 ms) on one
subchannel (``stream``): magic ``TXDS``, sequence number, the wall-clock time it was written,
flags (1: the last record), padding. It stops after ``--duration`` seconds or on the stdin
command ``{"command": "finish"}``, writes the last record, and waits for the receiver to close
the subchannel (or to exit). The receiver logs every record's arrival (sequence number, send
time, arrival time, all ``time.time()``: every process on one machine shares the clock, in
any namespace), closes the subchannel after the last record, and reports (``ArrivalLog``):
exactly once and in order or not, the largest gap between arrivals, and, once the parent said
when it broke the network (``{"command": "fault", "t": T}``), the gap around that moment and
how long after it a record written after it arrived. ``{"command": "finish"}`` makes the
receiver report at once with what it has. Events for the parent: ``stream-started`` (first
arrival) and ``stream-resumed`` (first record written after the fault arrived), each with ``t``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.task import LoopingCall
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from tests.support.peer_scenarios import Peer

RECORD_SIZE = 1024
MAGIC = b"TXDS"
_HEADER = struct.Struct("!4sIdB")
LAST = 1
FILLER = bytes(range(256)) * (RECORD_SIZE // 256)
SUBPROTOCOL = "stream"


class BadRecord(ValueError):
    """Bytes on the stream that are not a record."""


def encode_record(seq: int, sent_at: float, last: bool = False) -> bytes:
    """One record of exactly ``RECORD_SIZE`` bytes."""
    header = _HEADER.pack(MAGIC, seq, sent_at, LAST if last else 0)
    return header + FILLER[: RECORD_SIZE - len(header)]


def parse_record(record: bytes | memoryview) -> tuple[int, float, bool]:
    """``(seq, sent_at, last)`` of one record.

    :raises BadRecord: on a wrong size or magic.
    """
    if len(record) != RECORD_SIZE:
        raise BadRecord(f"a record is {RECORD_SIZE} bytes, not {len(record)}")
    magic, seq, sent_at, flags = _HEADER.unpack_from(record)
    if magic != MAGIC:
        raise BadRecord(f"bad magic {magic!r} (stream out of step?)")
    return seq, sent_at, bool(flags & LAST)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


@dataclass
class ArrivalLog:
    """Every record's arrival, in arrival order, and what they say about delivery."""

    seqs: list[int] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    last_seq: int | None = None

    def add(self, seq: int, sent_at: float, arrived_at: float, last: bool = False) -> None:
        """Log one arrival."""
        self.seqs.append(seq)
        self.sent.append(sent_at)
        self.arrived.append(arrived_at)
        if last:
            self.last_seq = seq

    def first_fresh_after(self, t: float) -> float | None:
        """Arrival time of the first record written after ``t``, or ``None``."""
        return next((a for s, a in zip(self.sent, self.arrived, strict=True) if s > t), None)

    def report(self, fault_at: float | None = None) -> dict[str, Any]:
        """
        The delivery figures (seconds, rounded to ms):

        - ``records``, ``expected`` (``None`` until the last record came), ``duplicates``,
          ``out_of_order``, ``missing``, ``exactly_once_in_order``;
        - ``max_gap`` (largest time between two arrivals) and ``max_gap_from`` (when it began),
          ``max_latency`` (arrival minus send time);
        - with ``fault_at``: ``gap_after_fault``, the largest gap between arrivals that ends
          after the fault (the gap from the last arrival before it, if any, to the first after
          it, counts); ``resumed_after_fault``, from the fault to the first arrival of a record
          written after it (``None``: none arrived, no recovery); ``recovered``.
        """
        seen: set[int] = set()
        duplicates = out_of_order = 0
        highest = -1
        for seq in self.seqs:
            if seq in seen:
                duplicates += 1
                continue
            seen.add(seq)
            if seq < highest:
                out_of_order += 1
            highest = max(highest, seq)
        expected = None if self.last_seq is None else self.last_seq + 1
        missing = (expected if expected is not None else highest + 1) - len(seen)
        gaps = [(b - a, a) for a, b in pairwise(self.arrived)]
        largest = max(gaps, default=(0.0, None))
        result: dict[str, Any] = {
            "records": len(self.seqs),
            "expected": expected,
            "duplicates": duplicates,
            "out_of_order": out_of_order,
            "missing": missing,
            "exactly_once_in_order": expected is not None and self.seqs == list(range(expected)),
            "max_gap": _ms(largest[0]),
            "max_gap_from": largest[1],
            "max_latency": _ms(
                max((a - s for s, a in zip(self.sent, self.arrived, strict=True)), default=0.0)
            ),
        }
        if fault_at is not None:
            result.update(self._around(fault_at))
        return result

    def _around(self, fault_at: float) -> dict[str, Any]:
        before = [a for a in self.arrived if a <= fault_at]
        after = [a for a in self.arrived if a > fault_at]
        edges = ([before[-1]] if before else [fault_at]) + after
        gap = max((b - a for a, b in pairwise(edges)), default=None)
        fresh = self.first_fresh_after(fault_at)
        return {
            "fault_at": fault_at,
            "gap_after_fault": _ms(gap),
            "resumed_after_fault": _ms(None if fresh is None else fresh - fault_at),
            "recovered": fresh is not None,
        }


def first_of(*waits: Deferred[Any]) -> Deferred[Any]:
    """Fires once any of ``waits`` has fired (their results are left alone)."""
    return DeferredList(list(waits), fireOnOneCallback=True)


def serve_commands(peer: Peer, handle: Callable[[dict[str, Any]], None]) -> None:
    """Hand every stdin command of this peer to ``handle``, for as long as the peer runs."""

    def got(command: dict[str, Any]) -> None:
        handle(command)
        peer.stdin.commands.get().addCallback(got)

    peer.stdin.commands.get().addCallback(got)


class StreamSender(Protocol):
    """Writes a record every ``interval`` seconds until ``finish()``, then the last one."""

    def __init__(self, reactor: Any, interval: float) -> None:
        self._loop = LoopingCall(self._tick)
        self._loop.clock = reactor
        self._interval = interval
        self.sent = 0
        self.finished = False
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self._loop.start(self._interval, now=True)

    def _tick(self) -> None:
        assert self.transport is not None
        self.transport.write(encode_record(self.sent, time.time()))
        self.sent += 1

    def finish(self) -> None:
        """Stop the stream: write the last record (flagged). Idempotent."""
        if self.finished or self.lost.called:
            return
        self.finished = True
        if self._loop.running:
            self._loop.stop()
        assert self.transport is not None
        self.transport.write(encode_record(self.sent, time.time(), last=True))
        self.sent += 1

    def dataReceived(self, data: bytes) -> None:
        pass  # the receiver sends nothing

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._loop.running:
            self._loop.stop()
        self.lost.callback(None)


class StreamReceiver(Protocol):
    """Parses records as they come and logs their arrivals; ``done`` fires at the last one."""

    def __init__(self, on_arrival: Callable[[ArrivalLog], None]) -> None:
        self.log = ArrivalLog()
        self._buffer = bytearray()
        self._on_arrival = on_arrival
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        now = time.time()
        self._buffer += data
        whole = len(self._buffer) - len(self._buffer) % RECORD_SIZE
        view = memoryview(self._buffer)
        try:
            for offset in range(0, whole, RECORD_SIZE):
                seq, sent_at, last = parse_record(view[offset : offset + RECORD_SIZE])
                self.log.add(seq, sent_at, now, last)
                if last and not self.done.called:
                    assert self.transport is not None
                    self.transport.loseConnection()
                    self.done.callback(None)
        finally:
            view.release()
        del self._buffer[:whole]
        self._on_arrival(self.log)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(None)


async def stream_send(peer: Peer) -> dict[str, Any]:
    """The sending side (see the module docstring)."""
    args = peer.args
    interval = float(args.record_interval)
    sender: StreamSender = await peer.connect(
        SUBPROTOCOL, Factory.forProtocol(lambda: StreamSender(peer.reactor, interval))
    )
    started = time.time()
    serve_commands(peer, lambda c: sender.finish() if c.get("command") == "finish" else None)
    timer = peer.reactor.callLater(args.duration, sender.finish)
    peer.phase = "stream-send: streaming"
    await first_of(sender.lost, peer.stdin.finished)
    if timer.active():
        timer.cancel()
    return {
        "sent": sender.sent,
        "finished": sender.finished,
        "seconds": round(time.time() - started, 3),
    }


async def stream_recv(peer: Peer) -> dict[str, Any]:
    """The receiving side (see the module docstring)."""
    state: dict[str, Any] = {"fault_at": None, "resumed": False, "started": False}
    reported: Deferred[None] = Deferred()

    def on_arrival(log: ArrivalLog) -> None:
        if not state["started"]:
            state["started"] = True
            peer.emit("stream-started", t=log.arrived[0])
        fault_at = state["fault_at"]
        if fault_at is not None and not state["resumed"]:
            fresh = log.first_fresh_after(fault_at)
            if fresh is not None:
                state["resumed"] = True
                peer.emit("stream-resumed", t=fresh, after=round(fresh - fault_at, 3))

    receivers: list[StreamReceiver] = []
    first: Deferred[StreamReceiver] = Deferred()

    def build() -> StreamReceiver:
        receiver = StreamReceiver(on_arrival)
        receivers.append(receiver)
        if not first.called:
            first.callback(receiver)
        return receiver

    def command(c: dict[str, Any]) -> None:
        if c.get("command") == "fault":
            state["fault_at"] = float(c["t"])
        elif c.get("command") == "finish" and not reported.called:
            reported.callback(None)

    serve_commands(peer, command)
    await peer.listen(SUBPROTOCOL, Factory.forProtocol(build))
    peer.phase = "stream-recv: waiting for the stream"
    await first_of(first, reported)
    if receivers:
        peer.phase = "stream-recv: receiving"
        await first_of(receivers[0].done, reported)
    log = receivers[0].log if receivers else ArrivalLog()
    return {"subchannels": len(receivers), **log.report(state["fault_at"])}
