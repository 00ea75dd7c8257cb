"""``txdilation demo``: two dilated wormholes through local real servers, with link cuts.

Everything listens on 127.0.0.1. The sender writes ``mib`` MiB in 64 KiB writes through a push
producer; the receiver hashes what it gets. While data flows, the current L2 connection is
aborted ``cuts`` times; Dilation reconnects and replays, and the receiver's SHA-256 must equal
the sender's.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

CHUNK = 64 * 1024
APPID = "txdilation.example/demo"


@dataclass
class _Stats:
    sent: int = 0
    received: int = 0
    started: float = 0.0
    finished: float = 0.0
    generations: set[int] = field(default_factory=set)
    paths: list[str] = field(default_factory=list)
    cuts: int = 0


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {100 * done / total:5.1f}%"


def run_demo(
    *, mib: int = 64, cuts: int = 3, relay_only: bool = False, timeout: float = 120.0
) -> int:
    """Run the demo in this process; returns 0 when the data was verified."""
    os.environ.setdefault("TXDILATION_LISTEN_INTERFACE", "127.0.0.1")
    os.environ.setdefault("TXDILATION_HINT_ADDRESSES", "127.0.0.1")
    import txdilation

    txdilation.install()
    from twisted.internet import reactor as _reactor
    from twisted.internet.defer import Deferred, ensureDeferred
    from twisted.internet.task import react

    result: list[int] = []

    async def scenario(reactor: Any) -> None:
        result.append(await _scenario(reactor, mib * 2**20, cuts, relay_only))

    def go(reactor: Any) -> Deferred[None]:
        d = ensureDeferred(scenario(reactor))
        timer = reactor.callLater(timeout, d.cancel)
        d.addBoth(lambda r: (timer.cancel() if timer.active() else None, r)[1])
        return d

    try:
        react(go)
    except SystemExit as e:
        if e.code not in (0, None):
            return int(e.code) if isinstance(e.code, int) else 1
    _ = _reactor
    return result[0] if result else 1


async def _scenario(reactor: Any, total: int, cuts: int, relay_only: bool) -> int:
    import wormhole
    from twisted.internet.defer import Deferred, gatherResults
    from twisted.internet.interfaces import IPushProducer
    from twisted.internet.protocol import Factory, Protocol
    from twisted.internet.task import deferLater
    from wormhole._status import ConnectedPeer, DilationStatus
    from zope.interface import implementer

    from .testing.servers import start_mailbox_server, start_transit_relay

    out = sys.stdout
    mailbox = await start_mailbox_server(reactor)
    relay = await start_transit_relay(reactor)
    print(f"mailbox server {mailbox.url}, transit relay {relay.hint} (both on loopback)", file=out)
    stats = _Stats()
    digest_out, digest_in = hashlib.sha256(), hashlib.sha256()
    done: Deferred[None] = Deferred()

    def on_status(status: DilationStatus) -> None:
        stats.generations.add(status.generation)
        if isinstance(status.peer_connection, ConnectedPeer):
            path = status.peer_connection.hint_description
            if not stats.paths or stats.paths[-1] != path:
                stats.paths.append(path)

    class Receiver(Protocol):
        def dataReceived(self, data: bytes) -> None:
            digest_in.update(data)
            stats.received += len(data)
            if stats.received >= total and not done.called:
                stats.finished = time.perf_counter()
                done.callback(None)

    @implementer(IPushProducer)
    class Sender(Protocol):
        def connectionMade(self) -> None:
            self.paused = False
            self.block = os.urandom(CHUNK)
            assert self.transport is not None
            self.transport.registerProducer(self, True)  # type: ignore[attr-defined]
            stats.started = time.perf_counter()
            reactor.callLater(0, self.resumeProducing)

        def pauseProducing(self) -> None:
            self.paused = True

        def resumeProducing(self) -> None:
            self.paused = False
            while not self.paused and stats.sent < total:
                chunk = self.block[: min(CHUNK, total - stats.sent)]
                digest_out.update(chunk)
                stats.sent += len(chunk)
                assert self.transport is not None
                self.transport.write(chunk)

        def stopProducing(self) -> None:
            self.paused = True

    w1 = wormhole.create(APPID, mailbox.url, reactor, dilation=True)
    w2 = wormhole.create(APPID, mailbox.url, reactor, dilation=True)
    w1.allocate_code()
    code = await w1.get_code()
    w2.set_code(code)
    print(f"wormhole code {code}; dilating...", file=out)
    kwargs: dict[str, Any] = {"transit_relay_location": relay.hint, "no_listen": relay_only}
    d1 = w1.dilate(on_status_update=on_status, **kwargs)
    d2 = w2.dilate(**kwargs)
    t0 = time.perf_counter()
    await gatherResults([d1.when_dilated(), d2.when_dilated()])
    print(f"dilated in {1000 * (time.perf_counter() - t0):.0f} ms via {stats.paths[-1:]}", file=out)
    await d1.listener_for("demo").listen(Factory.forProtocol(Receiver))
    sender = await d2.connector_for("demo").connect(Factory.forProtocol(Sender))

    manager = sender.transport._manager
    cut_points = [total * (i + 1) // (cuts + 1) for i in range(cuts)]

    last_print = 0.0
    tty = out.isatty()
    lead, end = ("\r", "") if tty else ("", "\n")
    while not done.called:
        await deferLater(reactor, 0.05, lambda: None)
        if cut_points and stats.received >= cut_points[0] and manager._connection is not None:
            cut_points.pop(0)
            stats.cuts += 1
            manager._connection.abort()
        now = time.perf_counter()
        if now - last_print > (0.5 if tty else 2.0):
            last_print = now
            print(
                f"{lead}  {_bar(stats.received, total)}  cuts {stats.cuts}/{cuts}",
                end=end,
                file=out,
                flush=True,
            )
    print(f"{lead}  {_bar(stats.received, total)}  cuts {stats.cuts}/{cuts}", file=out)
    await w1.close()
    await w2.close()
    await mailbox.stop()
    await relay.stop()

    elapsed = stats.finished - stats.started
    ok = digest_in.digest() == digest_out.digest() and stats.received == total
    rows = [
        ("bytes sent / received", f"{stats.sent:,} / {stats.received:,}"),
        ("SHA-256 verified", "yes" if ok else "NO"),
        ("throughput (with cuts)", f"{total / elapsed / 1e6:.0f} MB/s over {elapsed:.2f} s"),
        ("link cuts survived", str(stats.cuts)),
        ("generations", str(max(stats.generations))),
        ("connections used", ", ".join(dict.fromkeys(stats.paths))),
    ]
    width = max(len(k) for k, _ in rows)
    print("\nsummary", file=out)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}", file=out)
    return 0 if ok else 1
