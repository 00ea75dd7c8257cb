"""Tests for txdilation.mailbox.manager_core: the Manager machine's core on its own (a Clock,
real status, telemetry and Multiplexer, fake links and connectors)."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import ConnectedPeer, StoppedPeer

from txdilation.mailbox.absence import PeerAbsence
from txdilation.mailbox.dilate_messages import Outbox
from txdilation.mailbox.manager_core import Generation, ManagerCore
from txdilation.mailbox.status_reporter import StatusReporter
from txdilation.selection.connector_settings import ConnectorSettings
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.telemetry import Telemetry
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.roles import LEADER


class Sent:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    def send(self, phase: str, plaintext: bytes) -> None:
        self.messages.append((phase, plaintext))


class FakeLink(FakeDilatedConnection):
    """A selected link that can be retired: its own connection, without a log of writes."""

    retired = False
    sent_log = None

    @property
    def connection(self) -> FakeLink:
        return self

    def retire(self) -> None:
        self.retired = True


class FakeConnector:
    def __init__(self, settings: ConnectorSettings) -> None:
        self.settings = settings
        self.stopped = False
        self.events = self

    def stop(self) -> None:
        self.stopped = True


class Events:
    def check_generation(self) -> None: ...


def core() -> tuple[ManagerCore, Clock, list[Any], list[dict[str, Any]]]:
    clock = Clock()
    statuses: list[Any] = []
    records: list[dict[str, Any]] = []
    telemetry = Telemetry(clock, sink=records.append)
    launched: list[Any] = []
    c = ManagerCore(
        new_connector=FakeConnector,  # type: ignore[arg-type]
        launch_connector=launched.append,
        reactor=clock,  # type: ignore[arg-type]
        my_side="a" * 16,
        settings=Settings(),
        connector_settings=lambda role, key: ConnectorSettings(role, key, "a" * 16),
        outbox=Outbox(Sent()),  # type: ignore[arg-type]
        status=StatusReporter(statuses.append, None, clock, 30.0),
        telemetry=telemetry,
        mux=Multiplexer(manager=None, reactor=clock),
        absence=PeerAbsence(clock, None, lambda: None),
    )
    c.role, c.dilation_key = LEADER, b"k" * 32
    return c, clock, launched, records


class LaunchTests(SynchronousTestCase):
    def test_prefer_direct_is_for_the_next_generation_only(self) -> None:
        """A generation launched after a direct path proved to work prefers it; the one
        after that does not. Each is launched through the facade's seam; a Leader watches
        its generation for a stall."""
        c, clock, launched, _ = core()
        c.prefer_direct = True
        first, second = Generation(1), Generation(2)
        c.launch(Events(), first)  # type: ignore[arg-type]
        c.launch(Events(), second)  # type: ignore[arg-type]
        self.assertEqual(launched, [first.connector, second.connector])
        self.assertEqual(
            [g.connector.settings.prefer_direct for g in (first, second)],  # type: ignore[union-attr]
            [True, False],
        )
        self.assertEqual(len(clock.getDelayedCalls()), 1)  # one stall watch at a time
        c.stop_connector(second)
        self.assertTrue(launched[1].stopped)
        self.assertEqual(clock.getDelayedCalls(), [])


class PathTests(SynchronousTestCase):
    def test_switch_path_retires_the_old_link(self) -> None:
        """Moving to a direct link: the old one is retired (kept for what is in flight), the
        status names the new one, the telemetry records the move and how long the old one
        carried the wormhole, and the connector looking for a better path is stopped."""
        c, clock, _, records = core()
        relayed, direct = FakeLink("->relay", False), FakeLink("->tcp", True)
        c.link, c.selected_at = relayed, clock.seconds()  # type: ignore[assignment]
        upgrader = c.upgrader = FakeConnector(None)  # type: ignore[arg-type,assignment]
        clock.advance(4)
        c.switch_path(direct)  # type: ignore[arg-type]
        self.assertIs(c.link, direct)
        self.assertTrue(relayed.retired)
        self.assertEqual(c.retired, {relayed})
        peer = c.status.current.peer_connection
        assert isinstance(peer, ConnectedPeer)
        self.assertEqual(peer.hint_description, "->tcp")
        (changed,) = [r for r in records if r["event"] == "path_changed"]
        self.assertEqual(
            (changed["from_path"], changed["to_path"], changed["after_s"]), ("relay", "direct", 4)
        )
        self.assertTrue(upgrader.stopped)
        self.assertIsNone(c.upgrader)
        c.drop_retired()
        self.assertTrue(relayed.aborted)
        self.assertEqual(c.retired, set())


class FinishTests(SynchronousTestCase):
    def test_stopped_fires_once_after_the_last_status(self) -> None:
        """finish(): whoever waits for the stop hears it once, after the status says the
        peer connection stopped; those who ask later hear it at once."""
        c, _, _, records = core()
        seen: list[Any] = []
        c.stopped.when_fired().addCallback(
            lambda _: seen.append(type(c.status.current.peer_connection))
        )
        c.finish()
        self.assertEqual(seen, [StoppedPeer])
        self.assertTrue(c.stopped.fired)
        self.assertIsNone(self.successResultOf(c.stopped.when_fired()))
        self.assertEqual([r["event"] for r in records][-1:], ["session_ended"])
