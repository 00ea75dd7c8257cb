"""What an attacker of the pairing's rendezvous does, for tests: read the mailbox server's
channel database as its operator would, and speak the mailbox protocol as any client can.

``lobby_ids`` finds which of a pairing's rendezvous mailboxes (computed from a pairing file: the
oracle telling the test which database rows are lobbies) the server holds, with the sides it
recorded. ``squat`` closes a mailbox as each side it saw (the server deletes it, and does not
tell the listeners) and then opens it with two random sides (crowded for good for anyone
else). ``flood`` binds as a side it saw and adds messages (a 10 MB one, thousands of others).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint

from tests.support.waits import sleep
from txdilation.pairing import derive
from txdilation.pairing.store import PairingStore
from txdilation.testing.servers import MailboxServer


def database_rows(mailbox: MailboxServer) -> list[tuple[str, str]]:
    """``(mailbox id, side)`` of every side the server's channel database records."""
    db: Any = mailbox.server._db  # the operator's view: the SQLite channel database
    return [(row["mailbox_id"], row["side"]) for row in db.execute("SELECT * FROM mailbox_sides")]


def lobby_ids(mailbox: MailboxServer, pairing: Path, rounds: int = 4) -> dict[str, list[str]]:
    """The rendezvous mailboxes of the pairing's current generations that the database holds,
    each with the sides it recorded."""
    record = PairingStore(pairing).load()
    ours = {
        derive.lobby_mailbox(g.secret, slot, r)
        for g in record.held()
        for slot in range(derive.SLOTS)
        for r in range(rounds)
    }
    found: dict[str, list[str]] = {}
    for mailbox_id, side in database_rows(mailbox):
        if mailbox_id in ours:
            found.setdefault(mailbox_id, []).append(side)
    return found


class _Client(WebSocketClientProtocol):  # type: ignore[misc]
    def onOpen(self) -> None:
        self.factory.opened.callback(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.factory.received.append(json.loads(payload))

    def onClose(self, wasClean: bool, code: Any, reason: Any) -> None:
        if not self.factory.opened.called:
            self.factory.opened.errback(ConnectionError(reason))


async def session(
    reactor: Any, mailbox: MailboxServer, messages: Sequence[dict[str, Any]], linger: float = 0.3
) -> list[dict[str, Any]]:
    """Connect, send ``messages`` in order, wait ``linger`` seconds, disconnect; returns what
    the server sent."""
    factory: Any = WebSocketClientFactory(mailbox.url)
    factory.protocol = _Client
    factory.opened = Deferred()
    factory.received = []
    port = int(mailbox.url.rsplit(":", 1)[1].split("/")[0])
    await TCP4ClientEndpoint(reactor, "127.0.0.1", port).connect(factory)
    protocol = await factory.opened
    for message in messages:
        protocol.sendMessage(json.dumps(message).encode("utf-8"), False)
    await sleep(linger, reactor)
    protocol.dropConnection(abort=True)
    received: list[dict[str, Any]] = factory.received
    return received


async def squat(
    reactor: Any, mailbox: MailboxServer, appid: str, lobby: str, sides: Sequence[str]
) -> None:
    """Close ``lobby`` as each of ``sides`` (it is deleted once all are closed, its listeners
    not told), then open it as two random sides (crowded for anyone else)."""
    for side in sides:
        await session(reactor, mailbox, [
            {"type": "bind", "appid": appid, "side": side},
            {"type": "close", "mailbox": lobby, "mood": "happy"},
        ], 0.1)  # fmt: skip
    for _ in range(2):
        await session(reactor, mailbox, [
            {"type": "bind", "appid": appid, "side": os.urandom(5).hex()},
            {"type": "open", "mailbox": lobby},
        ], 0.1)  # fmt: skip


async def flood(
    reactor: Any, mailbox: MailboxServer, appid: str, lobby: str, side: str, bodies: Sequence[str]
) -> None:
    """Bind as ``side`` (one the database showed), open ``lobby`` and add every body."""
    messages: list[dict[str, Any]] = [
        {"type": "bind", "appid": appid, "side": side},
        {"type": "open", "mailbox": lobby},
    ]
    messages += [{"type": "add", "phase": "pairing", "body": body} for body in bodies]
    await session(reactor, mailbox, messages, 1.0)
