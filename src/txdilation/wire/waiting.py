"""Shared by every layer: the one way to wait for something ("wait until X, then tell everyone
who asked", as txtorcon's ``SingleObserver`` and magic-wormhole's ``OneShotObserver`` do).

:class:`OneShot`: something that happens once (``when_fired()``, fired at once if known; the
first outcome stands). :class:`Waiters`: something that can happen again (``wait()`` fires at
the next :meth:`Waiters.fire`). :func:`fire_unless_called` / :func:`pass_to`: fire a Deferred
unless it fired already (cancelled, or another outcome came first).

Invariants: a waiter fires at most once, with the result given (an errback for a
``Failure``); a waiter that is cancelled while it waits is forgotten (it errbacks with
``CancelledError``, as any Deferred without a canceller's result); nothing here schedules
anything: a waiter fires inside ``fire()``, so a caller that must not run its askers' callbacks
inside its own work fires after it (or delivers through a later reactor turn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

__all__ = ["OneShot", "Waiters", "fire_unless_called", "pass_to"]

T = TypeVar("T")


def fire_unless_called(d: Deferred[T], result: T | Failure) -> None:
    """Fire ``d`` with ``result`` (errback for a Failure) unless it fired already."""
    if d.called:
        return
    if isinstance(result, Failure):
        d.errback(result)
    else:
        d.callback(result)


def pass_to(d: Deferred[Any]) -> Callable[[object], object]:
    """A callback (for ``addBoth``) that fires ``d`` with the result unless it fired already,
    and passes a success on (a failure given to ``d`` is handled there: None goes on)."""

    def pass_on(result: object) -> object:
        fire_unless_called(d, result)
        return None if isinstance(result, Failure) else result

    return pass_on


class Waiters(Generic[T]):
    """Deferreds waiting for the next time something happens (it may happen again)."""

    def __init__(self) -> None:
        self._waiting: list[Deferred[T]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self) -> Deferred[T]:
        """A Deferred fired by the next :meth:`fire`; cancelling it forgets it."""
        d: Deferred[T] = Deferred(self._forget)
        self._waiting.append(d)
        return d

    def fire(self, result: T | Failure) -> None:
        """Fire every Deferred waiting now (in the order they were asked for) with ``result``;
        one asked for meanwhile waits for the next time."""
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            fire_unless_called(d, result)

    def clear(self) -> None:
        """Forget every Deferred waiting now: none of them fires (an owner that drops what
        they wait for, e.g. a closing wormhole's send queue)."""
        self._waiting.clear()

    def _forget(self, d: Deferred[T]) -> None:
        if d in self._waiting:
            self._waiting.remove(d)


class _NotYet:
    """The outcome of a :class:`OneShot` that has not fired."""


_NOT_YET = _NotYet()


class OneShot(Generic[T]):
    """Something that happens once; everyone who asks hears its outcome (see the module
    docstring)."""

    def __init__(self) -> None:
        self._waiters: Waiters[T] = Waiters()
        self._outcome: T | Failure | _NotYet = _NOT_YET

    @property
    def fired(self) -> bool:
        """Whether the outcome is known."""
        return self._outcome is not _NOT_YET

    def when_fired(self) -> Deferred[T]:
        """A Deferred with the outcome: fired now if it is known, else by :meth:`fire`
        (cancelling it meanwhile forgets it)."""
        outcome = self._outcome
        if isinstance(outcome, _NotYet):
            return self._waiters.wait()
        d: Deferred[T] = Deferred()
        fire_unless_called(d, outcome)
        return d

    def fire(self, result: T | Failure) -> None:
        """The outcome (a value, or a Failure to errback with): every waiter hears it. Only the
        first call counts; later ones are ignored."""
        if self.fired:
            return
        self._outcome = result
        self._waiters.fire(result)
