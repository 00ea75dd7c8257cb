"""Trial tests of the echo protocols over dilated wormholes: in memory, and for real.

    cd examples && python -m twisted.trial test_echo
    cd examples && python -m pytest test_echo.py        # the same with pytest (pip install pytest)

``txdilation.testing.memory.MemoryDilationPair`` joins two dilated wormholes in memory: the
real sequencing, acknowledgements, replay and flow control of Dilation, without a mailbox,
sockets or encryption, driven by a ``Clock``, with a link that can drop and come back. So a
protocol is tested as it will run over a real wormhole, in milliseconds.

``txdilation.testing.servers`` runs the real mailbox server and transit relay in the test
process, on 127.0.0.1, for the few tests that want everything real (``pip install
'txdilation[demo]'``).
"""

from __future__ import annotations

import os

from twisted.internet import reactor
from twisted.internet.endpoints import connectProtocol
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase

import txdilation
from echo_protocol import EchoClient, server_factory
from txdilation import TWISTED
from txdilation.testing.memory import MemoryDilationPair
from txdilation.testing.servers import start_mailbox_server, start_transit_relay


class EchoOverDilationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.pair = MemoryDilationPair(self.clock)  # a: the Leader, b: the Follower
        self.addCleanup(self.pair.close)
        listening = self.pair.b.listener_for("echo").listen(server_factory())
        self.pair.flush()  # answers come on a later turn, as from a real wormhole
        self.successResultOf(listening)

    def connect(self, *messages: bytes) -> EchoClient:
        connecting = connectProtocol(self.pair.a.connector_for("echo"), EchoClient(list(messages)))
        self.pair.flush()
        return self.successResultOf(connecting)

    def test_echo(self) -> None:
        """Every line comes back prefixed, then 'bye', and the subchannel closes."""
        client = self.connect(b"hello", b"world")
        self.assertEqual(
            self.successResultOf(client.done), [b"echo: hello", b"echo: world", b"bye"]
        )

    def test_link_drop_loses_nothing(self) -> None:
        """The link drops while the subchannel opens and the first line is on its way, and
        comes back (a new generation): nothing is lost or repeated, since Dilation replays
        what the peer did not acknowledge."""
        connecting = connectProtocol(
            self.pair.a.connector_for("echo"), EchoClient([b"one", b"two"])
        )
        self.pair.drop_link()  # what is in flight is lost on the wire
        self.pair.flush()
        client = self.successResultOf(connecting)
        self.assertEqual(client.replies, [])
        self.pair.restore_link()
        self.pair.flush()
        self.assertEqual(self.successResultOf(client.done), [b"echo: one", b"echo: two", b"bye"])

    def test_wormhole_closed_under_the_client(self) -> None:
        """With Twisted semantics, closing the wormholes reaches an open protocol: its 'done'
        fails instead of waiting forever (with stock's semantics it would hear nothing)."""
        pair = MemoryDilationPair(self.clock, semantics=TWISTED)
        listening = pair.b.listener_for("echo").listen(server_factory())
        pair.flush()
        self.successResultOf(listening)
        connecting = connectProtocol(pair.a.connector_for("echo"), EchoClient([b"x"]))
        pair.drop_link()  # the client waits for its first echo...
        pair.flush()
        client = self.successResultOf(connecting)
        pair.close()  # ...when both wormholes close
        pair.flush()
        self.failureResultOf(client.done)


class EchoOverRealServersTests(TestCase):
    """The same protocols between two real wormholes, through the real servers on 127.0.0.1."""

    timeout = 30

    async def test_echo(self) -> None:
        """Two wormholes exchange a code through the mailbox server, dilate, and echo."""
        import wormhole

        if not txdilation.is_installed():
            txdilation.install()
            self.addCleanup(txdilation.uninstall)
        # keep txdilation's direct-hint listener and its hints on loopback
        loopback = {
            "TXDILATION_LISTEN_INTERFACE": "127.0.0.1",
            "TXDILATION_HINT_ADDRESSES": "127.0.0.1",
        }
        self.patch(os, "environ", {**os.environ, **loopback})
        mailbox = await start_mailbox_server(reactor)  # a MailboxServer: .url, .stop()
        self.addCleanup(mailbox.stop)  # cleanups run last-added first: this one runs last
        relay = await start_transit_relay(reactor)  # a TransitRelay: .hint, .stop()
        self.addCleanup(relay.stop)

        alice = wormhole.create("example/echo-test", mailbox.url, reactor, dilation=True)
        bob = wormhole.create("example/echo-test", mailbox.url, reactor, dilation=True)
        self.addCleanup(bob.close)
        self.addCleanup(alice.close)
        a = alice.dilate(transit_relay_location=relay.hint)
        b = bob.dilate(transit_relay_location=relay.hint)
        alice.allocate_code()
        bob.set_code(await alice.get_code())

        await b.listener_for("echo").listen(server_factory())
        client = await connectProtocol(a.connector_for("echo"), EchoClient([b"real"]))
        self.assertEqual(await client.done, [b"echo: real", b"bye"])
