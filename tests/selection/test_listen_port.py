"""A fixed listen port and an advertised hint port (TXDILATION_LISTEN_PORT/TXDILATION_HINT_PORT,
for a port forward or the fault-injection proxy), over real loopback TCP; and the generation
stall check the Leader relies on (Connector.busy)."""

from __future__ import annotations

from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.support.faults import free_port
from tests.support.waits import sleep
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.settings import NetworkSettings
from txdilation.wire.roles import LEADER

from .test_connector import RecordingOwner, make

reactor: Any = _reactor


class NetworkSettingsPortTests(SynchronousTestCase):
    def test_ports_from_environment(self) -> None:
        """Both port variables are read; empty means the default; junk and out-of-range
        ports are refused."""
        s = NetworkSettings.from_environ(
            {"TXDILATION_LISTEN_PORT": " 4100 ", "TXDILATION_HINT_PORT": "4200"}
        )
        self.assertEqual((s.listen_port, s.hint_port), (4100, 4200))
        self.assertEqual(NetworkSettings.from_environ({"TXDILATION_HINT_PORT": ""}).hint_port, None)
        for env in (
            {"TXDILATION_LISTEN_PORT": "many"},
            {"TXDILATION_LISTEN_PORT": "70000"},
            {"TXDILATION_HINT_PORT": "0"},
        ):
            self.assertRaises(ValueError, NetworkSettings.from_environ, env)


def real_connector(case: TestCase, network: NetworkSettings, **settings: Any) -> tuple[Any, Any]:
    """A Leader's connector on the real reactor (stopped at ``case``'s cleanup), its owner."""
    full = ConnectorSettings(
        role=LEADER, dilation_key=b"k" * 32, side="a" * 16, network=network, **settings
    )
    owner = RecordingOwner()
    c = Connector(full, owner=owner, reactor=reactor)
    case.addCleanup(c.events.stop)
    return c, owner


@inlineCallbacks
def first_hints(case: TestCase, owner: RecordingOwner) -> Any:
    """The first connection-hints message ``owner`` gets (within 3 s, or ``case`` fails)."""
    for _ in range(300):
        if owner.hint_messages:
            return owner.hint_messages[0]
        yield sleep(0.01)
    case.fail("no hints published")


class FixedPortTests(TestCase):
    timeout = 10

    def connector(self, listen_port: int, hint_port: int | None = None) -> tuple[Any, Any]:
        network = NetworkSettings("127.0.0.1", ("127.0.0.1",), listen_port, hint_port)
        return real_connector(self, network)

    def wait_for_hints(self, owner: RecordingOwner) -> Any:
        return first_hints(self, owner)

    @inlineCallbacks
    def test_listens_on_the_port_and_advertises_the_other(self) -> Any:
        """The listener binds the fixed port; the hint names the advertised port."""
        port = free_port()
        c, owner = self.connector(port, 4242)
        c.start()
        hints = yield self.wait_for_hints(owner)
        self.assertEqual([(h["hostname"], h["port"]) for h in hints], [("127.0.0.1", 4242)])
        self.assertEqual([p.getHost().port for p in c._advertiser.listeners], [port])

    @inlineCallbacks
    def test_waits_for_the_port_to_be_free(self) -> Any:
        """The previous generation's listener still holds the port for a moment: the
        connector tries again and listens once it is free (its hints name that port); in
        the meantime it counts as busy."""
        port = free_port()
        blocker = yield TCP4ServerEndpoint(reactor, port, interface="127.0.0.1").listen(
            Factory.forProtocol(Protocol)
        )
        c, owner = self.connector(port)
        c.start()
        yield sleep(0.25)
        self.assertEqual(owner.hint_messages, [])
        self.assertTrue(c.busy)
        yield blocker.stopListening()
        hints = yield self.wait_for_hints(owner)
        self.assertEqual(hints[0]["port"], port)
        self.assertFalse(c.busy)  # a listener alone is not work in flight

    @inlineCallbacks
    def test_stop_while_waiting(self) -> Any:
        """Stopped while waiting for the port: no retry is left pending, no listener opens."""
        port = free_port()
        blocker = yield TCP4ServerEndpoint(reactor, port, interface="127.0.0.1").listen(
            Factory.forProtocol(Protocol)
        )
        c, owner = self.connector(port)
        c.start()
        yield sleep(0.15)
        c.events.stop()
        yield blocker.stopListening()
        yield sleep(0.3)
        self.assertEqual(c._advertiser.listeners, [])
        self.assertIsNone(c._advertiser.listen_retry)
        self.assertEqual(owner.hint_messages, [])


class BusyTests(SynchronousTestCase):
    def test_attempts_and_deferred_relays_count(self) -> None:
        """A pending outbound attempt or relay attempts waiting for their delay make the
        connector busy; once they are gone it is not."""
        c, _owner, _clock = make(LEADER)
        self.assertFalse(c.busy)
        c.start()  # listening (MemoryReactor) and publishing hints
        self.assertFalse(c.busy)
        from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint

        c.got_hints(
            [DirectTCPV1Hint("127.0.0.1", 1), RelayV1Hint((DirectTCPV1Hint("127.0.0.1", 2),))]
        )
        self.assertTrue(c.busy)
        c.events.stop()
        self.assertFalse(c.busy)
