"""L5: the CLOSE of a subchannel that closed first, and its answer that may never come.

With a stock peer (:meth:`Closes.peer_is_stock`), which leaves silently once it answered a
CLOSE, :class:`Closes` ends a subchannel whose CLOSE was acknowledged as if the answer had come
after :data:`ANSWER_TIMEOUT` seconds without a link, and gives up on a CLOSE never acknowledged
after :data:`GONE_TIMEOUT` (``connectionLost`` saying so); to a stock peer our CLOSE goes out
only once its DATA was acknowledged. Why (issue 33, Nagle at stock's receiver):
docs/module-notes.md.

Invariants: only while there is no link (a half-closeable peer may write on for as long as
it likes on a live one); never a subchannel with unacknowledged DATA; an answer that comes
later is absorbed (``expect_close``), and a CLOSE given up on still replays if a link comes
back; one timer per kind (acknowledged, unacknowledged) at most; nothing after
:meth:`Closes.stop`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.subchannels.subchannel_lifecycle import done

__all__ = ["ANSWER_TIMEOUT", "GONE_TIMEOUT", "Closes"]

ANSWER_TIMEOUT: Final = 3.0
"""Seconds without a link, after the peer acknowledged our CLOSE, before its answer is given
up on (a sender hears ``connectionLost`` within about this long of its last acknowledgement)."""

GONE_TIMEOUT: Final = 4.0
"""Seconds without a link before a CLOSE the peer never acknowledged (all DATA before it
acknowledged) is given up on: the stock peer left (one that is still there is back sooner: a
stock Leader dials again at once, a stock Follower answers our ``reconnect`` at once). A
sender then ends within about this long of its last acknowledgement; were the peer only
slow, nothing is lost: everything it was sent was acknowledged, and the CLOSE replays."""

_log = Logger()


class Closing(Protocol):
    """A subchannel waiting for the answer to its CLOSE."""

    def answer_overdue(self, reason: Failure) -> None:
        """Close with ``connectionLost(reason)`` (a no-op once it is not ``closing``)."""


class Outbound(Protocol):
    """What sends our CLOSEs and says when records were acknowledged (L4's outbound half)."""

    def send_close(self, scid: int) -> int: ...

    def last_queued(self, scid: int) -> int | None: ...

    def when_retired(self, seqnum: int) -> Deferred[None]: ...


class _Wait:
    """Subchannels given up on together after ``timeout`` seconds without a link."""

    def __init__(self, clock: IReactorTime, timeout: float, give_up: Callable[[int], Failure]):
        self._clock = clock
        self._timeout = timeout
        self._give_up = give_up
        self.waiting: dict[int, Closing] = {}
        self._timer: IDelayedCall | None = None

    def arm(self) -> None:
        if self._timer is None and self.waiting:
            self._timer = self._clock.callLater(self._timeout, self._overdue)

    def disarm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def discard(self, scid: int) -> Closing | None:
        subchannel = self.waiting.pop(scid, None)
        if not self.waiting:
            self.disarm()
        return subchannel

    def _overdue(self) -> None:
        self._timer = None
        overdue, self.waiting = self.waiting, {}
        for scid, subchannel in sorted(overdue.items()):
            subchannel.answer_overdue(self._give_up(scid))


class Closes:
    """See the module docstring.

    :param clock: the reactor's time.
    :param outbound: L4's outbound half.
    """

    def __init__(self, clock: IReactorTime, outbound: Outbound) -> None:
        self._outbound = outbound
        self._stock = False
        self._acknowledged = _Wait(clock, ANSWER_TIMEOUT, _answer_given_up)
        self._unacknowledged = _Wait(clock, GONE_TIMEOUT, _close_given_up)
        self._linked = False
        self._stopped = False

    def peer_is_stock(self) -> None:
        """The peer is stock: send each CLOSE once the DATA before it was acknowledged, and
        give up on an answer that no link brings."""
        self._stock = True

    def close(self, scid: int, subchannel: Closing) -> None:
        """``subchannel`` closed first: send its CLOSE (now, or once its DATA was
        acknowledged) and wait for the answer."""
        last = self._outbound.last_queued(scid) if self._stock else None
        if last is None:
            self._send(scid, subchannel)
        else:
            self._outbound.when_retired(last).addCallback(lambda _: self._send(scid, subchannel))

    def _send(self, scid: int, subchannel: Closing) -> None:
        if self._stopped:
            return
        stock = self._stock
        if stock:
            self._unacknowledged.waiting[scid] = subchannel
            if not self._linked:
                self._unacknowledged.arm()

        def acknowledged(_: None) -> None:
            if self._stopped or not stock or self._unacknowledged.discard(scid) is None:
                return  # (closed, or given up on, meanwhile)
            self._acknowledged.waiting[scid] = subchannel
            if not self._linked:
                self._acknowledged.arm()

        self._outbound.when_retired(self._outbound.send_close(scid)).addCallback(acknowledged)

    def closed(self, scid: int) -> None:
        """Subchannel ``scid`` closed (answered, or for any other reason)."""
        self._acknowledged.discard(scid)
        self._unacknowledged.discard(scid)

    def link_up(self) -> None:
        """A link was selected: the peer replays its answers on it."""
        self._linked = True
        self._acknowledged.disarm()
        self._unacknowledged.disarm()

    def link_down(self) -> None:
        """The link is gone: answers not come yet are given up on after the timeouts."""
        self._linked = False
        self._acknowledged.arm()
        self._unacknowledged.arm()

    def stop(self) -> None:
        """The wormhole is closing: nothing more."""
        self._stopped = True
        for wait in (self._acknowledged, self._unacknowledged):
            wait.waiting.clear()
            wait.disarm()


def _answer_given_up(scid: int) -> Failure:
    _log.info(
        "subchannel {scid}: the peer acknowledged our CLOSE and no link brought its answer"
        " within {t:g}s: closed",
        scid=scid,
        t=ANSWER_TIMEOUT,
    )
    return done()


def _close_given_up(scid: int) -> Failure:
    _log.info(
        "subchannel {scid}: no link for {t:g}s and the peer never acknowledged our CLOSE (all"
        " DATA before it was): the peer left, closed",
        scid=scid,
        t=GONE_TIMEOUT,
    )
    why = ConnectionLost(
        "the peer left before acknowledging the close (all data sent was acknowledged)"
    )
    return Failure(why)  # type: ignore[no-untyped-call]
