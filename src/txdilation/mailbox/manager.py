"""L1: the Manager, one per dilated wormhole: roles, generations and the DILATE-n messages.

It decides the role from the two ``please`` sides, runs one Connector per generation, takes
the link the Connector selects, and starts a new generation when that link is lost, following
stock's rules for ``reconnect``/``reconnecting``. The machine is ``mailbox.manager_lifecycle``
(state-diagrams/manager_lifecycle.svg); the peer's messages are ``mailbox.peer_messages``, the
links' reports ``mailbox.selection_reports``, the selected link ``path.selected_link``.

Invariants: DILATE-n phases are numbered from 0 without gaps (one ``Outbox``); the Follower
never sends ``reconnect`` and answers each one with exactly one ``reconnecting``; nothing the
peer sends raises ``NoTransition`` into the reactor; a Leader whose generation has nothing left
in flight starts a new one after ``GENERATION_RETRY`` seconds, doubling up to
``GENERATION_RETRY_MAX`` (stock waits forever); closing drains: the link goes once the peer
acknowledged every record, or after ``CLOSE_TIMEOUT`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Cooperator
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._interfaces import ISend
from wormhole._status import DilationStatus, WormholeStatus

from txdilation.mailbox.absence import PeerAbsence
from txdilation.mailbox.dilate_messages import (
    CLOSING,
    PATH_UPGRADE,
    Outbox,
    choose_version,
    dispatch,
)
from txdilation.mailbox.dilated import DilatedWormhole
from txdilation.mailbox.losses import LossRecorder
from txdilation.mailbox.manager_core import ManagerCore, ManagerEvents
from txdilation.mailbox.manager_lifecycle import manager_machine
from txdilation.mailbox.peer_messages import PeerMessages
from txdilation.mailbox.port_mapping import MappingReporter, free_port, port_mapper_for
from txdilation.mailbox.selection_reports import ConnectorReports, LinkReports
from txdilation.mailbox.standby import StandbyKeeper
from txdilation.mailbox.status_reporter import StatusReporter, mailbox_up
from txdilation.path import netwatch
from txdilation.path.liveness import PingTracker
from txdilation.path.selected_link import SelectedLink
from txdilation.portmap.mapping import PortMapping
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.connector_settings import Purpose
from txdilation.selection.hints import Hint
from txdilation.selection.relays import RelayLocation, parse_relay_location
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import IDilationReactor
from txdilation.wire.dilation_errors import OldPeerCannotDilateError
from txdilation.wire.roles import FOLLOWER, Role

__all__ = ["DILATION_VERSIONS", "DilatedWormhole", "Manager"]

DILATION_VERSIONS = ["ged"]

_log = Logger()


class Manager:
    """One dilated wormhole's L1 (see the module docstring): the Dilator's and the
    application's entry points, each one an input of the machine; the peer's messages go to
    ``PeerMessages``, what connectors and links report to ``connector_reports``."""

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
        self._mapper = port_mapper_for(reactor, settings, no_listen, tor, self._mapping)
        if self._mapper is not None and not settings.network.listen_port:
            # mapped now, so that the first generation's hints carry it (its listener takes it)
            self._mapper.map(free_port(), lambda mapping: None)
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
        self.telemetry.set_traffic_source(self._mux.traffic_stats)
        self.api = DilatedWormhole(self)
        """What ``dilate()`` returns to the application."""
        self.telemetry.dilation_requested()
        self.events: ManagerEvents = manager_machine(self._core)
        speaks = lambda version: version in self._acceptable_versions  # noqa: E731
        self._messages = PeerMessages(self._core, self.events, self._losses, speaks)
        links = LinkReports(self._core, self.events, self._losses)
        self.connector_reports = ConnectorReports(
            self._core,
            self.events,
            self._losses,
            links=links,
            pings=self._pings,
            clock=reactor,
            ping_interval=ping_interval,
            traffic_interval=settings.telemetry.traffic_interval,
            via_mapping=self._mapping.carried,
        )
        """What this wormhole's Connectors report to (``mailbox.selection_reports``)."""

    def public_addresses_seen(self, addresses: tuple[str, ...]) -> None:
        """The mailbox server told us the address it sees (``welcome["your-address"]``, see
        ``selection.punch.public_addresses``): later generations advertise it for punching."""
        self._public_addresses = addresses

    # --- seams for stock's hooks (``txdilation._stock.manager``) and tests ---

    def _new_connector(self, settings: ConnectorSettings) -> Connector:
        return Connector(
            settings,
            owner=self.connector_reports,
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
        """The host's addresses or routes changed (``path.netwatch``): the selected link
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
        if dispatch(plaintext, self._messages):
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

    def _peer_absent(self) -> None:
        _log.info("no sign of the peer for the peer timeout: presuming it gone")
        self.events.peer_absent()
