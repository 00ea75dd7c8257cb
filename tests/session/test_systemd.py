"""docs/txdilation.service, docs/txdilation-paired.service and docs/txdilation.socket, run as
systemd would run them.

There is no systemd here, so the test does what systemd does with these units: it takes the
unit's ``ExecStart=`` (the virtualenv's ``bin/twistd``: this environment's, whose first line
names this Python, as a virtualenv's does), expands ``%S`` and ``%d`` (the credentials
directory, where ``LoadCredential=`` puts a private copy of the settings) to scratch
directories, passes a listening socket as file descriptor 3 with ``LISTEN_PID``/``LISTEN_FDS``
set (socket activation, as ``txdilation.socket`` asks), and reads the journal from the
process's stdout.
A connection made to the socket before the session even dilated goes through it to the peer
(an in-process session against the real mailbox server on 127.0.0.1) and back; SIGTERM then
stops the unit with exit status 0. The paired unit is restarted as ``systemctl restart`` and
``Restart=on-failure`` would (SIGTERM then start; SIGKILL then start): each time the forward
through the socket works again, without a code."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Factory
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

import txdilation
from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK, REPO_ROOT, RealServersMixin
from tests.support.waits import sleep
from txdilation.reporting.status_events import EventLog, StatusWriter
from txdilation.session.child import SessionProcess
from txdilation.session.config import build_config

UNIT = REPO_ROOT / "docs" / "txdilation.service"
PAIRED_UNIT = REPO_ROOT / "docs" / "txdilation-paired.service"
SOCKET_UNIT = REPO_ROOT / "docs" / "txdilation.socket"
VENV = "/opt/txdilation"
CODE = "4-purple-sausage"

# what systemd does for a socket-activated service, between fork and exec
ACTIVATE = (
    "import os, sys; os.environ['LISTEN_PID'] = str(os.getpid()); "
    "os.environ['LISTEN_FDS'] = '1'; os.environ['LISTEN_FDNAMES'] = 'txdilation.socket'; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values]}}`` of a unit file (continuation lines joined)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


class UnitFileTests(SynchronousTestCase):
    """What the units say."""

    def test_service_unit(self) -> None:
        """The service runs the virtualenv's twistd in the foreground without a pidfile,
        logs to the journal through txdilation's journal logger, needs no existing user, and
        takes its settings and status file from systemd's directories."""
        service = unit_settings(UNIT)["Service"]
        argv = shlex.split(service["ExecStart"][0])
        self.assertEqual(argv[0], f"{VENV}/bin/twistd")
        self.assertEqual(
            argv[1:6],
            ["-n", "--pidfile=", "--logger", "txdilation.logs.journal_logger", "dilation"],
        )
        self.assertEqual(service["DynamicUser"], ["yes"])
        self.assertNotIn("User", service)
        self.assertEqual(service["StateDirectory"], ["txdilation"])
        self.assertEqual(service["ConfigurationDirectory"], ["txdilation"])
        self.assertEqual(service["Restart"], ["on-failure"])
        self.assertEqual(service["LoadCredential"], ["session.toml:/etc/txdilation/session.toml"])
        self.assertEqual(argv[argv.index("--config") + 1], "%d/session.toml")

    def test_paired_unit(self) -> None:
        """The paired unit runs the same twistd with --pairing in its state directory, and
        comes back quickly after a crash."""
        service = unit_settings(PAIRED_UNIT)["Service"]
        argv = shlex.split(service["ExecStart"][0])
        self.assertEqual(argv[0], f"{VENV}/bin/twistd")
        self.assertEqual(argv[argv.index("--pairing") + 1], "%S/txdilation/peer.pairing")
        self.assertEqual(service["StateDirectory"], ["txdilation"])
        self.assertEqual(service["Restart"], ["on-failure"])
        self.assertEqual(service["RestartSec"], ["1"])

    def test_settings_installed_private(self) -> None:
        """Both units install their settings (which may hold a wormhole code) mode 0600, and
        read them through systemd's credentials (the dynamic user cannot read a root-owned
        0600 file), never from a world-readable place."""
        for unit in (UNIT, PAIRED_UNIT):
            text = unit.read_text()
            self.assertIn("install -D -m 600 session.toml /etc/txdilation/session.toml", text)
            self.assertNotIn("-m 644", text)
            service = unit_settings(unit)["Service"]
            self.assertEqual(
                service["LoadCredential"], ["session.toml:/etc/txdilation/session.toml"]
            )
            self.assertIn("--config %d/session.toml", " ".join(service["ExecStart"]))

    def test_socket_unit(self) -> None:
        """The socket unit starts the service and listens on loopback."""
        socket_section = unit_settings(SOCKET_UNIT)["Socket"]
        self.assertEqual(socket_section["Service"], ["txdilation.service"])
        self.assertEqual(socket_section["ListenStream"], ["127.0.0.1:8080"])


