"""The limits a Dilation implementation runs against: ``python -m benchmarks.limits --help``.

Layer: benchmark infrastructure. Three modes, each printing one JSON line:

- ``tcp-sink`` + ``tcp-source``: raw Twisted TCP between two processes over 127.0.0.1, with
  the very sender and receiver protocols of the Dilation bulk figures (``benchmarks.peer``): the
  source writes ``--total`` bytes in ``--chunk`` writes as a push producer, the sink counts
  (``--hash``: and hashes with SHA-256); ``--buffer`` sets both transports' read, buffer and send
  sizes (as txdilation's L2 does). The sink prints ``{"port": N}`` first, then its result.
- ``crypto``: one core's ChaCha20-Poly1305 (``cryptography``) and Noise transport (our
  :class:`~txdilation.link.noise.NoiseSession`) encrypt/decrypt of 65519-byte pieces, and
  SHA-256 of 64 KiB blocks, in MB per CPU-second (1 MB = 10**6 bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.protocol import ClientFactory, Factory

from benchmarks.peer import BulkReceiver, BulkSender, bulk_stream, usage

PIECE = 65519


def emit(**fields: Any) -> None:
    """Write one JSON line to stdout and flush it."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _set_buffers(transport: Any, size: int) -> None:
    """Give the TCP transport ``size``-byte reads, buffer and sends (0: Twisted's defaults)."""
    if size:
        transport.bufferSize = transport.SEND_LIMIT = size


class Sink(BulkReceiver):
    """A :class:`~benchmarks.peer.BulkReceiver` that reports and stops at ``total`` bytes."""

    def __init__(self, reactor: Any, total: int, hashing: bool, buffer: int) -> None:
        super().__init__(total, hashing)
        self._reactor = reactor
        self._buffer = buffer

    def connectionMade(self) -> None:
        _set_buffers(self.transport, self._buffer)

    def dataReceived(self, data: bytes) -> None:
        super().dataReceived(data)
        if self.last and self._reactor.running:
            emit(
                first=self.first,
                last=self.last,
                bytes=self.bytes,
                transfer_cpu=self.cpu_at_last - self.cpu_at_first,
                **usage(),
            )
            self._reactor.stop()


class Source(BulkSender):
    """A :class:`~benchmarks.peer.BulkSender` of ``total`` bytes that reports when done."""

    def __init__(self, reactor: Any, total: int, chunk: int, buffer: int) -> None:
        super().__init__(reactor, bulk_stream("raw-tcp", total, chunk))
        self._reactor = reactor
        self._buffer = buffer

    def connectionMade(self) -> None:
        _set_buffers(self.transport, self._buffer)
        self.cpu0 = time.process_time()
        super().connectionMade()

    def connectionLost(self, reason: Any = None) -> None:
        emit(started=self.started, transfer_cpu=time.process_time() - self.cpu0, **usage())
        self._reactor.stop()


def tcp_sink(args: argparse.Namespace) -> None:
    from twisted.internet import reactor as _reactor

    reactor: Any = _reactor
    factory = Factory.forProtocol(lambda: Sink(reactor, args.total, args.hash, args.buffer))
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    emit(port=port.getHost().port)
    reactor.callLater(args.timeout, reactor.stop)
    reactor.run()


def tcp_source(args: argparse.Namespace) -> None:
    from twisted.internet import reactor as _reactor

    reactor: Any = _reactor
    source = Source(reactor, args.total, args.chunk, args.buffer)
    factory = ClientFactory.forProtocol(lambda: source)
    reactor.connectTCP("127.0.0.1", args.port, factory)
    reactor.callLater(args.timeout, reactor.stop)
    reactor.run()


def _rate(work: Callable[[], None], nbytes: int, seconds: float = 0.4) -> float:
    """MB per CPU-second of ``work`` (which processes ``nbytes``), timed for ``seconds``."""
    work()
    rounds = 0
    cpu0 = time.process_time()
    while (spent := time.process_time() - cpu0) < seconds:
        work()
        rounds += 1
    return rounds * nbytes / spent / 1e6


def crypto(args: argparse.Namespace) -> None:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    from txdilation.link.noise import NoiseSession
    from txdilation.wire.roles import FOLLOWER, LEADER

    plaintext = os.urandom(PIECE)
    aead = ChaCha20Poly1305(os.urandom(32))
    nonce = bytes(12)
    ciphertext = aead.encrypt(nonce, plaintext, None)
    leader, follower = NoiseSession(LEADER, bytes(32)), NoiseSession(FOLLOWER, bytes(32))
    message = leader.start()
    assert message is not None
    reply = follower.receive_handshake(message)
    assert reply is not None
    leader.receive_handshake(reply)
    block = os.urandom(64 << 10)
    result = {
        "chacha_encrypt": _rate(lambda: aead.encrypt(nonce, plaintext, None), PIECE),
        "chacha_decrypt": _rate(lambda: aead.decrypt(nonce, ciphertext, None), PIECE),
        "sha256": _rate(lambda: hashlib.sha256(block).digest(), len(block)),
    }
    # the Noise transport: each piece decrypted right after it was encrypted (nonces in step)
    spent = {"encrypt": 0.0, "decrypt": 0.0}
    rounds = 0
    while spent["encrypt"] + spent["decrypt"] < 0.8:
        t0 = time.process_time()
        sealed = leader.encrypt(plaintext)
        t1 = time.process_time()
        follower.decrypt(sealed)
        spent["encrypt"] += t1 - t0
        spent["decrypt"] += time.process_time() - t1
        rounds += 1
    result["noise_encrypt"] = rounds * PIECE / spent["encrypt"] / 1e6
    result["noise_decrypt"] = rounds * PIECE / spent["decrypt"] / 1e6
    emit(**result)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.limits", description=__doc__.split("\n")[0]
    )
    p.add_argument("mode", choices=("tcp-sink", "tcp-source", "crypto"))
    p.add_argument("--total", type=int, default=1 << 30)
    p.add_argument("--chunk", type=int, default=64 << 10)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--hash", action="store_true")
    p.add_argument("--buffer", type=int, default=0, help="TCP read/buffer/send size (0: default)")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    {"tcp-sink": tcp_sink, "tcp-source": tcp_source, "crypto": crypto}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
