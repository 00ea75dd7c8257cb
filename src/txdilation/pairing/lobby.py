"""A lobby: one generation's mailbox where paired sides post hellos, on a stock mailbox server.

Layer: pairing I/O (a WebSocket client of the mailbox server protocol, with an I/O-free core).
A :class:`Lobby` keeps one WebSocket to the mailbox server for as long as it runs, reconnecting
with Twisted's backoff (1 s, growing by 1.5 up to 60 s) after any loss, like stock's client.
On each connection it sends, as the mailbox protocol allows without a nameplate::

    bind {appid, side, client_version}    side: derive.lobby_side (the same at every restart)
    open {mailbox}                        mailbox: derive.lobby_mailbox of the generation
    add  {phase: "hello", body}           this side's latest hello, again after a reconnect

and hands every ``hello`` message the server delivers (those already in the mailbox first,
then new ones as they are added, this side's own included) to ``on_body(side, body)``.
:meth:`Lobby.close` sends ``close`` (the server deletes the mailbox and its messages once
every side that opened it has closed it) and stops reconnecting: only for a generation this
side dropped, since the server does not re-open a side that closed; :meth:`Lobby.stop` just
disconnects (a process stopping).

What the server sees of a lobby: the app id, the two sides (stable pseudonyms within one
generation), the mailbox id (stable within one generation), each hello's arrival time and size
(always :data:`~txdilation.pairing.hello.SEALED_SIZE`), the WebSocket's address, and
``client_version`` (stock's own value, so a lobby looks like any wormhole client). It cannot
read a hello, forge one, or tell which pairing a lobby belongs to beyond that.

Invariants: nothing is sent before the WebSocket is open; ``bind`` precedes ``open`` precedes
``add`` on every connection; an ``error`` from the server is reported once per connection
through ``on_error``; after :meth:`Lobby.close` nothing is reported.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.application.internet import ClientService
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, clientFromString
from twisted.logger import Logger

from txdilation.pairing.hello import PHASE

__all__ = ["CLOSE_TIMEOUT", "Lobby", "LobbyCore", "client_version"]

CLOSE_TIMEOUT: Final = 3.0
"""Seconds :meth:`Lobby.close` waits for the server's ``closed``."""

_log = Logger(namespace="txdilation.pairing.lobby")


def client_version() -> list[str]:
    """The ``client_version`` a stock magic-wormhole client sends (``["python", VERSION]``)."""
    from wormhole import __version__

    return ["python", str(__version__)]


@dataclass
class LobbyCore:
    """The lobby's protocol, without I/O: server messages in, messages to send out.

    :ivar body: the hello to (re)post on every connection (None: nothing yet).
    """

    appid: str
    side: str
    mailbox: str
    body: str | None = None
    connected: bool = False
    closing: bool = False
    outgoing: list[dict[str, Any]] = field(default_factory=list)

    def _send(self, kind: str, **fields: Any) -> None:
        self.outgoing.append({"type": kind, "id": os.urandom(2).hex(), **fields})

    def opened(self) -> None:
        """The WebSocket is open: bind, open, re-post our hello."""
        self.connected = True
        self._send("bind", appid=self.appid, side=self.side, client_version=client_version())
        self._send("open", mailbox=self.mailbox)
        if self.closing:
            self._send("close", mailbox=self.mailbox, mood="happy")
        elif self.body is not None:
            self._send("add", phase=PHASE, body=self.body)

    def post(self, body: str) -> None:
        """Post a new hello (replacing the one re-posted after reconnections)."""
        self.body = body
        if self.connected:
            self._send("add", phase=PHASE, body=body)

    def close(self) -> None:
        """Close the mailbox (now, or on the next connection)."""
        self.closing = True
        if self.connected:
            self._send("close", mailbox=self.mailbox, mood="happy")

    def lost(self) -> None:
        self.connected = False

    def take(self) -> list[dict[str, Any]]:
        """The messages to send now."""
        out, self.outgoing = self.outgoing, []
        return out


