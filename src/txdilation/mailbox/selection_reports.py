"""L1: what L3 reports to the Manager: its Connectors (``IConnectorOwner``) and its links
(``LinkOwner``), turned into telemetry, status and the Manager machine's inputs.

A Connector's hints go out as ``connection-hints``; the link it selects is the machine's
``connection_made``; a direct path proven under a stock peer's relayed link starts a new
generation at most once per :data:`PROVEN_BACKOFF` seconds. A lost link is moved away from (to
a ready standby, when its path died: :data:`PATH_DIED`) or lost, which the Multiplexer and the
peer-absence clock hear and the machine acts on. A silent link is failed; a silent standby is
dropped; the peer's move to our standby moves us too.

Invariants: a report about a link that is neither the selected one nor the standby changes
nothing but the bookkeeping of retired links; each loss of the selected link is recorded once
(``mailbox.losses``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from wormhole._status import DilationHint

from txdilation.mailbox.dilate_messages import PATH_UPGRADE, hint_type_counts
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.manager_core import ManagerCore, ManagerEvents
from txdilation.path.liveness import SILENCE, PingTracker
from txdilation.path.selected_link import SelectedLink
from txdilation.selection.relays import RelayUsed
from txdilation.wire.contracts import IDilatedConnection
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import LEADER

__all__ = ["PATH_DIED", "PROVEN_BACKOFF", "ConnectorReports", "LinkReports"]

#: the causes of a loss after which the link moves to its standby (a path that died); a clean
#: close (the peer closing its wormhole), a protocol error or a move of our own do not
PATH_DIED = frozenset(
    {
        Cause.DROPPED,
        Cause.TRANSPORT_FAILED,
        Cause.SILENT,
        Cause.PROBE_UNANSWERED,
        Cause.NETWORK_CHANGE,
        Cause.PEER_REPORT,
    }
)

#: seconds between two new generations started because a direct path proved to work while a
#: stock peer's link was relayed (if one ends on the relay again, the next waits this long)
PROVEN_BACKOFF = 120.0

_log = Logger()


class ConnectorReports:
    """One Manager's ``IConnectorOwner`` (see the module docstring): its connectors' hints,
    status and selected links, and the links it makes for them (owned by ``links``)."""

    def __init__(
        self,
        core: ManagerCore,
        events: ManagerEvents,
        losses: LossRecorder,
        *,
        links: LinkReports,
        pings: PingTracker,
        clock: IReactorTime,
        ping_interval: float,
        traffic_interval: float | None,
        via_mapping: Callable[[str], bool],
    ) -> None:
        self._core = core
        self._events = events
        self._losses = losses
        self._links = links
        self._pings = pings
        self._clock = clock
        self._ping_interval = ping_interval
        self._traffic_interval = traffic_interval
        self._via_mapping = via_mapping

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        self._core.telemetry.hints_sent(hint_type_counts(hints))
        self._core.outbox.send(type="connection-hints", hints=hints)

    def hint_status(self, hints: list[DilationHint]) -> None:
        self._core.status.hints(hints)

    def attempting_again(self) -> None:
        """(Follower, a stock Leader) the connector tries again: the status says when."""
        self._core.status.attempted()

    def link_for(self, connection: IDilatedConnection, standby: bool = False) -> SelectedLink:
        """The sink for the connection the Connector is selecting (no I/O yet)."""
        return SelectedLink(
            connection,
            owner=self._links,
            receiver=self._core.mux,
            pings=self._pings,
            clock=self._clock,
            ping_interval=self._ping_interval,
            on_alive=self._alive,
            standby=standby,
            leads=self._core.role is LEADER,
        )

    def standby_link_for(self, connection: IDilatedConnection) -> SelectedLink:
        """The sink for a standby connection (``mailbox.standby``)."""
        return self.link_for(connection, standby=True)

    def connector_standby_ready(self, link: SelectedLink) -> None:
        if self._core.standby is not None:
            self._core.standby.got(link)
        else:
            link.abort()

    def connector_connection_made(
        self, link: SelectedLink, candidates: int = 1, relay: RelayUsed | None = None
    ) -> None:
        kind = "direct-tcp-v1" if link.is_direct else "relay-v1"
        self._core.telemetry.connection_selected(
            kind,
            via_relay=not link.is_direct,
            candidates=candidates,
            relay_transport=relay.transport if relay is not None else None,
            relay_index=relay.index if relay is not None else None,
            via_mapping=link.is_direct and self._via_mapping(link.description),
        )
        if self._traffic_interval is not None and not self._core.telemetry.periodic_traffic:
            self._core.telemetry.start_periodic_traffic(self._traffic_interval)
        self._losses.selected()
        self._events.connection_made(link)

    def connector_path_upgraded(self, link: SelectedLink) -> None:
        """The connector that selected this generation's relayed link found a direct
        connection and (Leader) took it or (Follower) the Leader took it: move there."""
        self._events.path_upgraded(link)

    def direct_path_proven(self) -> None:
        """(Leader) a direct connection completed its handshake after this generation's
        relayed link was selected: with a peer that cannot move a link (stock), a new
        generation can use it, at most once per :data:`PROVEN_BACKOFF` seconds."""
        c = self._core
        link = c.link
        if c.role is not LEADER or link is None or link.is_direct:
            return
        if PATH_UPGRADE in c.peer_extensions:
            return  # the connector moves the link itself
        last = c.direct_proven_at
        if last is not None and self._clock.seconds() - last < PROVEN_BACKOFF:
            return
        self._events.direct_proven()

    def _alive(self, rtt: float | None) -> None:
        if rtt is not None:
            self._core.telemetry.ping_rtt(rtt)
        self._core.status.alive()


class LinkReports:
    """One Manager's ``LinkOwner`` (see the module docstring)."""

    def __init__(self, core: ManagerCore, events: ManagerEvents, losses: LossRecorder) -> None:
        self._core = core
        self._events = events
        self._losses = losses

    def link_lost(self, link: SelectedLink, reason: LinkLoss) -> None:
        c = self._core
        c.retired.discard(link)
        if link is not c.link:
            if c.standby is not None:
                c.standby.lost(link)
            return
        moving = c.standby is not None and c.standby.ready and reason.cause in PATH_DIED
        after = ": moving to the standby" if moving else ""
        _log.info(
            "dilated connection {desc} lost: {reason}" + after,
            desc=link.description,
            reason=reason.message,
            cause=reason.cause.value,
        )
        if moving:
            self._events.standby_taken()
            return
        c.link = None
        self._losses.lost(link, reason)
        self._core.mux.connection_lost()
        c.absence.waiting_for_peer(True)
        self._events.connection_lost()

    def link_silent(self, link: SelectedLink) -> None:
        c = self._core
        if link is c.link:
            self._events.link_silent()
        elif c.standby is not None and link is c.standby.standby:
            link.fail(SILENCE)

    def standby_used(self, link: SelectedLink) -> None:
        """The peer moved the wormhole to our standby: so do we."""
        c = self._core
        if c.standby is not None and link is c.standby.standby:
            self._events.standby_taken()
