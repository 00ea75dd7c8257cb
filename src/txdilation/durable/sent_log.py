"""L4: one link's sequenced writes, oldest first, until the ACKs that arrive on it retire them.

Outbound notes each write to the link here, once (the highest seqnum written, and when), as it
writes to the connection itself: the link is not on the write path. This is the one record of
when a write left: the link's dead-path detector (``path.dead_path``) owns the log and
reads the time of the oldest write not yet acknowledged (when to probe) and of the newest one
an ACK retired (a round trip); Outbound's in-flight window (``durable.window``) takes the time
:meth:`SentLog.sent` stamped as its sample's start. An Outbound given no link's log keeps one
of its own (``on_write=None``), which every ACK retires.

Invariants: seqnums and times never decrease from one entry to the next; an entry is retired
once; after :meth:`SentLog.close` nothing is noted and nothing is held (I/O-free but for the
clock's reading).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from txdilation.wire.contracts import ISentLog

__all__ = ["SentLog"]


@implementer(ISentLog)
class SentLog:
    """The writes of one link not yet acknowledged (see the module docstring).

    :param clock: stamps each write.
    :param on_write: called after each write is noted (the detector arms its timer), if given.
    """

    def __init__(self, clock: IReactorTime, on_write: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._on_write = on_write
        self.writes: deque[tuple[int, float]] = deque()
        """(highest seqnum written, when) per write, oldest first."""
        self.closed = False

    def sent(self, seqnum: int) -> float:
        """Sequenced records up to ``seqnum`` (a write's last) were written to the link now:
        the time noted (read from the clock after :meth:`close` too, noting nothing)."""
        now = self._clock.seconds()
        if self.closed:
            return now
        self.writes.append((seqnum, now))
        if self._on_write is not None:
            self._on_write()
        return now

    def retire(self, resp_seqnum: int) -> float | None:
        """An ACK for everything up to ``resp_seqnum`` arrived on the link: forget the writes
        it covers; the time of the newest of them (None when it covered none)."""
        writes = self.writes
        newest: float | None = None
        while writes and writes[0][0] <= resp_seqnum:
            newest = writes.popleft()[1]
        return newest

    def close(self) -> None:
        """Note nothing more; forget everything (idempotent)."""
        self.closed = True
        self.writes.clear()
