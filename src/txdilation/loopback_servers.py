"""Real magic-wormhole servers in-process on 127.0.0.1: the demo's, and applications' tests'.

Layer: an application helper above ``wire`` only; ``txdilation demo`` runs these, and tests
reach the same objects as :mod:`txdilation.testing.servers`. ``start_mailbox_server`` /
``start_transit_relay`` run the REAL ``wormhole_mailbox_server`` / ``wormhole_transit_relay``
code on a random (or given) loopback port (the ``demo`` and ``dev`` extras install them).

Both are coroutine functions (``await`` them, or wrap them in ``Deferred.fromCoroutine``). They
return a server object, not a URL: pass ``MailboxServer.url`` (``ws://127.0.0.1:PORT/v1``) to
``wormhole.create`` and ``TransitRelay.hint`` (``tcp:127.0.0.1:PORT``) to ``w.dilate``'s
``transit_relay_location``. ``stop()`` closes the listening port and aborts every open
connection, and its Deferred fires only once all of them are gone (a trial test returns or
awaits it, e.g. with ``self.addCleanup(server.stop)``). A mailbox server can be stopped and
started again on the same port with the same channel database file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IListeningPort, IReactorTCP
from twisted.internet.protocol import Factory, ServerFactory
from twisted.protocols.policies import WrappingFactory

from txdilation.wire.contracts import IDilationReactor
from txdilation.wire.waiting import Waiters

LOOPBACK = "127.0.0.1"

__all__ = [
    "LOOPBACK",
    "MailboxServer",
    "TransitRelay",
    "start_mailbox_server",
    "start_transit_relay",
]


class _TrackingFactory(WrappingFactory):
    """A ``WrappingFactory`` that can abort every live connection and wait until all are gone."""

    def __init__(self, wrapped: Factory) -> None:
        super().__init__(wrapped)  # type: ignore[no-untyped-call]
        self._drained: Waiters[None] = Waiters()

    def unregisterProtocol(self, p: Any) -> None:
        super().unregisterProtocol(p)  # type: ignore[no-untyped-call]
        if not self.protocols:
            self._drained.fire(None)

    def abort_all(self) -> Deferred[None]:
        """Abort every live connection; the Deferred fires when none is left."""
        if not self.protocols:
            return succeed(None)
        d = self._drained.wait()
        for wrapper in list(self.protocols):
            wrapper.transport.abortConnection()
        return d


async def _serve_loopback(
    reactor: IReactorTCP,
    port: int,
    factory: Factory,
    databases: Sequence[sqlite3.Connection | None],
) -> dict[str, Any]:
    """Listen on 127.0.0.1:``port``; returns the ``_LoopbackServer`` fields, ``port`` first."""
    from twisted.internet.endpoints import TCP4ServerEndpoint

    tracking = _TrackingFactory(factory)
    endpoint: Any = TCP4ServerEndpoint(reactor, port, interface=LOOPBACK)  # type: ignore[no-untyped-call]
    listening: Any = await endpoint.listen(tracking)
    return {
        "port": listening.getHost().port,
        "_listening": listening,
        "_factory": tracking,
        "_databases": [db for db in databases if db is not None],
    }


@dataclass(kw_only=True)
class _LoopbackServer:
    """A listening port on 127.0.0.1 with its tracked connections and open databases."""

    port: int
    _listening: IListeningPort
    _factory: _TrackingFactory
    _databases: list[sqlite3.Connection]
    _stopped: bool = False

    def _before_stop(self) -> None:
        """Hook: tell the service it is going away (before connections are cut)."""

    def stop(self) -> Deferred[None]:
        """
        Stop listening, abort every connection, close the databases. Idempotent.

        :returns: a Deferred that fires once the port is closed and no connection is left.
        """
        if self._stopped:
            return succeed(None)
        self._stopped = True
        self._before_stop()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        stopped: Any = self._listening.stopListening()
        if stopped is not None:
            await stopped
        await self._factory.abort_all()
        for db in self._databases:
            db.close()


@dataclass(kw_only=True)
class MailboxServer(_LoopbackServer):
    """
    A running in-process magic-wormhole mailbox (rendezvous) server on 127.0.0.1.

    ``url`` is the websocket URL clients use (``ws://127.0.0.1:PORT/v1``); ``channel_db`` is
    the database path it was started with (``None``: in memory, lost on stop).
    """

    url: str
    channel_db: str | None
    server: Any

    def _before_stop(self) -> None:
        self.server.stopService()  # tells connected clients their mailboxes are gone


async def start_mailbox_server(
    reactor: IReactorTCP,
    *,
    channel_db: str | None = None,
    usage_db: str | None = None,
    port: int = 0,
    advertise_version: str | None = None,
) -> MailboxServer:
    """
    Start the real mailbox server on 127.0.0.1.

    :param reactor: the reactor to listen with.
    :param channel_db: SQLite file for the channel state (created, or reopened as-is, so a
        restarted server keeps nameplates and mailboxes); ``None`` keeps it in memory.
    :param usage_db: SQLite file for usage records, or ``None`` for none.
    :param port: TCP port; 0 picks a free one (restart on ``server.port`` to keep the URL).
    :param advertise_version: client version the welcome message recommends, if any.
    :returns: the running ``MailboxServer``.
    :raises twisted.internet.error.CannotListenError: if the port is taken.
    """
    from wormhole_mailbox_server.database import (
        create_or_upgrade_channel_db,
        create_or_upgrade_usage_db,
    )
    from wormhole_mailbox_server.server import make_server
    from wormhole_mailbox_server.web import make_web_server

    channel = create_or_upgrade_channel_db(channel_db if channel_db is not None else ":memory:")
    usage = create_or_upgrade_usage_db(usage_db)
    server = make_server(channel, usage_db=usage, advertise_version=advertise_version)
    server.startService()
    site = make_web_server(server, log_requests=False)
    served = await _serve_loopback(reactor, port, site, [channel, usage])
    url = f"ws://{LOOPBACK}:{served['port']}/v1"
    return MailboxServer(url=url, channel_db=channel_db, server=server, **served)


@dataclass(kw_only=True)
class TransitRelay(_LoopbackServer):
    """A running in-process transit relay on 127.0.0.1; ``hint`` is ``tcp:127.0.0.1:PORT``.

    With a WebSocket port (``start_transit_relay(websocket=True)``), ``ws_url`` is
    ``ws://127.0.0.1:PORT/``, a relay location too; both ports relay to each other."""

    hint: str
    transit: Any
    ws_url: str | None = None
    _websocket: _LoopbackServer | None = None

    async def _stop(self) -> None:
        if self._websocket is not None:
            await self._websocket.stop()
        await super()._stop()


async def start_transit_relay(
    reactor: IDilationReactor,
    *,
    log_fd_file: IO[str] | None = None,
    usage_db: str | None = None,
    port: int = 0,
    websocket: bool = False,
    websocket_port: int = 0,
) -> TransitRelay:
    """
    Start the real transit relay (plain TCP, and WebSocket when asked) on 127.0.0.1.

    :param reactor: the reactor to listen with (its ``seconds`` timestamps usage records).
    :param log_fd_file: a text file to receive JSON usage lines, or ``None``.
    :param usage_db: SQLite file for usage records, or ``None``.
    :param port: TCP port; 0 picks a free one.
    :param websocket: also accept WebSocket connections (``transitrelay --websocket``).
    :param websocket_port: that port; 0 picks a free one.
    :returns: the running ``TransitRelay``.
    :raises twisted.internet.error.CannotListenError: if the port is taken.
    """
    from wormhole_transit_relay.database import get_db
    from wormhole_transit_relay.transit_server import Transit, TransitConnection
    from wormhole_transit_relay.usage import create_usage_tracker

    db = get_db(usage_db) if usage_db is not None else None
    usage = create_usage_tracker(blur_usage=None, log_file=log_fd_file, usage_db=db)
    transit = Transit(usage, reactor.seconds)
    relay_factory = ServerFactory()
    relay_factory.protocol = TransitConnection
    relay_factory.log_requests = False  # type: ignore[attr-defined]
    relay_factory.transit = transit  # type: ignore[attr-defined]
    served = await _serve_loopback(reactor, port, relay_factory, [db])
    relay = TransitRelay(hint=f"tcp:{LOOPBACK}:{served['port']}", transit=transit, **served)
    if websocket:
        from autobahn.twisted.websocket import WebSocketServerFactory
        from wormhole_transit_relay.transit_server import WebSocketTransitConnection

        ws_factory = WebSocketServerFactory(f"ws://{LOOPBACK}/")  # type: ignore[no-untyped-call]
        ws_factory.protocol = WebSocketTransitConnection
        ws_factory.transit = transit  # type: ignore[attr-defined]
        ws_factory.log_requests = False  # type: ignore[attr-defined]
        try:
            ws_served = await _serve_loopback(reactor, websocket_port, ws_factory, [])
        except BaseException:
            await relay.stop()
            raise
        relay._websocket = _LoopbackServer(**ws_served)
        relay.ws_url = f"ws://{LOOPBACK}:{ws_served['port']}/"
    return relay