class UnitMixin(RealServersMixin):
    """Runs a unit's ExecStart= as systemd would, next to an in-process peer session."""

    reactor: Any

    def directories(self, toml: str) -> Path:
        """The unit's state directory (``%S``) and credentials directory (``%d``) under a
        scratch root, with ``toml`` (mailbox, appid and the ``web`` listen added) as
        ``session.toml``; returns the root (``var-lib`` and ``credentials`` under it)."""
        root = Path(self.mktemp()).resolve()
        (root / "var-lib" / "txdilation").mkdir(parents=True, mode=0o700)
        (root / "credentials").mkdir(parents=True, mode=0o700)
        settings = root / "credentials" / "session.toml"  # LoadCredential='s private copy
        settings.write_text(
            f'mailbox = "{self.mailbox.url}"\nappid = "txdilation.test/systemd"\n{toml}'
            '[listen]\nweb = "systemd:domain=INET:index=0"\n'
        )
        settings.chmod(0o400)
        return root

    def listening_socket(self) -> tuple[socket.socket, int]:
        """The listening socket systemd would hold (txdilation.socket) and its port."""
        listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.addCleanup(listening.close)
        listening.bind((LOOPBACK, 0))
        listening.listen(8)
        return listening, listening.getsockname()[1]

    def unit(self, unit: Path, root: Path, listening: socket.socket) -> SessionProcess:
        """Start the unit's ``ExecStart=`` as systemd would: ``%S``/``%d`` expanded, the
        socket as file descriptor 3 (``LISTEN_FDS``), in the state directory."""
        twistd = Path(sys.prefix) / "bin" / "twistd"
        if not twistd.exists():
            raise SkipTest(f"no {twistd} (twistd is not installed as a script here)")
        state, credentials = root / "var-lib", root / "credentials"
        exec_start = unit_settings(unit)["Service"]["ExecStart"][0]
        exec_start = exec_start.replace("%S", str(state)).replace("%d", str(credentials))
        argv = shlex.split(exec_start)
        argv[0] = str(twistd)
        process = SessionProcess("unit")
        self.reactor.spawnProcess(
            process,
            sys.executable,
            [sys.executable, "-c", ACTIVATE, *argv],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            path=str(state / "txdilation"),
            childFDs={0: "w", 1: "r", 2: "r", 3: listening.fileno()},
        )
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def peer(self, pairing: Path | None = None) -> EventLog:
        """The other side: an in-process session forwarding 'web' to a local echo service
        (with a pairing file, when given); returns its events."""
        from txdilation.session.service import Session

        if not txdilation.is_installed():
            txdilation.install()
            self.addCleanup(txdilation.uninstall)
        echo = await TCP4ServerEndpoint(self.reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(HalfCloseEcho)
        )
        self.addCleanup(echo.stopListening)
        writer = StatusWriter(self.reactor)
        log = EventLog()
        writer.add_observer(log)
        raw: dict[str, Any] = {
            "mailbox": self.mailbox.url,
            "appid": "txdilation.test/systemd",
            "code": CODE,
            "connect": {"web": f"tcp:{LOOPBACK}:{echo.getHost().port}"},
        }
        if pairing is not None:
            raw["pairing"] = str(pairing)
        session = Session(build_config(raw), self.reactor, writer)
        self.addCleanup(session.stop)
        session.start()
        return log

    async def echo(self, port: int, payload: bytes, process: SessionProcess) -> bytes:
        """Send ``payload`` through the socket, half-close; what comes back."""
        client = await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client())
        client.transport.write(payload)
        client.transport.loseWriteConnection()
        await self.within(client.eof, f"the echo of {payload!r}", process)
        return bytes(client.data)

    async def within(self, d: Deferred[Any], what: str, process: SessionProcess) -> Any:
        timer = self.reactor.callLater(30, d.cancel)
        try:
            return await d
        except Exception:
            await sleep(0, self.reactor)
            self.fail(f"{what}:\n{process.tail()}\n" + "\n".join(process.other_output[-20:]))
        finally:
            if timer.active():
                timer.cancel()


