"""A rendezvous mailbox where paired processes post lobby messages, on a stock mailbox server.

Layer: pairing I/O (a WebSocket client of the mailbox server protocol, with an I/O-free core).
A :class:`Lobby` is one rendezvous slot of one generation: on each connection it sends
``bind``, ``open`` (the round's mailbox, :mod:`.derive`), ``ping`` and ``add`` for what the
mailbox lacks, and hands every body to ``on_body``. Trouble with the mailbox (an ``error``,
over :data:`MAX_MESSAGES` or :data:`MAX_PAYLOAD`) moves the slot to its next round, as the peer
does; a lost connection is retried in the same round, after a :class:`~.backoff.Backoff`; a
healthy one is renewed every :data:`RECHECK` seconds. The messages: docs/module-notes.md.

Invariants: nothing is sent before the WebSocket is open; ``bind`` precedes ``open`` precedes
``add``; a body is never decoded here (``on_body`` gets the text, bounded in size); after
:meth:`Lobby.stop` or :meth:`Lobby.close` nothing is reported.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlparse

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, clientFromString
from twisted.logger import Logger

from txdilation.pairing.backoff import Backoff
from txdilation.pairing.hello import BODY_LENGTH, PHASE

__all__ = [
    "CLOSE_TIMEOUT",
    "KEPT",
    "MAX_MESSAGES",
    "MAX_PAYLOAD",
    "MAX_ROUNDS",
    "RECHECK",
    "Lobby",
    "LobbyCore",
    "LobbyTrouble",
    "client_version",
]

CLOSE_TIMEOUT: Final = 3.0
"""Seconds :meth:`Lobby.close` waits for the server's ``closed``."""
MAX_MESSAGES: Final = 256
"""Messages one connection processes; a mailbox holding more is abandoned for the next round."""
MAX_PAYLOAD: Final = 16 * 1024
"""The WebSocket payload cap (a lobby message is about 1.2 KB)."""
MAX_ROUNDS: Final = 64
KEPT: Final = 4
"""Offers and answers kept for posting again (with the hello)."""
RECHECK: Final = 60.0
"""Seconds between renewals of a healthy connection (with up to 20% jitter)."""

_log = Logger()


def client_version() -> list[str]:
    """The ``client_version`` a stock magic-wormhole client sends (``["python", VERSION]``)."""
    from wormhole import __version__

    return ["python", str(__version__)]


@dataclass(frozen=True, slots=True)
class LobbyTrouble:
    """Why a lobby connection ended or was refused.

    :ivar cause: ``squatted`` (the mailbox is unusable: the slot moves on), ``unreachable``
        or ``refused`` (the server: retried as it is).
    """

    cause: str
    text: str


