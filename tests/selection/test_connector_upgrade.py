"""The Connector after a relayed selection (issue 19): with a peer that moves links
(``path_upgrade``) it keeps listening and dialing direct hints on the background schedule and
hands the first direct connection that works to its owner as a path upgrade; with a stock peer
a Leader probes the peer's direct hints and reports a direct path that proves to work. Driven
with a MemoryReactorClock and fake candidates (``tests.selection.test_connector``)."""

from __future__ import annotations

from typing import Any

from twisted.internet.error import ConnectionRefusedError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.selection.test_connector import RELAY, FakeCandidate, RecordingOwner, make
from txdilation.selection.connector import Candidate, Connector
from txdilation.selection.hints import DirectTCPV1Hint
from txdilation.selection.upgrade import BACKGROUND_CONNECT_TIMEOUT, FIRST_RETRIES
from txdilation.wire.roles import FOLLOWER, LEADER, Role

LAN = DirectTCPV1Hint("192.168.1.2", 6000)


def dials_to(reactor: MemoryReactorClock, host: str) -> list[Any]:
    """The connectTCP calls to ``host`` so far (their factories)."""
    return [factory for h, _p, factory, _t, _b in reactor.tcpClients if h == host]


def relayed(role: Role, **kw: Any) -> tuple[Connector, RecordingOwner, MemoryReactorClock, Any]:
    """A connector that listens, dials the peer's LAN hint and its relay, and selected a
    relayed candidate."""
    c, owner, reactor = make(role, relay_hints=(RELAY,), **kw)
    c.start()
    c.got_hints([LAN])
    c.got_hints([RELAY])
    relay = FakeCandidate("->relay:tcp:127.0.0.1:4001", False)
    c._core.candidates[relay] = Candidate(relay)  # as if the connector had built it
    c.candidate_ready(relay)
    assert owner.made == [relay], owner.made
    return c, owner, reactor, relay


class PathUpgradeTests(SynchronousTestCase):
    """A peer that speaks path-upgrade-v1."""

    def test_a_relayed_link_is_only_a_start(self) -> None:
        """After a relayed selection the connector keeps its listener and its direct dial,
        and stops dialing relays; the owner keeps it (``upgrading``)."""
        c, _owner, reactor, _relay = relayed(LEADER, path_upgrade=True)
        self.assertTrue(c.upgrading)
        self.assertTrue(c._advertiser.listeners)
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 1)
        self.assertTrue(c._dialer.in_background)
        self.assertEqual([d.hint for d in c._dialer.direct_dials], [LAN])

    def test_the_first_direct_connection_becomes_the_link(self) -> None:
        """Leader: a direct candidate after the relayed selection is selected (its KCM goes
        out), reported as a path upgrade; everything else closes, the relay link is the
        owner's to retire."""
        c, owner, _reactor, relay = relayed(LEADER, path_upgrade=True)
        direct, other = FakeCandidate("->tcp:192.168.1.2:6000", True), FakeCandidate("<-x", True)
        c.candidate_ready(direct)
        self.assertEqual(owner.upgraded, [direct])
        self.assertIs(direct.selected_with, owner.links[direct])
        self.assertFalse(relay.aborted)  # the owner retires it: what is in flight arrives
        self.assertFalse(c.upgrading)
        self.assertEqual(c._advertiser.listeners, [])
        self.assertFalse(relay.aborted)
        c.candidate_ready(other)
        self.assertTrue(other.aborted)
        self.assertEqual(owner.upgraded, [direct])

    def test_follower_moves_when_the_leaders_kcm_arrives(self) -> None:
        """Follower: a candidate is ready once the Leader's KCM came on it: that is the move."""
        c, owner, _reactor, _relay = relayed(FOLLOWER, path_upgrade=True)
        direct = FakeCandidate("<-tcp:192.168.1.3:5000", True)
        c.candidate_ready(direct)
        self.assertEqual(owner.upgraded, [direct])

    def test_never_another_relay(self) -> None:
        """A relay candidate while upgrading is closed."""
        c, owner, _reactor, _relay = relayed(LEADER, path_upgrade=True)
        late = FakeCandidate("->relay:tcp:127.0.0.1:4001", False)
        c.candidate_ready(late)
        self.assertTrue(late.aborted)
        self.assertFalse(hasattr(owner, "upgraded"))

    def test_direct_hints_are_dialed_again_on_the_schedule(self) -> None:
        """A failed direct dial is tried again at the schedule's times, with a short connect
        timeout."""
        _c, _owner, reactor, _relay = relayed(LEADER, path_upgrade=True)
        first = dials_to(reactor, LAN.hostname)[0]
        first.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        reactor.advance(FIRST_RETRIES[0])
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 2)
        reactor.advance(FIRST_RETRIES[1])
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 3)
        timeouts = [t for h, _p, _f, t, _b in reactor.tcpClients if h == LAN.hostname]
        self.assertLessEqual(max(timeouts[1:]), BACKGROUND_CONNECT_TIMEOUT)

    def test_a_network_change_dials_again_at_once(self) -> None:
        """A network change while upgrading: every direct hint is dialed again now."""
        c, _owner, reactor, _relay = relayed(LEADER, path_upgrade=True)
        dials_to(reactor, LAN.hostname)[0].clientConnectionFailed(
            None, Failure(ConnectionRefusedError())
        )
        c.network_changed()
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 2)

    def test_new_hints_are_dialed(self) -> None:
        """The peer's hints after selection (a new address of its) are dialed; a relay hint
        is not."""
        c, _owner, reactor, _relay = relayed(LEADER, path_upgrade=True)
        c.got_hints([DirectTCPV1Hint("192.168.7.7", 7000)])
        c.got_hints([RELAY])
        self.assertEqual(len(dials_to(reactor, "192.168.7.7")), 1)
        self.assertEqual(len(dials_to(reactor, "127.0.0.1")), 1)  # the first relay dial only

    def test_stop_leaves_nothing_behind(self) -> None:
        """Stopping an upgrading connector closes its listener and dials, and leaves no timer
        (the selected relay link is the owner's)."""
        c, _owner, reactor, relay = relayed(LEADER, path_upgrade=True)
        c.events.stop()
        self.assertFalse(c.upgrading)
        self.assertEqual(c._advertiser.listeners, [])
        self.assertEqual(reactor.getDelayedCalls(), [])
        self.assertFalse(relay.aborted)

    def test_direct_selection_ends_the_race(self) -> None:
        """A direct selection leaves nothing to upgrade."""
        c, owner, _reactor = make(LEADER, path_upgrade=True)
        c.start()
        direct = FakeCandidate("->tcp:a:1", True)
        c.candidate_ready(direct)
        self.assertEqual(owner.made, [direct])
        self.assertFalse(c.upgrading)
        self.assertEqual(c._advertiser.listeners, [])


