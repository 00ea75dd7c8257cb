"""Each lost link's telemetry reason and the recovery after it (txdilation.mailbox.losses), on a
Clock with a real Telemetry collecting its records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.mailbox.losses import LossRecorder
from txdilation.telemetry import LOST_REASONS, NOTICED_BY, OTHER, Telemetry, noticed_by
from txdilation.telemetry.causes import LOST_REASON, NOTICED_BY_CAUSE
from txdilation.wire.reasons import Cause, LinkLoss


@dataclass
class Link:
    """What the recorder reads of a selected link."""

    is_direct: bool = True
    last_received_at: float | None = None


def recorder() -> tuple[LossRecorder, Clock, list[dict[str, Any]]]:
    clock = Clock()
    records: list[dict[str, Any]] = []
    telemetry = Telemetry(clock, sink=records.append)
    return LossRecorder(telemetry, clock), clock, records


def lost_reason(loss: LinkLoss) -> str:
    """The ``connection_lost`` reason a real Telemetry records for ``loss``."""
    records: list[dict[str, Any]] = []
    Telemetry(Clock(), sink=records.append).connection_lost(loss.cause)
    return str(events(records, "connection_lost")[0]["reason"])


def events(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == name]


class LostReasonTests(SynchronousTestCase):
    def test_every_cause_has_a_telemetry_reason(self) -> None:
        """Every cause a link can end with is named in the telemetry's vocabulary (never
        ``other``); how it was noticed is a value of that vocabulary too."""
        self.assertEqual(set(LOST_REASON), set(Cause))
        self.assertEqual(set(NOTICED_BY_CAUSE), set(Cause))
        for cause in Cause:
            reason = lost_reason(LinkLoss(cause, "whatever the log says"))
            self.assertIn(reason, LOST_REASONS - {OTHER})
            self.assertIn(NOTICED_BY_CAUSE[cause], NOTICED_BY)

    def test_a_cause_is_noticed_as_its_reason_says(self) -> None:
        """The cause, carried as a value to the telemetry, is recorded as noticed exactly as
        the telemetry's words for its reason say (``noticed_by``): the records are what they
        were when the cause became a string first."""
        for cause in Cause:
            records: list[dict[str, Any]] = []
            telemetry = Telemetry(Clock(), sink=records.append)
            telemetry.recovered("direct", cause, 1.0)
            self.assertEqual(
                events(records, "recovered")[0]["noticed_by"], noticed_by(LOST_REASON[cause])
            )

    def test_the_message_decides_nothing(self) -> None:
        """Two losses with one cause and different messages get the same reason, and a message
        that once decided the reason ("... silent ...", "...Error...") decides nothing now."""
        same = {
            lost_reason(LinkLoss(Cause.DROPPED, "Connection was closed cleanly.")),
            lost_reason(LinkLoss(Cause.DROPPED, "peer silent, FramingError")),
        }
        self.assertEqual(same, {"network_error"})
        self.assertEqual(lost_reason(LinkLoss(Cause.CLOSED, "x")), "closed")
        self.assertEqual(lost_reason(LinkLoss(Cause.PROTOCOL_ERROR, "x")), "protocol_error")
        self.assertEqual(lost_reason(LinkLoss(Cause.SILENT, "x")), "timeout")


class LossRecorderTests(SynchronousTestCase):
    def test_loss_then_recovery(self) -> None:
        """A loss is one connection_lost record with the cause's reason; the next selection is
        one recovered record: the path that died, how it was noticed, and the gap from the last
        record received on it."""
        losses, clock, records = recorder()
        clock.advance(10)
        link = Link(is_direct=False, last_received_at=7.0)
        losses.lost(link, LinkLoss(Cause.PROBE_UNANSWERED, "probe unanswered for 1.5s"))
        self.assertEqual(
            [r["reason"] for r in events(records, "connection_lost")], ["probe_unanswered"]
        )
        clock.advance(2)
        losses.selected()
        (recovered,) = events(records, "recovered")
        self.assertEqual(
            (recovered["died"], recovered["noticed_by"], recovered["gap_s"]),
            ("relay", "probe", 5.0),
        )
        losses.selected()  # a second selection without a loss in between is no recovery
        self.assertEqual(len(events(records, "recovered")), 1)

    def test_no_record_received_counts_from_the_loss(self) -> None:
        """A link that never received a record: the gap counts from its loss."""
        losses, clock, records = recorder()
        clock.advance(3)
        losses.lost(Link(), LinkLoss(Cause.CLOSED, "Connection was closed cleanly."))
        clock.advance(0.5)
        losses.selected()
        (recovered,) = events(records, "recovered")
        self.assertEqual((recovered["noticed_by"], recovered["gap_s"]), ("connection_closed", 0.5))

    def test_first_selection_is_no_recovery(self) -> None:
        """Selecting a first link records nothing here."""
        losses, _clock, records = recorder()
        losses.selected()
        self.assertEqual(records, [])

    def test_the_link_the_leader_asked_to_leave_is_a_peer_report(self) -> None:
        """A link the Leader asked us to leave is reported as peer_report whatever its own end
        said (here its transport closed first), once: the next loss has its own reason."""
        losses, _clock, records = recorder()
        asked, later = Link(), Link()
        losses.leader_asked_to_leave(asked)
        losses.lost(asked, LinkLoss(Cause.DROPPED, "Connection was aborted"))
        losses.lost(later, LinkLoss(Cause.DROPPED, "Connection was aborted"))
        self.assertEqual(
            [r["reason"] for r in events(records, "connection_lost")],
            ["peer_report", "network_error"],
        )
