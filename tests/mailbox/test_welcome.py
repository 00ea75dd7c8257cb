"""The mailbox welcome's ``your-address`` on its way to the connector: stock's Boss hands each
welcome to the stock-facing Dilator (which wraps the Boss's ``rx_welcome``), the Dilator to its
Manager, the Manager to each generation's ConnectorSettings."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Cooperator
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from txdilation._stock.manager import Dilator as StockFacingDilator
from txdilation.mailbox.dilator import Dilator
from txdilation.mailbox.manager import Manager
from txdilation.wire.roles import LEADER

from .test_manager import MailboxPipe, RecordingTerminator

seen: list[tuple[str, ...]] = []


class RecordingManager(Manager):
    def public_addresses_seen(self, addresses: tuple[str, ...]) -> None:
        seen.append(addresses)
        super().public_addresses_seen(addresses)


class RecordingDilator(Dilator):
    manager_type = RecordingManager


class FakeBoss:
    """What the stock-facing Dilator needs of stock's Boss: ``rx_welcome``."""

    def __init__(self) -> None:
        self.welcomes: list[dict[str, Any]] = []

    def rx_welcome(self, welcome: dict[str, Any]) -> None:
        self.welcomes.append(welcome)


def welcome(address: str) -> dict[str, Any]:
    return {"motd": "hello", "your-address": {"ipv4": address, "port": 5000}}


class WelcomeTests(SynchronousTestCase):
    def setUp(self) -> None:
        seen.clear()

    def test_before_and_after_dilate(self) -> None:
        """A welcome before dilate() is kept for the Manager; a later one (a new mailbox
        connection) replaces it; each generation's ConnectorSettings carry the latest."""
        d = RecordingDilator(MemoryReactorClock(), None, Cooperator(), ["ged"])
        d.wire(MailboxPipe(), RecordingTerminator())
        d.got_welcome(welcome("203.0.113.7"))
        d.dilate(side="a" * 16)
        d.got_welcome(welcome("203.0.113.8"))
        self.assertEqual(seen, [("203.0.113.7",), ("203.0.113.8",)])
        manager: Any = d._manager
        settings = manager._core.connector_settings(LEADER, b"k" * 32)
        self.assertEqual(settings.public_addresses, ("203.0.113.8",))

    def test_stock_boss_welcome_is_seen(self) -> None:
        """The stock-facing Dilator sees each welcome stock's Boss receives, and the Boss
        still gets it (once, unchanged); wiring twice does not wrap twice."""
        boss = FakeBoss()
        terminator = RecordingTerminator()
        terminator._B = boss  # type: ignore[attr-defined]
        d = StockFacingDilator(MemoryReactorClock(), None, Cooperator(), ["ged"])
        d.wire(MailboxPipe(), terminator)
        d._watch_welcome(boss)
        boss.rx_welcome(welcome("203.0.113.9"))
        self.assertEqual(boss.welcomes, [welcome("203.0.113.9")])
        self.assertEqual(d._public_addresses, ("203.0.113.9",))
        boss.rx_welcome({"error": "go away"})  # no your-address: none, and no exception
        self.assertEqual(d._public_addresses, ())
        self.assertEqual(len(boss.welcomes), 2)
