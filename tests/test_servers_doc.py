"""docs/servers.md, run as written: every command of the page, one after the other in one
directory, on 127.0.0.1.

The page's commands are read from its ``sh`` blocks (continuation lines joined, comments
dropped; a ``# -> TEXT`` comment is what the command before it must print). What is replaced,
and nothing else: the host names by 127.0.0.1, the ports by free ones, the installation prefix
``/opt/wormhole-servers/bin/twistd`` by this environment's twistd, ``txdilation`` by this
checkout's, ``/var/lib/...`` by a temporary directory and the code by the one the first session
prints. Not run: the installation commands (the environment has the packages), the fragments
written with ``...``, and the systemd snippet. A command of any other kind fails the test, so
the page cannot gain a command that is not run.

So this pins what a reader meets: the servers start side by side in one directory (their pid
files differ), the channel database's directory is made first, the WebSocket relay replaces
the plain one, and two ``--no-listen`` sessions meet through the relay and carry a connection.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.trial.unittest import TestCase

from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK, REPO_ROOT
from tests.support.waits import sleep
from txdilation.session.child import SessionProcess, run_command, spawn_session

DOC = REPO_ROOT / "docs" / "servers.md"
TWISTD = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
NOT_RUN = ("python3.11 -m venv", "/opt/wormhole-servers/bin/pip install")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def doc_commands(text: str) -> list[tuple[str, list[str]]]:
    """Each command of the page's ``sh`` blocks, with the ``# -> TEXT`` lines after it."""
    commands: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            expected = re.match(r"\s*# -> (.*)", line)
            if expected and commands:
                commands[-1][1].append(expected.group(1))
                continue
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append((" ".join(command.split()), []))
    return commands


class ServersDocTests(TestCase):
    """docs/servers.md's commands, run."""

    timeout = 120

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor: Any = reactor
        self.directory = Path(self.mktemp()).resolve()
        self.directory.mkdir(parents=True)
        self.ports = {p: free_port() for p in ("4000", "4001", "4002", "8080")}
        self.var = self.directory / "var-lib"
        self.processes: list[SessionProcess] = []

    def substituted(self, command: str) -> str:
        command = command.replace("mailbox.example.com", LOOPBACK)
        command = command.replace("relay.example.com", LOOPBACK)
        command = command.replace("/var/lib", str(self.var))
        for port, free in self.ports.items():
            command = re.sub(rf"(?<=[:])({port})(?=\b)", str(free), command)
        return command

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command)
        if words[0] == "/opt/wormhole-servers/bin/twistd":
            return [*TWISTD, *words[1:]]
        if words[:2] == ["txdilation", "run"]:
            return [*run_command(), *words[2:]]
        self.fail(f"docs/servers.md has a command this test does not know: {command}")

    def start(self, name: str, command: str) -> SessionProcess:
        process = spawn_session(self.reactor, name, self.argv(command), path=str(self.directory))
        self.processes.append(process)
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def until_listening(self, process: SessionProcess, port: int) -> None:
        for _ in range(400):
            self.assertTrue(process.running, self.tails())
            try:
                client = await connectProtocol(
                    TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client()
                )
                client.transport.abortConnection()
                return
            except Exception:
                await sleep(0.05, self.reactor)
        self.fail(f"{process.name} never listened on {port}\n{self.tails()}")

    async def printed(self, process: SessionProcess, text: str) -> None:
        """Wait (up to 45 s) until ``process`` printed ``text`` (stdout or stderr)."""
        for _ in range(900):
            if text in process.stderr or any(text in line for line in process.other_output):
                return
            self.assertTrue(process.running, self.tails())
            await sleep(0.05, self.reactor)
        self.fail(f"{process.name} never printed {text!r}\n{self.tails()}")

    def tails(self) -> str:
        return "\n".join(p.tail() + "\n".join(p.other_output) for p in self.processes)

    async def ended(self, process: SessionProcess) -> int | None:
        d: Deferred[Any] = Deferred()
        process.ended.addBoth(lambda code: d.callback(code) if not d.called else None)
        code: int | None = await d.addTimeout(30, self.reactor)
        return code

    async def test_commands_as_written(self) -> None:
        """The mailbox server (after making its database's directory) and the plain relay
        run side by side in one directory; the WebSocket relay replaces the plain one (same
        TCP port, then a WebSocket port too); the two sessions of "Checking a setup" meet
        through it: the first prints its code, the second its relay connection, and a
        connection to the first's --listen port reaches the second's --connect service (the
        page's port 80: an echo service here). SIGTERM stops the first (exit 143), and the
        second ends by itself (exit 0)."""
        echo = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(HalfCloseEcho)
        )
        self.addCleanup(echo.stopListening)
        self.ports["80"] = echo.getHost().port
        commands = doc_commands(DOC.read_text())
        sessions: list[SessionProcess] = []
        relay: SessionProcess | None = None
        code = ""
        for command, expected in commands:
            if command.startswith(NOT_RUN) or "..." in command:
                continue
            command = self.substituted(command)
            if command.startswith("mkdir -p "):
                subprocess.run(shlex.split(command), check=True, cwd=self.directory, timeout=10)
            elif "wormhole-mailbox" in command:
                mailbox = self.start("mailbox", command)
                await self.until_listening(mailbox, self.ports["4000"])
            elif "transitrelay" in command:
                if relay is not None:  # the WebSocket relay replaces the plain one: stop that
                    await self.ended(await self.stopped(relay))  # (twistd dies by SIGTERM)
                relay = self.start("relay", command)
                await self.until_listening(relay, self.ports["4001"])
                if "--websocket" in command:
                    await self.until_listening(relay, self.ports["4002"])
            else:
                command = command.replace("2-tambourine-dreadful", code or "2-tambourine-dreadful")
                session = self.start(f"session {len(sessions) + 1}", command)
                sessions.append(session)
                for text in expected:
                    text = self.substituted(text)
                    if text.startswith("wormhole code: "):
                        await self.printed(session, "wormhole code: ")
                        found = re.search(r"wormhole code: (\S+)", session.stderr)
                        assert found is not None
                        code = found.group(1)
                    else:
                        await self.printed(session, text)
        self.assertEqual(len(sessions), 2, commands)
        self.assertTrue(code)
        self.assertTrue(os.path.exists(self.var / "wormhole-mailbox" / "channels.sqlite"))
        self.assertEqual(
            sorted(p.name for p in self.directory.iterdir() if p.suffix == ".pid"),
            ["mailbox.pid", "relay.pid"],
        )

        endpoint = TCP4ClientEndpoint(self.reactor, LOOPBACK, self.ports["8080"])
        client = await connectProtocol(endpoint, Client())
        client.transport.write(b"through your own servers")
        client.transport.loseWriteConnection()
        await client.eof.addTimeout(30, self.reactor)
        self.assertEqual(bytes(client.data), b"through your own servers")
        first, second = sessions
        self.assertEqual(await self.ended(await self.stopped(first)), 143, first.tail())
        self.assertEqual(await self.ended(second), 0, second.tail())

    async def stopped(self, process: SessionProcess) -> SessionProcess:
        process.signal("TERM")
        return process
