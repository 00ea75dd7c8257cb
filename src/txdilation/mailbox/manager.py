"""L1: the Manager, one per dilated wormhole: roles, generations and the DILATE-n messages.

It decides the role from the two ``please`` sides, runs one Connector per generation, takes
the link the Connector selects, and starts a new generation when that link is lost, following
stock's rules for ``reconnect``/``reconnecting``. Everything else has its own module: the
messages (``mailbox.messages``), the status (``mailbox.status``), waiting for a silent peer
(``mailbox.absence``), the selected link with its record dispatch and liveness
(``selection.selected``), L4/L5 (``subchannels.multiplexer``).

The lifecycle is ``txdilation.mailbox.manager_lifecycle`` (the diagram:
state-diagrams/manager_lifecycle.svg).

txdilation's extensions, sent only to a peer whose ``please`` listed them: ``closing`` (the
peer's application closed its wormhole: no reconnection, ``StoppedPeer``) and ``link-lost`` (a
Follower's report that the link of a generation is gone, so a Leader that has not noticed
starts a new one at once). docs/reliability.md discusses the limits.

Invariants:
- DILATE-n phases are numbered from 0 without gaps (one ``Outbox``);
- the Follower never sends ``reconnect`` and answers each ``reconnect`` with exactly one
  ``reconnecting``; the Leader ignores hints between losing a link and hearing
  ``reconnecting``;
- every (state, input) pair is a transition or a documented no-op: nothing the peer sends
  raises ``NoTransition`` into the reactor;
- a Leader whose generation has nothing left in flight starts a new one after
  ``GENERATION_RETRY`` seconds, doubling up to ``GENERATION_RETRY_MAX`` (stock waits forever);
- closing drains: the link goes once the peer acknowledged every record, or after
  ``CLOSE_TIMEOUT`` seconds.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorUDP
from twisted.internet.task import Cooperator
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._interfaces import ISend
from wormhole._status import DilationHint, DilationStatus, WormholeStatus

from txdilation.mailbox.absence import PeerAbsence
from txdilation.mailbox.dilated import DilatedWormhole
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.manager_core import ManagerCore, ManagerEvents
from txdilation.mailbox.manager_lifecycle import manager_machine
from txdilation.mailbox.mapping import MappingReporter
from txdilation.mailbox.messages import (
    CLOSING,
    PATH_UPGRADE,
    ConnectionHints,
    Outbox,
    Please,
    choose_version,
    dispatch,
    hint_type_counts,
)
from txdilation.mailbox.standby import StandbyKeeper
from txdilation.mailbox.status import StatusReporter, mailbox_up
from txdilation.portmap.mapper import PortMapper
from txdilation.portmap.mapping import PortMapping
from txdilation.selection import netwatch
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.connector_settings import Purpose
from txdilation.selection.hints import Hint
from txdilation.selection.liveness import SILENCE, PingTracker
from txdilation.selection.relays import RelayLocation, RelayUsed, parse_relay_location
from txdilation.selection.selected import SelectedLink
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import IDilationReactor
from txdilation.wire.errors import OldPeerCannotDilateError
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import FOLLOWER, LEADER, Role

__all__ = ["DILATION_VERSIONS", "DilatedWormhole", "Manager"]

DILATION_VERSIONS = ["ged"]

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

_log = Logger(namespace="txdilation.mailbox.manager")


class Manager:
    """One dilated wormhole's L1 (see the module docstring): the Dilator's, the Connector's, the
    selected link's and the application's entry points, each one an input of the machine."""

    def __init__(
        self,
        sender: ISend,
        my_side: str,
        transit_relay_location: RelayLocation,
        reactor: IDilationReactor,
        eventual_queue: Any,
        cooperator: Cooperator | None,
        acceptable_versions: Iterable[str],
        ping_interval: float,
        expected_subprotocols: Iterable[str] | None,
        no_listen: bool,
        status_update: Callable[[DilationStatus], object] | None,
        initial_mailbox_status: WormholeStatus | None = None,
        tor: Any = None,
        settings: Settings | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._reactor = reactor
        self._eventually = getattr(eventual_queue, "eventually", None)
        self._started = False
        self._closing_announced = False
        self._acceptable_versions = list(acceptable_versions)
        self._ping_interval = ping_interval
        self._public_addresses: tuple[str, ...] = ()
        settings = settings if settings is not None else Settings()
        relays = parse_relay_location(transit_relay_location)
        if telemetry is None:
            telemetry = Telemetry.from_settings(reactor, settings.telemetry)
        self.telemetry = telemetry
        self._losses = LossRecorder(telemetry, reactor)
        self._mux = Multiplexer(
            manager=self,
            reactor=reactor,
            cooperator=cooperator,
            expected_subprotocols=expected_subprotocols,
            max_unacked_bytes=settings.limits.max_unacked_bytes,
            max_pending_open_bytes=settings.limits.max_pending_open_bytes,
            max_buffered_inbound_bytes=settings.limits.max_buffered_inbound_bytes,
            max_record_size=settings.limits.max_record_size,
            telemetry=self.telemetry,
            semantics=settings.semantics,
            eventually=self._eventually,  # stock answers through its eventual queue: so do we
        )
        status = StatusReporter(status_update, initial_mailbox_status, reactor, ping_interval)
        self._mapping = MappingReporter(telemetry, status.refresh)
        self._mapper = _port_mapper(reactor, settings, no_listen, tor, self._mapping)
        if self._mapper is not None and not settings.network.listen_port:
            # mapped now, so that the first generation's hints carry it (its listener takes it)
            self._mapper.map(_free_port(), lambda mapping: None)
        self._pings = PingTracker(reactor)
        self._core = ManagerCore(
            new_connector=self._new_connector,
            launch_connector=self._launch_connector,
            reactor=reactor,
            my_side=my_side,
            settings=settings,
            connector_settings=lambda role, key: ConnectorSettings(
                role=role,
                dilation_key=key,
                side=my_side,
                relay_hints=relays,
                no_listen=no_listen,
                tor=tor,
                network=settings.network,
                max_record_size=settings.limits.max_record_size,
                handshake_timeout=settings.limits.handshake_timeout,
                max_unauthenticated=settings.limits.max_unauthenticated,
                public_addresses=self._public_addresses,  # as known when the generation starts
                path_upgrade=PATH_UPGRADE in self._core.peer_extensions,
                # a stock Leader never retries within a generation: the Follower rekindles it
                rekindle=role is FOLLOWER and not self._core.peer_extensions,
            ),
            outbox=Outbox(sender),
            status=status,
            telemetry=self.telemetry,
            mux=self._mux,
            absence=PeerAbsence(reactor, settings.policy.peer_timeout, self._peer_absent),
            via_mapping=lambda link: self._mapping.carried(link.description),
            standby=StandbyKeeper(reactor, self._make_standby) if tor is None else None,
            ping_interval=ping_interval,
        )
        if initial_mailbox_status is not None:
            self._core.absence.mailbox_connected(mailbox_up(initial_mailbox_status))
        self._traffic_interval = settings.telemetry.traffic_interval
        self.telemetry.set_traffic_source(self._mux.traffic_stats)
        self.api = DilatedWormhole(self)
        """What ``dilate()`` returns to the application."""
        self.telemetry.dilation_requested()
        self.events: ManagerEvents = manager_machine(self._core)

    def public_addresses_seen(self, addresses: tuple[str, ...]) -> None:
        """The mailbox server told us the address it sees (``welcome["your-address"]``, see
        ``selection.punch.public_addresses``): later generations advertise it for punching."""
        self._public_addresses = addresses

    # --- seams for stock's hooks (``txdilation._stock.manager``) and tests ---

    def _new_connector(self, settings: ConnectorSettings) -> Connector:
        return Connector(
            settings,
            owner=self,
            reactor=self._reactor,
            telemetry=self.telemetry,
            eventually=self._eventually,
            mapper=self._mapper,
        )

    def _launch_connector(self, connector: Connector) -> None:
        connector.start()

    def _make_standby(self, peer_relays: list[Hint]) -> Connector:
        """A standby connector for the current generation (``mailbox.standby``), started."""
        c = self._core
        assert c.role is not None and c.dilation_key is not None
        settings = c.connector_settings(c.role, c.dilation_key)
        settings = replace(settings, purpose=Purpose.STANDBY, no_listen=True, path_upgrade=False)
        connector = self._new_connector(settings)
        connector.start()
        if peer_relays:
            connector.got_hints(peer_relays)
        return connector

    @property
    def status(self) -> DilationStatus:
        """The current ``DilationStatus``."""
        return self._core.status.current

    @property
    def connection(self) -> Any:
        """The selected L2 connection, or None."""
        link = self._core.link
        return link.connection if link is not None else None

    @property
    def role(self) -> Role | None:
        """Our role, once the peer's ``please`` arrived."""
        return self._core.role

    @property
    def led_by_stock(self) -> bool:
        """We are the Follower and the Leader is stock (its please lists no extension)."""
        return self._core.role is FOLLOWER and not self._core.peer_extensions

    @property
    def connector(self) -> Connector | None:
        """The current generation's Connector while it is connecting, else None."""
        g = self._core.current
        return g.connector if g is not None else None

    @property
    def link(self) -> SelectedLink | None:
        """The selected link, or None."""
        return self._core.link

    @property
    def multiplexer(self) -> Multiplexer:
        """L4/L5 of this wormhole."""
        return self._mux

    @property
    def last_rtt(self) -> float | None:
        """The last round-trip time measured by our PINGs, in seconds."""
        return self._pings.last_rtt

    def abort_link(self) -> None:
        """Abort the selected connection and the standby beside it (``abort_connection``)."""
        if self._core.standby is not None:
            self._core.standby.drop()
        connection = self.connection
        if connection is not None:
            connection.abort()

    @property
    def port_mapping(self) -> PortMapping | None:
        """The port mapping of our listener the gateway granted, if any (``txdilation.portmap``)."""
        return self._mapping.current

    # --- from the Dilator ---

    def got_dilation_key(self, key: bytes) -> None:
        self._core.dilation_key = key
        self._maybe_start()

    def got_wormhole_versions(self, their_versions: dict[str, Any]) -> None:
        c = self._core
        c.version = choose_version(self._acceptable_versions, their_versions.get("can-dilate"))
        if c.version is None:  # stock defect 8: never send 'please' without a shared version
            self._mux.fail_dilation(Failure(OldPeerCannotDilateError()))  # type: ignore[no-untyped-call]
            return
        self._maybe_start()

    def _maybe_start(self) -> None:
        c = self._core
        if c.dilation_key is not None and c.version is not None and not self._started:
            self._started = True
            unsubscribe = netwatch.subscribe(self._reactor, self.network_changed)
            self.when_stopped().addCallback(lambda _: unsubscribe())
            self.events.start()

    def network_changed(self) -> None:
        """The host's addresses or routes changed (``selection.netwatch``): the selected link
        is dropped if its address is gone, else probed now; a generation still connecting
        publishes hints for new addresses; the edge may reconnect the mailbox
        (``_network_changed_edge``)."""
        if self._core.standby is not None:
            self._core.standby.network_changed()
        link = self._core.link
        if link is not None:
            link.network_changed()
        if self._mapper is not None:
            self._mapper.network_changed()
        for connector in (self.connector, self._core.upgrader):
            if connector is not None:
                connector.network_changed()
        self._network_changed_edge()

    def _network_changed_edge(self) -> None:
        """A seam for the stock-facing edge: the mailbox connection after a network change."""

    def mailbox_status(self, status: WormholeStatus) -> None:
        """Our mailbox connection's status changed (stock's Boss reports it)."""
        self._core.absence.mailbox_connected(mailbox_up(status))
        self._core.status.mailbox(status)

    def received_dilation_message(self, plaintext: bytes) -> None:
        """One DILATE-n body, in order (malformed ones are logged and ignored)."""
        if dispatch(plaintext, self):
            self._core.absence.heard_from_peer()

    def announce_closing(self) -> None:
        """Our application is closing the wormhole (before our mailbox closes): tell a peer
        that understands it, so it stops reconnecting. Once at most."""
        c = self._core
        if self._started and not c.stopped.fired and not self._closing_announced:
            self._closing_announced = CLOSING in c.peer_extensions
            if self._closing_announced:
                c.outbox.send(type="closing")

    def stop(self) -> None:
        """The wormhole is closing (idempotent)."""
        self.events.stop()

    def when_stopped(self) -> Deferred[None]:
        """Fires once the machine stopped (at once if it did) and the port mapping, if any, is
        deleted (each deletion is bounded in time)."""
        d = self._core.stopped.when_fired()
        mapper = self._mapper
        if mapper is not None:
            d.addCallback(lambda _: mapper.stop())
        return d

    def send_ping(self, ping_id: bytes, on_pong: Callable[[float], object] | None = None) -> None:
        """Stock's API (fowl's ``ping``): send a PING with ``ping_id`` on the current link, if
        any, and call ``on_pong(rtt)`` when its PONG arrives (see ``PingTracker.app_ping``)."""
        self._pings.app_ping(ping_id, on_pong)
        if self._core.link is not None:
            self._core.link.send_app_ping(ping_id)

    # --- MessageHandlers (the peer's DILATE-n messages) ---

    def please(self, message: Please) -> None:
        c = self._core
        if message.use_version is not None and message.use_version not in self._acceptable_versions:
            _log.warn("peer wants dilation version {v!r} we do not speak", v=message.use_version)
            self._mux.fail_dilation(Failure(OldPeerCannotDilateError()))  # type: ignore[no-untyped-call]
            return
        if message.side == c.my_side:
            _log.error("peer chose the same dilation side as ours; cannot pick a Leader")
            self.events.stop()
            return
        c.peer_extensions = c.peer_extensions or message.extensions
        if not c.peer_extensions:
            self._mux.peer_is_stock()
        self.telemetry.please_received()
        self.telemetry.set_pair(c.my_side, message.side)
        self.events.rx_please(message.side)

    def hints(self, message: ConnectionHints) -> None:
        for problem in message.problems:
            _log.warn("ignoring hint: {problem}", problem=problem)
        self.telemetry.hints_received(message.type_counts)
        self.events.rx_hints(message.hints)

    def reconnect(self) -> None:
        if self._core.role is not FOLLOWER:
            _log.warn("ignoring 'reconnect': only a Leader may send it to a Follower")
            return
        self._losses.leader_asked_to_leave(self._core.link)
        self.events.rx_reconnect()

    def reconnecting(self) -> None:
        if self._core.role is not LEADER:
            _log.warn("ignoring 'reconnecting': only a Follower may send it to a Leader")
            return
        self._core.reconnectings += 1
        self.events.rx_reconnecting()

    def closing(self) -> None:
        _log.info("the peer is closing its wormhole")
        self.events.rx_closing()

    def peer_lost_link(self, generation: int) -> None:
        if self._core.role is not LEADER:
            _log.warn("ignoring 'link-lost': only a Follower may send it to a Leader")
            return
        self.events.rx_link_lost(generation)

    # --- the Connector's owner ---

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        self.telemetry.hints_sent(hint_type_counts(hints))
        self._core.outbox.send(type="connection-hints", hints=hints)

    def hint_status(self, hints: list[DilationHint]) -> None:
        self._core.status.hints(hints)

    def attempting_again(self) -> None:
        """(Follower, a stock Leader) the connector tries again: the status says when."""
        self._core.status.attempted()

    def link_for(self, connection: Any, standby: bool = False) -> SelectedLink:
        """The sink for the connection the Connector is selecting (no I/O yet)."""
        return SelectedLink(
            connection,
            owner=self,
            handlers=self._mux.record_handlers(),
            pings=self._pings,
            may_send_pong=self._mux.may_send_pong,
            clock=self._reactor,
            ping_interval=self._ping_interval,
            on_alive=self._alive,
            standby=standby,
            leads=self._core.role is LEADER,
        )

    def standby_link_for(self, connection: Any) -> SelectedLink:
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
        self.telemetry.connection_selected(
            kind,
            via_relay=not link.is_direct,
            candidates=candidates,
            relay_transport=relay.transport if relay is not None else None,
            relay_index=relay.index if relay is not None else None,
            via_mapping=link.is_direct and self._mapping.carried(link.description),
        )
        if self._traffic_interval is not None and not self.telemetry.periodic_traffic:
            self.telemetry.start_periodic_traffic(self._traffic_interval)
        self._losses.selected()
        self.events.connection_made(link)

    def connector_path_upgraded(self, link: SelectedLink) -> None:
        """The connector that selected this generation's relayed link found a direct
        connection and (Leader) took it or (Follower) the Leader took it: move there."""
        self.events.path_upgraded(link)

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
        if last is not None and self._reactor.seconds() - last < PROVEN_BACKOFF:
            return
        self.events.direct_proven()

    # --- LinkOwner (the selected link) ---

    def link_lost(self, link: SelectedLink, reason: LinkLoss) -> None:
        c = self._core
        c.retired.discard(link)
        if link is not c.link:
            if c.standby is not None:
                c.standby.lost(link)
            return
        if c.standby is not None and c.standby.ready and reason.cause in PATH_DIED:
            _log.info(
                "dilated connection {desc} lost: {reason}: moving to the standby",
                desc=link.description,
                reason=reason.message,
                cause=reason.cause.value,
            )
            self.events.standby_taken()
            return
        _log.info(
            "dilated connection {desc} lost: {reason}",
            desc=link.description,
            reason=reason.message,
            cause=reason.cause.value,
        )
        c.link = None
        self._losses.lost(link, reason)
        self._mux.connection_lost()
        c.absence.waiting_for_peer(True)
        self.events.connection_lost()

    def link_silent(self, link: SelectedLink) -> None:
        c = self._core
        if link is c.link:
            self.events.link_silent()
        elif c.standby is not None and link is c.standby.standby:
            link.fail(SILENCE)

    def standby_used(self, link: SelectedLink) -> None:
        """The peer moved the wormhole to our standby: so do we."""
        c = self._core
        if c.standby is not None and link is c.standby.standby:
            self.events.standby_taken()

    def _alive(self, rtt: float | None) -> None:
        if rtt is not None:
            self.telemetry.ping_rtt(rtt)
        self._core.status.alive()

    def _peer_absent(self) -> None:
        _log.info("no sign of the peer for the peer timeout: presuming it gone")
        self.events.peer_absent()


def _free_port() -> int:
    """A TCP port free now on every address (0 if none could be had: any port then)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])
    except OSError:
        return 0


def _port_mapper(
    reactor: IDilationReactor,
    settings: Settings,
    no_listen: bool,
    tor: Any,
    reporter: MappingReporter,
) -> PortMapper | None:
    """The wormhole's port mapper, unless mapping is off, there is no listener to map (no
    listening, Tor), the listener is not on every address (a listen interface: the gateway
    may not reach it), a forward is configured by hand (a hint port), or the reactor has no
    UDP."""
    network = settings.network
    if not network.port_mapping or no_listen or tor is not None:
        return None
    if network.listen_interface or network.hint_port:
        return None
    if not IReactorUDP.providedBy(reactor):
        return None
    return PortMapper(reactor, observer=reporter)
