"""
Scenarios for ``tests.support.peer``: small, deterministic dilation exchanges over the public API.

Layer: test infrastructure, run inside a peer process. Nothing here imports ``wormhole`` at
module level (``--impl txdilation`` must install the drop-in first).

Each scenario is an ``async`` function ``(Peer) -> dict`` whose dict becomes the peer's
``result`` event; it raises ``ScenarioError`` when what it sees is wrong. Payloads are generated
from ``--seed`` so both peers (and the test) can recompute them; every check compares SHA-256
digests, not just lengths. Pairs (left/right, in any order):

- ``echo-server`` + ``echo-client``: N subchannels, each carrying every message size once,
  echoed back, verified, then closed (fully or half-closed with ``--half-close``).
- ``echo-both`` + ``echo-both``: both peers listen and open subchannels at the same time.
- ``bulk-send`` + ``bulk-recv``: ``--total`` bytes in ``--chunk`` writes through a registered
  push producer, then close; both report the stream's SHA-256. With ``--read-rate`` and
  ``--read-stall`` the receiver is a slow reader (it pauses its subchannel); both report their
  peak memory (``vm_hwm_kib``), a txdilation sender its largest unacknowledged backlog.
- ``close-first`` + ``close-second``: one message echoed on a subchannel that stays open; the
  first peer closes its wormhole, the second closes its own once the first has exited (stdin
  EOF); each reports whether its open subchannel got ``connectionLost`` from the close.
- ``expect-old-peer`` + ``no-dilation``: a dilating peer facing a peer created without
  dilation must see ``when_dilated()`` fail with ``OldPeerCannotDilateError``.

For fault injection (tests/test_durability.py drives a proxy between the peers):

- ``duplex`` + ``duplex``: both peers send ``--total`` bytes at once, each on a subchannel it
  opens, and answer ``!`` once the other's stream has fully arrived; the left peer (the one
  that allocated the code) closes once it has the right's stream and the right's ``!``, the
  right one once it has the left's stream and the left has exited (so neither closes while
  the other still needs the link, however often it is cut). Each reports the SHA-256 of what
  it sent and received.
- ``echo-steady`` + ``echo-server``: one message echoed every 50 ms for ``--duration`` seconds
  on one subchannel, however long an exchange waits for the link to come back.
- ``open-while-down`` + ``collect``: once its dilation status says the link is gone, the opener
  opens ``--count`` subchannels, writes one message on each and closes it, all before the link
  is back; the collector reports each subchannel's digest in the order they were opened.
- ``close-first`` + ``await-peer-close``: the second peer keeps its wormhole open and waits for
  its dilation status to reach ``StoppedPeer`` after the first closed its wormhole.

For recovery measurements (tests/support/peer_stream.py): ``stream-send`` + ``stream-recv``, a 1 KiB
record every 10 ms with its sequence number and send time, the receiver reporting exactly-once
delivery and the delivery gaps around the moment the parent broke the network.

Status events carry ``t`` (``time.time()``) so the test can time reconnections.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from tests.support.peer_stream import stream_recv, stream_send
from tests.support.waits import sleep

SETTLE_SECONDS = 0.2


class ScenarioError(Exception):
    """The scenario saw something other than what the protocol promises."""


def payload(seed: str, index: int, size: int) -> bytes:
    """The deterministic message ``index`` of ``size`` bytes for ``seed``."""
    return random.Random(f"{seed}/{index}/{size}").randbytes(size)


class Peer:
    """
    One peer's run: create the wormhole, get or use the code, dilate, run the scenario, close.

    ``phase`` always says what the peer is waiting for (reported on error and timeout).
    """

    def __init__(self, reactor: Any, args: Any, emit: Callable[..., None], stdin: Any) -> None:
        self.reactor = reactor
        self.args = args
        self.emit = emit
        self.stdin = stdin
        self.phase = "setup"
        self.wormhole: Any = None
        self.dilated: Any = None
        self._closed = False
        self._last_status: dict[str, Any] | None = None
        self.scenario = SCENARIOS[args.scenario]
        self.subprotocols: list[str] = args.subprotocols or list(self.scenario.subprotocols)

    def run(self) -> Deferred[None]:
        """Run the whole peer; the Deferred fails if any step does."""
        return Deferred.fromCoroutine(self._run())

    async def _run(self) -> None:
        import wormhole

        args = self.args
        self.phase = "code"
        self.wormhole = w = wormhole.create(
            args.appid,
            args.mailbox,
            self.reactor,
            dilation=True if self.scenario.dilation else None,
        )
        if args.allocate:
            w.allocate_code()
        else:
            w.set_code(args.code)
        self.emit("code", code=await w.get_code(), t=time.time())
        if self.scenario.dilate_first:
            self.phase = "when_dilated"
            await self.dilate().when_dilated()
            self.emit("dilated", t=time.time())
        self.phase = f"scenario {args.scenario}"
        result = await self.scenario.run(self)
        self.emit("result", **result)
        await self.close()

    async def close(self) -> None:
        """Close the wormhole (once) and report ``closed``; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self.phase = "close"
        await self.wormhole.close()
        self.emit("closed")

    def dilate(self) -> Any:
        """``w.dilate()`` with this peer's ``--relay`` and ``--no-listen``; returns the result."""
        extra: dict[str, Any] = {}
        if getattr(self.args, "ping_interval", None):
            extra["ping_interval"] = float(self.args.ping_interval)
        self.dilated = self.wormhole.dilate(
            transit_relay_location=relay_location(self.args.relay),
            no_listen=self.args.no_listen,
            on_status_update=self._status_update,
            **extra,
        )
        return self.dilated

    def _status_update(self, status: Any) -> None:
        connection = status.peer_connection
        summary = {
            "generation": status.generation,
            "peer": type(connection).__name__,
            "hint_description": getattr(connection, "hint_description", None),
        }
        if summary != self._last_status:
            self._last_status = summary
            self.emit("status", **summary, t=time.time())

    async def wait_for_status(self, *peers: str) -> str:
        """Wait until the dilation status's ``peer_connection`` is one of ``peers`` (type
        names such as ``"StoppedPeer"``); returns the one seen."""
        while True:
            current = (self._last_status or {}).get("peer")
            if current in peers:
                return str(current)
            await sleep(0.01, self.reactor)

    @property
    def is_left(self) -> bool:
        """True for the peer that allocated the code (run_peer_pair's left peer)."""
        return bool(self.args.allocate)

    async def connect(self, name: str, factory: Factory) -> Any:
        """Open a subchannel for subprotocol ``name``; returns the connected protocol."""
        return await self.dilated.connector_for(name).connect(factory)

    async def listen(self, name: str, factory: Factory) -> None:
        """Listen for subchannels of subprotocol ``name``."""
        await self.dilated.listener_for(name).listen(factory)


