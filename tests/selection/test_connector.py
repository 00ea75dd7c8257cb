"""One generation's connector (txdilation.selection.connector): listening, hints, relay timing, and
the selection policy, driven with a MemoryReactorClock and fake candidates."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import (
    ConnectionAborted,
    ConnectionDone,
    ConnectionRefusedError,
    TimeoutError,
)
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase
from wormhole._interfaces import IDilationConnector

from txdilation.selection.attempts import LOST_RACE_WINDOW, AttemptLog
from txdilation.selection.connector import PROVEN_GRACE, Connector, ConnectorSettings
from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint
from txdilation.settings import NetworkSettings
from txdilation.telemetry import Telemetry
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import FOLLOWER, LEADER, Role

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

    def deliver_held(self) -> None:
        self.delivered_held = True


class SelectedStub:
    """What ``link_for`` gives the connector for a connection (the selected link)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection


class RecordingOwner:
    def __init__(self) -> None:
        self.hint_messages: list[list[dict[str, Any]]] = []
        self.statuses: list[Any] = []
        self.made: list[Any] = []
        self.candidates: list[int] = []
        self.relays: list[Any] = []
        self.links: dict[Any, SelectedStub] = {}

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        self.hint_messages.append(hints)

    def hint_status(self, hints: list[Any]) -> None:
        self.statuses.extend(hints)

    def link_for(self, connection: Any) -> SelectedStub:
        link = self.links[connection] = SelectedStub(connection)
        return link

    def connector_connection_made(
        self, link: SelectedStub, candidates: int, relay: Any = None
    ) -> None:
        self.made.append(link.connection)
        self.candidates.append(candidates)
        self.relays.append(relay)

    upgraded: list[Any]
    proofs = 0

    def connector_path_upgraded(self, link: SelectedStub) -> None:
        self.__dict__.setdefault("upgraded", []).append(link.connection)

    def direct_path_proven(self) -> None:
        self.proofs += 1

    attempts_again = 0

    def attempting_again(self) -> None:
        self.attempts_again += 1


def settings_for(role: Role, **kw: Any) -> ConnectorSettings:
    """The test connector's settings (loopback network; ``kw`` override)."""
    kw.setdefault("network", NetworkSettings("127.0.0.1", ("127.0.0.1",)))
    return ConnectorSettings(role=role, dilation_key=b"k" * 32, side="a" * 16, **kw)


def make(role: Role, **kw: Any) -> tuple[Connector, RecordingOwner, MemoryReactorClock]:
    reactor = MemoryReactorClock()
    owner = RecordingOwner()
    settings = settings_for(role, **kw)
    # candidates are considered at once here (the later turn is pinned by TimingTests)
    connector = Connector(settings, owner=owner, reactor=reactor, eventually=_synchronously)
    return connector, owner, reactor


def _synchronously(f: Any, *args: Any) -> None:
    f(*args)


class TimingTests(SynchronousTestCase):
    def test_candidate_taken_on_the_next_turn_unless_lost(self) -> None:
        """By default a candidate is considered on the reactor turn after candidate_ready, as
        stock's connector does (through its eventual queue); one lost meanwhile is not taken,
        and the taken one hands over its held records after the owner has it."""
        reactor = MemoryReactorClock()
        owner = RecordingOwner()
        settings = ConnectorSettings(
            role=FOLLOWER,
            dilation_key=b"k" * 32,
            side="a" * 16,
            network=NetworkSettings("127.0.0.1", ("127.0.0.1",)),
        )
        c = Connector(settings, owner=owner, reactor=reactor)
        lost, kept = FakeCandidate("<-tcp:a:1", True), FakeCandidate("<-tcp:b:2", True)
        c.candidate_ready(lost)
        c.candidate_failed(lost, LinkLoss(Cause.DROPPED, "gone"))
        c.candidate_ready(kept)
        self.assertEqual(owner.made, [])
        reactor.advance(0)
        self.assertEqual(owner.made, [kept])
        self.assertTrue(getattr(kept, "delivered_held", False))
        self.assertIsNone(lost.selected_with)


