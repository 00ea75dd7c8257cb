"""
The one way a real-reactor test waits: ``sleep`` and ``wait_until``.

Layer: test infrastructure. Tests on a ``Clock`` advance it instead; tests on the real reactor
use these two, never ``deferLater`` or a helper of their own (``tests/test_idioms.py`` checks
that no other test module calls ``deferLater`` or defines a sleep/wait helper). A wait on a
condition is bounded: it fails naming what it waited for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import reactor as _global_reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

#: How often ``wait_until`` looks at its predicate.
POLL_INTERVAL = 0.01


def sleep(seconds: float, clock: IReactorTime | None = None) -> Deferred[None]:
    """A Deferred that fires after ``seconds`` on ``clock`` (the global reactor if None)."""
    timer: Any = _global_reactor if clock is None else clock
    return deferLater(timer, seconds, lambda: None)


async def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    what: str = "the condition",
    clock: IReactorTime | None = None,
) -> None:
    """Poll ``predicate`` every ``POLL_INTERVAL`` until it is true.

    :raises AssertionError: naming ``what`` when ``timeout`` seconds pass first.
    """
    timer: Any = _global_reactor if clock is None else clock
    deadline = timer.seconds() + timeout
    while not predicate():
        if timer.seconds() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await sleep(POLL_INTERVAL, timer)
