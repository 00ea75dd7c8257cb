"""``dilation:`` endpoint strings (src/twisted/plugins/txdilation_endpoints.py and
txdilation.endpoints): parsing, plugin discovery, and servers and clients in this process over
the real mailbox server on 127.0.0.1 (sharing one wormhole per code, the code file, errors in
words, timeouts, closing). ``tests/test_examples.py`` runs them across processes, with
``twistd web --listen dilation:...``."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError
from twisted.internet.endpoints import clientFromString, connectProtocol, serverFromString
from twisted.internet.interfaces import (
    IListeningPort,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
    IStreamServerEndpointStringParser,
)
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactor
from twisted.logger import formatEvent, globalLogPublisher
from twisted.plugin import getPlugins
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

import txdilation
from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import SRC_DIR, RealServersMixin
from txdilation.endpoints import (
    DEFAULT_APPID,
    DilationClientEndpoint,
    DilationServerEndpoint,
    EndpointSettings,
    in_words,
    parse_settings,
    registry,
)


def escaped(text: str) -> str:
    """``text`` with its colons escaped for an endpoint string."""
    return text.replace(":", "\\:")


class ParseTests(SynchronousTestCase):
    """Endpoint strings: keys, defaults, errors; nothing starts when parsing."""

    def test_discovered_and_ours(self) -> None:
        """serverFromString/clientFromString find txdilation's plugin for 'dilation:' (the
        module in this checkout's src/twisted/plugins), and parsing creates no wormhole."""
        parsers = [
            p for p in getPlugins(IStreamServerEndpointStringParser) if p.prefix == "dilation"
        ]
        self.assertEqual(len(parsers), 1)
        module = type(parsers[0]).__module__
        import sys

        self.assertEqual(
            Path(sys.modules[module].__file__ or "").resolve(),
            (SRC_DIR / "twisted" / "plugins" / "txdilation_endpoints.py").resolve(),
        )
        reactor = MemoryReactor()
        server = serverFromString(reactor, "dilation:subprotocol=http:code-file=c.txt")
        client = clientFromString(reactor, "dilation:subprotocol=http:code=7-a-b:timeout=5")
        self.assertIsInstance(server, DilationServerEndpoint)
        self.assertIsInstance(client, DilationClientEndpoint)
        verifyObject(IStreamServerEndpoint, server)
        verifyObject(IStreamClientEndpoint, client)
        self.assertEqual(client.settings.timeout, 5.0)
        self.assertEqual(server.settings.appid, DEFAULT_APPID)
        self.assertNotIn(id(reactor), registry._registries)

    def test_keys(self) -> None:
        """Every key, with escaped colons in URLs; flags take yes/no."""
        settings = parse_settings(
            (),
            {
                "subprotocol": "http",
                "mailbox": "ws://127.0.0.1:4000/v1",
                "appid": "example.com/app",
                "code": "7-a-b",
                "relay": "tcp:127.0.0.1:4001",
                "no-listen": "yes",
                "ping-interval": "10",
                "status": "s.jsonl",
                "timeout": "none",
            },
            client=True,
        )
        self.assertEqual(
            settings,
            EndpointSettings(
                subprotocol="http",
                mailbox="ws://127.0.0.1:4000/v1",
                appid="example.com/app",
                code="7-a-b",
                relay="tcp:127.0.0.1:4001",
                no_listen=True,
                ping_interval=10.0,
                status="s.jsonl",
                timeout=None,
            ),
        )
        url = escaped("ws://127.0.0.1:4000/v1")
        endpoint = serverFromString(MemoryReactor(), f"dilation:subprotocol=x:mailbox={url}")
        self.assertEqual(endpoint.settings.mailbox, "ws://127.0.0.1:4000/v1")
        relay = escaped("tcp:127.0.0.1:4001,ws://127.0.0.1:4002/")
        endpoint = serverFromString(MemoryReactor(), f"dilation:subprotocol=x:relay={relay}")
        self.assertEqual(endpoint.settings.relay, "tcp:127.0.0.1:4001,ws://127.0.0.1:4002/")

    def test_errors(self) -> None:
        """Bad strings are ValueErrors naming the problem (and how to escape a URL)."""
        reactor = MemoryReactor()
        for description, words in (
            ("dilation:http", "key=value"),
            ("dilation:code=1-a", "subprotocol=NAME is required"),
            ("dilation:subprotocol=x:colour=blue", "unknown server endpoint argument(s) colour"),
            ("dilation:subprotocol=x:timeout=5", "unknown server endpoint argument(s) timeout"),
            ("dilation:subprotocol=x:mailbox=http\\://h/v1", "starts with ws://"),
            ("dilation:subprotocol=x:mailbox=ws://h/v1", "escaped with a backslash"),
            ("dilation:subprotocol=x:relay=udp\\:h\\:1", "relay"),
            ("dilation:subprotocol=x:no-listen=maybe", "no-listen must be yes or no"),
            ("dilation:subprotocol=x:ping-interval=-1", "ping-interval must be a positive"),
        ):
            with self.subTest(description=description):
                e = self.assertRaises(ValueError, serverFromString, reactor, description)
                self.assertIn(words, str(e))
        e = self.assertRaises(
            ValueError, clientFromString, reactor, "dilation:subprotocol=x:timeout=soon"
        )
        self.assertIn("timeout must be a positive number", str(e))
        e = self.assertRaises(
            ValueError, serverFromString, reactor, "dilation:subprotocol=x:codefile=c"
        )
        self.assertIn(
            "unknown server endpoint argument(s) codefile (did you mean code-file?)", str(e)
        )
        for key in ("status", "code-file"):  # a file in a directory that is not there
            given = f"dilation:subprotocol=x:{key}=/nonexistent/d/f"
            e = self.assertRaises(ValueError, serverFromString, reactor, given)
            self.assertEqual(
                str(e), f"dilation: {key}=/nonexistent/d/f: no directory /nonexistent/d"
            )

    def test_one_line_in_a_twistd_server(self) -> None:
        """While a twistd server is being set up (its reactor not running yet), a bad string is
        ONE line on stderr and exit status 2 (twistd would print a 31-line traceback); in any
        other program it stays a ValueError."""
        import io
        import sys

        from txdilation.endpoints import strings

        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.patch(strings, "in_twistd", lambda: True)
        e = self.assertRaises(SystemExit, serverFromString, MemoryReactor(), "dilation:code=1-a")
        self.assertEqual(e.code, 2)
        self.assertEqual(
            err.getvalue(),
            "twistd: error: dilation: subprotocol=NAME is required (the subchannel name); "
            "docs/endpoints.md lists the keys\n",
        )
        running = MemoryReactor()
        running.running = True
        self.assertRaises(ValueError, serverFromString, running, "dilation:code=1-a")

    def test_bad_pairing_file(self) -> None:
        """``pairing=PATH`` naming a file others may read, or a damaged one, is refused when
        the string is parsed (nothing starts), in one line naming the file."""
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        path = directory / "peer.pairing"
        path.write_text("{}")
        os.chmod(path, 0o644)
        reactor = MemoryReactor()
        for mode, words in ((0o644, "mode 0644"), (0o600, "not a txdilation pairing file")):
            os.chmod(path, mode)
            description = f"dilation:subprotocol=x:pairing={escaped(str(path))}"
            e = self.assertRaises(ValueError, serverFromString, reactor, description)
            self.assertIn(words, str(e))
            self.assertNotIn("\n", str(e))
        self.assertNotIn(id(reactor), registry._registries)


