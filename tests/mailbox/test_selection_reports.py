"""Tests for txdilation.mailbox.selection_reports: what connectors and links report to the
Manager (a real core, Multiplexer, telemetry and SelectedLinks on a Clock over fake
connections; the machine's inputs recorded)."""

from __future__ import annotations

from typing import Any, NamedTuple

from twisted.trial.unittest import SynchronousTestCase

from tests.mailbox.test_manager_core import core
from tests.mailbox.test_peer_messages import Inputs
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.selection_reports import PROVEN_BACKOFF, ConnectorReports, LinkReports
from txdilation.path.liveness import PingTracker
from txdilation.testing.fakes import FakeDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss


class Reports(NamedTuple):
    connectors: ConnectorReports
    links: LinkReports
    inputs: Inputs
    core: Any
    records: list[dict[str, Any]]


def reports() -> Reports:
    """ConnectorReports over a core whose links report to a LinkReports."""
    c, clock, _, records = core()
    inputs = Inputs()
    losses = LossRecorder(c.telemetry, clock)
    links = LinkReports(c, inputs, losses)  # type: ignore[arg-type]
    connector_reports = ConnectorReports(
        c,
        inputs,  # type: ignore[arg-type]
        losses,
        links=links,
        pings=PingTracker(clock),
        clock=clock,
        ping_interval=30.0,
        traffic_interval=None,
        via_mapping=lambda description: False,
    )
    return Reports(connector_reports, links, inputs, c, records)


class ConnectorReportTests(SynchronousTestCase):
    def test_a_selected_link_is_recorded_then_made_the_machines(self) -> None:
        """The selected link is one connection_selected record (its kind, never its address)
        and the machine's connection_made input."""
        r, _, inputs, _, records = reports()
        link = r.link_for(FakeDilatedConnection("->tcp:192.0.2.1:4001", is_direct=False))
        r.connector_connection_made(link, candidates=2)
        self.assertEqual(inputs.seen, [("connection_made", (link,))])
        selected = [x for x in records if x["event"] == "connection_selected"]
        self.assertEqual(len(selected), 1)
        self.assertNotIn("192.0.2.1", repr(selected))

    def test_a_proven_direct_path_starts_one_generation_per_backoff(self) -> None:
        """(Leader, stock peer, relayed link) a direct path proven starts a new generation at
        most once per PROVEN_BACKOFF seconds; with a direct link nothing."""
        r, _, inputs, c, _ = reports()
        c.link = r.link_for(FakeDilatedConnection("relay", is_direct=False))
        r.direct_path_proven()
        self.assertEqual(inputs.seen, [("direct_proven", ())])
        c.direct_proven_at = c.reactor.seconds()
        r.direct_path_proven()
        self.assertEqual(len(inputs.seen), 1)
        c.reactor.advance(PROVEN_BACKOFF)
        r.direct_path_proven()
        self.assertEqual(len(inputs.seen), 2)
        c.link = r.link_for(FakeDilatedConnection("direct", is_direct=True))
        c.reactor.advance(PROVEN_BACKOFF)
        r.direct_path_proven()
        self.assertEqual(len(inputs.seen), 2)


class LinkReportTests(SynchronousTestCase):
    def test_losing_the_selected_link_is_the_machines_connection_lost(self) -> None:
        """The selected link's loss forgets it and reaches the machine; the loss of a link
        that is neither selected nor the standby reaches nothing."""
        r, links, inputs, c, _ = reports()
        selected = r.link_for(FakeDilatedConnection("selected"))
        other = r.link_for(FakeDilatedConnection("other"))
        c.link = selected
        c.retired.add(other)
        loss = LinkLoss(Cause.DROPPED, "dropped")
        links.link_lost(other, loss)
        self.assertEqual((inputs.seen, c.retired), ([], set()))
        links.link_lost(selected, loss)
        self.assertIsNone(c.link)
        self.assertEqual(inputs.seen, [("connection_lost", ())])

    def test_only_the_selected_link_falling_silent_reaches_the_machine(self) -> None:
        """link_silent of the selected link is the machine's input; of another, nothing."""
        r, links, inputs, c, _ = reports()
        c.link = r.link_for(FakeDilatedConnection("selected"))
        links.link_silent(r.link_for(FakeDilatedConnection("other")))
        self.assertEqual(inputs.seen, [])
        links.link_silent(c.link)
        self.assertEqual(inputs.seen, [("link_silent", ())])