# ---------------------------------------------------------------------------------------------
# echo


class EchoServer(Protocol):
    """Echoes every ``dataReceived`` back with exactly one ``write``."""

    def __init__(self, on_finished: Callable[[EchoServer], None]) -> None:
        self._on_finished = on_finished
        self.messages = 0
        self.bytes = 0
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.messages += 1
        self.bytes += len(data)
        self.transport.write(data)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost = True
        self._on_finished(self)


@implementer(IHalfCloseableProtocol)
class HalfCloseEchoServer(EchoServer):
    """An ``EchoServer`` that closes its write side (soon) after the peer closed its own."""

    reactor: Any = None

    def readConnectionLost(self) -> None:
        self.reactor.callLater(0, self.transport.loseWriteConnection)

    def writeConnectionLost(self) -> None:
        self._on_finished(self)


class EchoServerFactory(Factory):
    """Builds echo protocols; ``all_finished`` fires once ``expected`` subchannels ended."""

    def __init__(self, reactor: Any, expected: int, half_close: bool) -> None:
        self.reactor = reactor
        self.expected = expected
        self.half_close = half_close
        self.finished: list[EchoServer] = []
        self.built: list[EchoServer] = []
        self.all_finished: Deferred[None] = Deferred()

    def buildProtocol(self, addr: Any) -> EchoServer:
        if self.half_close:
            p: EchoServer = HalfCloseEchoServer(self._finished)
            p.reactor = self.reactor
        else:
            p = EchoServer(self._finished)
        p.factory = self
        self.built.append(p)
        return p

    def _finished(self, p: EchoServer) -> None:
        self.finished.append(p)
        if len(self.finished) == self.expected and not self.all_finished.called:
            self.all_finished.callback(None)


