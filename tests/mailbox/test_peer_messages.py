"""Tests for txdilation.mailbox.peer_messages: the peer's DILATE-n messages checked against our
role before they reach the Manager's machine (a real core, Multiplexer and telemetry on a
Clock; the machine's inputs recorded)."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.mailbox.test_manager_core import core
from txdilation.mailbox.dilate_messages import ConnectionHints, Please
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.peer_messages import PeerMessages
from txdilation.wire.dilation_errors import OldPeerCannotDilateError
from txdilation.wire.roles import FOLLOWER, LEADER


class Inputs:
    """The machine's inputs, recorded by name (with their arguments)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.seen.append((name, args))


def messages() -> tuple[PeerMessages, Inputs, Any, list[dict[str, Any]]]:
    c, clock, _, records = core()
    inputs = Inputs()
    handler = PeerMessages(
        c,
        inputs,  # type: ignore[arg-type]
        LossRecorder(c.telemetry, clock),
        speaks=lambda version: version == "ged",
    )
    return handler, inputs, c, records


class RoleTests(SynchronousTestCase):
    def test_a_follower_acts_on_reconnect_a_leader_ignores_it(self) -> None:
        """'reconnect' reaches the machine of a Follower only; 'reconnecting' and 'link-lost'
        that of a Leader only (a Leader counts each 'reconnecting')."""
        handler, inputs, c, _ = messages()
        c.role = LEADER
        handler.reconnect()
        handler.reconnecting()
        handler.peer_lost_link(3)
        self.assertEqual(inputs.seen, [("rx_reconnecting", ()), ("rx_link_lost", (3,))])
        self.assertEqual(c.reconnectings, 1)
        inputs.seen.clear()
        c.role = FOLLOWER
        handler.reconnect()
        handler.reconnecting()
        handler.peer_lost_link(3)
        self.assertEqual(inputs.seen, [("rx_reconnect", ())])
        self.assertEqual(c.reconnectings, 1)

    def test_closing_and_hints_go_through_in_any_role(self) -> None:
        """'closing' and hints are the machine's whatever our role; hints are counted in the
        telemetry by type."""
        handler, inputs, _, records = messages()
        handler.closing()
        handler.hints(ConnectionHints([], type_counts={"direct-tcp-v1": 2}))
        self.assertEqual(inputs.seen, [("rx_closing", ()), ("rx_hints", ([],))])
        self.assertEqual(records[-1]["event"], "hints_received")


class PleaseTests(SynchronousTestCase):
    def test_a_please_sets_the_extensions_and_the_pair(self) -> None:
        """A please in a version we speak records the peer's extensions and the pair id, then
        reaches the machine with the peer's side."""
        handler, inputs, c, _ = messages()
        handler.please(Please("b" * 16, "ged", frozenset({"closing-v1"})))
        self.assertEqual(c.peer_extensions, frozenset({"closing-v1"}))
        self.assertIsNotNone(c.telemetry.pair)
        self.assertEqual(inputs.seen, [("rx_please", ("b" * 16,))])

    def test_an_unknown_version_fails_the_dilation(self) -> None:
        """A please naming a version we do not speak fails the dilation and reaches nothing."""
        handler, inputs, c, _ = messages()
        failures: list[Any] = []
        c.mux.when_dilated().addErrback(failures.append)
        handler.please(Please("b" * 16, "other", frozenset()))
        c.reactor.advance(0)  # type: ignore[attr-defined]
        self.assertEqual(inputs.seen, [])
        self.assertEqual(len(failures), 1)
        self.assertIsInstance(failures[0].value, OldPeerCannotDilateError)

    def test_our_own_side_stops_the_machine(self) -> None:
        """A please with our own side cannot choose a Leader: the machine is stopped."""
        handler, inputs, c, _ = messages()
        handler.please(Please(c.my_side, "ged", frozenset()))
        self.assertEqual(inputs.seen, [("stop", ())])
