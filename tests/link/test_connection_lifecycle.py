"""The L2 connection's lifecycle machine (txdilation.link.connection_lifecycle) over a fake
connection: what it has the connection do in each state, and whom it tells of the end."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.link.connection_lifecycle import L2Core, L2Events, l2_machine
from txdilation.testing import missing_transitions
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import KCM, Record
from txdilation.wire.roles import FOLLOWER, LEADER, Role

LOSS = LinkLoss(Cause.DROPPED, "Connection to the other side was lost in a non-clean fashion.")


class Connection:
    """Records what the machine has it do."""

    def __init__(self) -> None:
        self.did: list[Any] = []

    def send_relay_line(self) -> None:
        self.did.append("relay line")

    def send_prologue(self) -> None:
        self.did.append("prologue")

    def start_handshake(self) -> None:
        self.did.append("handshake")

    def await_kcm(self) -> None:
        self.did.append("await KCM")

    def deliver_to(self, sink: Any) -> None:
        self.did.append(("deliver to", sink))

    def send_record(self, record: Record) -> None:
        self.did.append(record)

    def fail(self, reason: LinkLoss) -> None:
        self.did.append(reason)


class Owner:
    def __init__(self) -> None:
        self.failed: list[tuple[Any, LinkLoss]] = []

    def candidate_ready(self, connection: Any) -> None:
        raise AssertionError("the connection tells its owner, not the machine")

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        self.failed.append((connection, reason))


class Sink:
    """A record sink (any object with its two methods will do)."""

    def __init__(self) -> None:
        self.lost: list[tuple[Any, LinkLoss]] = []

    def got_record(self, record: Any) -> None:
        pass

    def connection_lost(self, connection: Any, reason: LinkLoss) -> None:
        self.lost.append((connection, reason))


def machine(role: Role) -> tuple[L2Events, L2Core, Connection, Owner, Clock]:
    connection, owner, clock = Connection(), Owner(), Clock()
    core = L2Core(connection, role, owner)
    core.timer = clock.callLater(30, lambda: None)
    return l2_machine(core), core, connection, owner, clock


def nominated(role: Role) -> tuple[L2Events, L2Core, Connection, Owner, Clock]:
    events, core, connection, owner, clock = machine(role)
    events.connected_directly()
    events.prologue_received()
    events.handshake_completed()
    assert events.kcm_received() is True
    return events, core, connection, owner, clock


class LifecycleTests(SynchronousTestCase):
    def test_every_pair_is_defined(self) -> None:
        """No (state, input) pair can raise NoTransition."""
        self.assertEqual(missing_transitions(l2_machine), [])

    def test_direct_follower(self) -> None:
        """Direct: prologue, handshake, then (the Follower) its KCM at once; the first KCM
        lets the owner select (records behind it are held); selected, records go to the sink,
        the handshake timer is off, and the end goes to the sink."""
        events, core, connection, owner, clock = nominated(FOLLOWER)
        self.assertEqual(connection.did, ["prologue", "handshake", "await KCM", KCM()])
        self.assertEqual(core.held, [])
        sink = Sink()
        events.select(sink)
        self.assertEqual(connection.did[-1], ("deliver to", sink))
        self.assertEqual(clock.getDelayedCalls(), [])
        events.lost(LOSS)
        self.assertEqual((sink.lost, owner.failed), ([(connection, LOSS)], []))

    def test_relayed_leader(self) -> None:
        """Through a relay: the relay line first, the prologue after the relay's ``ok``; the
        Leader sends its KCM only once selected."""
        events, _core, connection, _owner, _clock = machine(LEADER)
        events.connected_via_relay()
        events.relay_accepted()
        events.prologue_received()
        events.handshake_completed()
        self.assertEqual(connection.did, ["relay line", "prologue", "handshake", "await KCM"])
        self.assertIs(events.kcm_received(), True)
        events.select(Sink())
        self.assertEqual(connection.did[-1], KCM())

    def test_lost_candidate(self) -> None:
        """Lost before selection: the timer stops and the owner hears the typed reason."""
        events, _core, connection, owner, clock = machine(LEADER)
        events.connected_directly()
        events.lost(LOSS)
        self.assertEqual(owner.failed, [(connection, LOSS)])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_refusals(self) -> None:
        """A second KCM, or an input where the protocol has no place for it, fails the
        connection with a PROTOCOL_ERROR (and a second KCM does not let the owner select)."""
        events, _core, connection, _owner, _clock = nominated(LEADER)
        self.assertIs(events.kcm_received(), False)
        self.assertEqual(
            connection.did[-1], LinkLoss(Cause.PROTOCOL_ERROR, "second KCM before selection")
        )
        early, _core, connection, _owner, _clock = machine(LEADER)
        early.select(Sink())
        early.prologue_received()
        self.assertEqual(
            connection.did,
            [
                LinkLoss(Cause.PROTOCOL_ERROR, "selected before the KCM exchange"),
                LinkLoss(Cause.PROTOCOL_ERROR, "prologue at the wrong time"),
            ],
        )

    def test_closed_ignores_everything(self) -> None:
        """Once closed, every input is a no-op: nothing is done, nobody is told again."""
        events, _core, connection, owner, _clock = machine(FOLLOWER)
        events.lost(LOSS)
        done = list(connection.did)
        events.connected_directly()
        events.select(Sink())
        self.assertFalse(events.kcm_received())
        events.lost(LOSS)
        self.assertEqual((connection.did, owner.failed), (done, [(connection, LOSS)]))
