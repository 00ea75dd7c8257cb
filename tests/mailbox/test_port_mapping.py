"""The MappingReporter (txdilation.mailbox.port_mapping): telemetry records, the status nudge, and
which links came in through the port mapping."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.mailbox.port_mapping import MappingReporter
from txdilation.portmap.mapping import MappingProtocol, PortMapping
from txdilation.telemetry import Telemetry

MAPPED = PortMapping(MappingProtocol.NAT_PMP, "192.168.1.2", 4000, "198.20.1.2", 4000, 60.0, 0.0)


class ReporterTests(SynchronousTestCase):
    """See the module docstring."""

    def setUp(self) -> None:
        self.records: list[dict[str, Any]] = []
        telemetry = Telemetry(Clock(), sink=self.records.append, log_records=False)
        self.nudges = 0
        self.reporter = MappingReporter(telemetry, self.nudge)

    def nudge(self) -> None:
        self.nudges += 1

    def test_records_and_status(self) -> None:
        """Each change is one port_mapping record (no address, no port) and a status nudge;
        the mapping held follows mapped and renewed, and goes with deleted."""
        r = self.reporter
        r.port_mapping_changed("mapped", MAPPED)
        self.assertEqual(r.current, MAPPED)
        r.port_mapping_changed("deleted", MAPPED)
        self.assertIsNone(r.current)
        r.port_mapping_changed("unavailable", None)
        fields = [(x["change"], x.get("protocol"), x.get("lifetime_s")) for x in self.records]
        self.assertEqual(
            fields,
            [
                ("mapped", "nat-pmp", 60.0),
                ("deleted", "nat-pmp", 60.0),
                ("unavailable", None, None),
            ],
        )
        self.assertFalse(any("198.20.1.2" in str(x) or 4000 in x.values() for x in self.records))
        self.assertEqual(self.nudges, 3)

    def test_carried(self) -> None:
        """Only an accepted connection from a public IPv4 address, while a mapping is held,
        came in through it: not our own dials, LAN peers, IPv6, or without a mapping."""
        r = self.reporter
        self.assertFalse(r.carried("<-tcp:198.20.7.2:5555"))
        r.port_mapping_changed("mapped", MAPPED)
        self.assertTrue(r.carried("<-tcp:198.20.7.2:5555"))
        for description in (
            "->tcp:198.20.7.2:5555",
            "<-tcp:192.168.1.9:5555",
            "<-tcp:[2001:4860::1]:5555",
            "->relay:tcp:198.20.9.2:4001",
        ):
            self.assertFalse(r.carried(description), description)
