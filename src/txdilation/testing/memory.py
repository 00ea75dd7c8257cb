"""In-memory dilated wormholes, for applications' own tests: no mailbox, no sockets.

Layer: test support, shipped. A :class:`MemoryDilationPair` holds two ends, ``pair.a`` and
``pair.b``, each with the API of a dilated wormhole, over txdilation's real L4/L5
(:class:`~txdilation.subchannels.multiplexer.Multiplexer`); only L1-L3 are replaced by an
in-memory link that delivers on a later turn of the clock (a ``Clock``:
:meth:`~MemoryDilationPair.flush`; or the real reactor). :meth:`~MemoryDilationPair.drop_link`
loses what is in flight, :meth:`~MemoryDilationPair.restore_link` replays what was not
acknowledged, :meth:`~MemoryDilationPair.close` closes both as the pair's
:class:`~txdilation.semantics.Semantics` say. A guide: docs/testing.md.

Invariants: records are delivered in order, each at most once per link, never while the
receiving end paused its reading; ``a`` is the Leader (odd subchannel ids), ``b`` the Follower;
the first ``restore_link`` (by the constructor unless ``connected=False``) fires both ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IDelayedCall,
    IPushProducer,
    IReactorTime,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from zope.interface import implementer

from txdilation.durable.inbound import ACK_DELAY
from txdilation.semantics import Semantics
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.testing.fakes import record_sink
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.records import Record
from txdilation.wire.roles import FOLLOWER, LEADER

__all__ = ["MemoryDilatedWormhole", "MemoryDilationPair"]

#: ``flush`` runs timers due within this many seconds of now: deliveries (L4's cooperator uses
#: 1e-8 s) and the delayed ACKs.
_FLUSH_HORIZON = ACK_DELAY + 1e-6


@implementer(IDilatedConnection)
class _MemoryConnection:
    """One end of one generation's in-memory link (provides ``IDilatedConnection``)."""

    def __init__(self, link: _MemoryLink, side: int, description: str) -> None:
        self._link = link
        self._side = side
        self.description = description
        self.is_direct = True
        self.reading_paused = False
        self.producer: IPushProducer | None = None

    def send_record(self, record: Record) -> None:
        self._link.send(self._side, (record,))

    def send_records(self, records: Iterable[Record]) -> None:
        self._link.send(self._side, tuple(records))

    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None:
        self.producer = producer  # an in-memory link never pushes back

    def unregisterProducer(self) -> None:
        self.producer = None

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False
        self._link.schedule()

    def disconnect(self) -> None:
        self._link.pair._lose(self._link)

    def abort(self) -> None:
        self._link.pair._lose(self._link)

    def fail(self, reason: LinkLoss) -> None:
        self.abort()


class _MemoryLink:
    """Two connections back to back; records move on a later turn of the clock."""

    def __init__(self, pair: MemoryDilationPair, generation: int) -> None:
        self.pair = pair
        self.alive = True
        self.connections = (
            _MemoryConnection(self, 0, f"->memory:b (generation {generation})"),
            _MemoryConnection(self, 1, f"<-memory:a (generation {generation})"),
        )
        self._queues: tuple[deque[Record], deque[Record]] = (deque(), deque())
        self._call: IDelayedCall | None = None

    @property
    def in_flight(self) -> int:
        return len(self._queues[0]) + len(self._queues[1])

    def send(self, side: int, records: Sequence[Record]) -> None:
        if self.alive and records:
            self._queues[1 - side].extend(records)  # records for the other end
            self.schedule()

    def schedule(self) -> None:
        if self.alive and self._call is None and self.in_flight:
            self._call = self.pair.clock.callLater(0, self._deliver)

    def _deliver(self) -> None:
        self._call = None
        for side in (0, 1):
            queue, connection = self._queues[side], self.connections[side]
            deliver = self.pair._sinks[side]
            while queue and self.alive and not connection.reading_paused:
                deliver(queue.popleft())
        self.schedule()

    def kill(self) -> None:
        self.alive = False
        for queue in self._queues:
            queue.clear()
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None


class MemoryDilatedWormhole:
    """One end of a :class:`MemoryDilationPair`: what ``w.dilate()`` returns, in memory.

    ``transport._manager`` of its subchannels is this object, and ``_connection`` is the
    current link's connection (``None`` while the link is down), as on a real wormhole.
    """

    def __init__(self, pair: MemoryDilationPair, side: int) -> None:
        self._pair = pair
        self._side = side

    @property
    def _connection(self) -> _MemoryConnection | None:
        link = self._pair._link
        return link.connections[self._side] if link is not None and link.alive else None

    @property
    def _mux(self) -> Multiplexer:
        return self._pair._muxes[self._side]

    def when_dilated(self) -> Deferred[None]:
        """Fires once the link first came up; errbacks with ``WormholeClosedError`` if the
        pair is closed first."""
        return self._mux.when_dilated()

    def listener_for(self, subprotocol_name: str) -> IStreamServerEndpoint:
        """An endpoint whose ``listen(factory)`` accepts the subchannels the other end opens."""
        return self._mux.listener_for(subprotocol_name)

    def connector_for(self, subprotocol_name: str) -> IStreamClientEndpoint:
        """An endpoint whose ``connect(factory)`` opens a subchannel to the other end.

        :raises ValueError: for an empty name.
        """
        return self._mux.connector_for(subprotocol_name)


