"""Trial tests of the echo protocols over a dilated wormhole held in memory.

    cd examples && python -m twisted.trial test_echo      # or: python -m pytest test_echo.py

``txdilation.testing.memory.MemoryDilationPair`` joins two dilated wormholes in memory: the
real sequencing, acknowledgements, replay and flow control of Dilation, without a mailbox,
sockets or encryption, driven by a ``Clock``, with a link that can drop and come back. So a
protocol is tested as it will run over a real wormhole, in milliseconds.
"""

from __future__ import annotations

from twisted.internet.endpoints import connectProtocol
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from echo_protocol import EchoClient, server_factory
from txdilation import TWISTED
from txdilation.testing.memory import MemoryDilationPair


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
