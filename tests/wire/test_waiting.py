"""Tests for txdilation.wire.waiting: the one way to wait (OneShot, Waiters, pass_to)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from txdilation.wire.waiting import OneShot, Waiters, fire_unless_called, pass_to


class Boom(Exception):
    pass


class OneShotTests(SynchronousTestCase):
    def test_waiters_hear_the_outcome(self) -> None:
        """Everyone who asked before the outcome hears it, in the order they asked."""
        shot: OneShot[str] = OneShot()
        heard: list[tuple[int, str]] = []
        for i in range(3):
            shot.when_fired().addCallback(lambda r, i=i: heard.append((i, r)))
        self.assertEqual(heard, [])
        self.assertFalse(shot.fired)
        shot.fire("done")
        self.assertEqual(heard, [(0, "done"), (1, "done"), (2, "done")])
        self.assertTrue(shot.fired)

    def test_asking_afterwards_answers_at_once(self) -> None:
        """Once fired, when_fired() gives an already-fired Deferred with the outcome."""
        shot: OneShot[int] = OneShot()
        shot.fire(7)
        self.assertEqual(self.successResultOf(shot.when_fired()), 7)
        self.assertEqual(self.successResultOf(shot.when_fired()), 7)

    def test_first_outcome_stands(self) -> None:
        """A later fire(), a value or a failure, changes nothing."""
        shot: OneShot[int] = OneShot()
        early = shot.when_fired()
        shot.fire(1)
        shot.fire(2)
        shot.fire(Failure(Boom()))
        self.assertEqual(self.successResultOf(early), 1)
        self.assertEqual(self.successResultOf(shot.when_fired()), 1)

    def test_failure(self) -> None:
        """A Failure outcome errbacks every waiter, before and after."""
        shot: OneShot[None] = OneShot()
        early = shot.when_fired()
        shot.fire(Failure(Boom()))
        self.failureResultOf(early, Boom)
        self.failureResultOf(shot.when_fired(), Boom)

    def test_cancel_while_waiting(self) -> None:
        """A waiter cancelled before the outcome errbacks with CancelledError and is not
        fired again; the others still hear it."""
        shot: OneShot[int] = OneShot()
        cancelled, kept = shot.when_fired(), shot.when_fired()
        cancelled.cancel()
        self.failureResultOf(cancelled, CancelledError)
        shot.fire(3)
        self.assertEqual(self.successResultOf(kept), 3)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.sampled_from(["ask", "fire", "fail"]), max_size=20))
    def test_any_order(self, ops: list[str]) -> None:
        """Any order of asks and outcomes: each waiter fires exactly once once the outcome is
        known, with the first outcome, and never before."""
        shot: OneShot[str] = OneShot()
        asked: list[list[object]] = []
        outcome: str | None = None
        for op in ops:
            if op == "ask":
                results: list[object] = []
                shot.when_fired().addBoth(results.append)
                asked.append(results)
            elif op == "fire":
                shot.fire("ok")
                outcome = outcome or "ok"
            elif op == "fail":
                shot.fire(Failure(Boom()))
                outcome = outcome or "failed"
        for results in asked:
            if outcome is None:
                self.assertEqual(results, [])
                continue
            self.assertEqual(len(results), 1)
            if outcome == "ok":
                self.assertEqual(results[0], "ok")
            else:
                result = results[0]
                assert isinstance(result, Failure)
                self.assertTrue(result.check(Boom))


class WaitersTests(SynchronousTestCase):
    def test_fire_releases_those_waiting_now(self) -> None:
        """fire() fires every waiter so far; one asked for afterwards waits for the next."""
        waiters: Waiters[int] = Waiters()
        first, second = waiters.wait(), waiters.wait()
        self.assertEqual(len(waiters), 2)
        waiters.fire(1)
        self.assertEqual(self.successResultOf(first), 1)
        self.assertEqual(self.successResultOf(second), 1)
        later = waiters.wait()
        self.assertNoResult(later)
        waiters.fire(2)
        self.assertEqual(self.successResultOf(later), 2)
        self.assertEqual(len(waiters), 0)

    def test_cancelled_waiter_is_forgotten(self) -> None:
        """A cancelled waiter leaves the list; fire() does not touch it."""
        waiters: Waiters[None] = Waiters()
        d = waiters.wait()
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(len(waiters), 0)
        waiters.fire(None)

    def test_clear_forgets_without_firing(self) -> None:
        """clear() drops every waiter unfired; one asked for afterwards hears the next fire."""
        waiters: Waiters[int] = Waiters()
        dropped = waiters.wait()
        waiters.clear()
        self.assertEqual(len(waiters), 0)
        later = waiters.wait()
        waiters.fire(1)
        self.assertNoResult(dropped)
        self.assertEqual(self.successResultOf(later), 1)

    def test_waiter_asked_for_inside_fire_waits(self) -> None:
        """A callback that asks again while fire() runs gets a new waiter for the next fire."""
        waiters: Waiters[int] = Waiters()
        again: list[Deferred[int]] = []
        waiters.wait().addCallback(lambda _: again.append(waiters.wait()))
        waiters.fire(1)
        self.assertNoResult(again[0])
        waiters.fire(2)
        self.assertEqual(self.successResultOf(again[0]), 2)


class FireUnlessCalledTests(SynchronousTestCase):
    def test_fires_once(self) -> None:
        """The first result fires the Deferred; a later one, value or failure, is dropped."""
        d: Deferred[int] = Deferred()
        fire_unless_called(d, 1)
        fire_unless_called(d, 2)
        fire_unless_called(d, Failure(Boom()))
        self.assertEqual(self.successResultOf(d), 1)

    def test_after_cancel(self) -> None:
        """A cancelled Deferred is left alone (no AlreadyCalledError)."""
        d: Deferred[int] = Deferred()
        d.cancel()
        fire_unless_called(d, 1)
        self.failureResultOf(d, CancelledError)

    def test_pass_to(self) -> None:
        """pass_to(d) fires d with a success and passes it on; a failure is given to d and
        handled (None goes on); once d fired, nothing happens to it."""
        target: Deferred[object] = Deferred()
        source: Deferred[object] = Deferred()
        source.addBoth(pass_to(target))
        source.callback("x")
        self.assertEqual(self.successResultOf(target), "x")
        self.assertEqual(self.successResultOf(source), "x")

        target2: Deferred[object] = Deferred()
        failing: Deferred[object] = Deferred()
        failing.addBoth(pass_to(target2))
        failing.errback(Boom())
        self.failureResultOf(target2, Boom)
        self.assertIsNone(self.successResultOf(failing))

        fired: Deferred[object] = Deferred()
        seen: list[object] = []
        fired.addCallback(seen.append)
        fired.callback("x")
        late: Deferred[object] = Deferred()
        late.addBoth(pass_to(fired))
        late.callback("y")
        self.assertEqual(seen, ["x"])
