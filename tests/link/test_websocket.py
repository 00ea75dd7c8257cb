"""The WebSocket client endpoint (txdilation.link.websocket) against the real transit relay's
WebSocket port (magic-wormhole-transit-relay 0.5.0, in-process on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import socket
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectError, ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from txdilation.link.websocket import WebSocketClientEndpoint
from txdilation.testing.servers import start_transit_relay

TOKEN = hashlib.sha256(b"txdilation websocket test").hexdigest()


class Recorder(Protocol):
    """Sends the relay line on connect; collects what arrives."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.received = b""
        self.lost: Deferred[None] = Deferred()
        self.reason: Failure | None = None
        self.waiting: list[tuple[int, Deferred[None]]] = []

    def connectionMade(self) -> None:
        self.transport.write(f"please relay {TOKEN} for side {self.side}\n".encode())  # type: ignore[union-attr]

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        for item in list(self.waiting):
            if len(self.received) >= item[0]:
                self.waiting.remove(item)
                item[1].callback(None)

    def until(self, size: int) -> Deferred[None]:
        """Fires once ``size`` bytes in all have arrived."""
        d: Deferred[None] = Deferred()
        if len(self.received) >= size:
            d.callback(None)
        else:
            self.waiting.append((size, d))
        return d

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.reason = reason
        self.lost.callback(None)


def factory_for(protocol: Protocol) -> Factory:
    f = Factory()
    f.buildProtocol = lambda addr: protocol  # type: ignore[method-assign]
    return f


class WebSocketEndpointTests(TestCase):
    timeout = 30

    def setUp(self) -> Deferred[None]:
        from twisted.internet import reactor

        self.reactor: Any = reactor

        async def start() -> None:
            self.relay = await start_transit_relay(reactor, websocket=True)
            self.addCleanup(self.relay.stop)

        return Deferred.fromCoroutine(start())

    def ws_endpoint(self, **kw: Any) -> WebSocketClientEndpoint:
        port = int(self.relay.ws_url.rsplit(":", 1)[1].strip("/"))  # type: ignore[union-attr]
        return WebSocketClientEndpoint(self.reactor, "127.0.0.1", port, "/", timeout=5.0, **kw)

    async def test_websocket_side_relays_to_tcp_side(self) -> None:
        """A WebSocket client and a TCP client presenting the same token are joined: ``ok``,
        then bytes both ways (several writes and a writeSequence), then a close reaches the
        other side; a write after the close is dropped without an error."""
        ws, tcp = Recorder("a" * 16), Recorder("b" * 16)
        connected = await self.ws_endpoint().connect(factory_for(ws))
        self.assertIs(connected, ws)
        port = self.relay.port
        await TCP4ClientEndpoint(self.reactor, "127.0.0.1", port).connect(factory_for(tcp))
        await ws.until(3)
        await tcp.until(3)
        ws.transport.write(b"hello ")  # type: ignore[union-attr]
        ws.transport.writeSequence([b"from ", b"ws"])  # type: ignore[union-attr]
        await tcp.until(16)
        self.assertEqual(tcp.received, b"ok\nhello from ws")
        big = bytes(range(256)) * 1024
        tcp.transport.write(big)  # type: ignore[union-attr]
        await ws.until(3 + len(big))
        self.assertEqual(ws.received, b"ok\n" + big)
        ws.transport.loseConnection()  # type: ignore[union-attr]
        ws.transport.write(b"late")  # type: ignore[union-attr]  # dropped, as TCP drops it
        await ws.lost
        await tcp.lost

    async def test_tcp_no_delay_reaches_the_tcp_socket(self) -> None:
        """``setTcpNoDelay`` on the stream's transport (what an L2 connection calls in
        ``connectionMade``) sets TCP_NODELAY on the TCP socket under the WebSocket, both ways,
        and ``getTcpNoDelay`` reads it back from that socket."""
        ws = Recorder("a" * 16)
        await self.ws_endpoint().connect(factory_for(ws))
        transport: Any = ws.transport
        handle = transport._tcp().getHandle()
        for enabled in (False, True):
            transport.setTcpNoDelay(enabled)
            self.assertEqual(transport.getTcpNoDelay(), enabled)
            self.assertEqual(
                bool(handle.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)), enabled
            )
        transport.loseConnection()
        await ws.lost

    async def test_refused(self) -> None:
        """A closed port fails the connect like TCP: ConnectionRefusedError."""
        endpoint = WebSocketClientEndpoint(self.reactor, "127.0.0.1", 1, timeout=5.0)
        with self.assertRaises(ConnectionRefusedError):
            await endpoint.connect(factory_for(Recorder("a" * 16)))

    async def test_not_a_websocket_server(self) -> None:
        """The relay's plain TCP port does not speak WebSocket: the connect fails (the
        opening handshake does not complete), and the protocol never sees a connection."""
        proto = Recorder("a" * 16)
        endpoint = WebSocketClientEndpoint(self.reactor, "127.0.0.1", self.relay.port, timeout=2.0)
        with self.assertRaises(ConnectError):
            await endpoint.connect(factory_for(proto))
        self.assertFalse(proto.lost.called)

    async def test_cancel_while_opening(self) -> None:
        """Cancelling the connect while the handshake is pending abandons the connection."""
        proto = Recorder("a" * 16)
        d = self.ws_endpoint().connect(factory_for(proto))
        d.cancel()
        failures: list[Failure] = []
        d.addErrback(failures.append)
        self.assertEqual(len(failures), 1)
        waited: Deferred[None] = Deferred()
        self.reactor.callLater(0.2, waited.callback, None)
        await waited
        self.assertFalse(proto.lost.called)
