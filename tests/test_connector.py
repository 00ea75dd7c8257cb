"""One generation's connector (txdilation.connector): listening, hints, relay timing, and the
selection policy, driven with a MemoryReactorClock and fake candidates."""

from __future__ import annotations

from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase
from wormhole._interfaces import IDilationConnector

from txdilation.config import NetworkSettings
from txdilation.connector import Connector, ConnectorSettings
from txdilation.hints import DirectTCPV1Hint, RelayV1Hint
from txdilation.roles import FOLLOWER, LEADER, Role

RELAY = RelayV1Hint((DirectTCPV1Hint("127.0.0.1", 4001),))


class FakeEvents:
    def __init__(self, owner: FakeCandidate) -> None:
        self.owner = owner

    def select(self, sink: Any) -> None:
        self.owner.selected_with = sink


class FakeCandidate:
    """Stands in for an L2 connection that reached the KCM exchange."""

    def __init__(self, description: str, is_direct: bool) -> None:
        self.description = description
        self.is_direct = is_direct
        self.aborted = False
        self.selected_with: Any = None
        self.events = FakeEvents(self)

    def abort(self) -> None:
        self.aborted = True


class RecordingOwner:
    def __init__(self) -> None:
        self.hint_messages: list[list[dict[str, Any]]] = []
        self.statuses: list[Any] = []
        self.made: list[Any] = []
        self.record_sink = object()

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        self.hint_messages.append(hints)

    def hint_status(self, hints: list[Any]) -> None:
        self.statuses.extend(hints)

    def connector_connection_made(self, connection: Any) -> None:
        self.made.append(connection)


def make(role: Role, **kw: Any) -> tuple[Connector, RecordingOwner, MemoryReactorClock]:
    reactor = MemoryReactorClock()
    owner = RecordingOwner()
    settings = ConnectorSettings(
        role=role,
        dilation_key=b"k" * 32,
        side="a" * 16,
        network=NetworkSettings("127.0.0.1", ("127.0.0.1",)),
        **kw,
    )
    return Connector(settings, owner=owner, reactor=reactor), owner, reactor


class SelectionPolicyTests(SynchronousTestCase):
    def test_provides_stock_interface(self) -> None:
        """The connector provides stock's IDilationConnector (magic-wormhole's tests check it)
        and advertises stock's abilities."""
        c, _, _ = make(LEADER)
        self.assertTrue(IDilationConnector.providedBy(c))
        self.assertEqual(
            Connector.get_connection_abilities(), [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]
        )

    def test_leader_prefers_direct_over_relay_in_grace(self) -> None:
        """Leader: a relay candidate is held; a direct one completing within the grace period
        wins, and the relay one is aborted."""
        c, owner, clock = make(LEADER)
        c.start()  # listening: a direct connection may still come
        relay, direct = FakeCandidate("->relay:tcp:x:1", False), FakeCandidate("->tcp:y:2", True)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [])
        clock.advance(0.1)
        c.candidate_ready(direct)
        self.assertEqual(owner.made, [direct])
        self.assertIs(direct.selected_with, owner.record_sink)
        self.assertTrue(relay.aborted)
        self.assertFalse(direct.aborted)

    def test_leader_takes_relay_after_grace(self) -> None:
        """Leader: with only a relay candidate, it is selected once the grace period ends."""
        c, owner, clock = make(LEADER)
        c.start()
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [])
        clock.advance(c._settings.direct_grace + 0.01)
        self.assertEqual(owner.made, [relay])

    def test_leader_held_relay_lost_goes_back_to_connecting(self) -> None:
        """If the held relay candidate closes during the grace period, nothing is selected and
        a later candidate still can be."""
        c, owner, clock = make(LEADER)
        c.start()
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        c.candidate_failed(relay, "gone")
        clock.advance(1)
        self.assertEqual(owner.made, [])
        later = FakeCandidate("<-tcp:z:3", True)
        c.candidate_ready(later)
        self.assertEqual(owner.made, [later])

    def test_leader_takes_relay_at_once_when_no_direct_can_come(self) -> None:
        """Leader without a listener (no_listen) and no direct attempt or candidate: a relay
        candidate is selected at once, not held for the grace period (holding it only widens
        the window in which a flaky link cuts it before selection)."""
        c, owner, _clock = make(LEADER, no_listen=True)
        c.start()
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [relay])

    def test_follower_takes_first_at_once(self) -> None:
        """Follower: the first candidate (even via relay) is selected synchronously."""
        c, owner, _ = make(FOLLOWER)
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [relay])

    def test_late_candidates_are_aborted(self) -> None:
        """After selection (and after stop), any further candidate is aborted (stock defect 9),
        and the listener is stopped."""
        c, owner, _reactor = make(FOLLOWER)
        c.start()
        first, late = FakeCandidate("a", True), FakeCandidate("b", True)
        c.candidate_ready(first)
        c.candidate_ready(late)
        self.assertTrue(late.aborted)
        self.assertEqual(owner.made, [first])
        c.events.stop()
        after_stop = FakeCandidate("c", True)
        c.candidate_ready(after_stop)
        self.assertTrue(after_stop.aborted)
        self.assertFalse(first.aborted)
        self.assertEqual(c._listeners, [])