@dataclass
class LobbyCore:
    """The lobby's protocol, without I/O: server messages in, messages to send out.

    :ivar place: the ``(mailbox, side)`` of a round.
    :ivar hello: this process's hello, posted whenever a connection finds the mailbox without
        it; ``directed``: its latest offers or answers (:data:`KEPT`), likewise.
    """

    appid: str
    place: Callable[[int], tuple[str, str]]
    round: int = 0
    hello: str | None = None
    directed: list[str] = field(default_factory=list)
    connected: bool = False
    closing: bool = False
    received: int = 0
    history: bool = True
    seen: set[str] = field(default_factory=set)
    outgoing: list[dict[str, Any]] = field(default_factory=list)

    def _send(self, kind: str, **fields: Any) -> None:
        self.outgoing.append({"type": kind, "id": os.urandom(2).hex(), **fields})

    @property
    def mailbox(self) -> str:
        return self.place(self.round)[0]

    def opened(self) -> None:
        """The WebSocket is open: bind, open, and mark the end of the mailbox's history."""
        self.connected, self.received, self.history = True, 0, True
        self.seen = set()
        mailbox, side = self.place(self.round)
        self._send("bind", appid=self.appid, side=side, client_version=client_version())
        self._send("open", mailbox=mailbox)
        if self.closing:
            self._send("close", mailbox=mailbox, mood="happy")
        else:
            self._send("ping", ping=self.round)

    def post(self, body: str, *, hello: bool) -> None:
        """Post ``body`` now (if connected, else on the next connection), and again on every
        connection that finds the mailbox without it (a message lost with a mailbox that was
        deleted or left for the next round is not lost for the peer)."""
        if hello:
            self.hello = body
        else:
            self.directed = [*self.directed, body][-KEPT:]
        if self.connected and not self.closing and not self.history:
            self._send("add", phase=PHASE, body=body)

    def close(self) -> None:
        """Close the mailbox (now, or on the next connection)."""
        self.closing = True
        if self.connected:
            self._send("close", mailbox=self.mailbox, mood="happy")

    def lost(self) -> None:
        self.connected = False

    def squatted(self) -> None:
        """Move to the next round (a mailbox nobody who saw this one can tell)."""
        self.round = min(self.round + 1, MAX_ROUNDS)

    def message(self, message: dict[str, Any]) -> tuple[str | None, LobbyTrouble | None]:
        """One server message: returns ``(body to hand on, trouble)``."""
        kind = message.get("type")
        if kind == "message" and message.get("phase") == PHASE:
            self.received += 1
            if self.received > MAX_MESSAGES:
                return None, LobbyTrouble(
                    "squatted", f"the rendezvous holds over {MAX_MESSAGES} messages"
                )
            body = message.get("body")
            if not isinstance(body, str) or len(body) != BODY_LENGTH:
                return None, None
            if body == self.hello or body in self.directed:
                self.seen.add(body)
            return body, None
        if kind == "pong" and self.history:
            self.history = False
            kept = [self.hello] if self.hello is not None else []
            for body in [*kept, *self.directed]:
                if body not in self.seen:
                    self._send("add", phase=PHASE, body=body)
        elif kind == "error":
            return None, LobbyTrouble("squatted", f"the server said: {message.get('error')}")
        elif kind == "welcome":
            welcome = message.get("welcome")
            if isinstance(welcome, dict) and "error" in welcome:
                return None, LobbyTrouble("refused", f"the server refused us: {welcome['error']}")
        return None, None

    def take(self) -> list[dict[str, Any]]:
        """The messages to send now."""
        out, self.outgoing = self.outgoing, []
        return out


