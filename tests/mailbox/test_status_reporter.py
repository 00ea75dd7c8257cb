"""Tests for txdilation.mailbox.status_reporter: the DilationStatus on_status_update sees, on a
Clock."""

from __future__ import annotations

import copy
import functools
import pickle

import attrs
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from wormhole._status import (
    Connected,
    ConnectedPeer,
    ConnectingPeer,
    DilationHint,
    DilationStatus,
    NoPeer,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)

from txdilation import __version__
from txdilation.mailbox.status_reporter import StatusReporter, TxdilationStatus, mailbox_up


class StatusReporterTests(SynchronousTestCase):
    def make(self) -> StatusReporter:
        self.clock = Clock()
        self.clock.advance(1000)
        self.seen: list[DilationStatus] = []
        return StatusReporter(self.seen.append, None, self.clock, ping_interval=30.0)

    def test_peer_connection_progresses_and_every_change_is_reported(self) -> None:
        """NoPeer, Connecting, Connected (expiring two ping intervals on), Reconnecting:
        each change reaches the callback with the time from the clock."""
        status = self.make()
        self.assertIsInstance(status.current.peer_connection, NoPeer)
        status.connecting(1)
        status.connected(1, "->tcp:peer")
        self.clock.advance(5)
        status.reconnecting(1)
        kinds = [type(s.peer_connection) for s in self.seen]
        self.assertEqual(kinds, [ConnectingPeer, ConnectedPeer, ReconnectingPeer])
        connected = self.seen[1].peer_connection
        assert isinstance(connected, ConnectedPeer)
        self.assertEqual((connected.connected_at, connected.expires_at), (1000, 1060))
        self.assertEqual(connected.hint_description, "->tcp:peer")

    def test_alive_pushes_expiry_back_only_when_connected(self) -> None:
        """alive() moves expires_at to two intervals after now, keeping when it connected;
        while not connected it reports nothing."""
        status = self.make()
        status.alive()
        self.assertEqual(self.seen, [])
        status.connected(1, "d")
        self.clock.advance(20)
        status.alive()
        peer = status.current.peer_connection
        assert isinstance(peer, ConnectedPeer)
        self.assertEqual((peer.connected_at, peer.expires_at), (1000, 1080))

    def test_stopped_is_final(self) -> None:
        """Once StoppedPeer, nothing changes the peer connection (other fields still do)."""
        status = self.make()
        status.connected(2, "d")
        status.stopped()
        status.connecting(3)
        status.connected(3, "d")
        self.assertIsInstance(status.current.peer_connection, StoppedPeer)
        self.assertEqual(status.current.generation, 3)

    def test_generation_never_decreases(self) -> None:
        """A lower generation reported later leaves the highest seen."""
        status = self.make()
        status.connecting(4)
        status.reconnecting(2)
        self.assertEqual(status.current.generation, 4)

    def test_hints_only_grow(self) -> None:
        """hints are the union of all hints reported."""
        status = self.make()
        a = DilationHint(url="tcp:a:1", is_direct=True)
        b = DilationHint(url="tcp:b:2", is_direct=False)
        status.hints([a])
        status.hints([b])
        status.hints([a])
        self.assertEqual(status.current.hints, {a, b})

    def test_a_raising_callback_is_logged_not_raised(self) -> None:
        """The application's exception is logged; the status still changes."""

        def boom(status: DilationStatus) -> None:
            raise ZeroDivisionError()

        status = StatusReporter(boom, None, Clock(), ping_interval=1.0)
        status.connecting(1)
        self.assertIsInstance(status.current.peer_connection, ConnectingPeer)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_mailbox_up(self) -> None:
        """mailbox_up is True only for a Connected mailbox connection; mailbox() reports it."""
        status = self.make()
        up = WormholeStatus(mailbox_connection=Connected(url="ws://m"))
        self.assertTrue(mailbox_up(up))
        self.assertFalse(mailbox_up(WormholeStatus()))
        status.mailbox(up)
        self.assertIs(self.seen[-1].mailbox, up)


class TxdilationStatusTests(SynchronousTestCase):
    """The status names txdilation, and an application written for stock cannot tell it from
    stock's ``DilationStatus`` otherwise."""

    def test_every_update_names_the_implementation(self) -> None:
        """The reporter's statuses, its first included, are TxdilationStatus instances naming
        txdilation and its version."""
        clock = Clock()
        seen: list[DilationStatus] = []
        status = StatusReporter(seen.append, None, clock, ping_interval=30.0)
        status.connecting(1)
        status.connected(1, "->tcp:peer")
        self.assertTrue(all(isinstance(s, TxdilationStatus) for s in [status.current, *seen]))
        self.assertEqual(
            {(s.implementation, s.implementation_version) for s in seen},
            {("txdilation", __version__)},
        )

    def test_indistinguishable_from_stock_for_stock_applications(self) -> None:
        """Against a stock DilationStatus with the same fields: equal both ways (and not
        unequal), the same repr, attrs fields and ``asdict``; unhashable alike (a set field);
        frozen; evolve, copy and pickle keep it equal; ``match`` and ``singledispatch`` on
        stock's class find it; a different field makes it unequal."""
        fields = {
            "mailbox": WormholeStatus(),
            "generation": 2,
            "peer_connection": ConnectingPeer(5),
            "hints": {DilationHint("127.0.0.1:1", True)},
        }
        stock, ours = DilationStatus(**fields), TxdilationStatus(**fields)
        self.assertTrue(stock == ours and ours == stock)
        self.assertFalse(stock != ours or ours != stock)
        self.assertEqual(repr(ours), repr(stock))
        self.assertEqual(attrs.fields(type(ours)), attrs.fields(DilationStatus))
        self.assertEqual(attrs.asdict(ours, recurse=False), attrs.asdict(stock, recurse=False))
        for status in (stock, ours):
            self.assertRaises(TypeError, hash, status)
            self.assertRaises(attrs.exceptions.FrozenInstanceError, setattr, status, "x", 1)
        for copied in (
            attrs.evolve(ours),
            copy.copy(ours),
            copy.deepcopy(ours),
            pickle.loads(pickle.dumps(ours)),
        ):
            self.assertEqual(copied, stock)
            self.assertEqual(copied.implementation, "txdilation")
        self.assertNotEqual(attrs.evolve(ours, generation=3), stock)
        self.assertNotEqual(ours, "not a status")
        match ours:
            case DilationStatus(generation=2):
                matched = True
            case _:
                matched = False
        self.assertTrue(matched)

        @functools.singledispatch
        def kind(status: object) -> str:
            return "other"

        @kind.register
        def _(status: DilationStatus) -> str:
            return "dilation"

        self.assertEqual(kind(ours), "dilation")
        empty = DilationStatus(mailbox=WormholeStatus(), generation=0)
        self.assertEqual(TxdilationStatus(mailbox=WormholeStatus(), generation=0), empty)