class SelectionPolicyTests(SynchronousTestCase):
    def test_provides_stock_interface(self) -> None:
        """The connector provides stock's IDilationConnector (magic-wormhole's tests check it)
        and advertises stock's abilities."""
        c, _, _ = make(LEADER)
        self.assertTrue(IDilationConnector.providedBy(c))
        self.assertEqual(
            Connector.get_connection_abilities(), [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]
        )

    def test_leader_takes_a_relay_at_once_while_direct_dials_are_pending(self) -> None:
        """Leader: relay first. A relay candidate is taken at once while we listen and dial
        direct hints that have not connected (a better path is moved to later, if the peer
        can), never held for them."""
        c, owner, _clock = make(LEADER)
        c.start()
        c.got_hints([DirectTCPV1Hint("192.168.1.2", 6000)])  # dialing, not connected
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [relay])

    def in_handshake(self, c: Connector) -> Any:
        """A direct connection that connected and is in its handshake."""
        return c._core.build("->tcp:y:2", True, None, None, None, c)

    def test_leader_prefers_direct_over_relay_in_grace(self) -> None:
        """Leader: while a direct connection is in its handshake, a relay candidate is held;
        the direct one completing within the grace period wins, and the relay one is
        aborted."""
        c, owner, clock = make(LEADER)
        c.start()
        self.in_handshake(c)
        relay, direct = FakeCandidate("->relay:tcp:x:1", False), FakeCandidate("->tcp:y:2", True)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [])
        clock.advance(0.1)
        c.candidate_ready(direct)
        self.assertEqual(owner.made, [direct])
        self.assertIs(direct.selected_with, owner.links[direct])
        self.assertTrue(relay.aborted)
        self.assertFalse(direct.aborted)

    def test_leader_takes_relay_after_grace(self) -> None:
        """Leader: a relay candidate held for a direct one in its handshake is selected once
        the grace period ends."""
        c, owner, clock = make(LEADER)
        c.start()
        self.in_handshake(c)
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [])
        clock.advance(settings_for(LEADER).direct_grace + 0.01)
        self.assertEqual(owner.made, [relay])

    def test_leader_held_relay_lost_goes_back_to_connecting(self) -> None:
        """If the held relay candidate closes during the grace period, nothing is selected and
        a later candidate still can be."""
        c, owner, clock = make(LEADER)
        c.start()
        self.in_handshake(c)
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        c.candidate_failed(relay, LinkLoss(Cause.DROPPED, "gone"))
        clock.advance(1)
        self.assertEqual(owner.made, [])
        later = FakeCandidate("<-tcp:z:3", True)
        c.candidate_ready(later)
        self.assertEqual(owner.made, [later])

    def test_a_generation_that_prefers_direct_holds_the_relay_longer(self) -> None:
        """prefer_direct (after a direct path proved to work with a stock peer): a relay
        candidate is held for PROVEN_GRACE while a direct connection may still come."""
        c, owner, clock = make(LEADER, prefer_direct=True)
        c.start()
        relay = FakeCandidate("->relay:tcp:x:1", False)
        c.candidate_ready(relay)
        clock.advance(PROVEN_GRACE - 0.1)
        self.assertEqual(owner.made, [])
        clock.advance(0.2)
        self.assertEqual(owner.made, [relay])

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
        self.assertEqual(c._advertiser.listeners, [])


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

    def test_network_change_while_connecting_publishes_new_addresses(self) -> None:
        """An address that appears while the generation connects is published at once, in a
        hints message of its own; addresses already published are not sent again, and nothing
        is published once a connection is selected."""
        from txdilation.selection import connector as connector_module

        found = ["127.0.0.1", "10.0.0.5"]
        self.patch(connector_module.ipaddrs, "find_addresses", lambda: list(found))
        c, owner, reactor = make(LEADER, network=NetworkSettings("", None))
        c.start()
        port = reactor.tcpServers[0][0]
        direct = {"type": "direct-tcp-v1", "priority": 0.0, "port": port}
        self.assertEqual(owner.hint_messages, [[direct | {"hostname": "10.0.0.5"}]])

        c.network_changed()  # nothing new
        self.assertEqual(len(owner.hint_messages), 1)
        found[1:] = ["10.0.0.5", "10.0.0.9"]
        c.network_changed()
        self.assertEqual(owner.hint_messages[1:], [[direct | {"hostname": "10.0.0.9"}]])

        c.events.stop()
        found.append("10.0.0.10")
        c.network_changed()
        self.assertEqual(len(owner.hint_messages), 2)

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

    def test_nothing_dialed_after_stop(self) -> None:
        """Stopped while a direct dial is pending and the peer's relay hint waits out the
        delay: cancelling the direct dial starts no relay dial (the race is over)."""
        c, _owner, reactor = make(LEADER, relay_delay=2.0)
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7])
        c.events.stop()
        reactor.advance(5.0)
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7])

    def test_relay_after_delay(self) -> None:
        """With a direct attempt still pending, relay attempts start after relay_delay."""
        c, _owner, reactor = make(LEADER, relay_delay=2.0)
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7), RELAY])
        reactor.advance(1.9)
        self.assertEqual(len(reactor.tcpClients), 1)
        reactor.advance(0.2)
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7, 4001])


