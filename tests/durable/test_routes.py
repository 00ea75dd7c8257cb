"""Tests for txdilation.durable.routes: one route's life and what it holds, counted in the
shared Holdings (a Clock drives the drain call it may carry)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.durable.routes import Holdings, Route, RouteState


class Sink:
    def __init__(self) -> None:
        self.got: list[object] = []

    def start(self) -> None:
        self.got.append("start")

    def remote_data(self, data: bytes) -> None:
        self.got.append(data)

    def remote_close(self) -> None:
        self.got.append("close")

    def abandon(self, reason: Failure) -> None:
        self.got.append("abandon")


def drain(route: Route) -> list[bytes | None]:
    items = []
    while route.holding:
        items.append(route.take())
    return items


class RouteLifeTests(SynchronousTestCase):
    def test_pending_counts_its_open_and_what_it_holds(self) -> None:
        """A route nobody listens on counts 9 bytes plus its name for its OPEN, and its held
        DATA, in pending; a held CLOSE costs nothing."""
        holdings = Holdings()
        route = Route(3, "chat", holdings)
        self.assertIs(route.state, RouteState.PENDING)
        self.assertTrue(route.holds_all)
        self.assertEqual(holdings.pending, 9 + 4)
        route.hold(b"abc")
        route.hold(None)
        self.assertEqual(holdings, Holdings(pending=9 + 4 + 3, buffered=0))
        self.assertTrue(route.holds_close)

    def test_attach_moves_held_bytes_to_buffered(self) -> None:
        """Once attached, what it held counts as buffered until delivered, in order, the
        CLOSE last; then nothing is counted."""
        holdings = Holdings()
        route = Route(3, "chat", holdings)
        route.hold(b"ab")
        route.hold(b"c")
        route.hold(None)
        route.attach(Sink())
        self.assertIs(route.state, RouteState.ATTACHED)
        self.assertTrue(route.delivers)
        self.assertEqual(holdings, Holdings(pending=0, buffered=3))
        self.assertEqual(drain(route), [b"ab", b"c", None])
        self.assertEqual(holdings, Holdings())

    def test_local_route_is_attached_and_costs_nothing(self) -> None:
        """A route made with its delivery (a subchannel we opened) starts attached."""
        holdings = Holdings()
        route = Route(2, "", holdings, Sink())
        self.assertIs(route.state, RouteState.ATTACHED)
        self.assertEqual(holdings, Holdings())

    def test_pause_and_resume(self) -> None:
        """A paused route holds everything (counted as buffered); resume delivers again."""
        holdings = Holdings()
        route = Route(2, "", holdings, Sink())
        route.pause()
        self.assertIs(route.state, RouteState.PAUSED)
        self.assertTrue(route.holds_all)
        self.assertFalse(route.delivers)
        route.hold(b"xyz")
        self.assertEqual(holdings.buffered, 3)
        route.resume()
        self.assertIs(route.state, RouteState.ATTACHED)
        self.assertEqual(drain(route), [b"xyz"])
        self.assertEqual(holdings.buffered, 0)

    def test_discard_keeps_only_the_close(self) -> None:
        """discard drops held DATA (and its count) but keeps a held CLOSE; a discarding route
        no longer pauses."""
        holdings = Holdings()
        route = Route(2, "", holdings, Sink())
        route.pause()
        route.hold(b"1234")
        route.hold(None)
        route.discard()
        self.assertIs(route.state, RouteState.DISCARDING)
        self.assertEqual(holdings.buffered, 0)
        route.pause()
        self.assertIs(route.state, RouteState.DISCARDING)
        self.assertEqual(drain(route), [None])

    def test_forget_uncounts_and_cancels_the_drain(self) -> None:
        """forget: nothing held or counted, its drain call cancelled, from either kind of
        holding; forgetting twice changes nothing."""
        clock = Clock()
        holdings = Holdings()
        pending = Route(3, "x", holdings)
        pending.hold(b"ab")
        attached = Route(2, "", holdings, Sink())
        attached.pause()
        attached.hold(b"cd")
        attached.drain_call = clock.callLater(0, lambda: None)
        for route in (pending, attached, attached):
            route.forget()
        self.assertEqual(holdings, Holdings())
        self.assertIs(attached.state, RouteState.FORGOTTEN)
        self.assertFalse(attached.holding)
        self.assertEqual(clock.getDelayedCalls(), [])

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.sampled_from(["attach", "pause", "resume", "discard", "forget", "take"]),
                st.binary(max_size=5),
                st.none(),
            ),
            max_size=25,
        )
    )
    def test_counts_match_what_is_held(self, ops: list) -> None:
        """Any sequence: pending and buffered are exactly what the route's state says it
        holds (its OPEN too while pending), and never negative."""
        holdings = Holdings()
        route = Route(3, "ab", holdings)
        for op in ops:
            if op == "attach":
                if route.state is RouteState.PENDING:
                    route.attach(Sink())
            elif op == "take":
                if route.holding and route.delivers:
                    route.take()
            elif isinstance(op, str):
                if route.state is not RouteState.PENDING or op == "forget":
                    getattr(route, op)()
            elif route.state not in (RouteState.FORGOTTEN, RouteState.DISCARDING):
                route.hold(op)
            if route.state is RouteState.PENDING:
                expected = Holdings(pending=9 + 2 + route.held_bytes)
            elif route.state is RouteState.FORGOTTEN:
                expected = Holdings()
            else:
                expected = Holdings(buffered=route.held_bytes)
            self.assertEqual(holdings, expected)
