"""docs/servers.md's setup, run: the mailbox server and the transit relay started with the
doc's ``twistd`` commands (as processes, on 127.0.0.1), and two ``txdilation run --no-listen``
sessions that can only meet through them: they dilate through the relay and carry a forwarded
connection, then stop cleanly."""

from __future__ import annotations

import socket
import sys
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK
from txdilation.session.child import SessionProcess, run_command, spawn_session

TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile="]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class OwnServersTests(TestCase):
    """The doc's commands, run."""

    timeout = 90

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor

    def spawn(self, name: str, argv: list[str]) -> SessionProcess:
        directory = self.mktemp()
        import os

        os.makedirs(directory)
        process = spawn_session(self.reactor, name, argv, path=directory)
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def until_listening(self, process: SessionProcess, port: int) -> None:
        """Wait until something accepts on 127.0.0.1:port (the server is up)."""
        for _ in range(400):
            self.assertTrue(process.running, process.tail() + "\n".join(process.other_output))
            try:
                await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client())
                return
            except Exception:
                await deferLater(self.reactor, 0.05, lambda: None)
        self.fail(f"{process.name} never listened on {port}")

    async def within(self, d: Deferred[Any], *processes: SessionProcess) -> Any:
        d.addTimeout(30, self.reactor)
        try:
            return await d
        except Exception:
            self.fail("\n".join(p.tail() + "\n".join(p.other_output) for p in processes))

    async def test_doc_setup(self) -> None:
        """twistd wormhole-mailbox and twistd transitrelay serve two --no-listen sessions:
        both select a relay connection (->relay:tcp:127.0.0.1:PORT), a forwarded connection
        is echoed end to end, and SIGTERM stops the sessions with exit 0."""
        mailbox_port, relay_port = free_port(), free_port()
        mailbox = self.spawn(
            "mailbox",
            [*TWISTD, "wormhole-mailbox", "--port", f"tcp:{mailbox_port}:interface={LOOPBACK}",
             "--channel-db", "channels.sqlite"],
        )  # fmt: skip
        relay = self.spawn(
            "relay", [*TWISTD, "transitrelay", "--port", f"tcp:{relay_port}:interface={LOOPBACK}"]
        )
        await self.until_listening(mailbox, mailbox_port)
        await self.until_listening(relay, relay_port)
        echo = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(HalfCloseEcho)
        )
        self.addCleanup(echo.stopListening)
        common = [
            "--mailbox", f"ws://{LOOPBACK}:{mailbox_port}/v1",
            "--relay", f"tcp:{LOOPBACK}:{relay_port}", "--no-listen", "--status", "-",
        ]  # fmt: skip
        a = self.spawn(
            "A",
            [
                *run_command(),
                *common,
                "--allocate-code",
                "--listen",
                f"web=tcp:0:interface={LOOPBACK}",
            ],
        )
        code = (await self.within(a.next_event("code"), a, mailbox))["code"]
        b = self.spawn(
            "B",
            [*run_command(), *common, "--code", code,
             "--connect", f"web=tcp:{LOOPBACK}:{echo.getHost().port}"],
        )  # fmt: skip
        for process in (a, b):
            selected = await self.within(process.next_event("connection-selected"), a, b, relay)
            self.assertEqual(selected["path"], "relay")
            self.assertEqual(selected["hint"], f"->relay:tcp:{LOOPBACK}:{relay_port}")
        address = (await a.next_event("listening"))["address"]
        port = int(address.rsplit(":", 1)[1])
        client = await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client())
        client.transport.write(b"through your own servers")
        client.transport.loseWriteConnection()
        await self.within(client.eof, a, b)
        self.assertEqual(bytes(client.data), b"through your own servers")
        self.assertEqual(await a.terminate(self.reactor, 10.0), 143, a.tail())  # SIGTERM
        self.assertEqual(await self.within(b.ended, b), 0, b.tail())