class _LobbyProtocol(WebSocketClientProtocol):  # type: ignore[misc]
    lobby: Lobby

    def onOpen(self) -> None:
        self.lobby._opened(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.lobby._message(self, payload)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        too_big = bool(getattr(self, "wasMaxMessagePayloadSizeExceeded", False))
        self.lobby._lost(self, too_big)


class Lobby:
    """One rendezvous slot's WebSocket (see the module docstring).

    :param reactor: the reactor (``IReactorTCP``, ``IReactorTime``).
    :param url: the mailbox server (``ws://HOST:PORT/v1`` or ``wss://...``).
    :param core: what to bind and open.
    :param on_body: called with every message body delivered (bounded, not decoded).
    :param on_trouble: called with what went wrong (the lobby goes on by itself).
    """

    def __init__(
        self,
        reactor: Any,
        url: str,
        core: LobbyCore,
        on_body: Callable[[str], object],
        on_trouble: Callable[[LobbyTrouble], object],
    ) -> None:
        self._reactor = reactor
        self.core = core
        self._on_body = on_body
        self._on_trouble = on_trouble
        self._protocol: _LobbyProtocol | None = None
        self._closed_waiter: Deferred[None] | None = None
        self._stopped = False
        self._backoff = Backoff(reactor)
        self._recheck: Any = None
        factory: Any = WebSocketClientFactory(url)  # type: ignore[no-untyped-call]
        factory.protocol = _LobbyProtocol
        factory.setProtocolOptions(
            autoPingInterval=30,
            autoPingTimeout=60,
            maxMessagePayloadSize=MAX_PAYLOAD,
            maxFramePayloadSize=MAX_PAYLOAD,
        )
        lobby = self

        def build(addr: Any) -> Any:
            protocol: Any = WebSocketClientFactory.buildProtocol(factory, addr)
            protocol.lobby = lobby
            return protocol

        factory.buildProtocol = build
        self._factory = factory
        self._endpoint = _endpoint(reactor, url)

    def start(self) -> None:
        """Connect (and keep reconnecting until :meth:`stop` or :meth:`close`)."""
        self._connect()

    def _connect(self) -> None:
        if self._stopped:
            return
        d: Deferred[Any] = self._endpoint.connect(self._factory)

        def failed(failure: Any) -> None:
            self._retry(LobbyTrouble("unreachable", failure.getErrorMessage()))

        d.addErrback(failed)

    def _retry(self, trouble: LobbyTrouble | None, renewing: bool = False) -> None:
        if self._stopped:
            return
        if trouble is not None:
            if trouble.cause == "squatted":
                self.core.squatted()
            self._on_trouble(trouble)
        if renewing:
            self._connect()
        else:
            self._backoff.later(self._connect)

    def post(self, body: str, *, hello: bool) -> None:
        """Post a lobby message (sealed, hex); see :meth:`LobbyCore.post`."""
        self.core.post(body, hello=hello)
        self._flush()

    def close(self) -> Deferred[None]:
        """Close the mailbox and the connection; fires once done (at most
        :data:`CLOSE_TIMEOUT` seconds for the server's ``closed``)."""
        if self._stopped:
            return succeed(None)
        self.core.close()
        protocol = self._protocol
        self._halt()
        if protocol is None:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._closed_waiter = waiter
        self._flush(protocol)
        waiter.addTimeout(CLOSE_TIMEOUT, self._reactor)
        waiter.addErrback(lambda f: None)
        waiter.addCallback(lambda _: _hang_up(protocol, clean=True))
        return waiter

    def stop(self) -> Deferred[None]:
        """Disconnect without closing the mailbox (a process stopping: the next process of
        this side re-opens it as the same side)."""
        protocol = self._protocol
        self._halt()
        if protocol is not None:
            _hang_up(protocol, clean=False)
        return succeed(None)

    def _halt(self) -> None:
        self._stopped = True
        self._backoff.cancel()
        if self._recheck is not None and self._recheck.active():
            self._recheck.cancel()
        self._recheck = None

    # --- from the protocol ---

    def _opened(self, protocol: _LobbyProtocol) -> None:
        if self._stopped and not self.core.closing:
            _hang_up(protocol, clean=False)
            return
        self._protocol = protocol
        self.core.opened()
        self._flush()
        delay = RECHECK * (1 + 0.2 * random.random())
        self._recheck = self._reactor.callLater(delay, self._renew, protocol)

    def _renew(self, protocol: _LobbyProtocol) -> None:
        self._recheck = None
        if self._protocol is protocol:
            self._drop(protocol, None, renewing=True)

    def _message(self, protocol: _LobbyProtocol, payload: bytes) -> None:
        if protocol is not self._protocol:
            return
        try:
            message = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "closed":
            waiter, self._closed_waiter = self._closed_waiter, None
            if waiter is not None and not waiter.called:
                waiter.callback(None)
            return
        if self._stopped:
            return
        in_history = self.core.history
        body, trouble = self.core.message(message)
        if in_history and not self.core.history:
            self._backoff.reset()  # the mailbox answered in full: it is fine
        if trouble is not None:
            self._drop(protocol, trouble)
            return
        self._flush()
        if body is not None:
            self._on_body(body)

    def _lost(self, protocol: _LobbyProtocol, too_big: bool) -> None:
        if self._protocol is protocol:
            trouble = None
            if too_big:
                text = f"the rendezvous holds a message over {MAX_PAYLOAD} bytes"
                trouble = LobbyTrouble("squatted", text)
            self._drop(protocol, trouble)

    def _drop(
        self, protocol: _LobbyProtocol, trouble: LobbyTrouble | None, renewing: bool = False
    ) -> None:
        """This connection is over (whatever ends it): connect again, in the next round when
        the mailbox is unusable."""
        self._protocol = None
        self.core.lost()
        if self._recheck is not None and self._recheck.active():
            self._recheck.cancel()
        self._recheck = None
        _hang_up(protocol, clean=renewing)
        self._retry(trouble, renewing)

    def _flush(self, protocol: _LobbyProtocol | None = None) -> None:
        protocol = protocol or self._protocol
        if protocol is None:
            return
        for message in self.core.take():
            protocol.sendMessage(json.dumps(message).encode("utf-8"), False)  # type: ignore[no-untyped-call]


def _hang_up(protocol: _LobbyProtocol, *, clean: bool) -> None:
    """End a connection: a WebSocket close handshake, or at once (unless it is over already)."""
    if protocol.state == protocol.STATE_CLOSED:
        return
    if clean and protocol.state == protocol.STATE_OPEN:
        protocol.sendClose()
    else:
        transport: Any = protocol.transport
        if transport is not None:
            transport.abortConnection()


def _endpoint(reactor: Any, url: str) -> Any:
    """The client endpoint for a mailbox URL, as stock's client makes it."""
    parts = urlparse(url)
    tls = parts.scheme == "wss"
    host = parts.hostname or "localhost"
    port = parts.port or (443 if tls else 80)
    if tls:
        return clientFromString(reactor, f"tls:{host}:{port}")  # type: ignore[no-untyped-call]
    return HostnameEndpoint(reactor, host, port)
