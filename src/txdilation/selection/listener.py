"""L3: the direct-hint listener's defences against connection floods.

Anyone who sees our direct hints can open connections before the peer does. :func:`listen`
uses a backlog of :data:`LISTEN_BACKLOG` (not Twisted's 50); :class:`OldestFirstCap` holds at
most ``limit`` unauthenticated connections, closing the oldest (those without a correct
prologue first) so the real peer is the last to go; bad bytes and idle connections are closed
in ``link.connection``. Why: docs/module-notes.md.

Invariants: :class:`OldestFirstCap` is I/O-free (it decides, the Connector closes); after
:meth:`OldestFirstCap.admit` at most ``limit`` items are held, the admitted one among them
(``limit`` >= 1); an item is held at most once; discarding one not held is a no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IListeningPort, IReactorTCP
from twisted.internet.protocol import ServerFactory

__all__ = ["LISTEN_BACKLOG", "OldestFirstCap", "listen"]

LISTEN_BACKLOG = 4096
"""Listen backlog of the direct-hint listener (Linux caps it at ``net.core.somaxconn``,
4096 by default since 5.4; the SYN queue is bounded by ``tcp_max_syn_backlog`` and SYN cookies
take over beyond it)."""

T = TypeVar("T", bound=Hashable)


def listen(
    reactor: IReactorTCP,
    port: int,
    interface: str,
    factory: ServerFactory,
    backlog: int = LISTEN_BACKLOG,
) -> Deferred[IListeningPort]:
    """Listen on TCP ``interface``:``port`` (IPv6 when the interface has a ``:``) with
    ``backlog``; fires with the listening port."""
    endpoint_class: Any = TCP6ServerEndpoint if ":" in interface else TCP4ServerEndpoint
    endpoint = endpoint_class(reactor, port, backlog=backlog, interface=interface)
    d: Deferred[IListeningPort] = endpoint.listen(factory)
    return d


class OldestFirstCap(Generic[T]):
    """At most ``limit`` items, the oldest out first (see the module docstring).

    :param limit: how many items may be held (at least 1).
    :param progressed: whether an item has shown it may be genuine (a correct prologue);
        those go after the ones that have not, each group oldest first.
    """

    def __init__(self, limit: int, progressed: Callable[[T], bool]) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, not {limit!r}")
        self.limit = limit
        self._progressed = progressed
        self._items: dict[T, None] = {}  # insertion order: oldest first
        self.evicted = 0
        """How many items :meth:`admit` has pushed out so far."""

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def admit(self, item: T) -> list[T]:
        """Hold ``item`` (the newest); return the items to close now, oldest first, so that
        at most ``limit`` remain. ``item`` itself is never returned."""
        self._items.pop(item, None)
        self._items[item] = None
        out: list[T] = []
        while len(self._items) > self.limit:
            victim = self._victim(item)
            del self._items[victim]
            out.append(victim)
        self.evicted += len(out)
        return out

    def _victim(self, newest: T) -> T:
        oldest: T | None = None
        for candidate in self._items:
            if candidate == newest:
                continue
            if not self._progressed(candidate):
                return candidate
            if oldest is None:
                oldest = candidate
        assert oldest is not None  # more than limit >= 1 items: one besides the newest
        return oldest

    def discard(self, item: T) -> None:
        """``item`` is authenticated or gone: no longer held."""
        self._items.pop(item, None)

    def clear(self) -> None:
        """Hold nothing (the listener is closing)."""
        self._items.clear()
