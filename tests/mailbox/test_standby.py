"""The StandbyKeeper (txdilation.mailbox.standby) on a Clock: when a standby is made, held,
handed over, made again and dropped."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from txdilation.mailbox.standby import MAKE_TIMEOUT, RETRY_DELAYS, StandbyKeeper
from txdilation.selection.hints import DirectTCPV1Hint, RelayV1Hint


class Detector:
    standby_ready = False


class Link:
    """What the keeper uses of a SelectedLink."""

    def __init__(self, name: str) -> None:
        self.description = name
        self.dead_path = Detector()
        self.aborted = False
        self.network_changes = 0
        self.address_gone = False

    def abort(self) -> None:
        self.aborted = True

    def network_changed(self) -> bool:
        self.network_changes += 1
        return self.address_gone


class Maker:
    """A standby connector: only ``events.stop()`` is used."""

    def __init__(self, relays: list[Any]) -> None:
        self.relays = relays
        self.stopped = False
        self.events = self

    def stop(self) -> None:
        self.stopped = True


class KeeperTests(SynchronousTestCase):
    """See the module docstring."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.makers: list[Maker] = []

        def make(relays: list[Any]) -> Any:
            self.makers.append(Maker(relays))
            return self.makers[-1]

        self.keeper = StandbyKeeper(self.clock, make)
        self.direct = Link("->tcp:10.0.0.2:4000")
        relay = RelayV1Hint((DirectTCPV1Hint("10.9.0.2", 4001, 0.0),))
        self.hints = [DirectTCPV1Hint("10.0.0.2", 4000, 0.0), relay]

    def test_made_once_and_held(self) -> None:
        """A direct link wants a standby: one connector, given the peer's relay hints only;
        once it selected one, the link's dead-path detector knows a standby is ready."""
        k = self.keeper
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        self.assertEqual(len(self.makers), 1)
        self.assertEqual(self.makers[0].relays, self.hints[1:])
        standby = Link("->relay:tcp:10.9.0.2:4001")
        k.got(standby)  # type: ignore[arg-type]
        self.assertTrue(k.ready)
        self.assertTrue(self.direct.dead_path.standby_ready)

    def test_taken(self) -> None:
        """take hands the standby over and forgets it; nothing more is made for that link."""
        k = self.keeper
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        standby = Link("relay")
        k.got(standby)  # type: ignore[arg-type]
        self.assertIs(k.take(), standby)
        self.assertFalse(k.ready)
        self.clock.advance(100)
        self.assertEqual(len(self.makers), 1)
        self.assertFalse(standby.aborted)

    def test_lost_standby_made_again_later(self) -> None:
        """A standby that ends is made again after RETRY_DELAYS (doubling while they keep
        ending); meanwhile the link's detector is back to its patient timeouts."""
        k = self.keeper
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        first = Link("relay 1")
        k.got(first)  # type: ignore[arg-type]
        self.assertTrue(k.lost(first))  # type: ignore[arg-type]
        self.assertFalse(self.direct.dead_path.standby_ready)
        self.clock.advance(RETRY_DELAYS[0] - 0.1)
        self.assertEqual(len(self.makers), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(self.makers), 2)
        self.assertFalse(k.lost(Link("another")))  # type: ignore[arg-type]

    def test_maker_timeout(self) -> None:
        """A connector that selects nothing within MAKE_TIMEOUT is stopped and tried again."""
        self.keeper.want(self.direct, self.hints)  # type: ignore[arg-type]
        self.clock.advance(MAKE_TIMEOUT)
        self.assertTrue(self.makers[0].stopped)
        self.clock.advance(RETRY_DELAYS[0])
        self.assertEqual(len(self.makers), 2)

    def test_drop(self) -> None:
        """drop aborts the standby and stops its maker; a standby arriving after is aborted."""
        k = self.keeper
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        k.drop()
        self.assertTrue(self.makers[0].stopped)
        late = Link("late")
        k.got(late)  # type: ignore[arg-type]
        self.assertTrue(late.aborted)
        self.assertFalse(k.ready)
        self.clock.advance(100)
        self.assertEqual(len(self.makers), 1)

    def test_network_change(self) -> None:
        """A network change is passed to the standby; one whose address went is given up at
        once (the link is never moved to it)."""
        k = self.keeper
        k.want(self.direct, self.hints)  # type: ignore[arg-type]
        standby = Link("relay")
        k.got(standby)  # type: ignore[arg-type]
        k.network_changed()
        self.assertEqual(standby.network_changes, 1)
        self.assertTrue(k.ready)
        standby.address_gone = True
        k.network_changed()
        self.assertFalse(k.ready)
        self.assertFalse(self.direct.dead_path.standby_ready)
