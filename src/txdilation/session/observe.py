"""Turn magic-wormhole's status objects into session status events.

Layer: session observability. Stock's ``on_status_update`` callbacks report *states*
(``WormholeStatus``, ``DilationStatus``); a :class:`LinkObserver` remembers the last one and
emits an event for each *change* worth reporting: ``mailbox``, ``connecting``,
``connection-selected``, ``reconnecting``, ``rtt``, ``port-mapping`` (docs/status-events.md).

Invariants: events follow the order of the status updates; ``generation`` in events never
decreases (stock's own promise); the same state reported twice emits nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from wormhole._status import (
    Closed,
    Connected,
    ConnectedPeer,
    Connecting,
    ConnectingPeer,
    DilationStatus,
    Disconnected,
    Failed,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)

from txdilation.reporting.status_events import StatusWriter

__all__ = ["LinkObserver", "LinkState", "path_of"]

_MAILBOX_STATES: dict[type, str] = {
    Disconnected: "disconnected",
    Connecting: "connecting",
    Connected: "connected",
    Failed: "failed",
    Closed: "closed",
}


def path_of(hint_description: str) -> str:
    """``relay`` when the description names a transit relay (``->relay:tcp:...``), else
    ``direct``."""
    return "relay" if "relay" in hint_description else "direct"


@dataclass(frozen=True, slots=True)
class LinkState:
    """What the live status line shows: the last known state of the peer link.

    :ivar state: ``waiting`` (not dilating yet), ``connecting``, ``connected``,
        ``reconnecting`` or ``stopped``.
    :ivar reconnects: connections selected after the first one.
    """

    state: str = "waiting"
    generation: int = 0
    path: str | None = None
    hint: str | None = None
    rtt_s: float | None = None
    mailbox: str = "disconnected"
    reconnects: int = 0


class LinkObserver:
    """Feed it stock's status objects; it emits events on ``writer`` and keeps :attr:`state`.

    :param writer: where events go.
    :param rtt_source: returns the Manager's latest round-trip time in seconds (or None).
    :param on_stopped: called once when the dilation reports it stopped (the wormhole closed).
    :param led_by_stock: whether we follow a stock Leader now (``connecting`` says so).
    :param mapping_source: returns the wormhole's port mapping (a ``PortMapping``) or None.
    """

    def __init__(
        self,
        writer: StatusWriter,
        rtt_source: Callable[[], float | None],
        on_stopped: Callable[[], object] | None = None,
        led_by_stock: Callable[[], bool] | None = None,
        mapping_source: Callable[[], object] = lambda: None,
    ) -> None:
        self._writer = writer
        self._rtt_source = rtt_source
        self._mapping_source = mapping_source
        self._mapping: tuple[object, ...] | None = None
        self._on_stopped = on_stopped
        self._led_by_stock = led_by_stock
        self.state = LinkState()
        self._selected: tuple[int, str] | None = None
        self._reconnecting_generation = -1
        self._connecting_generation = -1

    def wormhole_status(self, status: WormholeStatus) -> None:
        """``wormhole.create(on_status_update=)``: the mailbox connection."""
        connection = status.mailbox_connection
        name = _MAILBOX_STATES.get(type(connection), "other")
        if name != self.state.mailbox:
            self.state = replace(self.state, mailbox=name)
            fields: dict[str, object] = {"state": name}
            url = getattr(connection, "url", None)
            if url is not None:
                fields["url"] = url
            reason = getattr(connection, "reason", None)
            if reason is not None:
                fields["reason"] = str(reason)
            self._writer.emit("mailbox", **fields)

    def dilation_status(self, status: DilationStatus) -> None:
        """``w.dilate(on_status_update=)``: the peer link (and the mailbox it carries)."""
        self.wormhole_status(status.mailbox)
        self._maybe_mapping()
        generation = max(status.generation, self.state.generation)
        peer = status.peer_connection
        emit = self._writer.emit
        if isinstance(peer, ConnectingPeer):
            if generation != self._connecting_generation:
                self._connecting_generation = generation
                self.state = replace(self.state, state="connecting", generation=generation)
                if self._led_by_stock is not None and self._led_by_stock():
                    emit("connecting", generation=generation, waits_on="stock-leader")
                else:
                    emit("connecting", generation=generation)
        elif isinstance(peer, ConnectedPeer):
            hint = peer.hint_description
            if self._selected != (generation, hint):
                reconnects = self.state.reconnects + (self._selected is not None)
                self._selected = (generation, hint)
                self.state = replace(
                    self.state,
                    state="connected",
                    generation=generation,
                    path=path_of(hint),
                    hint=hint,
                    reconnects=reconnects,
                )
                emit("connection-selected", generation=generation, path=path_of(hint), hint=hint)
            self._maybe_rtt(generation)
        elif isinstance(peer, ReconnectingPeer):
            if generation != self._reconnecting_generation:
                self._reconnecting_generation = generation
                self.state = replace(self.state, state="reconnecting", generation=generation)
                emit("reconnecting", generation=generation)
        elif isinstance(peer, StoppedPeer) and self.state.state != "stopped":
            self.state = replace(self.state, state="stopped")
            if self._on_stopped is not None:
                self._on_stopped()

    def _maybe_mapping(self) -> None:
        mapping: Any = self._mapping_source()
        if mapping is None:
            now: tuple[object, ...] | None = None
        else:
            lease = mapping.lifetime if math.isfinite(mapping.lifetime) else None
            now = (mapping.protocol.value, mapping.external_port, lease)
        if now == self._mapping:
            return
        self._mapping = now
        if now is None:
            self._writer.emit("port-mapping", protocol=None)
            return
        fields: dict[str, object] = {"protocol": now[0], "port": now[1]}
        if now[2] is not None:
            fields["lifetime_s"] = now[2]
        self._writer.emit("port-mapping", **fields)

    def _maybe_rtt(self, generation: int) -> None:
        rtt = self._rtt_source()
        if rtt is not None and rtt != self.state.rtt_s:
            self.state = replace(self.state, rtt_s=rtt)
            self._writer.emit("rtt", rtt_ms=round(rtt * 1000, 3), generation=generation)
