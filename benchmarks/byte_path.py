"""CPU cost of txdilation's byte path, without sockets: ``python -m benchmarks.byte_path``.

Layer: benchmark infrastructure (for profile-driven work on the byte path; no stock here).
Two real L2 connections (leader and follower, real Noise, real records) and two real
Multiplexers are joined by in-memory transports. The sending subchannel writes ``--count``
messages of ``--size`` bytes, about one read's worth at a time; what the sending L2 connection
writes is fed to the receiving L2 connection in ``--read``-byte pieces (what a TCP read would
hand it) and delivered to a subchannel protocol that hashes it with SHA-256; after each read
the clock moves on by the time the piece takes at ``--link-mbps`` (so delayed ACKs fall due as
on a link of that rate), and the ACKs the receiver wrote go back to the sender. CPU seconds of
each half are measured separately (``time.process_time``), reported per message and as MB per
CPU-second. ``--profile send|recv`` prints a cProfile of that half.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import sys
import time
from typing import Any

from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock, Cooperator
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.wire.contracts import ICandidateOwner, IRecordSink
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.records import Record
from txdilation.wire.roles import FOLLOWER, LEADER


class MemoryTransport:
    """The part of a TCP transport an L2 connection uses; collects what is written."""

    bufferSize = 2**16

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.producer: Any = None

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def writeSequence(self, seq: Any) -> None:
        self.chunks.extend(seq)

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.producer = producer

    def unregisterProducer(self) -> None:
        self.producer = None

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def loseConnection(self) -> None:
        pass

    def abortConnection(self) -> None:
        pass


@implementer(ICandidateOwner)
class Owner:
    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.ready: list[DilatedConnectionProtocol] = []

    def candidate_ready(self, connection: DilatedConnectionProtocol) -> None:
        connection.events.select(self.sink)
        self.ready.append(connection)

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        raise RuntimeError(reason)


@implementer(IRecordSink)
class MuxSink:
    """The selected link's record dispatch (one table from type to handler), without its
    liveness and PING handling: what the byte path needs."""

    def __init__(self, mux: Multiplexer) -> None:
        self.mux = mux
        self._handlers = mux.record_handlers()

    def got_record(self, record: Record) -> None:
        self._handlers[type(record)](record)

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        pass


class Hasher(Protocol):
    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.bytes = 0

    def dataReceived(self, data: bytes) -> None:
        self.digest.update(data)
        self.bytes += len(data)


def build() -> tuple[Any, Any, Clock]:
    """Two selected, connected L2 connections and their multiplexers."""
    clock = Clock()
    key = os.urandom(32)
    sides = {}
    for role in (LEADER, FOLLOWER):
        mux = Multiplexer(
            manager=None,
            reactor=clock,
            cooperator=Cooperator(scheduler=lambda f: clock.callLater(0, f)),
        )
        mux.set_role(role)
        owner = Owner(MuxSink(mux))
        l2 = DilatedConnectionProtocol(
            role=role, dilation_key=key, owner=owner, description=role.value, is_direct=True,
            relay_line=None, clock=clock,
        )  # fmt: skip
        transport = MemoryTransport()
        l2.makeConnection(transport)  # type: ignore[arg-type]
        sides[role] = (l2, mux, transport, owner)
    leader, follower = sides[LEADER], sides[FOLLOWER]
    for _ in range(6):  # prologues, handshake, KCMs
        for a, b in ((leader, follower), (follower, leader)):
            data = a[2].take()
            if data:
                b[0].dataReceived(data)
    assert leader[3].ready and follower[3].ready, "handshake did not complete"
    for l2, mux, _, _ in (leader, follower):
        mux.connection_made(l2)
        mux.dilated()
    return leader, follower, clock


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=64 << 10)
    p.add_argument("--count", type=int, default=4096)
    p.add_argument("--read", type=int, default=256 << 10, help="bytes per dataReceived")
    p.add_argument(
        "--link-mbps", type=float, default=1000.0, help="simulated link rate (MB/s): the clock"
    )
    p.add_argument("--profile", choices=("send", "recv"), default=None)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    results = []
    for _ in range(args.repeat):
        results.append(run_once(args))
    best_send = min(r[0] for r in results)
    best_recv = min(r[1] for r in results)
    total = args.size * args.count
    print(
        f"{args.count} x {args.size} B, reads of {args.read} B: "
        f"send {best_send / args.count * 1e6:.1f} us/msg ({total / best_send / 1e6:.0f} MB/CPU-s), "
        f"recv {best_recv / args.count * 1e6:.1f} us/msg ({total / best_recv / 1e6:.0f} MB/CPU-s) "
        f"[best of {args.repeat}; {args.acks} steps with ACKs at {args.link_mbps:g} MB/s]"
    )
    return 0


def run_once(args: argparse.Namespace) -> tuple[float, float]:
    """One transfer, in steps: the sender writes about one read's worth of messages, the
    receiver gets the wire bytes in ``--read``-byte pieces, the clock moves by the time those
    bytes take at ``--link-mbps`` (so delayed ACKs fall due as they would), and what the
    receiver wrote (its ACKs) goes back to the sender. Returns (send, receive) CPU seconds."""
    leader, follower, clock = build()
    (l2_out, mux_out, t_out, _), (l2_in, mux_in, t_in, _) = follower, leader
    hasher = Hasher()
    mux_in.listener_for("bulk").listen(Factory.forProtocol(lambda: hasher))
    sender = Protocol()
    mux_out.connector_for("bulk").connect(Factory.forProtocol(lambda: sender))
    clock.advance(0)
    message = os.urandom(args.size)
    write = sender.transport.write
    read = args.read
    seconds_per_byte = 1 / (args.link_mbps * 1e6)
    per_step = max(1, read // args.size)
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    send_cpu = recv_cpu = 0.0
    left = b""
    sent = 0
    acks = 0
    while sent < args.count or left:
        # the sender: a step's messages, then the ACKs the receiver wrote last step
        if profiler and args.profile == "send":
            profiler.enable()
        cpu0 = time.process_time()
        for _ in range(min(per_step, args.count - sent)):
            write(message)
        sent = min(args.count, sent + per_step)
        back = t_in.take()
        if back:
            l2_out.dataReceived(back)
        send_cpu += time.process_time() - cpu0
        if profiler:
            profiler.disable()
        acks += bool(back)
        # the receiver: what arrived, in reads of at most `read` bytes
        wire = left + t_out.take()
        cut = len(wire) if sent >= args.count else len(wire) - len(wire) % read
        left = wire[cut:]
        view = memoryview(wire)
        pieces = [view[i : min(i + read, cut)].tobytes() for i in range(0, cut, read)]
        if profiler and args.profile == "recv":
            profiler.enable()
        cpu0 = time.process_time()
        for piece in pieces:
            l2_in.dataReceived(piece)
            clock.advance(len(piece) * seconds_per_byte)  # a reactor turn, at the link's rate
        recv_cpu += time.process_time() - cpu0
        if profiler:
            profiler.disable()
    if hasher.bytes != args.size * args.count:
        raise SystemExit(f"received {hasher.bytes} B, expected {args.size * args.count}")
    args.acks = acks
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
        args.profile = None
    return send_cpu, recv_cpu


if __name__ == "__main__":
    sys.exit(main())