class EchoClient(Protocol):
    """Sends messages one at a time and checks each echo's SHA-256 and boundaries."""

    def __init__(self) -> None:
        self.lost: Deferred[None] = Deferred()
        self.read_lost: Deferred[None] = Deferred()
        self._waiting: Deferred[None] | None = None
        self._want = 0
        self._received = 0
        self._digest = hashlib.sha256()
        self.max_chunks = 0
        self._chunks = 0
        self.stray = 0

    def dataReceived(self, data: bytes) -> None:
        if self._waiting is None:
            self.stray += len(data)
            return
        self._digest.update(data)
        self._received += len(data)
        self._chunks += 1
        if self._received >= self._want:
            d, self._waiting = self._waiting, None
            d.callback(None)

    async def exchange(self, message: bytes) -> None:
        """Write ``message`` once and wait for its whole echo; raises ``ScenarioError``."""
        self._want, self._received, self._chunks = len(message), 0, 0
        self._digest = hashlib.sha256()
        self._waiting = Deferred()
        self.transport.write(message)
        await self._waiting
        self.max_chunks = max(self.max_chunks, self._chunks)
        if self._received != len(message):
            raise ScenarioError(f"sent {len(message)} B, echo was {self._received} B")
        if self._digest.digest() != hashlib.sha256(message).digest():
            raise ScenarioError(f"echo of a {len(message)} B message differs (SHA-256)")

    async def close(self) -> None:
        """Close fully and wait for ``connectionLost`` (the peer's CLOSE arrived)."""
        self.transport.loseConnection()
        await self.lost

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


@implementer(IHalfCloseableProtocol)
class HalfCloseEchoClient(EchoClient):
    """An ``EchoClient`` that half-closes: its write side first, then waits for the read side."""

    async def close(self) -> None:
        """Close the write side and wait until the peer closes its own (``readConnectionLost``)."""
        self.transport.loseWriteConnection()
        await self.read_lost

    def readConnectionLost(self) -> None:
        self.read_lost.callback(None)

    def writeConnectionLost(self) -> None:
        pass


async def _one_client(peer: Peer, index: int) -> dict[str, int]:
    name = peer.subprotocols[index % len(peer.subprotocols)]
    factory = Factory.forProtocol(HalfCloseEchoClient if peer.args.half_close else EchoClient)
    client: EchoClient = await peer.connect(name, factory)
    total = 0
    for number, size in enumerate(peer.args.sizes):
        peer.phase = f"echo subchannel {index} ({name}) message {number} ({size} B)"
        await client.exchange(payload(peer.args.seed, index * 1000 + number, size))
        total += size
    peer.phase = f"closing echo subchannel {index}"
    await client.close()
    if client.stray:
        raise ScenarioError(f"subchannel {index}: {client.stray} B arrived unasked")
    return {"bytes": total, "max_chunks": client.max_chunks}


async def _echo_clients(peer: Peer) -> dict[str, Any]:
    runs = [Deferred.fromCoroutine(_one_client(peer, i)) for i in range(peer.args.count)]
    outcomes: list[dict[str, int]] = await gatherResults(runs, consumeErrors=True)
    return {
        "opened": len(outcomes),
        "messages": len(outcomes) * len(peer.args.sizes),
        "bytes": sum(o["bytes"] for o in outcomes),
        "max_chunks_per_message": max(o["max_chunks"] for o in outcomes),
        "half_close": peer.args.half_close,
    }


async def _echo_listen(peer: Peer) -> EchoServerFactory:
    factory = EchoServerFactory(peer.reactor, peer.args.count, peer.args.half_close)
    for name in peer.subprotocols:
        await peer.listen(name, factory)
    return factory


