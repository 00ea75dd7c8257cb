"""One UDP request and its answer over loopback: retransmission, refusal, silence."""

from __future__ import annotations

import time
from typing import Any

from twisted.internet.protocol import DatagramProtocol
from twisted.trial.unittest import TestCase

from txdilation.portmap.mapping import NoService
from txdilation.portmap.udp import exchange


class Gateway(DatagramProtocol):
    """Answers ``b"ok"`` from the ``answer_from``-th request on (never, if 0)."""

    def __init__(self, answer_from: int) -> None:
        self.answer_from = answer_from
        self.requests = 0

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        self.requests += 1
        if self.answer_from and self.requests >= self.answer_from:
            self.transport.write(b"not it", addr)  # type: ignore[union-attr]
            self.transport.write(b"ok", addr)  # type: ignore[union-attr]


def only_ok(data: bytes) -> bytes:
    if data != b"ok":
        raise ValueError("not an answer")
    return data


class ExchangeTests(TestCase):
    """See the module docstring (the real reactor, 127.0.0.1 only)."""

    timeout = 10

    def serve(self, answer_from: int) -> tuple[Gateway, int]:
        from twisted.internet import reactor

        gateway = Gateway(answer_from)
        port = reactor.listenUDP(0, gateway, interface="127.0.0.1")  # type: ignore[attr-defined]
        self.addCleanup(port.stopListening)
        return gateway, port.getHost().port

    async def test_retransmitted_until_answered(self) -> None:
        """A lost request is sent again; the first answer the parser accepts is the result
        (one it rejects is ignored)."""
        from twisted.internet import reactor

        gateway, port = self.serve(answer_from=2)
        result = await exchange(reactor, "127.0.0.1", port, b"q", only_ok, tries=(0, 0.05, 0.1))
        self.assertEqual(result, b"ok")
        self.assertEqual(gateway.requests, 2)

    async def test_refused_at_once(self) -> None:
        """Nothing listening: the ICMP port unreachable ends the exchange at once, long
        before its timeout."""
        from twisted.internet import reactor

        _gateway, port = self.serve(answer_from=0)
        started = time.monotonic()
        d = exchange(
            reactor, "127.0.0.1", port + 1 if port < 65535 else 1, b"q", only_ok, timeout=5
        )
        with self.assertRaises(NoService):
            await d
        self.assertLess(time.monotonic() - started, 2.0)

    async def test_silence_times_out(self) -> None:
        """A gateway that never answers: NoService after the timeout, each try sent."""
        from twisted.internet import reactor

        gateway, port = self.serve(answer_from=0)
        with self.assertRaises(NoService):
            await exchange(reactor, "127.0.0.1", port, b"q", only_ok, tries=(0, 0.05), timeout=0.3)
        self.assertEqual(gateway.requests, 2)
