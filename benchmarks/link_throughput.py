"""Raw L2 link throughput: two txdilation L2 connections over loopback TCP in one process.

Sends DATA records of --record-size bytes (default 64 KiB) from the Follower to the Leader after
the KCM exchange, and prints MB/s (1 MB = 10**6 bytes) measured from the first write to the last
record parsed at the receiver. Flow control: the sender writes while the transport accepts
(IPushProducer), so memory stays bounded.

    python benchmarks/link_throughput.py --total-mib 256
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from twisted.internet import reactor as _reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import ClientFactory, ServerFactory
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.wire.contracts import ICandidateOwner, IRecordSink
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.records import Data
from txdilation.wire.roles import FOLLOWER, LEADER

reactor: Any = _reactor


@implementer(IRecordSink)
class CountingSink:
    def __init__(self, total: int) -> None:
        self.total = total
        self.received = 0
        self.done_at: float | None = None

    def got_record(self, record: Any) -> None:
        self.received += len(record.data)
        if self.received >= self.total and self.done_at is None:
            self.done_at = time.perf_counter()
            reactor.stop()

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        pass


@implementer(ICandidateOwner)
class Owner:
    def __init__(self, sink: CountingSink, on_selected: Any) -> None:
        self.sink, self.on_selected = sink, on_selected

    def candidate_ready(self, connection: Any) -> None:
        connection.events.select(self.sink)
        self.on_selected(connection)

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        print("candidate failed:", reason, file=sys.stderr)
        reactor.stop()


class Sender:
    """A push producer writing DATA records while the TCP transport is not paused."""

    def __init__(self, connection: DilatedConnectionProtocol, size: int, total: int) -> None:
        self.connection, self.sent, self.total = connection, 0, total
        self.payload = os.urandom(size)
        self.paused = False
        self.seq = 0

    def start(self) -> None:
        self.started_at = time.perf_counter()
        self.connection.registerProducer(self, True)
        self.resumeProducing()

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        while not self.paused and self.sent < self.total:
            batch = []
            for _ in range(16):
                batch.append(Data(self.seq, 1, self.payload))
                self.seq += 1
                self.sent += len(self.payload)
                if self.sent >= self.total:
                    break
            self.connection.send_records(batch)

    def stopProducing(self) -> None:
        self.paused = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256)
    parser.add_argument("--record-size", type=int, default=64 * 1024)
    args = parser.parse_args()
    total = args.total_mib * 2**20
    key = os.urandom(32)
    sink = CountingSink(total)
    sender: list[Sender] = []

    def follower_selected(connection: DilatedConnectionProtocol) -> None:
        s = Sender(connection, args.record_size, total)
        sender.append(s)
        s.start()

    class F(ServerFactory, ClientFactory):
        def __init__(self, role: Any, owner: Owner) -> None:
            self.role, self.owner = role, owner

        def buildProtocol(self, addr: Any) -> DilatedConnectionProtocol:
            return DilatedConnectionProtocol(
                role=self.role,
                dilation_key=key,
                owner=self.owner,
                description="bench",
                is_direct=True,
                relay_line=None,
                clock=reactor,
            )

    def go(port: Any) -> Any:
        return TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port).connect(
            F(FOLLOWER, Owner(CountingSink(0), follower_selected))
        )

    TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        F(LEADER, Owner(sink, lambda c: None))
    ).addCallback(go)
    reactor.callLater(300, reactor.stop)
    cpu0 = time.process_time()
    reactor.run()
    if sink.done_at is None or not sender:
        sys.exit("benchmark did not complete")
    elapsed = sink.done_at - sender[0].started_at
    cpu = time.process_time() - cpu0
    print(
        f"L2 link, one process, {args.total_mib} MiB in {args.record_size}-byte records: "
        f"{total / elapsed / 1e6:.0f} MB/s ({elapsed:.2f} s wall, {cpu:.2f} s CPU)"
    )


if __name__ == "__main__":
    main()
