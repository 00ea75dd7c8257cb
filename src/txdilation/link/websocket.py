"""L2: a stream connection carried in WebSocket binary messages, as a Twisted client endpoint.

A transit relay's WebSocket port (``twistd transitrelay --websocket``) relays each binary
message's payload byte for byte, so a Dilation connection over WebSocket carries the same bytes
as over TCP. :class:`WebSocketClientEndpoint` dials ``ws://`` or ``wss://`` with autobahn;
each ``write``/``writeSequence`` is one binary message, each message received one
``dataReceived``.

Invariants: ``connect()`` fires only after the opening handshake, and fails (or is cancelled)
as a TCP connect would; writes after closing are dropped; the wrapped protocol's
``connectionLost`` comes exactly once, only if it was connected; a text message drops the
connection; flow control and ``setTcpNoDelay`` pass through to the TCP transport. In full:
docs/module-notes.md.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from autobahn.websocket.protocol import WebSocketProtocol
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.internet.error import ConnectError, ConnectionDone, ConnectionLost
from twisted.internet.interfaces import (
    IConsumer,
    IProtocol,
    IProtocolFactory,
    IPushProducer,
    IStreamClientEndpoint,
    ITransport,
)
from twisted.internet.ssl import optionsForClientTLS
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.errors import LinkFailure
from txdilation.wire.contracts import IDilationReactor
from txdilation.wire.waiting import fire_unless_called

__all__ = ["WebSocketClientEndpoint", "WebSocketHandshakeError"]


class WebSocketHandshakeError(ConnectError, LinkFailure):
    """The WebSocket opening handshake failed or timed out."""


def _tcp_endpoint(
    reactor: IDilationReactor, host: str, port: int, timeout: float
) -> IStreamClientEndpoint:
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return HostnameEndpoint(reactor, host.encode("idna"), port, timeout=timeout)
    if version == 6:
        return TCP6ClientEndpoint(reactor, host, port, timeout=timeout)  # type: ignore[no-untyped-call]
    return TCP4ClientEndpoint(reactor, host, port, timeout=timeout)


@implementer(IStreamClientEndpoint)
class WebSocketClientEndpoint:
    """Connect a stream protocol through a WebSocket (see the module docstring).

    :param host: the relay's host name or address (no brackets for IPv6).
    :param port: its WebSocket port.
    :param path: the URL's path (the relay accepts any).
    :param secure: ``wss://``: TLS, verified against ``host``.
    :param timeout: seconds for the TCP connect, and again for the opening handshake.
    """

    def __init__(
        self,
        reactor: IDilationReactor,
        host: str,
        port: int,
        path: str = "/",
        *,
        secure: bool = False,
        timeout: float = 30.0,
    ) -> None:
        self._reactor = reactor
        self._host = host
        self._port = port
        self._secure = secure
        self._timeout = timeout
        netloc = f"[{host}]" if ":" in host else host
        self.url = f"{'wss' if secure else 'ws'}://{netloc}:{port}{path}"

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        tcp = _tcp_endpoint(self._reactor, self._host, self._port, self._timeout)
        if self._secure:
            tcp = wrapClientTLS(optionsForClientTLS(self._host), tcp)
        factory = _Factory(self, protocolFactory)
        ws: _WebSocketStream | None = None

        def cancel(d: Deferred[IProtocol]) -> None:
            connecting.cancel()
            if ws is not None and ws.transport is not None:
                ws.dropConnection(abort=True)

        opened: Deferred[IProtocol] = Deferred(cancel)
        factory.opened = opened

        def connected(proto: _WebSocketStream) -> None:
            nonlocal ws
            ws = proto

        def failed(f: Failure) -> None:
            fire_unless_called(opened, f)

        connecting = tcp.connect(factory)
        connecting.addCallbacks(connected, failed)
        return opened


class _Factory(WebSocketClientFactory):
    noisy = False

    def __init__(self, endpoint: WebSocketClientEndpoint, wrapped: IProtocolFactory) -> None:
        super().__init__(url=endpoint.url, reactor=endpoint._reactor)  # type: ignore[no-untyped-call]
        self.setProtocolOptions(  # type: ignore[no-untyped-call]
            openHandshakeTimeout=endpoint._timeout,
            autoFragmentSize=0,
            failByDrop=True,
            perMessageCompressionOffers=[],
        )
        self.wrapped = wrapped
        self.opened: Deferred[IProtocol] | None = None

    def buildProtocol(self, addr: Any) -> _WebSocketStream:  # type: ignore[override]
        p = _WebSocketStream()
        p.factory = self
        p.address = addr
        return p


class _WebSocketStream(WebSocketClientProtocol):
    factory: _Factory
    address: Any = None
    _inner: IProtocol | None = None
    _lost = False

    def onOpen(self) -> None:
        opened = self.factory.opened
        self.factory.opened = None
        inner = self.factory.wrapped.buildProtocol(self.address)
        if inner is None or opened is None or opened.called:
            self.dropConnection(abort=True)
            return
        self._inner = inner
        inner.makeConnection(_MessageTransport(self))
        opened.callback(inner)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if not isBinary:
            self.dropConnection(abort=True)
            return
        if self._inner is not None:
            self._inner.dataReceived(payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        opened = self.factory.opened
        if opened is not None and not opened.called:
            self.factory.opened = None
            error = WebSocketHandshakeError(string=f"websocket closed: {reason}")  # type: ignore[no-untyped-call]
            opened.errback(error)
            return
        inner, self._inner = self._inner, None
        if inner is not None and not self._lost:
            self._lost = True
            why = ConnectionDone() if wasClean else ConnectionLost(f"websocket closed: {reason}")
            inner.connectionLost(Failure(why))  # type: ignore[no-untyped-call]


@implementer(ITransport, IConsumer, IPushProducer)
class _MessageTransport:
    """What the wrapped protocol sees as its transport: writes become binary messages."""

    def __init__(self, ws: _WebSocketStream) -> None:
        self._ws = ws
        self.disconnecting = False

    def write(self, data: bytes) -> None:
        # Like a TCP transport's, writes after a close (ours or the peer's) are dropped: the
        # WebSocket is no longer open, and autobahn would raise instead.
        if data and not self.disconnecting and self._ws.state == WebSocketProtocol.STATE_OPEN:
            self._ws.sendMessage(bytes(data), isBinary=True)  # type: ignore[no-untyped-call]

    def writeSequence(self, data: Any) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        if not self.disconnecting:
            self.disconnecting = True
            self._ws.sendClose(1000)

    def abortConnection(self) -> None:
        self.disconnecting = True
        self._ws.dropConnection(abort=True)

    def getPeer(self) -> Any:
        return self._tcp().getPeer() if self._tcp() is not None else None

    def getHost(self) -> Any:
        return self._tcp().getHost() if self._tcp() is not None else None

    def setTcpNoDelay(self, enabled: bool) -> None:
        """Set ``TCP_NODELAY`` on the TCP connection under the WebSocket (through TLS for
        ``wss://``); autobahn sets it too, by default."""
        tcp = self._tcp()
        if tcp is not None:
            tcp.setTcpNoDelay(enabled)

    def getTcpNoDelay(self) -> bool:
        tcp = self._tcp()
        return bool(tcp.getTcpNoDelay()) if tcp is not None else False

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        tcp = self._tcp()
        if tcp is not None:
            tcp.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        tcp = self._tcp()
        if tcp is not None:
            tcp.unregisterProducer()

    def pauseProducing(self) -> None:
        tcp = self._tcp()
        if tcp is not None:
            tcp.pauseProducing()

    def resumeProducing(self) -> None:
        tcp = self._tcp()
        if tcp is not None:
            tcp.resumeProducing()

    def stopProducing(self) -> None:
        self.abortConnection()

    def _tcp(self) -> Any:
        return self._ws.transport
