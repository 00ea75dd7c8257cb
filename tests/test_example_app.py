"""An example of an application testing its own subprotocol with txdilation.testing.

This file is the example docs/testing.md walks through. The application here is a tiny "tally"
service: a client sends ``add N`` messages over a subchannel named ``tally`` and the server
answers each with the running total. The tests run it over ``MemoryDilationPair`` (no mailbox
server, no sockets, a ``Clock``) and check what the application cares about: totals are right,
and a network drop in the middle neither loses nor repeats an ``add``.

(Messages are length-prefixed here; a ``LineReceiver`` works as well: see
examples/test_echo.py.)
"""

from __future__ import annotations

from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.protocols.basic import Int32StringReceiver
from twisted.trial.unittest import SynchronousTestCase

from txdilation import TWISTED
from txdilation.testing.memory import MemoryDilationPair

# --- the application under test -------------------------------------------------------------


class TallyServer(Int32StringReceiver):
    """Answers every ``add N`` with ``total T`` (the sum of every N so far)."""

    def connectionMade(self) -> None:
        self.total = 0

    def stringReceived(self, message: bytes) -> None:
        verb, _, number = message.partition(b" ")
        if verb == b"add":
            self.total += int(number)
            self.sendString(b"total %d" % self.total)


class TallyClient(Int32StringReceiver):
    """Sends ``add`` messages and remembers the totals it was told."""

    def connectionMade(self) -> None:
        self.totals: list[int] = []
        self.closed = False

    def add(self, n: int) -> None:
        self.sendString(b"add %d" % n)

    def stringReceived(self, message: bytes) -> None:
        self.totals.append(int(message.split()[1]))

    def connectionLost(self, reason: object = None) -> None:
        self.closed = True


# --- its tests ------------------------------------------------------------------------------


class TallyOverDilationTests(SynchronousTestCase):
    """The tally subprotocol over an in-memory dilated wormhole pair."""

    def setUp(self) -> None:
        self.clock = Clock()
        # TWISTED semantics: closing the wormhole reaches open protocols (stock's never does)
        self.pair = MemoryDilationPair(self.clock, semantics=TWISTED)
        self.addCleanup(self.pair.close)
        # the server side listens for "tally" subchannels; the client side opens one
        listening = self.pair.b.listener_for("tally").listen(Factory.forProtocol(TallyServer))
        connecting = self.pair.a.connector_for("tally").connect(Factory.forProtocol(TallyClient))
        self.pair.flush()  # (both answer on a later turn, as a real wormhole's do)
        self.successResultOf(listening)
        self.client: TallyClient = self.successResultOf(connecting)

    def test_totals(self) -> None:
        """Each add is answered with the running total."""
        for n in (1, 2, 3):
            self.client.add(n)
        self.pair.flush()
        self.assertEqual(self.client.totals, [1, 3, 6])

    def test_drop_in_the_middle_loses_and_repeats_nothing(self) -> None:
        """The link drops with adds in flight and more adds are made while it is down: once it
        is back, every add was counted exactly once, in order."""
        self.client.add(10)
        self.pair.flush()
        self.client.add(20)  # in flight when the link drops: lost on the wire...
        self.pair.drop_link()
        self.client.add(30)  # ...and this one is queued while the link is down
        self.pair.flush()
        self.assertEqual(self.client.totals, [10])
        self.pair.restore_link()  # Dilation replays what the peer did not acknowledge
        self.pair.flush()
        self.assertEqual(self.client.totals, [10, 30, 60])

    def test_wormhole_closing_ends_the_subchannel(self) -> None:
        """When the wormhole closes, the application's protocol hears connectionLost."""
        self.pair.close()
        self.assertTrue(self.client.closed)