class SocketActivatedUnitTests(UnitMixin, TestCase):
    """The service unit, socket-activated, with a real peer."""

    timeout = 60

    async def test_socket_activated_session(self) -> None:
        """The first connection to the socket reaches the peer's service once the wormhole
        is dilated (the bytes come back, then end of input); the journal lines carry syslog
        priorities and say the code and 'dilated'; SIGTERM stops it with exit 0 and a final
        'closed' event in the status file."""
        state = self.directories(f'code = "{CODE}"\n')
        listening, port = self.listening_socket()
        process = self.unit(UNIT, state, listening)

        # a client before anything is dilated: accepted by the session, held until dilation
        client = await connectProtocol(TCP4ClientEndpoint(self.reactor, LOOPBACK, port), Client())
        client.transport.write(b"hello through systemd")
        client.transport.loseWriteConnection()
        await self.peer()
        await self.within(client.eof, "the echo", process)
        self.assertEqual(bytes(client.data), b"hello through systemd")

        self.assertEqual(await process.terminate(self.reactor, 10.0), 0, process.tail())
        status = state / "var-lib" / "txdilation" / "status.jsonl"
        events = [json.loads(line) for line in status.read_text().splitlines()]
        self.assertEqual(events[-1]["kind"], "closed")
        self.assertEqual(events[-1]["reason"], "stopped")
        journal = process.other_output
        self.assertTrue(journal, process.tail())
        self.assertTrue(all(re.match(r"<[2-7]>\[", line) for line in journal), journal)
        self.assertIn(f"<6>[txdilation.session] wormhole code: {CODE}", journal)
        self.assertTrue(any("] dilated: generation 1" in line for line in journal), journal)


class PairedUnitTests(UnitMixin, TestCase):
    """The paired unit restarted as systemd restarts it."""

    timeout = 120

    async def test_restart_brings_the_forward_back(self) -> None:
        """The paired unit pairs with the in-process peer using the code of its TOML file;
        ``systemctl restart`` (SIGTERM, exit 0, start again) and a crash with
        ``Restart=on-failure`` (SIGKILL, start again) each bring the forward through the
        socket back without a code (the code in the file is not used: a warning says so), and
        the journal says it reconnected to the paired peer."""
        root = self.directories(f'code = "{CODE}"\n')
        pairing = root / "var-lib" / "txdilation" / "peer.pairing"
        listening, port = self.listening_socket()
        process = self.unit(PAIRED_UNIT, root, listening)
        peer = await self.peer(Path(self.mktemp() + ".pairing").resolve())
        self.assertEqual(await self.echo(port, b"paired", process), b"paired")
        await self.within(peer.next_event("paired"), "the peer paired", process)
        self.assertTrue(pairing.exists())

        for stop in ("TERM", "KILL"):
            if stop == "TERM":
                self.assertEqual(await process.terminate(self.reactor, 10.0), 0, process.tail())
            else:
                process.signal("KILL")
                await process.ended
            process = self.unit(PAIRED_UNIT, root, listening)
            payload = f"after SIG{stop}".encode()
            self.assertEqual(await self.echo(port, payload, process), payload)
        journal = process.other_output
        self.assertTrue(any("] reconnected to paired peer" in line for line in journal), journal)
        self.assertTrue(
            any("the code in the settings is not used" in line for line in journal), journal
        )
        self.assertEqual(await process.terminate(self.reactor, 10.0), 0, process.tail())