class EndpointsTests(RealServersMixin, TestCase):
    """Servers and clients in this process, through the real mailbox server."""

    timeout = 60

    def setUp(self) -> Any:
        d = super().setUp()
        # a dilation: endpoint installs txdilation (its wormholes dilate through it); the
        # other tests of this process expect what they found (run last: cleanups are LIFO)
        installed = txdilation.is_installed()
        self.addCleanup(lambda: None if installed else txdilation.uninstall())
        self.lines: list[str] = []

        def observe(event: dict[str, Any]) -> None:
            if event.get("log_namespace") == "txdilation.endpoints":
                self.lines.append(formatEvent(event))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        self.addCleanup(self.close_wormholes)
        return d

    async def close_wormholes(self) -> None:
        """Close what the test left open (as the reactor's shutdown would)."""
        await registry._close_all(self.reactor)

    def string(self, **keys: str) -> str:
        """A dilation: string against this test's servers."""
        keys = {"mailbox": escaped(self.mailbox.url), "appid": "txdilation.test/endpoints", **keys}
        return "dilation:" + ":".join(f"{k}={v}" for k, v in keys.items())

    def within(self, d: Deferred[Any], seconds: float = 20.0) -> Deferred[Any]:
        """``d``, failing after ``seconds``."""
        return d.addTimeout(seconds, self.reactor)

    async def test_shared_wormhole_two_ports_code_file(self) -> None:
        """Two server endpoints with the same code file share one wormhole (one 'wormhole
        starting' line) and each gives its own listening port; the allocated code is logged
        and written to the file (owner-only); two client endpoints with that code share the
        other wormhole and reach each subprotocol's service."""
        code_file = os.path.abspath(self.mktemp())
        ports: list[IListeningPort] = []
        for name in ("one", "two"):
            endpoint = serverFromString(
                self.reactor, self.string(subprotocol=name, **{"code-file": code_file})
            )
            ports.append(await self.within(endpoint.listen(Factory.forProtocol(HalfCloseEcho))))
        code = Path(code_file).read_text().strip()
        self.assertEqual(stat.S_IMODE(os.stat(code_file).st_mode), 0o600)
        self.assertEqual([p.getHost().subprotocol for p in ports], ["one", "two"])
        self.assertEqual({p.getHost().code for p in ports}, {code})
        for name in ("one", "two"):
            client = await self.within(
                connectProtocol(
                    clientFromString(self.reactor, self.string(subprotocol=name, code=code)),
                    Client(),
                )
            )
            client.transport.write(name.encode())
            client.transport.loseWriteConnection()
            await self.within(client.eof)
            self.assertEqual(bytes(client.data), name.encode())
        starts = [line for line in self.lines if line.startswith("wormhole starting")]
        self.assertEqual(len(starts), 2, self.lines)  # one per side
        self.assertIn(f"wormhole code: {code}", self.lines)
        self.assertIn(f"wormhole code written to {code_file}", self.lines)
        self.assertTrue(any(line.startswith("dilated: generation 1, ") for line in self.lines))
        for port in ports:
            await port.stopListening()
        self.assertTrue(
            any(line.startswith("wormhole closed (stopped") for line in self.lines), self.lines
        )

    async def test_paired_endpoints_meet_again(self) -> None:
        """``pairing=PATH`` on both sides: the first time with a code (allocated, in the code
        file); once the client's wormhole is closed, a new client endpoint naming its pairing
        file (and no code) meets the server again, whose port from the first time serves it."""
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        served, used = directory / "server.pairing", directory / "client.pairing"
        code_file = str(directory / "code.txt")
        server = serverFromString(
            self.reactor,
            self.string(subprotocol="echo", pairing=str(served), **{"code-file": code_file}),
        )
        port = await self.within(server.listen(Factory.forProtocol(HalfCloseEcho)))
        self.addCleanup(port.stopListening)
        code = Path(code_file).read_text().strip()
        for attempt, keys in enumerate(({"code": code}, {})):
            endpoint = clientFromString(
                self.reactor, self.string(subprotocol="echo", pairing=str(used), **keys)
            )
            client = await self.within(connectProtocol(endpoint, Client()))
            payload = f"attempt {attempt}".encode()
            client.transport.write(payload)
            client.transport.loseWriteConnection()
            await self.within(client.eof)
            self.assertEqual(bytes(client.data), payload)
            await registry.acquire(self.reactor, endpoint.settings).close()
        self.assertTrue(served.exists() and used.exists())
        self.assertTrue(any("reconnected to paired peer" in line for line in self.lines))

    async def test_conflicting_settings_and_repeated_subprotocol(self) -> None:
        """An endpoint sharing a wormhole with other dilation settings, or listening again for
        a subprotocol that wormhole already serves, fails to listen with ValueError."""
        code_file = os.path.abspath(self.mktemp())
        first = serverFromString(
            self.reactor, self.string(subprotocol="a", **{"code-file": code_file})
        )
        port = await self.within(first.listen(Factory()))
        self.addCleanup(port.stopListening)
        again = serverFromString(
            self.reactor, self.string(subprotocol="a", **{"code-file": code_file})
        )
        e = await self.assertFailure(again.listen(Factory()), ValueError)
        self.assertIn("already listening", str(e))
        other = serverFromString(
            self.reactor,
            self.string(
                subprotocol="b", relay=escaped(self.transit_relay.hint), **{"code-file": code_file}
            ),
        )
        e = await self.assertFailure(other.listen(Factory()), ValueError)
        self.assertIn("must agree on relay", str(e))

    async def test_wrong_code(self) -> None:
        """A client with a wrong code fails with the wormhole's reason (WrongPasswordError,
        not a bare 'wormhole closed'), and the log says it in words, with advice."""
        from wormhole.errors import WrongPasswordError

        code_file = os.path.abspath(self.mktemp())
        server = serverFromString(
            self.reactor, self.string(subprotocol="x", **{"code-file": code_file})
        )
        port = await self.within(server.listen(Factory()))
        self.addCleanup(port.stopListening)
        nameplate = Path(code_file).read_text().split("-")[0]
        client = clientFromString(
            self.reactor, self.string(subprotocol="x", code=f"{nameplate}-wrong-words")
        )
        e = await self.assertFailure(self.within(client.connect(Factory())), WrongPasswordError)
        self.assertTrue(str(e).startswith("wrong wormhole code: "), str(e))  # stock's is empty
        self.assertIn("check the code", in_words(e))
        fatal = [line for line in self.lines if line.startswith("fatal error")]
        self.assertTrue(fatal, self.lines)
        self.assertIn("wrong wormhole code", fatal[0])
        self.assertIn("check the code", fatal[0])

    async def test_client_timeout(self) -> None:
        """A client whose code nobody else uses (a nameplate the mailbox server does not know)
        fails after its timeout, logged when it starts waiting, with a TimeoutError saying how
        far it got (nobody joined with that code) and what to check (the code, the nameplate,
        the other side); in_words() gives that line as it is."""
        client = clientFromString(
            self.reactor, self.string(subprotocol="x", code="5-nobody-home", timeout="0.5")
        )
        e = await self.assertFailure(client.connect(Factory()), TimeoutError)
        self.assertIn("nobody joined with code 5-nobody-home within 0.5 s", str(e))
        self.assertIn("nameplate 5 may be unknown to the mailbox server", str(e))
        self.assertEqual(in_words(e), str(e))
        self.assertIn(
            "dilation: opening a x subchannel (code 5-nobody-home), waiting up to 0.5 s for "
            "the peer",
            self.lines,
        )

    async def test_client_with_unreachable_mailbox_fails_at_once(self) -> None:
        """A client given a code whose mailbox server cannot be reached fails with the cause
        in words, not after its 120 s timeout blaming the peer: the failure is the mailbox's
        ServerConnectionError, before ``within``'s 20 s bound, not a TimeoutError (how soon
        depends on the machine's load: not asserted)."""
        from wormhole.errors import ServerConnectionError

        client = clientFromString(
            self.reactor,
            "dilation:subprotocol=x:code=4-a-b:mailbox=" + escaped("ws://127.0.0.1:1/v1"),
        )
        e = await self.assertFailure(self.within(client.connect(Factory())), ServerConnectionError)
        self.assertIn("cannot reach the mailbox server", in_words(e))
        self.assertIn("check mailbox=", in_words(e))

    async def test_unreachable_mailbox(self) -> None:
        """listen() fails when the mailbox server cannot be reached (before any code)."""
        from wormhole.errors import ServerConnectionError

        server = serverFromString(
            self.reactor, "dilation:subprotocol=x:mailbox=" + escaped("ws://127.0.0.1:1/v1")
        )
        await self.assertFailure(self.within(server.listen(Factory())), ServerConnectionError)
        self.assertTrue(
            any("cannot reach the mailbox server" in line for line in self.lines), self.lines
        )
