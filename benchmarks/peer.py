"""One benchmark peer in its own process: ``python -m benchmarks.peer --help``.

Layer: benchmark infrastructure (not shipped). It drives magic-wormhole through the public API
only (``wormhole.create(..., dilation=True)``, ``set_code``, ``dilate()``, ``when_dilated()``,
``listener_for``/``connector_for``), so stock (``--impl stock``, confined to 127.0.0.1 with
``tests.support.harness.stock_loopback()``) and txdilation (``--impl txdilation``, installed as the
drop-in before anything imports ``wormhole``) run exactly the same code.

Both peers of a pair get the same ``--code`` (numeric nameplate) and set it, so neither waits
for the other to allocate one; ``--side`` forces the dilation side (the larger one leads).

Output: one JSON line ``{"event": "result", ...}`` on stdout, with ``time.monotonic()``
timestamps (CLOCK_MONOTONIC is shared by all processes of the machine, so the parent can compare
the two peers' clocks), this process's CPU seconds and peak RSS. On failure: a line
``{"event": "error", ...}`` and a non-zero exit. Every peer exits by itself within ``--timeout``.

Roles (pairs): ``bulk-recv``/``bulk-send`` (throughput, receiver hashing with SHA-256),
``gap-recv``/``gap-send`` (the receiver aborts the L2 connection ``--cuts`` times while the
sender writes 1 KiB every millisecond; reports each cut-to-next-delivery gap),
``echo-server``/``echo-client`` (``--count`` subchannels open at once, one echoed message each),
``many-server``/``many-client`` (``--count`` dilated wormholes in this one process, one echoed
message each).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import resource
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

APPID = "lothar.com/txdilation/benchmark"
ECHO_MESSAGE = b"x" * 100


def emit(event: str, **fields: Any) -> None:
    """Write one JSON line to stdout and flush it."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def usage() -> dict[str, float]:
    """This process's CPU seconds so far (all, and in the kernel) and its peak RSS in MiB."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu": ru.ru_utime + ru.ru_stime,
        "system_cpu": ru.ru_stime,
        "maxrss_mib": ru.ru_maxrss / 1024,
    }


def _gc_collections() -> int:
    """How many garbage collections (all generations) this process has run."""
    return sum(generation["collections"] for generation in gc.get_stats())


def current_rss_mib() -> float:
    """The current resident set size in MiB (from /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def bulk_chunks(seed: str, chunk: int) -> list[bytes]:
    """The distinct blocks a bulk stream cycles through (at least 2, about 8 MiB in all)."""
    rng = random.Random(seed)
    count = max(2, min(61, (8 << 20) // chunk))
    return [rng.randbytes(chunk) for _ in range(count)]


def bulk_stream(seed: str, total: int, chunk: int) -> Iterator[bytes]:
    """The bulk stream's writes: ``total`` bytes in ``chunk``-byte pieces.

    The blocks are generated before this returns, so that iterating costs (almost) nothing.
    """
    blocks = bulk_chunks(seed, chunk)

    def writes() -> Iterator[bytes]:
        remaining = total
        index = 0
        while remaining > 0:
            block = blocks[index % len(blocks)]
            index += 1
            if remaining < chunk:
                block = block[:remaining]
            remaining -= len(block)
            yield block

    return writes()


def expected_digest(seed: str, total: int, chunk: int) -> str:
    """SHA-256 of the whole bulk stream (what the receiver must report)."""
    h = hashlib.sha256()
    for block in bulk_stream(seed, total, chunk):
        h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# the wormhole


class Peer:
    """One process's wormhole(s) and the role it plays."""

    def __init__(self, reactor: Any, args: argparse.Namespace) -> None:
        self.reactor = reactor
        self.args = args

    async def dilate(self, code: str) -> tuple[Any, Any, dict[str, float]]:
        """Create a wormhole with ``code``, dilate, wait for ``when_dilated``.

        :returns: ``(wormhole, dilated wormhole, {"created": t, "keyed": t, "dilated": t})``
            (``keyed``: when the key exchange finished, ``get_unverified_key()``).
        """
        import wormhole

        created = time.monotonic()
        w = wormhole.create(APPID, self.args.mailbox, self.reactor, dilation=True)
        times = {"created": created}
        w.get_unverified_key().addCallback(lambda _: times.setdefault("keyed", time.monotonic()))
        w.set_code(code)
        dilated = w.dilate()
        await dilated.when_dilated()
        times["dilated"] = time.monotonic()
        return w, dilated, times


@implementer(IPushProducer)
class BulkSender(Protocol):
    """Writes the bulk stream as a push producer (up to 16 writes per turn), then closes."""

    def __init__(self, reactor: Any, stream: Any) -> None:
        self._reactor = reactor
        self._stream = stream
        self._paused = False
        self._scheduled = False
        self._done = False
        self.started = 0.0
        self.pauses = 0
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self.started = time.monotonic()
        self._pump()

    def _pump(self) -> None:
        self._scheduled = False
        write = self.transport.write
        for _ in range(16):
            if self._paused or self._done:
                return
            block = next(self._stream, None)
            if block is None:
                self._done = True
                self.transport.unregisterProducer()
                self.transport.loseConnection()
                return
            write(block)
        if not self._paused and not self._scheduled:
            self._scheduled = True
            self._reactor.callLater(0, self._pump)

    def pauseProducing(self) -> None:
        self._paused = True
        self.pauses += 1

    def resumeProducing(self) -> None:
        self._paused = False
        if not self._scheduled:
            self._pump()

    def stopProducing(self) -> None:
        self._paused = True

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


class BulkReceiver(Protocol):
    """Hashes what arrives; records the first and the last arrival."""

    def __init__(self, total: int, hashing: bool) -> None:
        self._total = total
        self._hash = hashlib.sha256() if hashing else None
        self.bytes = 0
        self.first = 0.0
        self.last = 0.0
        self.deliveries = 0
        self.cpu_at_first = 0.0
        self.cpu_at_last = 0.0
        self.gc_at_first = self.gc_during = 0
        self.marks: list[float] = []  # when each further 16 MiB had arrived
        self.next_mark = 16 << 20
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        if not self.bytes:
            self.first = time.monotonic()
            self.cpu_at_first = time.process_time()
            self.gc_at_first = _gc_collections()
        if self._hash is not None:
            self._hash.update(data)
        self.bytes += len(data)
        self.deliveries += 1
        if self.bytes >= self.next_mark:
            self.marks.append(time.monotonic())
            self.next_mark += 16 << 20
        if self.bytes >= self._total and not self.last:
            self.last = time.monotonic()
            self.cpu_at_last = time.process_time()
            self.gc_during = _gc_collections() - self.gc_at_first

    @property
    def digest(self) -> str | None:
        return None if self._hash is None else self._hash.hexdigest()

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.done.callback(None)


def _one_protocol(build: Callable[[], Protocol]) -> tuple[Factory, Deferred[Any]]:
    """A factory and a Deferred firing with the first protocol it builds."""
    first: Deferred[Any] = Deferred()

    class _Factory(Factory):
        def buildProtocol(self, addr: Any) -> Protocol:
            p = build()
            p.factory = self
            if not first.called:
                first.callback(p)
            return p

    return _Factory(), first


async def bulk_recv(peer: Peer) -> dict[str, Any]:
    """Receive one subchannel's bulk stream to its end (hashing unless ``--no-hash``)."""
    args = peer.args
    w, dilated, times = await peer.dilate(args.code)
    factory, first = _one_protocol(lambda: BulkReceiver(args.total, not args.no_hash))
    await dilated.listener_for("bulk").listen(factory)
    receiver: BulkReceiver = await first
    await receiver.done
    if receiver.bytes != args.total:
        raise RuntimeError(f"received {receiver.bytes} B, expected {args.total} B")
    result = {
        **times,
        "first": receiver.first,
        "last": receiver.last,
        "bytes": receiver.bytes,
        "deliveries": receiver.deliveries,
        "sha256": receiver.digest,
        "transfer_cpu": receiver.cpu_at_last - receiver.cpu_at_first,
        "marks": receiver.marks,
        "gc_collections": receiver.gc_during,
    }
    await w.close()
    return result


async def bulk_send(peer: Peer) -> dict[str, Any]:
    """Send the bulk stream on one subchannel, close it, wait for the peer's CLOSE."""
    args = peer.args
    w, dilated, times = await peer.dilate(args.code)
    stream = bulk_stream(args.seed, args.total, args.chunk)
    cpu0 = time.process_time()
    gc0 = _gc_collections()
    sender: BulkSender = await dilated.connector_for("bulk").connect(
        Factory.forProtocol(lambda: BulkSender(peer.reactor, stream))
    )
    await sender.lost
    result = {
        **times,
        "started": sender.started,
        "transfer_cpu": time.process_time() - cpu0,
        "gc_collections": _gc_collections() - gc0,
        "pauses": sender.pauses,
    }
    await w.close()
    return result


# ---------------------------------------------------------------------------------------------
# reconnection gap


class TickSender(Protocol):
    """Writes 1 KiB every millisecond until the peer closes."""

    def __init__(self, reactor: Any) -> None:
        from twisted.internet.task import LoopingCall

        self._loop = LoopingCall(self._tick)
        self._loop.clock = reactor
        self.lost: Deferred[None] = Deferred()
        self.sent = 0

    def connectionMade(self) -> None:
        self._loop.start(0.001)

    def _tick(self) -> None:
        self.sent += 1
        self.transport.write(b"t" * 1024)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        if self._loop.running:
            self._loop.stop()
        self.lost.callback(None)


class GapReceiver(Protocol):
    """Aborts the L2 connection under the subchannel ``cuts`` times; measures each stall.

    The abort goes through the seam stock and txdilation share,
    ``transport._manager._connection.transport.abortConnection()``. Nothing of the old
    connection can be delivered after our own abort, so the first delivery after a cut came
    over the new connection: the gap is cut -> that delivery.
    """

    def __init__(self, reactor: Any, cuts: int, interval: float) -> None:
        self._reactor = reactor
        self._cuts_left = cuts
        self._interval = interval
        self._cut_at: float | None = None
        self.gaps: list[float] = []
        self.bytes = 0
        self.done: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self._reactor.callLater(self._interval, self._cut)

    def _cut(self) -> None:
        connection = getattr(self.transport._manager, "_connection", None)
        if connection is None or connection.transport is None:
            self._reactor.callLater(0.01, self._cut)
            return
        self._cut_at = time.monotonic()
        self._cuts_left -= 1
        connection.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        self.bytes += len(data)
        if self._cut_at is not None:
            self.gaps.append(time.monotonic() - self._cut_at)
            self._cut_at = None
            if self._cuts_left > 0:
                self._reactor.callLater(self._interval, self._cut)
            else:
                self._reactor.callLater(self._interval, self.transport.loseConnection)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.done.callback(None)


async def gap_recv(peer: Peer) -> dict[str, Any]:
    """Receive ticks; cut the L2 connection ``--cuts`` times; report the gaps (seconds)."""
    args = peer.args
    w, dilated, times = await peer.dilate(args.code)
    factory, first = _one_protocol(lambda: GapReceiver(peer.reactor, args.cuts, 0.3))
    await dilated.listener_for("ticks").listen(factory)
    receiver: GapReceiver = await first
    await receiver.done
    await w.close()
    return {**times, "gaps": receiver.gaps, "bytes": receiver.bytes}


async def gap_send(peer: Peer) -> dict[str, Any]:
    """Write ticks until the receiver closes the subchannel."""
    w, dilated, times = await peer.dilate(peer.args.code)
    sender: TickSender = await dilated.connector_for("ticks").connect(
        Factory.forProtocol(lambda: TickSender(peer.reactor))
    )
    await sender.lost
    await w.close()
    return {**times, "sent": sender.sent}


# ---------------------------------------------------------------------------------------------
# many subchannels, many wormholes


class EchoServer(Protocol):
    """Echoes each ``dataReceived``; counts the subchannels it served."""

    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)


class EchoClient(Protocol):
    """Writes one message on connect; ``echoed`` fires once it is all back."""

    def __init__(self) -> None:
        self.echoed: Deferred[float] = Deferred()
        self.lost: Deferred[None] = Deferred()
        self._received = 0

    def connectionMade(self) -> None:
        self.transport.write(ECHO_MESSAGE)

    def dataReceived(self, data: bytes) -> None:
        self._received += len(data)
        if self._received >= len(ECHO_MESSAGE) and not self.echoed.called:
            self.echoed.callback(time.monotonic())

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


class _CountingFactory(Factory):
    protocol = EchoServer

    def __init__(self) -> None:
        self.built = 0

    def buildProtocol(self, addr: Any) -> Protocol | None:
        self.built += 1
        return super().buildProtocol(addr)


async def echo_server(peer: Peer) -> dict[str, Any]:
    """Echo on every subchannel until the other peer closes the wormhole."""
    w, dilated, times = await peer.dilate(peer.args.code)
    factory = _CountingFactory()
    await dilated.listener_for("echo").listen(factory)
    await peer_finished(peer)
    rss = current_rss_mib()
    await w.close()
    return {**times, "served": factory.built, "rss_mib": rss}


async def peer_finished(peer: Peer) -> None:
    """Wait until the parent says the other peer is done (stdin EOF)."""
    d: Deferred[None] = Deferred()

    def wait() -> None:
        sys.stdin.read()
        peer.reactor.callFromThread(d.callback, None)

    threading.Thread(target=wait, name="stdin", daemon=True).start()
    await d


async def echo_client(peer: Peer) -> dict[str, Any]:
    """Open ``--count`` subchannels at once, one message echoed on each, then close them all."""
    args = peer.args
    w, dilated, times = await peer.dilate(args.code)
    rss_before = current_rss_mib()
    endpoint = dilated.connector_for("echo")
    factory = Factory.forProtocol(EchoClient)
    started = time.monotonic()
    clients: list[EchoClient] = await gatherResults(
        [endpoint.connect(factory) for _ in range(args.count)], consumeErrors=True
    )
    echoed_at = await gatherResults([c.echoed for c in clients], consumeErrors=True)
    all_echoed = max(echoed_at)
    rss_open = current_rss_mib()
    for c in clients:
        c.transport.loseConnection()
    await gatherResults([c.lost for c in clients], consumeErrors=True)
    closed = time.monotonic()
    await w.close()
    return {
        **times,
        "started": started,
        "all_echoed": all_echoed,
        "all_closed": closed,
        "rss_before_mib": rss_before,
        "rss_open_mib": rss_open,
    }


async def many(peer: Peer, connect: bool) -> dict[str, Any]:
    """``--count`` wormholes in this process; each echoes one message over a subchannel."""
    args = peer.args
    rss_before = current_rss_mib()
    started = time.monotonic()

    async def one(index: int) -> Any:
        w, dilated, _ = await peer.dilate(f"{args.nameplate_base + index + 1}-{args.code}")
        if connect:
            client: EchoClient = await dilated.connector_for("echo").connect(
                Factory.forProtocol(EchoClient)
            )
            await client.echoed
        else:
            await dilated.listener_for("echo").listen(Factory.forProtocol(EchoServer))
        return w

    wormholes = await gatherResults(
        [Deferred.fromCoroutine(one(i)) for i in range(args.count)], consumeErrors=True
    )
    ready = time.monotonic()
    rss_ready = current_rss_mib()
    if not connect:
        await peer_finished(peer)
    await gatherResults([w.close() for w in wormholes], consumeErrors=True)
    return {
        "started": started,
        "ready": ready,
        "rss_before_mib": rss_before,
        "rss_ready_mib": rss_ready,
    }


async def many_server(peer: Peer) -> dict[str, Any]:
    """The listening halves of ``--count`` wormholes (closes once the clients are done)."""
    return await many(peer, connect=False)


async def many_client(peer: Peer) -> dict[str, Any]:
    """The connecting halves of ``--count`` wormholes."""
    return await many(peer, connect=True)


ROLES: dict[str, Callable[[Peer], Awaitable[dict[str, Any]]]] = {
    "bulk-recv": bulk_recv,
    "bulk-send": bulk_send,
    "gap-recv": gap_recv,
    "gap-send": gap_send,
    "echo-server": echo_server,
    "echo-client": echo_client,
    "many-server": many_server,
    "many-client": many_client,
}


# ---------------------------------------------------------------------------------------------
# main


def build_parser(
    roles: Mapping[str, Callable[[Peer], Awaitable[dict[str, Any]]]] = ROLES,
    prog: str = "python -m benchmarks.peer",
) -> argparse.ArgumentParser:
    """The peer's options; ``roles``: the roles ``--role`` may name."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=("stock", "txdilation"), required=True)
    p.add_argument("--role", choices=sorted(roles), required=True)
    p.add_argument("--mailbox", required=True, help="mailbox server URL (ws://...)")
    p.add_argument("--code", required=True, help="wormhole code (numeric nameplate first)")
    p.add_argument("--side", default=None, help="force the dilation side (16 hex digits)")
    p.add_argument("--total", type=int, default=256 << 20, help="bulk bytes")
    p.add_argument("--chunk", type=int, default=64 << 10, help="bulk write size")
    p.add_argument("--no-hash", action="store_true", help="bulk-recv: do not hash")
    p.add_argument("--seed", default="txdilation-bench")
    p.add_argument("--cuts", type=int, default=3, help="gap-recv: L2 aborts")
    p.add_argument("--count", type=int, default=1, help="subchannels or wormholes")
    p.add_argument("--nameplate-base", type=int, default=0, help="many-*: first nameplate - 1")
    p.add_argument("--profile", default=None, help="write a cProfile of the run to this file")
    p.add_argument("--timeout", type=float, default=300.0)
    return p


def _install(impl: str, stack: ExitStack, side: str | None) -> None:
    if impl == "txdilation":
        import txdilation

        txdilation.install()  # before anything imports wormhole
    else:
        from tests.support.harness import stock_loopback

        stack.enter_context(stock_loopback())
    if side is not None:
        from unittest import mock

        import wormhole._dilation.manager as manager

        stack.enter_context(mock.patch.object(manager, "make_side", lambda: side))


def main(
    argv: list[str] | None = None,
    roles: Mapping[str, Callable[[Peer], Awaitable[dict[str, Any]]]] = ROLES,
    parser: argparse.ArgumentParser | None = None,
) -> int:
    """Run one peer; returns the exit status (0 ok, 1 failed, 3 timed out).

    ``roles`` and ``parser`` (built by :func:`build_parser` with the same roles, plus options
    of its own) let another benchmark's peer module run its roles with this machinery.
    """
    args = (parser or build_parser(roles)).parse_args(argv)
    log_path = os.environ.get("BENCH_PEER_LOG")
    if log_path:  # debugging aid: this peer's Twisted log, one file per process
        from twisted.logger import globalLogBeginner, textFileLogObserver

        log_file = open(f"{log_path}.{args.role}", "a")  # noqa: SIM115 (lives as long as the process)
        observer = textFileLogObserver(log_file, timeFormat="%H:%M:%S.%f")
        globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    outcome: list[int] = []
    with ExitStack() as stack:
        _install(args.impl, stack, args.side)
        from twisted.internet import reactor

        peer = Peer(reactor, args)
        profiler: Any = None

        def on_timeout() -> None:
            emit("error", error=f"timed out after {args.timeout} s")
            sys.stdout.flush()
            os._exit(3)

        def finished(result: dict[str, Any]) -> None:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
            emit("result", impl=args.impl, role=args.role, **result, **usage())
            outcome.append(0)
            reactor.stop()

        def failed(f: Failure) -> None:
            emit("error", error=f"{f.type.__name__}: {f.value}")
            traceback.print_exception(f.value, file=sys.stderr)
            outcome.append(1)
            reactor.stop()

        def start() -> None:
            nonlocal profiler
            if args.profile:
                import cProfile

                profiler = cProfile.Profile(time.process_time)
                profiler.enable()
            d = Deferred.fromCoroutine(roles[args.role](peer))
            d.addCallbacks(finished, failed)

        reactor.callLater(args.timeout, on_timeout)
        reactor.callWhenRunning(start)
        reactor.run()
    sys.stdout.flush()
    return outcome[0] if outcome else 1


if __name__ == "__main__":
    sys.exit(main())
