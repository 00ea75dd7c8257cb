"""Paired session processes for tests: pair two ``txdilation run --pairing`` processes through the
real mailbox server and transit relay on 127.0.0.1, kill and restart them, and push bytes
through the forward.

Side A listens (``--listen echo=tcp:0``); side B connects each ``echo`` subchannel to a local
echo service. A restarted A listens on a new port: :meth:`PairedProcessesMixin.echo` reads the
port from the process's latest ``listening`` event.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Factory

from tests.session.test_processes import STOP_WITHIN, ProcessesMixin
from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK
from tests.support.waits import sleep
from txdilation.session.child import SessionProcess, run_command, spawn_session

APPID = "txdilation.test/pairing"


class PairedProcessesMixin(ProcessesMixin):
    """Paired ``txdilation run`` processes (see the module docstring)."""

    reactor: Any

    async def start_pairing_services(self) -> None:
        """The echo service B forwards to, and the directory of the pairing files."""
        self.echo_port = await self.service(Factory.forProtocol(HalfCloseEcho))
        self.directory = Path(self.mktemp()).resolve()  # type: ignore[attr-defined]
        self.directory.mkdir(parents=True)
        self.paths = {name: self.directory / f"{name}.pairing" for name in ("A", "B")}

    def side(self, name: str, *extra: str, env: dict[str, str] | None = None) -> SessionProcess:
        """Start side ``name`` (``A`` listens, ``B`` connects) with its pairing file."""
        forward = (
            ["--listen", f"echo=tcp:0:interface={LOOPBACK}"]
            if name == "A"
            else ["--connect", f"echo=tcp:{LOOPBACK}:{self.echo_port}"]
        )
        argv = [
            *run_command(),
            "--mailbox", self.mailbox.url, "--appid", APPID, "--relay", self.transit_relay.hint,
            "--pairing", str(self.paths[name]), "--status", "-", *forward, *extra,
        ]  # fmt: skip
        environment = dict(os.environ)
        environment.update(env or {})
        process = spawn_session(self.reactor, name, argv, env=environment)
        self.processes = [*getattr(self, "processes", []), process]
        self.addCleanup(process.terminate, self.reactor, STOP_WITHIN)  # type: ignore[attr-defined]
        return process

    async def pair(self) -> tuple[SessionProcess, SessionProcess]:
        """A with an allocated code, B with it: both write their pairing file and dilate."""
        a = self.side("A", "--allocate-code")
        code = (await self.within(a.next_event("code"), "A's code"))["code"]
        b = self.side("B", "--code", code)
        for process in (a, b):
            await self.within(process.next_event("paired"), f"{process.name} paired")
            await self.within(process.next_event("dilated"), f"{process.name} dilated")
        return a, b

    async def kill(self, process: SessionProcess) -> None:
        """SIGKILL, and wait until it is gone."""
        process.signal("KILL")
        await self.within(process.ended, f"{process.name} killed")

    async def echo(self, a: SessionProcess, payload: bytes, seconds: float = 30.0) -> bytes:
        """Connect to A's ``echo`` port, send ``payload``, half-close, until the payload comes
        back (a connection made while the peer is restarting is reset: its forward belonged to
        the meeting with the peer's previous process); returns what came back last."""
        listening = await self.within(
            a.next_event("listening", lambda e: e["name"] == "echo"), "A listening"
        )
        port = int(listening["address"].rsplit(":", 1)[1])
        deadline = self.reactor.seconds() + seconds
        while True:
            client = Client()
            await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), client)
            client.transport.write(payload)
            client.transport.loseWriteConnection()
            left = max(0.1, deadline - self.reactor.seconds())
            await self.within(client.eof, f"the echo of {payload[:20]!r}", left)
            if bytes(client.data) == payload or self.reactor.seconds() > deadline:
                return bytes(client.data)
            await sleep(0.05, self.reactor)

    async def reconnected(self, process: SessionProcess, after: int = 0) -> dict[str, Any]:
        """The process's next ``reconnected`` event (from event number ``after`` on)."""
        event: dict[str, Any] = await self.within(
            process.next_event("reconnected", after=after), f"{process.name} reconnected"
        )
        return event

    def held_open(self, a: SessionProcess) -> Deferred[Client]:
        """A forwarded connection through A left open (its client's ``lost`` fires when the
        session ends it)."""

        async def open_one() -> Client:
            listening = await a.next_event("listening", lambda e: e["name"] == "echo")
            port = int(listening["address"].rsplit(":", 1)[1])
            client = Client()
            await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), client)
            client.transport.write(b"held")
            return client

        return Deferred.fromCoroutine(open_one())