async def _echo_served(peer: Peer, factory: EchoServerFactory) -> dict[str, Any]:
    peer.phase = f"echo server: {len(factory.finished)} of {peer.args.count} subchannels ended"
    peer.stdin.finished.addCallback(lambda _: _peer_left_early(peer, factory))
    await factory.all_finished
    return {
        "served": len(factory.finished),
        "messages": sum(p.messages for p in factory.finished),
        "bytes": sum(p.bytes for p in factory.finished),
    }


def _peer_left_early(peer: Peer, factory: EchoServerFactory) -> None:
    if not factory.all_finished.called:
        factory.all_finished.errback(
            ScenarioError(
                f"the other peer finished after {len(factory.built)} subchannels opened and "
                f"{len(factory.finished)} of {peer.args.count} ended"
            )
        )


async def echo_server(peer: Peer) -> dict[str, Any]:
    """Listen on every subprotocol; echo until ``--count`` subchannels have ended."""
    return await _echo_served(peer, await _echo_listen(peer))


async def echo_client(peer: Peer) -> dict[str, Any]:
    """Open ``--count`` subchannels at once; on each, exchange every ``--sizes`` message."""
    return await _echo_clients(peer)


async def echo_both(peer: Peer) -> dict[str, Any]:
    """Be an echo server and an echo client at the same time."""
    factory = await _echo_listen(peer)
    client, server = await gatherResults(
        [
            Deferred.fromCoroutine(_echo_clients(peer)),
            Deferred.fromCoroutine(_echo_served(peer, factory)),
        ],
        consumeErrors=True,
    )
    return {"client": client, "server": server}


# ---------------------------------------------------------------------------------------------
# bulk


