"""The Manager's side of a path upgrade (``path-upgrade-v1``): a relayed link moves to a direct
connection of the same generation, the old one retires; with a stock peer, a Leader that saw a
direct path work starts a new generation that prefers it. Driven on a MemoryReactorClock with
fake connections (the Connector's side: ``tests/selection/test_connector.py``; end to end, in
namespaces: ``tests/test_upgrade.py``)."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import ConnectedPeer, DilationStatus

from tests.mailbox.test_manager import MailboxPipe, clock_manager
from txdilation.mailbox.dilate_messages import EXTENSIONS, PATH_UPGRADE
from txdilation.mailbox.manager import Manager
from txdilation.mailbox.manager_lifecycle import LEAVE_TIMEOUT
from txdilation.mailbox.selection_reports import PROVEN_BACKOFF
from txdilation.path.selected_link import RETIRE_GRACE
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.records import Ack, Data, Open

LEADER, FOLLOWER = "ffffffffffffffff", "0000000000000000"


class Sink(Protocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)


def started(
    side: str, peer_side: str, extensions: list[str]
) -> tuple[Manager, MailboxPipe, Any, list[dict[str, Any]], list[DilationStatus]]:
    """A Manager with its key, versions and the peer's ``please`` (with ``extensions``)."""
    pipe = MailboxPipe()
    statuses: list[DilationStatus] = []
    m, clock = clock_manager(pipe, side, status_update=statuses.append)
    records: list[dict[str, Any]] = []
    m.telemetry._sinks.append(records.append)
    m.got_dilation_key(b"k" * 32)
    m.got_wormhole_versions({"can-dilate": ["ged"]})
    please = {"type": "please", "side": peer_side, "use-version": "ged", "extensions": extensions}
    m.received_dilation_message(json.dumps(please).encode())
    return m, pipe, clock, records, statuses


def relay() -> FakeDilatedConnection:
    return FakeDilatedConnection("->relay:tcp:10.0.0.9:4001", is_direct=False)


def direct() -> FakeDilatedConnection:
    return FakeDilatedConnection("->tcp:10.0.0.2:4444", is_direct=True)


class PathUpgradeTests(SynchronousTestCase):
    """A peer that speaks path-upgrade-v1: the link moves within its generation."""

    def test_our_please_announces_path_upgrades(self) -> None:
        """Our ``please`` lists the extension (a stock peer ignores unknown ``please`` keys)."""
        m, pipe, *_ = started(LEADER, FOLLOWER, [])
        (please,) = [body for _phase, body in pipe.sent if body["type"] == "please"]
        self.assertIn(PATH_UPGRADE, please["extensions"])
        m.stop()

    def test_connectors_know_whether_the_peer_moves_links(self) -> None:
        """The generation's connector is told the peer speaks path upgrades, or not."""
        for extensions, expected in ((list(EXTENSIONS), True), ([], False)):
            m, *_ = started(LEADER, FOLLOWER, extensions)
            connector = m.connector
            assert connector is not None
            self.assertIs(connector._settings.path_upgrade, expected)
            m.stop()

    def test_link_moves_and_replays_what_is_unacknowledged(self) -> None:
        """Moving to a direct link: L4 replays every unacknowledged record on it first, in
        order, and writes new ones there only; the old link gets nothing more, is not
        reported lost (no reconnection), and is closed RETIRE_GRACE later."""
        m, pipe, clock, records, statuses = started(LEADER, FOLLOWER, list(EXTENSIONS))
        old = relay()
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(old), 1)
        sink = Sink()
        connecting = m.api.connector_for("chat").connect(Factory.forProtocol(lambda: sink))
        clock.advance(0)
        protocol = self.successResultOf(connecting)
        protocol.transport.write(b"one")
        clock.advance(0)
        old_link = m.link
        assert old_link is not None
        old_link.got_record(Ack(0))  # the OPEN was acknowledged; "one" was not
        sent_before = len(pipe.sent)
        new = direct()
        new_link = m.connector_reports.link_for(new)
        m.connector_reports.connector_path_upgraded(new_link)
        protocol.transport.write(b"two")
        clock.advance(0)
        self.assertIs(m.link, new_link)
        self.assertEqual([r.data for r in new.of_type(Data)], [b"one", b"two"])
        self.assertEqual(new.of_type(Open), [])  # acknowledged: not replayed
        self.assertEqual([r.data for r in old.of_type(Data)], [b"one"])
        self.assertEqual(len(pipe.sent), sent_before)  # no 'reconnect': same generation
        self.assertIsInstance(statuses[-1].peer_connection, ConnectedPeer)
        self.assertEqual(statuses[-1].peer_connection.hint_description, new.description)
        (changed,) = [r for r in records if r["event"] == "path_changed"]
        self.assertEqual((changed["from_path"], changed["to_path"]), ("relay", "direct"))
        self.assertNotIn("connection_lost", [r["event"] for r in records])
        self.assertFalse(old.closed)
        clock.advance(RETIRE_GRACE)
        self.assertIsNotNone(old.failed_reason)
        assert old.failed_reason is not None
        self.assertIs(old.failed_reason.cause, Cause.PATH_UPGRADE)
        old_link.connection_lost(old, old.failed_reason)  # type: ignore[arg-type]
        self.assertIs(m.link, new_link)
        self.assertNotIn("connection_lost", [r["event"] for r in records])
        m.stop()

    def test_records_still_in_flight_on_the_old_link_arrive(self) -> None:
        """What the peer wrote on the old link before it moved still arrives there, and is
        delivered once, in order, with what comes on the new link."""
        m, _pipe, clock, _records, _statuses = started(FOLLOWER, LEADER, list(EXTENSIONS))
        sink = Sink()
        m.api.listener_for("chat").listen(Factory.forProtocol(lambda: sink))
        old = relay()
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(old), 1)
        old_link = m.link
        assert old_link is not None
        new = direct()
        new_link = m.connector_reports.link_for(new)
        old_link.got_record(Open(0, 1, "chat"))
        old_link.got_record(Data(1, 1, b"a"))
        m.connector_reports.connector_path_upgraded(new_link)
        new_link.got_record(Open(0, 1, "chat"))  # the peer replays what we had not acked
        new_link.got_record(Data(1, 1, b"a"))
        old_link.got_record(Data(2, 1, b"b"))  # still in flight on the old path
        new_link.got_record(Data(2, 1, b"b"))
        new_link.got_record(Data(3, 1, b"c"))
        clock.advance(1.0)
        self.assertEqual(sink.received, [b"a", b"b", b"c"])
        self.assertTrue(new.of_type(Ack))
        m.stop()

    def test_an_upgrade_outside_a_connected_link_is_refused(self) -> None:
        """A connection offered as an upgrade while no link is selected is closed."""
        m, *_ = started(LEADER, FOLLOWER, list(EXTENSIONS))
        stray = direct()
        m.connector_reports.connector_path_upgraded(m.connector_reports.link_for(stray))
        self.assertTrue(stray.aborted)
        m.stop()

    def test_a_finished_wormhole_closes_a_retired_link_at_once(self) -> None:
        """Once the wormhole has stopped, a retired link does not wait for its grace."""
        m, _pipe, clock, *_ = started(LEADER, FOLLOWER, list(EXTENSIONS))
        old = relay()
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(old), 1)
        new = direct()
        new_link = m.connector_reports.link_for(new)
        m.connector_reports.connector_path_upgraded(new_link)
        m.stop()
        clock.advance(0)
        self.assertTrue(new.disconnected)  # drained: nothing was unacknowledged
        self.assertFalse(old.closed)
        new_link.connection_lost(new, LinkLoss(Cause.CLOSED, "closed"))  # type: ignore[arg-type]
        self.assertTrue(old.closed)
        self.successResultOf(m.when_stopped())