class MemoryDilationPair:
    """Two dilated wormholes joined in memory (see the module docstring).

    :param clock: a ``Clock`` (then call :meth:`flush`) or the reactor.
    :param connected: bring the link up (and dilate) at once; otherwise call
        :meth:`restore_link` when the test wants dilation to happen.
    :param expected_subprotocols: per end (``{"a": [...], "b": [...]}``): when given for an
        end, subchannels the other end opens with any other name are refused with CLOSE.
    :param reconnect_after: when given, the link comes back by itself this many seconds after
        every drop (as Dilation reconnects); default: only :meth:`restore_link` restores it.
    :param semantics: what the applications on both ends see where stock's behaviour is a
        defect (see :mod:`txdilation.semantics`); default, as ``w.dilate()``: the one given to
        ``txdilation.install(semantics=)``, else ``TXDILATION_SEMANTICS``, else stock's.
    :param multiplexer_options: passed to both ``Multiplexer`` s (e.g. ``max_unacked_bytes``).
    """

    def __init__(
        self,
        clock: IReactorTime,
        *,
        connected: bool = True,
        expected_subprotocols: dict[str, Iterable[str]] | None = None,
        reconnect_after: float | None = None,
        semantics: Semantics | None = None,
        **multiplexer_options: Any,
    ) -> None:
        self.clock = clock
        self.semantics = Settings.from_process().semantics if semantics is None else semantics
        self.reconnect_after = reconnect_after
        self.a = MemoryDilatedWormhole(self, 0)
        self.b = MemoryDilatedWormhole(self, 1)
        expected = expected_subprotocols or {}
        self._muxes = tuple(
            Multiplexer(
                manager=end,
                reactor=clock,
                expected_subprotocols=expected.get(name),
                semantics=self.semantics,
                **multiplexer_options,
            )
            for name, end in (("a", self.a), ("b", self.b))
        )
        self._sinks = tuple(record_sink(mux) for mux in self._muxes)
        self._muxes[0].set_role(LEADER)
        self._muxes[1].set_role(FOLLOWER)
        self._link: _MemoryLink | None = None
        self._reconnect_call: IDelayedCall | None = None
        self.generation = 0
        self.closed = False
        if connected:
            self.restore_link()

    @property
    def link_up(self) -> bool:
        """True while a link connects the two ends."""
        return self._link is not None and self._link.alive

    @property
    def in_flight(self) -> int:
        """Records sent over the current link and not yet delivered."""
        return self._link.in_flight if self._link is not None else 0

    def restore_link(self) -> None:
        """Connect a new generation (no-op while the link is up or after :meth:`close`)."""
        if self.link_up or self.closed:
            return
        self._cancel_reconnect()
        self.generation += 1
        link = self._link = _MemoryLink(self, self.generation)
        for mux, connection in zip(self._muxes, link.connections, strict=True):
            mux.connection_made(connection)
        if self.generation == 1:
            for mux in self._muxes:
                mux.dilated()

    def drop_link(self) -> None:
        """Lose the link and everything in flight on it (no-op while it is down)."""
        if self._link is not None:
            self._lose(self._link)

    def _lose(self, link: _MemoryLink) -> None:
        if link is not self._link or not link.alive:
            return
        link.kill()
        for mux in self._muxes:
            mux.connection_lost()
        if self.reconnect_after is not None and not self.closed:
            self._reconnect_call = self.clock.callLater(self.reconnect_after, self.restore_link)

    def close(self) -> None:
        """Close both ends (idempotent): see the module docstring."""
        if self.closed:
            return
        self.closed = True
        self._cancel_reconnect()
        if self._link is not None:
            self._link.kill()
        for mux in self._muxes:
            mux.stop("memory pair closed")

    def flush(self, max_rounds: int = 100_000) -> None:
        """With a ``Clock``: run deliveries and every timer due now or within the ACK delay
        (:data:`txdilation.durable.inbound.ACK_DELAY`), until nothing is left to do, so that the
        ACKs of everything delivered have arrived too. Time advances by at most that delay per
        round.

        :raises RuntimeError: when traffic has not settled after ``max_rounds`` rounds.
        :raises TypeError: when the pair runs on a reactor (which delivers by itself).
        """
        advance = getattr(self.clock, "advance", None)
        if advance is None:
            raise TypeError("flush() drives a Clock; a reactor delivers by itself")
        for _ in range(max_rounds):
            now = self.clock.seconds()
            due = [c.getTime() for c in self.clock.getDelayedCalls()]  # type: ignore[attr-defined]
            soonest = min((t for t in due if t <= now + _FLUSH_HORIZON), default=None)
            if soonest is None:
                return
            advance(max(0.0, soonest - now))
        raise RuntimeError("the in-memory link did not settle")

    def _cancel_reconnect(self) -> None:
        if self._reconnect_call is not None and self._reconnect_call.active():
            self._reconnect_call.cancel()
        self._reconnect_call = None