class _LobbyProtocol(WebSocketClientProtocol):  # type: ignore[misc]
    lobby: Lobby

    def onOpen(self) -> None:
        self.lobby._opened(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.lobby._message(payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        self.lobby._lost(self)


class Lobby:
    """One lobby's WebSocket (see the module docstring).

    :param reactor: the reactor (``IReactorTCP``, ``IReactorTime``).
    :param url: the mailbox server (``ws://HOST:PORT/v1`` or ``wss://...``).
    :param core: what to bind and open.
    :param on_body: called with ``(side, body)`` of every hello delivered.
    :param on_error: called with the server's words when it refuses something.
    """

    def __init__(
        self,
        reactor: Any,
        url: str,
        core: LobbyCore,
        on_body: Callable[[str, str], object],
        on_error: Callable[[str], object],
    ) -> None:
        self._reactor = reactor
        self.core = core
        self._on_body = on_body
        self._on_error = on_error
        self._protocol: _LobbyProtocol | None = None
        self._closed_waiter: Deferred[None] | None = None
        self._stopped = False
        factory: Any = WebSocketClientFactory(url)  # type: ignore[no-untyped-call]
        factory.protocol = _LobbyProtocol
        factory.setProtocolOptions(autoPingInterval=30, autoPingTimeout=60)
        lobby = self

        def build(addr: Any) -> Any:
            protocol: Any = WebSocketClientFactory.buildProtocol(factory, addr)
            protocol.lobby = lobby
            return protocol

        factory.buildProtocol = build
        self._service = ClientService(_endpoint(reactor, url), factory, clock=reactor)

    def start(self) -> None:
        """Connect (and keep reconnecting until :meth:`close`); a first connection that fails
        is reported once through ``on_error`` (the lobby keeps trying)."""
        self._service.startService()  # type: ignore[no-untyped-call]
        first: Deferred[Any] = self._service.whenConnected(failAfterFailures=1)  # type: ignore[no-untyped-call]

        def unreachable(failure: Any) -> None:
            if not self._stopped:
                self._on_error(f"cannot reach the mailbox server: {failure.getErrorMessage()}")

        first.addErrback(unreachable)

    def post(self, body: str) -> None:
        """Post a hello (sealed, hex)."""
        self.core.post(body)
        self._flush()

    def close(self) -> Deferred[None]:
        """Close the mailbox and the connection; fires once done (at most
        :data:`CLOSE_TIMEOUT` seconds for the server's ``closed``)."""
        if self._stopped:
            return succeed(None)
        self._stopped = True
        self.core.close()
        if self._protocol is None:
            return self._stop()
        waiter: Deferred[None] = Deferred()
        self._closed_waiter = waiter
        self._flush()
        waiter.addTimeout(CLOSE_TIMEOUT, self._reactor)
        waiter.addErrback(lambda f: None)
        waiter.addCallback(lambda _: self._stop())
        return waiter

    def stop(self) -> Deferred[None]:
        """Disconnect without closing the mailbox (a process stopping: the next process of
        this side re-opens the lobby as the same side; a closed side could not re-open it)."""
        if self._stopped:
            return succeed(None)
        self._stopped = True
        return self._stop()

    def _stop(self) -> Deferred[None]:
        stopped: Deferred[None] = self._service.stopService()  # type: ignore[no-untyped-call]
        return stopped

    # --- from the protocol ---

    def _opened(self, protocol: _LobbyProtocol) -> None:
        self._protocol = protocol
        self.core.opened()
        self._flush()

    def _message(self, payload: bytes) -> None:
        try:
            message = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind == "message" and message.get("phase") == PHASE:
            side, body = message.get("side"), message.get("body")
            if isinstance(side, str) and isinstance(body, str) and not self._stopped:
                self._on_body(side, body)
        elif kind == "closed":
            waiter, self._closed_waiter = self._closed_waiter, None
            if waiter is not None and not waiter.called:
                waiter.callback(None)
        elif kind == "error" and not self._stopped:
            self._on_error(f"the mailbox server said: {message.get('error', 'unknown error')}")
        elif kind == "welcome":
            welcome = message.get("welcome")
            if isinstance(welcome, dict) and "error" in welcome and not self._stopped:
                self._on_error(f"the mailbox server refused us: {welcome['error']}")

    def _lost(self, protocol: _LobbyProtocol) -> None:
        if self._protocol is protocol:
            self._protocol = None
            self.core.lost()

    def _flush(self) -> None:
        protocol = self._protocol
        if protocol is None:
            return
        for message in self.core.take():
            protocol.sendMessage(json.dumps(message).encode("utf-8"), False)  # type: ignore[no-untyped-call]


def _endpoint(reactor: Any, url: str) -> Any:
    """The client endpoint for a mailbox URL, as stock's client makes it."""
    parts = urlparse(url)
    tls = parts.scheme == "wss"
    host = parts.hostname or "localhost"
    port = parts.port or (443 if tls else 80)
    if tls:
        return clientFromString(reactor, f"tls:{host}:{port}")  # type: ignore[no-untyped-call]
    return HostnameEndpoint(reactor, host, port)
