"""Tests for txdilation.mailbox.dilator: what the Dilator holds until dilate() builds the one
Manager, and how it stops (a MemoryReactorClock, a recording mailbox and terminator)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import wormhole
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import DilationStatus, WormholeStatus

from tests.mailbox.test_manager import LOOPBACK, MailboxPipe, RecordingTerminator
from txdilation import __version__
from txdilation._stock.manager import Dilator as StockFacingDilator
from txdilation._stock.manager import Manager as StockFacingManager
from txdilation.mailbox.dilator import Dilator
from txdilation.mailbox.manager import Manager
from txdilation.settings import Settings


class RecordingManager(Manager):
    """The Manager a RecordingDilator builds: records what reaches it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls: list[str] = []
        super().__init__(*args, **kwargs)

    def got_dilation_key(self, key: bytes) -> None:
        self.calls.append("key")
        super().got_dilation_key(key)

    def got_wormhole_versions(self, their_versions: dict[str, Any]) -> None:
        self.calls.append("versions")
        super().got_wormhole_versions(their_versions)

    def received_dilation_message(self, plaintext: bytes) -> None:
        self.calls.append(json.loads(plaintext)["type"])
        super().received_dilation_message(plaintext)


class RecordingDilator(Dilator):
    manager_type = RecordingManager


class FaultyManager(RecordingManager):
    """A Manager with a fault: a 'reconnect' message, or the key, makes it raise."""

    def got_dilation_key(self, key: bytes) -> None:
        super().got_dilation_key(key)
        raise RuntimeError("a fault with the key")

    def received_dilation_message(self, plaintext: bytes) -> None:
        super().received_dilation_message(plaintext)
        if self.calls[-1] == "reconnect":
            raise RuntimeError("a fault with 'reconnect'")

    def stop(self) -> None:
        raise RuntimeError("a fault with the stop")


class FaultyDilator(Dilator):
    manager_type = FaultyManager


class FaultyStockFacingManager(StockFacingManager):
    """The stock-facing Manager with a fault in following the mailbox status."""

    def mailbox_status(self, status: WormholeStatus) -> None:
        raise RuntimeError("a fault with the mailbox status")


class FaultyStockFacingDilator(StockFacingDilator):
    manager_type = FaultyStockFacingManager


def dilator() -> tuple[RecordingDilator, MailboxPipe, RecordingTerminator]:
    d = RecordingDilator(MemoryReactorClock(), None, None, ["ged"])
    pipe, terminator = MailboxPipe(), RecordingTerminator()
    d.wire(pipe, terminator)
    return d, pipe, terminator


