"""Tests for txdilation.selection.race: the core the connector's machine works on (which input
a candidate's turn makes, how long a relay is held, what a selection closes), driven directly
on a MemoryReactorClock with fake candidates (tests/selection/test_connector.py drives the
whole connector)."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.selection.test_connector import FakeCandidate, make
from txdilation.selection.connector import DIRECT_GRACE
from txdilation.selection.race import PROVEN_GRACE, Candidate, ConnectorCore
from txdilation.wire.roles import FOLLOWER, LEADER, Role


class RecordingEvents:
    """Which input the core makes."""

    def __init__(self) -> None:
        self.made: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.made.append((name, *args))


def core_of(role: Role, **kw: Any) -> tuple[ConnectorCore, Any]:
    kw.setdefault("no_listen", True)
    connector, owner, _ = make(role, **kw)
    return connector._core, owner


def candidate(core: ConnectorCore, description: str, is_direct: bool) -> Candidate:
    c = Candidate(FakeCandidate(description, is_direct))  # type: ignore[arg-type]
    core.candidates[c.connection] = c
    return c


class TurnTests(SynchronousTestCase):
    def test_a_candidates_turn(self) -> None:
        """Direct: decisive; relay, Leader, a direct connection in its handshake: tentative;
        relay otherwise (or the Follower): taken; a candidate no longer in line: nothing."""
        events = RecordingEvents()
        for role, others, is_direct, expected in (
            (LEADER, False, True, "decisive_candidate"),
            (LEADER, True, False, "tentative_candidate"),
            (LEADER, False, False, "relay_candidate"),
            (FOLLOWER, True, False, "relay_candidate"),
        ):
            core, _ = core_of(role)
            if others:
                candidate(core, "->tcp:direct", True)
            c = candidate(core, "->relay", is_direct)
            c.in_line = True
            core.consider(events, c)  # type: ignore[arg-type]
            self.assertEqual(events.made[-1], (expected, c))
            self.assertFalse(c.in_line)
            core.consider(events, c)  # type: ignore[arg-type]
            self.assertEqual(events.made[-1], (expected, c))
            self.assertEqual(len([m for m in events.made if m[1] is c]), 1)


class GraceTests(SynchronousTestCase):
    def test_relay_grace(self) -> None:
        """0 with nothing direct in sight; direct_grace while a direct candidate is in its
        handshake; PROVEN_GRACE in a generation preferring a direct path while one may come
        (a direct candidate, a listener or a direct dial), else 0 there too."""
        core, _ = core_of(LEADER)
        self.assertEqual(core.relay_grace(), 0.0)
        candidate(core, "->tcp:direct", True)
        self.assertEqual(core.relay_grace(), DIRECT_GRACE)
        preferring, _ = core_of(LEADER, prefer_direct=True)
        self.assertEqual(preferring.relay_grace(), 0.0)
        self.assertFalse(preferring.direct_still_possible())
        candidate(preferring, "->tcp:direct", True)
        self.assertEqual(preferring.relay_grace(), PROVEN_GRACE)


class SelectionTests(SynchronousTestCase):
    def test_upgrades(self) -> None:
        """Only a relayed selection with a peer that moves links, not over Tor, upgrades."""
        plain, _ = core_of(LEADER)
        upgrading, _ = core_of(LEADER, path_upgrade=True)
        tor, _ = core_of(LEADER, path_upgrade=True, tor=object())
        relay = Candidate(FakeCandidate("->relay", False))
        direct = Candidate(FakeCandidate("->tcp", True))
        self.assertEqual(
            [plain.upgrades(relay), upgrading.upgrades(relay), upgrading.upgrades(direct)],
            [False, True, False],
        )
        self.assertFalse(tor.upgrades(relay))

    def test_select_closes_the_rest(self) -> None:
        """Selecting: the owner gets the link (with the count of candidates), then the
        connection delivers what it held; every other candidate is aborted."""
        core, owner = core_of(FOLLOWER)
        chosen = candidate(core, "->tcp:a", True)
        other = candidate(core, "->relay", False)
        core.count = 2
        core.select(chosen)
        self.assertEqual(owner.made, [chosen.connection])
        self.assertEqual(owner.candidates, [2])
        self.assertIs(chosen.connection.selected_with.connection, chosen.connection)
        self.assertTrue(chosen.connection.delivered_held)
        self.assertTrue(other.connection.aborted)
        self.assertEqual(core.candidates, {})
        self.assertIs(core.selected, chosen.connection)
        self.assertFalse(core.looking)

    def test_relayed_start_keeps_direct_candidates(self) -> None:
        """Selecting a relay that upgrades: other relays close, direct candidates stay, and
        the core goes on looking."""
        core, _ = core_of(LEADER, path_upgrade=True)
        relay = candidate(core, "->relay:1", False)
        other_relay = candidate(core, "->relay:2", False)
        direct = candidate(core, "->tcp:a", True)
        core.select(relay)
        self.assertTrue(other_relay.connection.aborted)
        self.assertFalse(direct.connection.aborted)
        self.assertEqual(list(core.candidates.values()), [direct])
        self.assertTrue(core.looking)