class StockPeerUpgradeTests(SynchronousTestCase):
    """A stock Follower cannot move a link: a Leader that saw a direct path work starts a new
    generation, once in PROVEN_BACKOFF seconds."""

    def relayed(self) -> tuple[Manager, MailboxPipe, Any, FakeDilatedConnection]:
        m, pipe, clock, _records, _statuses = started(LEADER, FOLLOWER, [])
        link = relay()
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(link), 1)
        return m, pipe, clock, link

    def test_leader_asks_for_a_new_generation_and_keeps_the_link_meanwhile(self) -> None:
        """The Leader sends 'reconnect' and keeps using the relayed link until the stock
        Follower drops it (it does on 'reconnect'); the next generation prefers direct."""
        m, pipe, _clock, link = self.relayed()
        m.connector_reports.direct_path_proven()
        self.assertEqual(pipe.sent[-1][1], {"type": "reconnect"})
        self.assertFalse(link.closed)
        current = m.link
        assert current is not None
        current.connection_lost(link, LinkLoss(Cause.CLOSED, "closed by the peer"))  # type: ignore[arg-type]
        m.received_dilation_message(b'{"type": "reconnecting"}')
        connector = m.connector
        assert connector is not None
        self.assertTrue(connector._settings.prefer_direct)
        m.stop()

    def test_peer_answering_first_is_fine(self) -> None:
        """'reconnecting' before the link's end is noticed: the link is dropped, the new
        generation starts."""
        m, _pipe, _clock, link = self.relayed()
        m.connector_reports.direct_path_proven()
        m.received_dilation_message(b'{"type": "reconnecting"}')
        self.assertTrue(link.aborted)
        self.assertIsNotNone(m.connector)
        m.stop()

    def test_a_silent_peer_gets_its_link_dropped(self) -> None:
        """No answer within LEAVE_TIMEOUT: the Leader drops the link itself."""
        m, _pipe, clock, link = self.relayed()
        m.connector_reports.direct_path_proven()
        clock.advance(LEAVE_TIMEOUT)
        self.assertIsNotNone(link.failed_reason)
        assert link.failed_reason is not None
        self.assertIs(link.failed_reason.cause, Cause.PATH_UPGRADE)
        m.stop()

    def test_once_per_backoff(self) -> None:
        """A second proof within PROVEN_BACKOFF of the first starts nothing."""
        m, pipe, clock, _link = self.relayed()
        m.connector_reports.direct_path_proven()
        m.received_dilation_message(b'{"type": "reconnecting"}')
        second = relay()
        m.connector_reports.connector_connection_made(m.connector_reports.link_for(second), 1)
        sent = len(pipe.sent)
        m.connector_reports.direct_path_proven()
        self.assertEqual(len(pipe.sent), sent)
        clock.advance(PROVEN_BACKOFF)
        m.connector_reports.direct_path_proven()
        self.assertEqual(pipe.sent[-1][1], {"type": "reconnect"})
        m.stop()

    def test_not_for_a_direct_link_a_follower_or_an_upgrading_peer(self) -> None:
        """Only a Leader on a relayed link with a peer that cannot move links acts."""
        for side, peer, extensions, conn in (
            (LEADER, FOLLOWER, [], direct()),
            (FOLLOWER, LEADER, [], relay()),
            (LEADER, FOLLOWER, list(EXTENSIONS), relay()),
        ):
            m, pipe, _clock, _records, _statuses = started(side, peer, extensions)
            m.connector_reports.connector_connection_made(m.connector_reports.link_for(conn), 1)
            sent = len(pipe.sent)
            m.connector_reports.direct_path_proven()
            self.assertEqual(len(pipe.sent), sent)
            self.assertFalse(conn.closed)
            m.stop()