class DilatorTests(SynchronousTestCase):
    def test_what_came_before_dilate_is_handed_over_in_order(self) -> None:
        """The key, the versions and the peer's messages that came before dilate() reach the
        Manager it builds, in that order (messages in the order they came)."""
        d, pipe, _ = dilator()
        d.got_key(b"k" * 32)
        d.got_wormhole_versions({"can-dilate": ["ged"]})
        d.received_dilate(b'{"type": "please", "side": "ffffffffffffffff"}')
        d.received_dilate(b'{"type": "connection-hints", "hints": []}')
        d.dilate(settings=Settings(network=LOOPBACK), side="0000000000000000")
        manager = d._manager
        assert isinstance(manager, RecordingManager)
        self.assertEqual(manager.calls, ["key", "versions", "please", "connection-hints"])
        self.assertEqual([m["type"] for _, m in pipe.sent][:1], ["please"])
        d.received_dilate(b'{"type": "connection-hints", "hints": []}')
        self.assertEqual(manager.calls[-1], "connection-hints")
        manager.stop()

    def test_dilate_names_the_implementation_in_its_log_and_status(self) -> None:
        """dilate() logs one line naming txdilation, its version and stock's it stands in
        for; the first status the application's ``on_status_update`` gets names them too
        (``implementation``, ``implementation_version``) while equal, field for field and in
        its repr, to stock's own ``DilationStatus``."""
        d, _, _ = dilator()
        seen: list[DilationStatus] = []
        d.got_key(b"k" * 32)
        d.got_wormhole_versions({"can-dilate": ["ged"]})
        with capturedLogs() as events:
            d.dilate(
                settings=Settings(network=LOOPBACK),
                side="0000000000000000",
                status_update=seen.append,
            )
            d.received_dilate(b'{"type": "please", "side": "ffffffffffffffff"}')
        lines = [formatEvent(e) for e in events if "dilating through" in formatEvent(e)]
        self.assertEqual(
            lines,
            [
                f"dilating through txdilation {__version__} (in place of magic-wormhole "
                f"{wormhole.__version__}'s Dilation)"
            ],
        )
        self.assertTrue(seen, "no status update")
        first = seen[0]
        self.assertEqual(
            (first.implementation, first.implementation_version), ("txdilation", __version__)
        )
        as_stock = DilationStatus(**attrs.asdict(first, recurse=False))
        self.assertEqual(first, as_stock)
        self.assertEqual(as_stock, first)
        self.assertEqual(repr(first), repr(as_stock))
        self.assertIsInstance(first, DilationStatus)
        self.assertEqual(attrs.evolve(first, generation=7).implementation, "txdilation")
        d._manager.stop()  # type: ignore[union-attr]

    def test_a_fault_of_ours_never_reaches_the_boss(self) -> None:
        """stock's Boss calls the Dilator while it handles a mailbox message and closes the
        whole wormhole on an exception: a Manager that raises (on a message, on the key,
        before or after dilate()) has its failure logged, that one thing dropped, and the
        messages after it handled."""
        d = FaultyDilator(MemoryReactorClock(), None, None, ["ged"])
        d.wire(MailboxPipe(), RecordingTerminator())
        d.received_dilate(b'{"type": "reconnect"}')
        d.received_dilate(b'{"type": "please", "side": "ffffffffffffffff"}')
        d.got_key(b"k" * 32)
        d.dilate(settings=Settings(network=LOOPBACK), side="0000000000000000")
        manager = d._manager
        assert isinstance(manager, FaultyManager)
        self.assertEqual(manager.calls, ["key", "reconnect", "please"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 2)
        d.received_dilate(b'{"type": "reconnect"}')
        d.got_key(b"k" * 32)
        d.received_dilate(b'{"type": "connection-hints", "hints": []}')
        self.assertEqual(manager.calls[3:], ["reconnect", "key", "connection-hints"])
        errors = self.flushLoggedErrors(RuntimeError)
        self.assertEqual(
            [str(e.value) for e in errors], ["a fault with 'reconnect'", "a fault with the key"]
        )

    def test_a_fault_in_stopping_still_lets_the_wormhole_close(self) -> None:
        """The Terminator calls stop() once the mailbox closed (inside stock's handling of it)
        and waits for ``stoppedD``: a Manager whose stop raises has the failure logged and the
        terminator told at once, so the wormhole's close completes; a second stop() changes
        nothing."""
        d = FaultyDilator(MemoryReactorClock(), None, None, ["ged"])
        terminator = RecordingTerminator()
        d.wire(MailboxPipe(), terminator)
        d.dilate(settings=Settings(network=LOOPBACK))
        d.stop()
        self.successResultOf(terminator.stopped)
        d.stop()
        errors = self.flushLoggedErrors(RuntimeError)
        self.assertEqual([str(e.value) for e in errors], ["a fault with the stop"])

    def test_the_mailbox_status_fault_never_reaches_the_boss(self) -> None:
        """stock's Boss tells the stock-facing Manager of every mailbox status change
        (``_D._manager._wormhole_status``), often while handling a mailbox message: a fault
        there is logged, not raised into the Boss."""
        d = FaultyStockFacingDilator(MemoryReactorClock(), None, None, ["ged"])
        d.wire(MailboxPipe(), RecordingTerminator())
        d.dilate(settings=Settings(network=LOOPBACK))
        manager: Any = d._manager
        manager._wormhole_status(WormholeStatus())
        errors = self.flushLoggedErrors(RuntimeError)
        self.assertEqual([str(e.value) for e in errors], ["a fault with the mailbox status"])
        manager.stop()

    def test_stop_before_dilate(self) -> None:
        """Stopped before dilate(): the terminator hears so at once, and a later dilate()
        builds a Manager that is stopped already."""
        d, _, terminator = dilator()
        d.stop()
        self.successResultOf(terminator.stopped)
        d.dilate(settings=Settings(network=LOOPBACK))
        manager = d._manager
        assert manager is not None
        self.successResultOf(manager.when_stopped())

    def test_stop_after_dilate_waits_for_the_manager(self) -> None:
        """Stopped after dilate(): the terminator hears once the Manager stopped; a second
        stop() changes nothing."""
        d, _, terminator = dilator()
        d.dilate(settings=Settings(network=LOOPBACK))
        d.stop()
        d.stop()
        self.successResultOf(terminator.stopped)