class ListeningAndHintTests(SynchronousTestCase):
    def test_listener_honours_interface_and_hint_addresses(self) -> None:
        """The listener binds the configured interface and advertises the configured addresses
        with the listening port, in one connection-hints message."""
        c, owner, reactor = make(LEADER)
        c.start()
        port, _factory, _backlog, interface = reactor.tcpServers[0]
        self.assertEqual(interface, "127.0.0.1")
        self.assertEqual(
            owner.hint_messages,
            [[{"type": "direct-tcp-v1", "priority": 0.0, "hostname": "127.0.0.1", "port": port}]],
        )

    def test_no_listen_publishes_relay_only(self) -> None:
        """no_listen: no listener, no direct hints; the relay hint is published and our own
        relay is dialled at once (no relay delay)."""
        c, owner, reactor = make(LEADER, no_listen=True, relay_hints=(RELAY,))
        c.start()
        self.assertEqual(reactor.tcpServers, [])
        self.assertEqual(
            owner.hint_messages,
            [
                [
                    {
                        "type": "relay-v1",
                        "hints": [
                            {
                                "type": "direct-tcp-v1",
                                "priority": 0.0,
                                "hostname": "127.0.0.1",
                                "port": 4001,
                            }
                        ],
                    }
                ]
            ],
        )
        self.assertEqual([(h, p) for h, p, *_ in reactor.tcpClients], [("127.0.0.1", 4001)])

    def test_tor_never_listens(self) -> None:
        """A connector for a Tor wormhole neither listens nor advertises local addresses
        (stock defect 10)."""

        class FakeTor:
            def __init__(self) -> None:
                self.dialled: list[tuple[str, int]] = []

            def stream_via(self, host: str, port: int) -> Any:
                self.dialled.append((host, port))
                from twisted.internet.endpoints import TCP4ClientEndpoint

                return TCP4ClientEndpoint(reactor, host, port)

        tor = FakeTor()
        c, owner, reactor = make(LEADER, tor=tor)
        c.start()
        self.assertEqual(reactor.tcpServers, [])
        self.assertEqual(owner.hint_messages, [])
        c.got_hints([DirectTCPV1Hint("10.0.0.1", 5)])
        self.assertEqual(tor.dialled, [("10.0.0.1", 5)])

    def test_relay_delayed_while_direct_pending_then_started_when_direct_fails(self) -> None:
        """Peer hints with direct and relay: direct attempts start at once, relay waits; when
        every direct attempt has failed, relay attempts start without waiting out the delay."""
        c, owner, reactor = make(LEADER, relay_delay=2.0)
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7])
        _host, _port, factory, *_ = reactor.tcpClients[0]
        from twisted.internet.error import ConnectionRefusedError

        factory.clientConnectionFailed(
            None,
            __import__("twisted.python.failure").python.failure.Failure(ConnectionRefusedError()),
        )
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7, 4001])
        self.assertEqual(
            {(s.url, s.is_direct) for s in owner.statuses},
            {("127.0.0.1:7", True), ("127.0.0.1:4001", False)},
        )

    def test_relay_after_delay(self) -> None:
        """With a direct attempt still pending, relay attempts start after relay_delay."""
        c, _owner, reactor = make(LEADER, relay_delay=2.0)
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        reactor.advance(1.9)
        self.assertEqual(len(reactor.tcpClients), 1)
        reactor.advance(0.2)
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7, 4001])
