"""Tests for txdilation.selection.attempts: each attempt's outcome and durations, from what the
Connector reports and the typed reason a connection ended with, on a Clock."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.error import TimeoutError as ConnectTimeoutError
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.attempts import LOST_RACE_WINDOW, AttemptLog
from txdilation.telemetry import Telemetry
from txdilation.wire.reasons import Cause, LinkLoss


class AttemptLogTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.records: list[dict[str, Any]] = []
        telemetry = Telemetry(self.clock, sink=self.records.append)
        telemetry.set_generation(3)
        self.log = AttemptLog(telemetry, self.clock)

    def ended(self) -> list[tuple[str, Any, Any]]:
        return [
            (r["outcome"], r.get("connect_s"), r.get("handshake_s"))
            for r in self.records
            if r["event"] == "attempt_ended"
        ]

    def test_selected_with_durations(self) -> None:
        """An outbound attempt: started, connected 1 s later, ready 2 s after that,
        selected: one start and one end record, with both durations and its generation."""
        attempt = self.log.started("direct-tcp-v1", "outbound")
        self.clock.advance(1)
        self.log.connected(attempt)
        self.clock.advance(2)
        self.log.ready(attempt)
        self.log.selected(attempt)
        self.log.selected(attempt)
        self.assertEqual(self.ended(), [("selected", 1.0, 2.0)])
        starts = [r for r in self.records if r["event"] == "attempt_started"]
        self.assertEqual([r["generation"] for r in starts + self.records[-1:]], [3, 3])

    def test_inbound_is_connected_at_once(self) -> None:
        """A connection our listener accepted has a zero connect time."""
        attempt = self.log.started("direct-tcp-v1", "inbound")
        self.clock.advance(0.5)
        self.log.ready(attempt)
        self.log.selected(attempt)
        self.assertEqual(self.ended(), [("selected", 0.0, 0.5)])

    def test_dial_failures(self) -> None:
        """A dial cancelled, timed out or refused before connecting: cancelled, timeout,
        connect_failed; a failure after the connection was made is left to its own end."""
        for error, outcome in (
            (CancelledError(), "cancelled"),
            (ConnectTimeoutError(), "timeout"),
            (ConnectionRefusedError(), "connect_failed"),
        ):
            attempt = self.log.started("relay-v1", "outbound")
            self.log.connect_failed(attempt, Failure(error))
            self.assertEqual(self.ended()[-1][0], outcome)
        connected = self.log.started("relay-v1", "outbound")
        self.log.connected(connected)
        self.log.connect_failed(connected, Failure(ConnectionRefusedError()))
        self.assertEqual(len(self.ended()), 3)

    def test_the_cause_decides(self) -> None:
        """Not selected in time: timeout; a protocol error: handshake_failed, whatever the
        message says."""
        slow = self.log.started("direct-tcp-v1", "outbound")
        self.log.closed(slow, LinkLoss(Cause.HANDSHAKE_TIMEOUT, "anything"))
        broken = self.log.started("direct-tcp-v1", "outbound")
        self.log.closed(broken, LinkLoss(Cause.PROTOCOL_ERROR, "silent timeout Error"))
        self.assertEqual([e[0] for e in self.ended()], ["timeout", "handshake_failed"])

    def test_closed_during_the_race_is_held_until_it_ends(self) -> None:
        """A candidate the peer closed while the race was on lost the race if the race ended
        within LOST_RACE_WINDOW (superseded if it was ready), else it failed."""
        lost = self.log.started("direct-tcp-v1", "outbound")
        self.log.ready(lost)
        self.log.closed(lost, LinkLoss(Cause.CLOSED, "closed"))
        late = self.log.started("direct-tcp-v1", "outbound")
        self.clock.advance(1)
        self.log.closed(late, LinkLoss(Cause.DROPPED, "lost"))
        self.assertEqual(self.ended(), [])
        self.clock.advance(LOST_RACE_WINDOW + 0.5)
        self.log.race_over()
        outcomes = [e[0] for e in self.ended()]
        self.assertEqual(outcomes, ["other", "handshake_failed"])

        fresh = AttemptLog(Telemetry(self.clock, sink=self.records.append), self.clock)
        quick = fresh.started("direct-tcp-v1", "outbound")
        fresh.ready(quick)
        fresh.closed(quick, LinkLoss(Cause.CLOSED, "closed"))
        fresh.race_over()
        self.assertEqual(self.ended()[-1][0], "superseded")

    def test_race_over_ends_the_abandoned_and_later_closes(self) -> None:
        """The race's end ends the attempts still open (superseded if ready, else cancelled);
        a close after it ends as having lost the race."""
        ready = self.log.started("direct-tcp-v1", "outbound")
        self.log.ready(ready)
        waiting = self.log.started("direct-tcp-v1", "outbound")
        later = self.log.started("relay-v1", "outbound")
        self.log.race_over([ready, waiting])
        self.log.closed(later, LinkLoss(Cause.PROTOCOL_ERROR, "x"))
        self.log.closed(ready, LinkLoss(Cause.CLOSED, "x"))
        self.assertEqual([e[0] for e in self.ended()], ["superseded", "cancelled", "cancelled"])