class StockPeerTests(SynchronousTestCase):
    """A peer that cannot move links."""

    def test_leader_probes_the_peers_direct_hints(self) -> None:
        """The Leader of a relayed link closes everything, then probes the peer's direct
        hints on the schedule; a refusal proves the path (once)."""
        c, owner, reactor, _relay = relayed(LEADER)
        self.assertTrue(c.upgrading)
        self.assertEqual(c._advertiser.listeners, [])
        reactor.advance(FIRST_RETRIES[0])
        probes = dials_to(reactor, LAN.hostname)
        self.assertEqual(len(probes), 2)  # the race's dial (cancelled), then the probe
        probes[-1].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertEqual(owner.proofs, 1)
        reactor.advance(60)
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 2)  # no probe after proof

    def test_a_late_direct_candidate_proves_the_path(self) -> None:
        """A direct connection completing after the relay was selected proves it too; it is
        closed."""
        c, owner, _reactor, _relay = relayed(LEADER)
        late = FakeCandidate("<-tcp:192.168.1.2:5000", True)
        c.candidate_ready(late)
        self.assertTrue(late.aborted)
        self.assertEqual(owner.proofs, 1)

    def test_follower_does_nothing(self) -> None:
        """A Follower cannot start generations: no probes, nothing kept."""
        c, owner, reactor, _relay = relayed(FOLLOWER)
        self.assertFalse(c.upgrading)
        reactor.advance(60)
        self.assertEqual(len(dials_to(reactor, LAN.hostname)), 1)
        self.assertEqual(owner.proofs, 0)

    def test_stop_ends_the_probes(self) -> None:
        """Stopping a relayed Connector leaves no probe scheduled on the reactor."""
        c, _owner, reactor, _relay = relayed(LEADER)
        c.events.stop()
        self.assertEqual(reactor.getDelayedCalls(), [])

    def test_hints_after_the_selection_are_probed(self) -> None:
        """The stock peer's direct hints often come after its relay hint, and so after a
        relayed selection: they are probed too."""
        c, owner, reactor = make(LEADER, relay_hints=(RELAY,))
        c.start()
        c.got_hints([RELAY])
        relay = FakeCandidate("->relay:tcp:127.0.0.1:4001", False)
        c.candidate_ready(relay)
        c.got_hints([DirectTCPV1Hint("192.168.5.5", 5000)])
        reactor.advance(FIRST_RETRIES[0])
        (probe,) = dials_to(reactor, "192.168.5.5")
        probe.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertEqual(owner.proofs, 1)
