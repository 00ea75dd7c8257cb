"""A Follower facing a stock Leader rekindles a stuck generation (txdilation.selection.rekindle):
the Rekindler's checks on a Clock, and a Follower's Connector on a MemoryReactorClock whose
relay connection is cut before the relay paired it (issue 33: both sides then waited for ever)."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import ConnectingPeer

from tests.mailbox.test_manager import MailboxPipe
from tests.mailbox.test_manager_lifecycle import started
from tests.selection.test_connector import RELAY, FakeCandidate, make, make_observed, outcomes
from txdilation.link.framer import PROLOGUE_LEADER
from txdilation.mailbox.manager import Manager
from txdilation.selection.hints import DirectTCPV1Hint
from txdilation.selection.rekindle import REKINDLE_FIRST, REKINDLE_MAX, Rekindler
from txdilation.wire.roles import FOLLOWER, LEADER

ADDR = IPv4Address("TCP", "127.0.0.1", 40000)


class RekindlerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.busy = False
        self.times: list[float] = []
        self.r = Rekindler(
            self.clock, lambda: self.busy, lambda: self.times.append(self.clock.seconds())
        )

    def test_backs_off_to_the_longest_wait(self) -> None:
        """While nothing is in its handshake, the hints go out again after 1, 2, 4, 4 ... s."""
        self.r.start()
        self.clock.pump([1.0] * 40)
        gaps = [b - a for a, b in zip([0.0, *self.times], self.times, strict=False)]
        self.assertEqual(gaps[:5], [REKINDLE_FIRST, 2.0, REKINDLE_MAX, REKINDLE_MAX, REKINDLE_MAX])
        self.assertEqual(self.r.rekindled, len(self.times))

    def test_a_handshake_in_progress_waits_and_resets(self) -> None:
        """A check that finds a handshake in progress rekindles nothing and starts over at the
        first wait."""
        self.r.start()
        self.clock.advance(REKINDLE_FIRST)
        self.clock.advance(2.0)
        self.assertEqual(len(self.times), 2)
        self.busy = True
        self.clock.advance(REKINDLE_MAX)
        self.assertEqual(len(self.times), 2)
        self.busy = False
        self.clock.advance(REKINDLE_FIRST)
        self.assertEqual(len(self.times), 3)

    def test_nothing_after_stop(self) -> None:
        """Once stopped, no check runs and no timer is left."""
        self.r.start()
        self.r.stop()
        self.clock.advance(100)
        self.assertEqual(self.times, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])


def _cut_at_the_relay(reactor: Any, index: int = 0) -> Any:
    """Connect the ``index``-th dial and lose it before the relay said ``ok``."""
    factory = reactor.tcpClients[index][2]
    protocol = factory.buildProtocol(ADDR)
    protocol.makeConnection(StringTransport())
    return protocol


class FollowerConnectorTests(SynchronousTestCase):
    def test_cut_relay_dial_is_rekindled(self) -> None:
        """A Follower (relay only) whose relay connection was cut before the relay paired it
        publishes its relay hint again and dials the relay again: a stock Leader, which never
        retries by itself, dials the hints it gets while it connects."""
        c, owner, reactor = make(FOLLOWER, no_listen=True, relay_hints=(RELAY,), rekindle=True)
        c.start()
        _cut_at_the_relay(reactor).connectionLost(Failure(ConnectionLost()))
        self.assertFalse(c.busy)
        reactor.advance(REKINDLE_FIRST)
        self.assertEqual(owner.hint_messages, [owner.hint_messages[0]] * 2)
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [4001, 4001])
        self.assertEqual(owner.attempts_again, 1)
        reactor.advance(1.9)  # the next check comes 2 s after the first
        self.assertEqual(len(owner.hint_messages), 2)
        _cut_at_the_relay(reactor, 1).connectionLost(Failure(ConnectionLost()))
        reactor.advance(0.1)
        self.assertEqual((len(owner.hint_messages), len(reactor.tcpClients)), (3, 3))

    def test_telemetry_ends_the_cut_attempt(self) -> None:
        """The cut attempt's attempt_ended comes while the generation goes on (a closed
        candidate is held until the race ends, to tell a lost race from a failure: issue 33's
        telemetry showed the Follower's attempt never ending, the race never did), and each
        try again is an attempt of its own."""
        c, _owner, reactor, records = make_observed(
            FOLLOWER, no_listen=True, relay_hints=(RELAY,), rekindle=True
        )
        c.start()
        _cut_at_the_relay(reactor).connectionLost(Failure(ConnectionLost()))
        reactor.pump([0.5] * 8)
        self.assertEqual(outcomes(records), [(1, "relay-v1", "outbound", "handshake_failed")])
        started = [r["attempt"] for r in records if r["event"] == "attempt_started"]
        self.assertEqual(started, [1, 2])  # the second try is still connecting

    def test_without_rekindle_a_cut_generation_waits(self) -> None:
        """With a txdilation Leader (no rekindle: the Leader starts a new generation itself)
        the Follower's connector publishes and dials nothing more (issue 33's stall, where the
        Leader was stock)."""
        c, owner, reactor = make(FOLLOWER, no_listen=True, relay_hints=(RELAY,))
        c.start()
        _cut_at_the_relay(reactor).connectionLost(Failure(ConnectionLost()))
        reactor.advance(60)
        self.assertEqual((len(owner.hint_messages), len(reactor.tcpClients)), (1, 1))

    def test_waiting_relay_connection_is_kept(self) -> None:
        """Our relay connection still waits for the relay's ok: the hints go out again (the
        Leader's new dial pairs with it) but the relay is not dialled a second time."""
        c, owner, reactor = make(FOLLOWER, no_listen=True, relay_hints=(RELAY,), rekindle=True)
        c.start()
        _cut_at_the_relay(reactor)
        reactor.advance(REKINDLE_FIRST)
        self.assertEqual(len(owner.hint_messages), 2)
        self.assertEqual(len(reactor.tcpClients), 1)

    def test_handshake_in_progress_is_left_alone(self) -> None:
        """A connection that got the Leader's prologue is in its handshake: nothing again."""
        c, owner, reactor = make(FOLLOWER, no_listen=True, rekindle=True)
        c.start()
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        protocol = _cut_at_the_relay(reactor)
        protocol.dataReceived(PROLOGUE_LEADER)
        reactor.advance(REKINDLE_FIRST)
        self.assertEqual((owner.hint_messages, len(reactor.tcpClients)), ([], 1))

    def test_listener_hints_again_and_peer_hints_dialled_again(self) -> None:
        """A listening Follower publishes its direct hints again (its listener stays up) and
        dials again the Leader's direct hint whose connection was lost."""
        c, owner, reactor = make(FOLLOWER, rekindle=True)
        c.start()
        self.assertEqual(len(reactor.tcpServers), 1)
        c.got_hints([DirectTCPV1Hint("127.0.0.1", 7)])
        _cut_at_the_relay(reactor).connectionLost(Failure(ConnectionLost()))
        reactor.advance(REKINDLE_FIRST)
        self.assertEqual(owner.hint_messages, [owner.hint_messages[0]] * 2)
        self.assertEqual([p for _, p, *_ in reactor.tcpClients], [7, 7])
        self.assertEqual(len(reactor.tcpServers), 1)

    def test_nothing_after_selection(self) -> None:
        """Once the Leader's KCM selected a connection, nothing is published or dialled."""
        c, owner, reactor = make(FOLLOWER, no_listen=True, relay_hints=(RELAY,), rekindle=True)
        c.start()
        c.candidate_ready(FakeCandidate("->relay", is_direct=False))
        reactor.advance(60)
        self.assertEqual((len(owner.hint_messages), len(reactor.tcpClients)), (1, 1))
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_leader_never_rekindles(self) -> None:
        """rekindle is a Follower's: a Leader's connector is not given it by the Manager, and
        a stuck txdilation Leader starts a new generation instead."""
        c, owner, reactor = make(LEADER, no_listen=True, relay_hints=(RELAY,))
        c.start()
        _cut_at_the_relay(reactor).connectionLost(Failure(ConnectionLost()))
        reactor.advance(60)
        self.assertEqual(len(owner.hint_messages), 1)


