"""L4 inbound: when the cumulative ACK goes out (I/O-free but for the timer it is given).

A :class:`DelayedAck` coalesces ACKs: one goes out ``delay`` seconds after the first record it
covers, or at the end of the reactor turn once an OPEN or CLOSE arrived, the DATA it covers
reached ``threshold`` bytes, or a record arrived more than ``delay`` after the last ACK (a
quiet link: a lone record's ACK is not delayed, so a sender timing round trips by our ACKs
measures the path, not our delay), whichever comes first. The defaults (:data:`ACK_DELAY`
5 ms, :data:`ACK_THRESHOLD_BYTES` 1 MiB) fit any sender's window (ours is at least 2 MiB;
stock has none). It only decides when: ``send()`` writes the ACK of the highest record
processed by then. Why: docs/module-notes.md.

Invariants: at most one ACK is scheduled at a time; :meth:`DelayedAck.cancel` drops the pending
one and what it covered (a new connection starts afresh: the peer replays what we did not
acknowledge, and that replay is acknowledged).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["ACK_DELAY", "ACK_THRESHOLD_BYTES", "DelayedAck"]

#: seconds an ACK waits for more records to cover (one ACK per batch, not per TCP read)
ACK_DELAY = 0.005
#: received DATA bytes not yet acknowledged at which the ACK goes out at the end of the turn
ACK_THRESHOLD_BYTES = 2**20


class DelayedAck:
    """One connection's ACK timing (see the module docstring).

    :param reactor: schedules the ACK.
    :param send: writes the ACK (called from the timer).
    :param delay: seconds an ACK may wait for more records.
    :param threshold: DATA bytes after which it waits no longer than the turn.
    """

    def __init__(
        self, reactor: IReactorTime, send: Callable[[], None], delay: float, threshold: int
    ) -> None:
        self._reactor = reactor
        self._send = send
        self._delay = delay
        self._threshold = threshold
        self._call: IDelayedCall | None = None
        self._soon = False  # the pending ACK goes out at the end of this turn
        self._unacked = 0  # DATA bytes received since the last ACK went out
        self._last_sent = reactor.seconds()  # when the last ACK went out (or the connection came)

    def data(self, size: int) -> None:
        """A DATA record of ``size`` payload bytes is to be acknowledged."""
        self._unacked += size
        soon = self._unacked >= self._threshold
        if self._call is None or (soon and not self._soon):  # (else: as scheduled, per record)
            self._schedule(soon)

    def soon(self) -> None:
        """An OPEN or CLOSE is to be acknowledged: by the end of this turn."""
        self._schedule(True)

    def restart(self) -> None:
        """A new connection: the link counts as quiet from now (its first records wait)."""
        self._last_sent = self._reactor.seconds()

    def cancel(self) -> None:
        """No ACK now (the connection is gone): drop the pending one."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self._unacked = 0

    def _schedule(self, soon: bool) -> None:
        call = self._call
        if call is None:
            if not soon and self._reactor.seconds() - self._last_sent >= self._delay:
                soon = True  # the link was quiet: this record's round trip is not delayed
            self._soon = soon
            self._call = self._reactor.callLater(0 if soon else self._delay, self._fire)
        elif soon and not self._soon:
            self._soon = True
            call.reset(0)

    def _fire(self) -> None:
        self._call = None
        self._unacked = 0
        self._last_sent = self._reactor.seconds()
        self._send()
