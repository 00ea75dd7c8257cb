"""PairedWormhole in-process, two sides through the real mailbox server and transit relay on
127.0.0.1: the code meeting writes both files; a side that stops and starts again from its file
meets the peer without a code; a peer that does not pair is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.internet.protocol import Factory
from twisted.trial.unittest import TestCase

from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import RealServersMixin
from txdilation.pairing.options import PairingOptions
from txdilation.pairing.store import PairingStore

APPID = "txdilation.test/pairing"
CODE = "7-pairing-test"


class Side:
    """One PairedWormhole and what it reported."""

    def __init__(self, test: Any, path: Path, **options: Any) -> None:
        from txdilation.pairing.paired import PairedWormhole

        self.events: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[Any] = []
        opts = PairingOptions(
            path=str(path),
            appid=APPID,
            mailbox=test.mailbox.url,
            relay=(test.transit_relay.hint,),
            **options,
        )
        self.paired = PairedWormhole(
            test.reactor,
            opts,
            on_event=lambda kind, fields: self.events.append((kind, fields)),
            on_failed=self.failures.append,
        )
        test.addCleanup(self.paired.close)

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


class PairedTests(RealServersMixin, TestCase):
    timeout = 60

    def path(self, name: str) -> Path:
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        return directory / f"{name}.pairing"

    async def exchange(self, listening: Side, connecting: Side, payload: bytes) -> bytes:
        client = Client()
        await connecting.paired.connector_for("echo").connect(Factory.forProtocol(lambda: client))
        client.transport.write(payload)
        client.transport.loseWriteConnection()
        await client.eof
        return bytes(client.data)

    async def test_pair_then_meet_again(self) -> None:
        a_path, b_path = self.path("a"), self.path("b")
        a = Side(self, a_path, code=CODE)
        b = Side(self, b_path, code=CODE)
        await a.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a.paired.start()
        b.paired.start()
        await a.paired.when_dilated()
        await b.paired.when_dilated()
        self.assertEqual(await self.exchange(a, b, b"first"), b"first")
        ra, rb = PairingStore(a_path).load(), PairingStore(b_path).load()
        self.assertEqual(ra.current, rb.current)
        self.assertEqual(ra.peer.id, rb.me.id)
        self.assertEqual(os.stat(a_path).st_mode & 0o777, 0o600)

        await a.paired.close()
        a2 = Side(self, a_path)
        await a2.paired.listener_for("echo").listen(Factory.forProtocol(HalfCloseEcho))
        a2.paired.start()
        await a2.paired.when_dilated()
        self.assertEqual(await self.exchange(a2, b, b"second"), b"second")