@implementer(IPushProducer)
class BulkSender(Protocol):
    """Writes ``total`` bytes in ``chunk`` pieces as a push producer, then closes."""

    close_when_done = True  # loseConnection() once everything is written

    def __init__(
        self, reactor: Any, seed: str, total: int, chunk: int, cut_interval: float = 0.0
    ) -> None:
        self._reactor = reactor
        self._cutter = LinkCutter(cut_interval)
        self._seed = seed
        self._remaining = total
        self._chunk = chunk
        self._index = 0
        self._paused = False
        self._scheduled = False
        self._closed = False
        self.digest = hashlib.sha256()
        self.pauses = 0
        self.max_unacked: int | None = None
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)
        self._cutter.start(self._reactor, self.transport)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._reactor.callLater(0, self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        for _ in range(16):  # then let the reactor breathe
            if self._paused or self._remaining <= 0:
                break
            piece = payload(self._seed, self._index, min(self._chunk, self._remaining))
            self._index += 1
            self._remaining -= len(piece)
            self.digest.update(piece)
            self.transport.write(piece)
        self._note_unacked()
        if self._remaining <= 0:
            if not self._closed:
                self._closed = True
                self.transport.unregisterProducer()
                if self.close_when_done:
                    self.transport.loseConnection()
        elif not self._paused:
            self._schedule()

    def _note_unacked(self) -> None:
        """txdilation only: the largest unacknowledged outbound backlog seen, in bytes."""
        mux = getattr(getattr(self.transport, "_manager", None), "multiplexer", None)
        if mux is not None:
            self.max_unacked = max(self.max_unacked or 0, mux.traffic_stats().queue_bytes)

    def pauseProducing(self) -> None:
        self._paused = True
        self.pauses += 1

    def resumeProducing(self) -> None:
        self._paused = False
        if self._remaining > 0:
            self._schedule()

    def stopProducing(self) -> None:
        self._paused = True

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self._cutter.stop()
        self.lost.callback(None)


def relay_location(relays: list[str] | None) -> str | list[str] | None:
    """``--relay`` as ``dilate()`` takes it: None, one string (stock's form) or a list."""
    if not relays:
        return None
    return relays[0] if len(relays) == 1 else relays


class LinkCutter:
    """Aborts the dilated L2 connection (not the subchannel) every ``interval`` seconds until
    stopped, through the seam both implementations share: ``transport._manager._connection``
    (its ``transport.abortConnection()`` loses whatever was still buffered, as a real cut does).
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.cuts = 0
        self._call: Any = None

    def start(self, reactor: Any, transport: Any) -> None:
        if self.interval > 0:
            self._call = reactor.callLater(self.interval, self._cut, reactor, transport)

    def _cut(self, reactor: Any, transport: Any) -> None:
        self.cut_now(transport)
        self._call = reactor.callLater(self.interval, self._cut, reactor, transport)

    def cut_now(self, transport: Any) -> None:
        """Abort the L2 connection under ``transport`` (a subchannel's) now, if there is one."""
        connection = getattr(transport._manager, "_connection", None)
        if connection is not None and connection.transport is not None:
            self.cuts += 1
            connection.transport.abortConnection()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class BulkReceiver(Protocol):
    """Hashes everything it receives; ``done`` fires at ``connectionLost``.

    A slow reader when asked: it reads nothing for ``read_stall`` seconds, then at most
    ``read_rate`` bytes per second (0: as fast as it comes), pausing its subchannel between.
    """

    def __init__(
        self,
        reactor: Any = None,
        cut_interval: float = 0.0,
        read_rate: float = 0.0,
        read_stall: float = 0.0,
    ) -> None:
        self._reactor = reactor
        self._cutter = LinkCutter(cut_interval)
        self._read_rate = read_rate
        self._read_stall = read_stall
        self._started = 0.0
        self._holding = False
        self.holds = 0
        self.digest = hashlib.sha256()
        self.bytes = 0
        self.done: Deferred[None] = Deferred()
        self.cut_at_close = False

    def connectionMade(self) -> None:
        self._cutter.start(self._reactor, self.transport)
        if self._reactor is not None:
            self._started = self._reactor.seconds()
        if self._read_stall > 0:
            self._hold(self._read_stall)

    def dataReceived(self, data: bytes) -> None:
        self.digest.update(data)
        self.bytes += len(data)
        if self._read_rate > 0 and not self._holding:
            due = self._started + self._read_stall + self.bytes / self._read_rate
            now = self._reactor.seconds()  # once: two readings could straddle ``due``
            if due > now:
                self._hold(due - now)

    def _hold(self, seconds: float) -> None:
        self._holding = True
        self.holds += 1
        self.transport.pauseProducing()
        self._reactor.callLater(seconds, self._release)

    def _release(self) -> None:
        self._holding = False
        if not self.done.called:
            self.transport.resumeProducing()

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self._cutter.stop()
        if self.cut_at_close:  # our answering CLOSE is still in the transport's buffer: lost
            self._cutter.cut_now(self.transport)
        self.done.callback(None)


async def bulk_send(peer: Peer) -> dict[str, Any]:
    """Send ``--total`` bytes on one subchannel, then close and wait for the peer's CLOSE."""
    args = peer.args
    factory = Factory.forProtocol(
        lambda: BulkSender(peer.reactor, args.seed, args.total, args.chunk, args.cut_interval)
    )
    started = time.monotonic()
    peer.phase = "bulk-send: sending"
    sender: BulkSender = await peer.connect(peer.subprotocols[0], factory)
    await sender.lost
    seconds = time.monotonic() - started
    return {
        "bytes": args.total,
        "sha256": sender.digest.hexdigest(),
        "seconds": round(seconds, 3),
        "pauses": sender.pauses,
        "cuts": sender._cutter.cuts,
        "vm_hwm_kib": vm_hwm_kib(),
        "max_unacked_bytes": sender.max_unacked,
    }


async def bulk_recv(peer: Peer) -> dict[str, Any]:
    """Receive one subchannel to its end; check ``--total`` and report the SHA-256."""
    receivers: list[BulkReceiver] = []
    first: Deferred[BulkReceiver] = Deferred()

    def build() -> BulkReceiver:
        args = peer.args
        receiver = BulkReceiver(
            peer.reactor,
            args.cut_interval,
            getattr(args, "read_rate", 0.0),
            getattr(args, "read_stall", 0.0),
        )
        receiver.cut_at_close = bool(getattr(args, "cut_at_close", False))
        receivers.append(receiver)
        if not first.called:
            first.callback(receiver)
        return receiver

    await peer.listen(peer.subprotocols[0], Factory.forProtocol(build))
    peer.phase = "bulk-recv: waiting for the subchannel"
    receiver = await first
    started = time.monotonic()
    peer.phase = "bulk-recv: receiving"
    await receiver.done
    seconds = time.monotonic() - started
    if receiver.bytes != peer.args.total:
        raise ScenarioError(f"received {receiver.bytes} B, expected {peer.args.total} B")
    if peer.args.linger:
        # let our CLOSE reply reach the sender (perhaps over a new connection) before we close
        peer.phase = "bulk-recv: lingering"
        await sleep(peer.args.linger, peer.reactor)
    return {
        "bytes": receiver.bytes,
        "sha256": receiver.digest.hexdigest(),
        "seconds": round(seconds, 3),
        "subchannels": len(receivers),
        "cuts": receiver._cutter.cuts,
        "holds": receiver.holds,
        "vm_hwm_kib": vm_hwm_kib(),
    }


def vm_hwm_kib() -> int | None:
    """This process's peak resident memory (VmHWM, KiB), or None where /proc has no such line."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------
# closing and old peers


async def _settle(peer: Peer) -> None:
    """Let deliveries scheduled by ``w.close()`` for later reactor turns happen."""
    await sleep(SETTLE_SECONDS, peer.reactor)


async def close_first(peer: Peer) -> dict[str, Any]:
    """
    Echo one message on a subchannel, then close the wormhole with the subchannel still open,
    and report whether the subchannel's protocol got ``connectionLost`` (stock: it does not).
    """
    client: EchoClient = await peer.connect(peer.subprotocols[0], Factory.forProtocol(EchoClient))
    peer.phase = "close-first: echo"
    await client.exchange(payload(peer.args.seed, 0, peer.args.sizes[0]))
    lost_before = client.lost.called
    await peer.close()
    await _settle(peer)
    return {
        "echoed": peer.args.sizes[0],
        "connection_lost_before_close": int(lost_before),
        "connection_lost_after_close": int(client.lost.called),
    }


async def close_second(peer: Peer) -> dict[str, Any]:
    """
    Echo on a subchannel until the other peer has exited (stdin EOF), then close the wormhole
    with the subchannel still open; report how many subchannels saw ``connectionLost``.
    """
    factory = EchoServerFactory(peer.reactor, expected=1, half_close=False)
    await peer.listen(peer.subprotocols[0], factory)
    peer.phase = "close-second: waiting for the other peer to finish"
    await peer.stdin.finished
    lost_before = len(factory.finished)
    await peer.close()
    await _settle(peer)
    return {
        "opened": len(factory.built),
        "bytes": sum(p.bytes for p in factory.built),
        "connection_lost_before_close": lost_before,
        "connection_lost_after_close": len(factory.finished),
    }


async def expect_old_peer(peer: Peer) -> dict[str, Any]:
    """Dilate against a peer without dilation: ``when_dilated()`` must fail."""
    from wormhole._dilation.manager import OldPeerCannotDilateError

    peer.phase = "expect-old-peer: when_dilated"
    try:
        await peer.dilate().when_dilated()
    except OldPeerCannotDilateError as e:
        return {"when_dilated": type(e).__name__}
    raise ScenarioError("when_dilated() succeeded against a peer without dilation")


async def no_dilation(peer: Peer) -> dict[str, Any]:
    """Exchange versions without dilation, then wait for the other peer to finish."""
    versions = await peer.wormhole.get_versions()
    peer.phase = "no-dilation: waiting for the other peer to finish"
    await peer.stdin.finished
    return {"peer_can_dilate": versions.get("can-dilate", [])}


# ---------------------------------------------------------------------------------------------
# fault-injection scenarios


def stream_seed(seed: str, left: bool) -> str:
    """The seed of the stream the left (or right) peer sends in ``duplex``."""
    return f"{seed}/{'left' if left else 'right'}"


class DuplexSender(BulkSender):
    """A ``BulkSender`` that keeps its subchannel open and waits for the receiver's ``!``."""

    close_when_done = False

    def __init__(self, reactor: Any, seed: str, total: int, chunk: int) -> None:
        super().__init__(reactor, seed, total, chunk)
        self.confirmed: Deferred[None] = Deferred()
        self.extra = 0

    def dataReceived(self, data: bytes) -> None:
        if data == b"!" and not self.confirmed.called:
            self.confirmed.callback(None)
        else:
            self.extra += len(data)


class DuplexReceiver(Protocol):
    """Hashes ``total`` bytes, then answers ``!``; more than ``total`` is an error."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bytes = 0
        self.digest = hashlib.sha256()
        self.done: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.bytes += len(data)
        self.digest.update(data)
        if self.bytes >= self.total and not self.done.called:
            self.transport.write(b"!")
            self.done.callback(None)


def _max_generation(peer: Peer) -> int:
    return int((peer._last_status or {}).get("generation") or 0)


async def duplex(peer: Peer) -> dict[str, Any]:
    """Both directions at once (see the module docstring)."""
    args = peer.args
    receivers: list[DuplexReceiver] = []
    first: Deferred[DuplexReceiver] = Deferred()

    def build() -> DuplexReceiver:
        receiver = DuplexReceiver(args.total)
        receivers.append(receiver)
        if not first.called:
            first.callback(receiver)
        return receiver

    await peer.listen("bulk", Factory.forProtocol(build))
    started = time.monotonic()
    seed = stream_seed(args.seed, peer.is_left)
    sender: DuplexSender = await peer.connect(
        "bulk",
        Factory.forProtocol(lambda: DuplexSender(peer.reactor, seed, args.total, args.chunk)),
    )
    peer.phase = "duplex: receiving the other stream"
    receiver = await first
    await receiver.done
    if peer.is_left:
        # Close only once the right peer has all of our stream; it needs nothing else.
        peer.phase = "duplex: waiting for the other peer to confirm our stream"
        await sender.confirmed
    else:
        # The left peer exits once it has all of our stream (and we have all of its): until
        # then it may still need our link, so do not close first.
        peer.phase = "duplex: waiting for the left peer to exit"
        await peer.stdin.finished
    seconds = time.monotonic() - started
    if receiver.bytes != args.total:
        raise ScenarioError(f"received {receiver.bytes} B, expected {args.total} B")
    if sender.extra:
        raise ScenarioError(f"{sender.extra} unexpected bytes came back on our stream")
    return {
        "sent": args.total,
        "received": receiver.bytes,
        "sent_sha256": sender.digest.hexdigest(),
        "received_sha256": receiver.digest.hexdigest(),
        "subchannels": len(receivers),
        "generation": _max_generation(peer),
        "seconds": round(seconds, 3),
    }


async def echo_steady(peer: Peer) -> dict[str, Any]:
    """Exchange a 512-byte message every 50 ms for ``--duration`` seconds, then close."""
    client: EchoClient = await peer.connect(peer.subprotocols[0], Factory.forProtocol(EchoClient))
    ends = time.monotonic() + peer.args.duration
    exchanges = 0
    longest = 0.0
    while time.monotonic() < ends:
        peer.phase = f"echo-steady: exchange {exchanges}"
        began = time.monotonic()
        await client.exchange(payload(peer.args.seed, exchanges, 512))
        longest = max(longest, time.monotonic() - began)
        exchanges += 1
        await sleep(0.05, peer.reactor)
    peer.phase = "echo-steady: closing"
    await client.close()
    return {
        "exchanges": exchanges,
        "longest_exchange": round(longest, 3),
        "generation": _max_generation(peer),
    }


class Collected(Protocol):
    """Keeps the digest of one subchannel's stream; reports to its factory when it ends."""

    def __init__(self, finished: Callable[[Collected], None]) -> None:
        self._finished = finished
        self.digest = hashlib.sha256()
        self.bytes = 0

    def dataReceived(self, data: bytes) -> None:
        self.digest.update(data)
        self.bytes += len(data)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self._finished(self)


def collected_size(index: int) -> int:
    """The message size ``open-while-down`` writes on subchannel ``index``."""
    return 1000 + 37_000 * index


async def open_while_down(peer: Peer) -> dict[str, Any]:
    """Once the link is gone, open, write and close ``--count`` subchannels (module doc)."""
    peer.phase = "open-while-down: waiting for the link to go down"
    await peer.wait_for_status("ConnectedPeer")  # stock reports it after when_dilated()
    await peer.wait_for_status("ReconnectingPeer", "ConnectingPeer")
    status_at_open = peer._last_status["peer"] if peer._last_status else None
    clients = []
    for index in range(peer.args.count):
        client: EchoClient = await peer.connect(
            peer.subprotocols[0], Factory.forProtocol(EchoClient)
        )
        client.transport.write(payload(peer.args.seed, index, collected_size(index)))
        client.transport.loseConnection()
        clients.append(client)
    status_after_close = peer._last_status["peer"] if peer._last_status else None
    peer.phase = "open-while-down: waiting for the peer's CLOSE replies"
    await gatherResults([c.lost for c in clients])
    return {
        "opened": len(clients),
        "status_at_open": status_at_open,
        "status_after_close": status_after_close,
    }


async def collect(peer: Peer) -> dict[str, Any]:
    """Listen; report the digest of each of ``--count`` subchannels, in the order opened."""
    built: list[Collected] = []
    finished: list[Collected] = []
    all_done: Deferred[None] = Deferred()

    def on_finished(p: Collected) -> None:
        finished.append(p)
        if len(finished) == peer.args.count and not all_done.called:
            all_done.callback(None)

    def build() -> Collected:
        p = Collected(on_finished)
        built.append(p)
        return p

    await peer.listen(peer.subprotocols[0], Factory.forProtocol(build))
    peer.phase = "collect: waiting for the subchannels"
    await all_done
    return {
        "digests": [p.digest.hexdigest() for p in built],
        "bytes": [p.bytes for p in built],
    }


async def await_peer_close(peer: Peer) -> dict[str, Any]:
    """Echo on the other peer's subchannel; after it closed its wormhole, wait for our
    dilation status to reach StoppedPeer (we do not close ours first)."""
    factory = EchoServerFactory(peer.reactor, expected=1, half_close=False)
    await peer.listen(peer.subprotocols[0], factory)
    peer.phase = "await-peer-close: waiting for the link to go"
    await peer.wait_for_status("ConnectedPeer")
    await peer.wait_for_status("ReconnectingPeer", "StoppedPeer")
    lost_at = time.monotonic()
    peer.phase = "await-peer-close: waiting for StoppedPeer"
    await peer.wait_for_status("StoppedPeer")
    return {
        "seconds_to_stopped": round(time.monotonic() - lost_at, 3),
        "subchannels_ended": len(factory.finished),
        "echoed": sum(p.bytes for p in factory.built),
    }


@dataclass(frozen=True)
class Scenario:
    """A scenario function and how ``Peer`` prepares for it."""

    run: Callable[[Peer], Awaitable[dict[str, Any]]]
    subprotocols: tuple[str, ...] = ("echo",)
    dilation: bool = True  # create the wormhole with dilation=True
    dilate_first: bool = True  # dilate and wait for when_dilated() before run


SCENARIOS: dict[str, Scenario] = {
    "echo-server": Scenario(echo_server),
    "echo-client": Scenario(echo_client),
    "echo-both": Scenario(echo_both),
    "bulk-send": Scenario(bulk_send, subprotocols=("bulk",)),
    "bulk-recv": Scenario(bulk_recv, subprotocols=("bulk",)),
    "close-first": Scenario(close_first, subprotocols=("close",)),
    "close-second": Scenario(close_second, subprotocols=("close",)),
    "expect-old-peer": Scenario(expect_old_peer, dilate_first=False),
    "no-dilation": Scenario(no_dilation, dilation=False, dilate_first=False),
    "duplex": Scenario(duplex, subprotocols=("bulk",)),
    "echo-steady": Scenario(echo_steady),
    "open-while-down": Scenario(open_while_down, subprotocols=("collect",)),
    "collect": Scenario(collect, subprotocols=("collect",)),
    "await-peer-close": Scenario(await_peer_close, subprotocols=("close",)),
    "stream-send": Scenario(stream_send, subprotocols=("stream",)),
    "stream-recv": Scenario(stream_recv, subprotocols=("stream",)),
}