class ManagerTests(SynchronousTestCase):
    """The Manager gives rekindle to a Follower whose Leader is stock (its please lists no
    txdilation extension), and to nobody else."""

    def follower(self, extensions: tuple[str, ...]) -> tuple[MailboxPipe, Any, Manager]:
        """A relay-only Follower whose first relay connection is cut at the relay."""
        m, pipe, clock = started("0" * 16, "ffff000000000000", extensions)
        _cut_at_the_relay(clock).connectionLost(Failure(ConnectionLost()))
        clock.pump([0.5] * 8)
        self.addCleanup(m.stop)
        return pipe, clock, m

    def hint_messages(self, pipe: MailboxPipe) -> int:
        return [body["type"] for _, body in pipe.sent].count("connection-hints")

    def test_stock_leader_is_rekindled(self) -> None:
        """Stock's please (no extensions): the Follower's hints go out again."""
        pipe, clock, m = self.follower(())
        self.assertGreaterEqual(self.hint_messages(pipe), 3)
        self.assertGreaterEqual(len(clock.tcpClients), 2)
        # the status says when it last tried: stock's own field, ConnectingPeer.last_attempt
        self.assertEqual(m.status.peer_connection, ConnectingPeer(3))
        self.assertTrue(m.api.waiting_on_stock_leader)

    def test_txdilation_leader_is_not(self) -> None:
        """A txdilation Leader (its please lists our extensions) starts a new generation by
        itself: nothing changes between txdilation peers."""
        pipe, clock, m = self.follower(("closing-v1",))
        self.assertFalse(m.api.waiting_on_stock_leader)
        self.assertEqual(self.hint_messages(pipe), 1)
        self.assertEqual(len(clock.tcpClients), 1)