# --- telemetry: one attempt per dial and per accepted connection --------------------------


def telemetry_for(reactor: Clock, generation: int = 1) -> tuple[Telemetry, list]:
    """A Telemetry on ``reactor``'s clock collecting its records (no file)."""
    records: list[dict[str, Any]] = []
    t = Telemetry(reactor, sink=records.append)
    t.set_generation(generation)
    return t, records


def ended(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "attempt_ended"]


def outcomes(records: list[dict[str, Any]]) -> list[tuple[int, str, str, str]]:
    """(attempt, hint type, direction, outcome) of every attempt_ended record, in order."""
    return [(r["attempt"], r["hint_type"], r["direction"], r["outcome"]) for r in ended(records)]


def make_observed(role: Role, **kw: Any) -> tuple[Connector, RecordingOwner, Any, list]:
    """``make`` with a Telemetry: the connector, its owner, reactor and records."""
    reactor, owner = MemoryReactorClock(), RecordingOwner()
    t, records = telemetry_for(reactor)
    settings = settings_for(role, **kw)
    c = Connector(settings, owner=owner, reactor=reactor, telemetry=t, eventually=_synchronously)
    return c, owner, reactor, records


ADDR = IPv4Address("TCP", "127.0.0.1", 40000)


class AttemptTelemetryTests(SynchronousTestCase):
    """attempt_started / attempt_ended from the Connector, Clock-driven (MemoryReactorClock)
    and over real L2 protocols connected in memory (iosim)."""

    def test_failed_connect(self) -> None:
        """A refused dial ends as connect_failed, with no durations; both records carry the
        attempt id, hint type, direction and generation, never the address."""
        c, _owner, reactor, records = make_observed(LEADER, no_listen=True)
        c.got_hints([DirectTCPV1Hint("10.1.2.3", 7)])
        reactor.advance(0.5)
        reactor.tcpClients[0][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertEqual([r["event"] for r in records], ["attempt_started", "attempt_ended"])
        self.assertEqual(outcomes(records), [(1, "direct-tcp-v1", "outbound", "connect_failed")])
        self.assertEqual({r["generation"] for r in records}, {1})
        self.assertNotIn("connect_s", records[1])
        self.assertNotIn("10.1.2.3", repr(records))

    def test_connect_timeout(self) -> None:
        """A dial that times out ends as timeout."""
        c, _owner, reactor, records = make_observed(LEADER, no_listen=True)
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        reactor.tcpClients[0][2].clientConnectionFailed(None, Failure(TimeoutError()))
        self.assertEqual(outcomes(records), [(1, "direct-tcp-v1", "outbound", "timeout")])

    def test_pending_dials_cancelled_when_stopped(self) -> None:
        """Dials still connecting when the connector stops end as cancelled, the relay one
        with hint type relay-v1."""
        c, _owner, _reactor, records = make_observed(LEADER, no_listen=True, relay_hints=(RELAY,))
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        c.events.stop()
        self.assertEqual(
            sorted(outcomes(records)),
            [
                (1, "relay-v1", "outbound", "cancelled"),
                (2, "direct-tcp-v1", "outbound", "cancelled"),
            ],
        )

    def test_ids_unique_across_generations(self) -> None:
        """Two generations' connectors sharing the session's Telemetry never reuse an attempt
        id, and each attempt's records carry its own generation."""
        reactor = MemoryReactorClock()
        t, records = telemetry_for(reactor)
        settings, owner = settings_for(LEADER, no_listen=True), RecordingOwner()
        for generation in (1, 2):
            t.set_generation(generation)
            c = Connector(
                settings,
                owner=owner,
                reactor=reactor,
                telemetry=t,
                eventually=_synchronously,
            )
            c.got_hints([DirectTCPV1Hint("127.0.0.1", 7), DirectTCPV1Hint("127.0.0.1", 8)])
            c.events.stop()
        started = [r for r in records if r["event"] == "attempt_started"]
        self.assertEqual([r["attempt"] for r in started], [1, 2, 3, 4])
        self.assertEqual([r["generation"] for r in started], [1, 1, 2, 2])

    def test_handshake_failure(self) -> None:
        """A connection whose peer sends garbage instead of its prologue ends as
        handshake_failed, with its connect time and no handshake time."""
        c, _owner, reactor, records = make_observed(LEADER, no_listen=True)
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        reactor.advance(0.25)
        protocol = reactor.tcpClients[0][2].buildProtocol(ADDR)
        protocol.makeConnection(StringTransport())
        protocol.dataReceived(b"GET / HTTP/1.1\r\n\r\n" * 4)
        protocol.connectionLost(Failure(ConnectionAborted()))
        self.assertEqual(outcomes(records), [(1, "direct-tcp-v1", "outbound", "handshake_failed")])
        self.assertEqual(ended(records)[0]["connect_s"], 0.25)
        self.assertNotIn("handshake_s", ended(records)[0])

    def test_handshake_timeout(self) -> None:
        """A connection that never completes its handshake ends as timeout."""
        c, _owner, reactor, records = make_observed(FOLLOWER, handshake_timeout=5.0)
        c.start()
        protocol = reactor.tcpServers[0][1].buildProtocol(ADDR)
        protocol.makeConnection(StringTransport())
        reactor.advance(5.0)
        protocol.connectionLost(Failure(ConnectionAborted()))
        self.assertEqual(outcomes(records), [(1, "direct-tcp-v1", "inbound", "timeout")])
        self.assertEqual(ended(records)[0]["connect_s"], 0.0)

    def test_peer_close_just_before_the_race_ends_lost_the_race(self) -> None:
        """An accepted connection the peer closes before it is ready is held back: the race
        ending within LOST_RACE_WINDOW makes it cancelled (the peer dropped it as it chose
        another); ending later makes it handshake_failed."""
        cases = ((LOST_RACE_WINDOW, "cancelled"), (LOST_RACE_WINDOW + 1, "handshake_failed"))
        for wait, expected in cases:
            c, _owner, reactor, records = make_observed(FOLLOWER)
            c.start()
            protocol = reactor.tcpServers[0][1].buildProtocol(ADDR)
            protocol.makeConnection(StringTransport())
            protocol.connectionLost(Failure(ConnectionDone()))
            self.assertEqual(ended(records), [])
            reactor.advance(wait)
            c.events.stop()
            self.assertEqual(outcomes(records), [(1, "direct-tcp-v1", "inbound", expected)])


class L2RaceTests(SynchronousTestCase):
    """A Leader's connector dialling a Follower's listener, the L2 protocols connected in
    memory (iosim), so that the Noise handshake and KCM exchange really happen."""

    def setUp(self, relay_hints: tuple[RelayV1Hint, ...] = ()) -> None:
        """The Leader does not listen; the Follower listens (and dials ``relay_hints``)."""
        leader = make_observed(LEADER, no_listen=True, relay_hints=relay_hints)
        self.leader, self.leader_owner, self.leader_reactor, self.leader_records = leader
        follower = make_observed(FOLLOWER, relay_hints=relay_hints)
        self.follower, self.follower_owner, self.follower_reactor, self.follower_records = follower
        self.follower.start()
        self.server_factory = self.follower_reactor.tcpServers[0][1]

    def dial(self, *ports: int) -> list[iosim.IOPump]:
        """The Leader dials ``ports``; each dial reaches the Follower's listener (the
        connections exist, nothing is exchanged until they are pumped)."""
        self.leader.got_hints([DirectTCPV1Hint("127.0.0.1", p) for p in ports])
        pumps = []
        for _host, port, factory, *_ in self.leader_reactor.tcpClients:
            if port not in ports:
                continue
            client = factory.buildProtocol(ADDR)
            server = self.server_factory.buildProtocol(ADDR)
            pumps.append(
                iosim.connect(
                    server,
                    iosim.makeFakeServer(server),
                    client,
                    iosim.makeFakeClient(client),
                    greet=False,
                )
            )
        return pumps

    def test_selected_with_durations(self) -> None:
        """One dial: both sides record it as selected, the Leader's outbound with its connect
        and handshake times, the Follower's inbound; connection_selected counts 1 candidate."""
        (pump,) = self.dial(7)
        self.leader_reactor.advance(0.5)
        pump.flush()
        self.assertEqual(len(self.leader_owner.made), 1)
        self.assertEqual(len(self.follower_owner.made), 1)
        self.assertEqual(
            outcomes(self.leader_records), [(1, "direct-tcp-v1", "outbound", "selected")]
        )
        self.assertEqual(
            outcomes(self.follower_records), [(1, "direct-tcp-v1", "inbound", "selected")]
        )
        record = ended(self.leader_records)[0]
        self.assertEqual((record["connect_s"], record["handshake_s"]), (0.0, 0.5))
        self.assertEqual(self.leader.candidates, 1)

    def test_lost_race(self) -> None:
        """Two dials: the one whose handshake completes first is selected on both sides; the
        other, closed by the race's end before it was ready, is cancelled on both sides."""
        first, second = self.dial(7, 8)
        first.flush()
        second.flush()
        self.assertEqual(
            outcomes(self.leader_records),
            [
                (1, "direct-tcp-v1", "outbound", "selected"),
                (2, "direct-tcp-v1", "outbound", "cancelled"),
            ],
        )
        self.assertEqual(
            sorted(o for *_, o in outcomes(self.follower_records)), ["cancelled", "selected"]
        )

    def test_superseded_held_relay(self) -> None:
        """The Leader holds a relay candidate that is ready while a direct dial may still
        complete; the direct one completes and is selected: the relay attempt, ready but not
        selected, is superseded; on the Follower, whose relay connection never got the
        Leader's KCM, it is cancelled."""
        self.setUp(relay_hints=(RELAY,))
        (direct,) = self.dial(7)  # a direct dial is pending: a relay candidate is held
        self.leader.start()  # dials the relay
        (follower_relay,) = self.follower_reactor.tcpClients
        (leader_relay,) = [c for c in self.leader_reactor.tcpClients if c[1] == 4001]
        a, b = RelayEnd(), RelayEnd()
        a.other, b.other = b, a
        relay_pumps = [
            iosim.connect(
                end,
                iosim.makeFakeServer(end),
                client,
                iosim.makeFakeClient(client),
                greet=False,
            )
            for end, client in (
                (a, leader_relay[2].buildProtocol(ADDR)),
                (b, follower_relay[2].buildProtocol(ADDR)),
            )
        ]
        pump_all(relay_pumps)
        self.assertEqual(self.leader_owner.made, [])  # held for the grace period
        pump_all([direct, *relay_pumps])
        self.assertEqual([c.is_direct for c in self.leader_owner.made], [True])
        self.assertEqual(
            outcomes(self.leader_records),
            [
                (1, "direct-tcp-v1", "outbound", "selected"),
                (2, "relay-v1", "outbound", "superseded"),
            ],
        )
        self.assertEqual(
            sorted(outcomes(self.follower_records)),
            [
                (1, "relay-v1", "outbound", "cancelled"),
                (2, "direct-tcp-v1", "inbound", "selected"),
            ],
        )
        self.assertEqual(self.leader.candidates, 2)


def pump_all(pumps: list[iosim.IOPump]) -> None:
    """Pump every connection until none moves anything."""
    while any([p.pump() for p in pumps]):
        pass


class RelayEnd(Protocol):
    """One end of an in-memory transit relay: answers its client's relay line with ``ok``,
    then forwards what the client sends to the other end's client (and closes with it)."""

    def __init__(self) -> None:
        self.other: RelayEnd | None = None
        self._line = b""
        self._relaying = False

    def dataReceived(self, data: bytes) -> None:
        assert self.transport is not None and self.other is not None
        if not self._relaying:
            self._line += data
            if b"\n" not in self._line:
                return
            _, data = self._line.split(b"\n", 1)
            self._relaying = True
            self.transport.write(b"ok\n")
        if data:
            assert self.other.transport is not None
            self.other.transport.write(data)

    def connectionLost(self, reason: object = None) -> None:
        assert self.other is not None and self.other.transport is not None
        self.other.transport.loseConnection()


class AttemptLogTests(SynchronousTestCase):
    """txdilation.selection.attempts.AttemptLog alone, on a Clock."""

    def test_ready_then_closed_by_peer(self) -> None:
        """A ready candidate the peer closes while the race is on is superseded if the race
        ends within LOST_RACE_WINDOW, else other; each attempt ends once, with its handshake
        time; later reports about an ended attempt change nothing."""
        for wait, expected in ((0.5, "superseded"), (LOST_RACE_WINDOW + 0.5, "other")):
            clock = Clock()
            t, records = telemetry_for(clock)
            log = AttemptLog(t, clock)
            attempt = log.started("relay-v1", "outbound")
            clock.advance(1)
            log.connected(attempt)
            clock.advance(2)
            log.ready(attempt)
            log.closed(attempt, LinkLoss(Cause.CLOSED, "Connection was closed cleanly."))
            clock.advance(wait)
            log.race_over()
            log.closed(attempt, LinkLoss(Cause.CLOSED, "Connection was closed cleanly."))
            log.selected(attempt)
            self.assertEqual(outcomes(records), [(1, "relay-v1", "outbound", expected)])
            self.assertEqual(
                (ended(records)[0]["connect_s"], ended(records)[0]["handshake_s"]), (1, 2)
            )
