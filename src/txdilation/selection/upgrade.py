"""L3: when a relayed link tries direct paths again, in the background (I/O-free).

Once a link is selected on a relay, two peers that speak ``path-upgrade-v1`` go on dialing each
other's direct hints so that the link moves to a direct connection as soon as one works;
:class:`RetrySchedule` says when: counted from the selection (``origin``), so both peers' dials
line up without a message; quickly at first (:data:`FIRST_RETRIES`), then every
:data:`STEADY_RETRY`, and every :data:`SLOW_RETRY` after :data:`SLOW_AFTER`; a network change
starts over (:meth:`RetrySchedule.restart`). Why: docs/module-notes.md.

Invariants: the times returned only grow; every time is on the grid that starts at ``origin``
(or at the last restart), so two schedules with the same origin agree however late they are
asked; nothing here reads a clock.
"""

from __future__ import annotations

from itertools import accumulate

__all__ = [
    "BACKGROUND_CONNECT_TIMEOUT",
    "FIRST_RETRIES",
    "SLOW_AFTER",
    "SLOW_RETRY",
    "STEADY_RETRY",
    "RetrySchedule",
]

FIRST_RETRIES = (0.5, 1.0, 2.0)
"""The first intervals between background dials (seconds)."""

STEADY_RETRY = 4.0
"""Then one dial every this many seconds (a dial still connecting at the next one is given up
for it: with TCP's own SYN retransmissions one and three seconds into a dial, a SYN leaves at
least every two seconds, so a path that unblocks is found within about that long)."""

SLOW_AFTER = 120.0
"""Seconds after the origin from which dials are only every :data:`SLOW_RETRY` seconds."""

SLOW_RETRY = 30.0

BACKGROUND_CONNECT_TIMEOUT = 3.5
"""Seconds a background dial may take to connect (one SYN and its retransmissions at 1 and 3
seconds) before it fails by itself."""

_OFFSETS = tuple(accumulate(FIRST_RETRIES))


class RetrySchedule:
    """The times of the background dials of one relayed link (see the module docstring).

    :param origin: when the link was selected (clock seconds).
    """

    def __init__(self, origin: float) -> None:
        self._origin = origin

    @property
    def origin(self) -> float:
        """Where the grid starts (the selection, or the last restart)."""
        return self._origin

    def restart(self, now: float) -> None:
        """Something changed (the network): the quick first retries again, from ``now``."""
        self._origin = now

    def quick(self, now: float) -> bool:
        """Whether ``now`` is within the quick first retries (from the origin, or the last
        restart; the last of them included, however late its timer fires)."""
        return now - self._origin < _OFFSETS[-1] + FIRST_RETRIES[0] / 2

    def next_after(self, now: float) -> float:
        """The first dial time strictly after ``now``."""
        elapsed = now - self._origin
        if elapsed < _OFFSETS[-1]:
            offset = next((o for o in _OFFSETS if o > elapsed), _OFFSETS[-1])
        elif elapsed < SLOW_AFTER:
            offset = (
                _OFFSETS[-1] + (int((elapsed - _OFFSETS[-1]) // STEADY_RETRY) + 1) * STEADY_RETRY
            )
            if offset > SLOW_AFTER:
                offset = SLOW_AFTER + SLOW_RETRY
        else:
            offset = SLOW_AFTER + (int((elapsed - SLOW_AFTER) // SLOW_RETRY) + 1) * SLOW_RETRY
        t = self._origin + offset
        while t <= now:  # ``origin + offset`` rounded down to ``now`` itself: the next one
            t = self.next_after(t + max(abs(t), 1.0) * 1e-12)
        return t
