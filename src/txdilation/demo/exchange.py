"""The demo's traffic: :class:`Exchange`, deterministic data one way and its hash the other.

Layer: application (``txdilation demo``; shared with the tests that forward traffic through
sessions). An :class:`Exchange` sends ``send_total`` bytes derived from a seed (distinct 64 KiB
blocks, in an order that varies) as a push producer, then half-closes; it hashes what it reads
(SHA-256) until the end of input. Comparing the digests of both ends shows every byte arrived
once, in order.

Invariants: what an :class:`Exchange` sends depends only on its seed and total; it writes only
while its consumer wants data (at most ``_WRITES_PER_TURN`` chunks per reactor turn); ``done``
fires once both directions have ended.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = ["CHUNK", "Exchange", "ExchangeFactory"]

CHUNK = 64 * 1024
_BLOCKS = 16
_WRITES_PER_TURN = 16


def _blocks(seed: bytes) -> list[bytes]:
    """16 distinct 64 KiB blocks derived from ``seed`` (their order in a stream varies too)."""
    return [hashlib.sha256(seed + bytes([i])).digest() * (CHUNK // 32) for i in range(_BLOCKS)]


@implementer(IHalfCloseableProtocol, IPushProducer)
class Exchange(Protocol):
    """Sends ``send_total`` bytes derived from ``seed`` through a push producer, then closes
    its write side; hashes what it reads until end of input. ``done`` fires (with the
    protocol) once both directions have ended. :meth:`hold_at` stops sending at a byte count
    until :meth:`release` (to act while the earlier bytes are still in flight).

    :ivar sent: bytes written so far. :ivar received: bytes read so far.
    :ivar sent_digest: SHA-256 of what was written. :ivar received_digest: of what was read.
    """

    def __init__(self, reactor: Any, seed: bytes, send_total: int) -> None:
        self._reactor = reactor
        self._blocks = _blocks(seed)
        self.send_total = send_total
        self.sent = 0
        self.received = 0
        self.sent_digest = hashlib.sha256()
        self.received_digest = hashlib.sha256()
        self.done: Deferred[Exchange] = Deferred()
        self.started = 0.0
        self._index = 0
        self._paused = False
        self._scheduled = False
        self._write_closed = False
        self._read_closed = False
        self._hold_at: int | None = None
        self._held: Deferred[None] | None = None

    def hold_at(self, count: int) -> Deferred[None]:
        """Stop sending once ``count`` bytes were written; fires then (at once if already)."""
        self._hold_at = count
        self._held = Deferred()
        held = self._held
        if self.sent >= count:
            self._held = None
            held.callback(None)
        return held

    def release(self) -> None:
        """Send on after :meth:`hold_at`."""
        self._hold_at = None
        self._schedule()

    def _limit(self) -> int:
        return self.send_total if self._hold_at is None else min(self.send_total, self._hold_at)

    def _holding(self) -> bool:
        if self._hold_at is None or self.sent < self._hold_at:
            return False
        held, self._held = self._held, None
        if held is not None:
            held.callback(None)
        return True

    def connectionMade(self) -> None:
        self.started = time.perf_counter()
        self.transport.registerProducer(self, True)  # type: ignore[union-attr]
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._write_closed:
            self._scheduled = True
            self._reactor.callLater(0, self._produce)

    def _produce(self) -> None:
        self._scheduled = False
        transport: Any = self.transport
        for _ in range(_WRITES_PER_TURN):
            if self._paused or self.sent >= self.send_total or self._write_closed:
                break
            if self._holding():
                return
            block = self._blocks[(self._index * 7 + 3) % _BLOCKS]
            limit = (
                self.send_total if self._hold_at is None else min(self.send_total, self._hold_at)
            )
            piece = block[: min(CHUNK, limit - self.sent)]
            self._index += 1
            self.sent += len(piece)
            self.sent_digest.update(piece)
            transport.write(piece)
        if self.sent >= self.send_total and not self._write_closed:
            self._write_closed = True
            transport.unregisterProducer()
            transport.loseWriteConnection()
        elif not self._paused:
            self._schedule()

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        self._schedule()

    def stopProducing(self) -> None:
        self._paused = True

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)
        self.received_digest.update(data)

    def readConnectionLost(self) -> None:
        self._read_closed = True
        self._maybe_done()

    def writeConnectionLost(self) -> None:
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._read_closed and self._write_closed and self.transport is not None:
            self.transport.loseConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if not self.done.called:
            self.done.callback(self)


class ExchangeFactory(Factory):
    """Builds an :class:`Exchange` per connection (all with the same seed and total); keeps
    them in ``built`` and calls ``on_built`` with each."""

    def __init__(
        self,
        reactor: Any,
        seed: bytes,
        send_total: int,
        on_built: Callable[[Exchange], object] | None = None,
    ) -> None:
        self._reactor = reactor
        self._seed = seed
        self._send_total = send_total
        self._on_built = on_built
        self.built: list[Exchange] = []

    def buildProtocol(self, addr: object) -> Exchange:
        protocol = Exchange(self._reactor, self._seed, self._send_total)
        protocol.factory = self
        self.built.append(protocol)
        if self._on_built is not None:
            self._on_built(protocol)
        return protocol
