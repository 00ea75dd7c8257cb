"""L1: the Manager's lifecycle as its machine sees it: the inputs (:class:`ManagerEvents`), the
core every state shares (:class:`ManagerCore`) and the ``connecting`` state's data
(:class:`Generation`).

The machine is ``txdilation.mailbox.manager_lifecycle``; the facade
(``txdilation.mailbox.manager.Manager``) builds the core, handing it what makes and starts a
generation's Connector (its seams for stock's hooks), and feeds the machine its inputs. The core
knows neither: it is driven by the machine's behaviours, and the only inputs it makes are the
timers it is handed them for (``check_generation``).

Invariants: the selected link lives here, not in a state, because it outlives ``connected``
(it is aborted in ``abandoning``, drained in ``stopping``, watched in ``peer_leaving``); links
the wormhole moved away from (a path upgrade) stay in ``retired`` until they end or the wormhole
is done; ``stopped`` fires once, when the machine reaches ``stopped``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol as TypingProtocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from txdilation.mailbox.absence import PeerAbsence
from txdilation.mailbox.dilate_messages import PATH_UPGRADE, STANDBY, Outbox
from txdilation.mailbox.standby import StandbyKeeper
from txdilation.mailbox.status_reporter import StatusReporter
from txdilation.path.selected_link import SelectedLink
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.connector_settings import Purpose
from txdilation.selection.hints import Hint, RelayV1Hint
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.telemetry import Telemetry
from txdilation.wire.roles import LEADER, Role
from txdilation.wire.waiting import OneShot

__all__ = [
    "GENERATION_RETRY",
    "GENERATION_RETRY_MAX",
    "GENERATION_RETRY_WITH_PEER",
    "Generation",
    "ManagerCore",
    "ManagerEvents",
]

GENERATION_RETRY = 1.0
GENERATION_RETRY_MAX = 60.0
GENERATION_RETRY_WITH_PEER = 10.0
"""The longest wait before a new generation when the last one heard the peer's hints: the
peer takes part, and its connections were lost (cut) rather than never made. Backing off to
GENERATION_RETRY_MAX there left no connection attempt for a minute at a time in fault runs."""

_log = Logger()


class ManagerEvents(TypingProtocol):
    """Inputs of the Manager's lifecycle machine."""

    def start(self) -> None:
        "dilate() was called and the key and a shared version are known."

    def rx_please(self, side: str) -> None:
        "The peer's ``please``."

    def rx_hints(self, hints: list[Hint]) -> None:
        "The peer's ``connection-hints``."

    def rx_reconnect(self) -> None:
        "(Follower) the Leader asks for a new generation."

    def rx_reconnecting(self) -> None:
        "(Leader) the Follower is ready for a new generation."

    def rx_closing(self) -> None:
        "The peer's application is closing its wormhole."

    def rx_link_lost(self, generation: int) -> None:
        "(Leader) the Follower lost that link."

    def launch(self) -> None:
        "(connecting) start this generation's connector."

    def check_generation(self) -> None:
        "(Leader) has this generation stalled?"

    def generation_stalled(self) -> None:
        "(Leader) nothing in flight could still connect."

    def connection_made(self, link: SelectedLink) -> None:
        "The connector selected a link."

    def connection_lost(self) -> None:
        "The selected link is gone."

    def path_upgraded(self, link: SelectedLink) -> None:
        "The generation's connector moved the link to this direct connection (path upgrade)."

    def direct_proven(self) -> None:
        "(Leader) a direct connection worked after a relay was selected (a stock peer)."

    def leave_timeout(self) -> None:
        "(leaving) the peer did not answer 'reconnect' in time: drop the link ourselves."

    def link_silent(self) -> None:
        "The selected link was silent for 1.5 ping intervals."

    def peer_absent(self) -> None:
        "The peer gave no sign of life for the peer timeout."

    def stop(self) -> None:
        "The wormhole is closing."

    def drained(self) -> None:
        "(stopping) the peer acknowledged every record."

    def standby_taken(self) -> None:
        "(connected) the link died, or the peer moved: the standby carries the wormhole."

    def drain_timeout(self) -> None:
        "(stopping) the deadline passed."


@dataclass
class Generation:
    """The ``connecting`` state's data: the generation's number and its connector."""

    number: int
    connector: Connector | None = None
    heard_peer: bool = False
    """The peer's hints for this generation came (it takes part)."""


@dataclass
class ManagerCore:
    """What every state shares (the machine's core)."""

    #: builds a generation's Connector, and starts it (the facade's seams for stock's hooks)
    new_connector: Callable[[ConnectorSettings], Connector]
    launch_connector: Callable[[Connector], None]
    reactor: IReactorTime
    my_side: str
    settings: Settings
    connector_settings: Callable[[Role, bytes], ConnectorSettings]
    outbox: Outbox
    status: StatusReporter
    telemetry: Telemetry
    mux: Multiplexer
    absence: PeerAbsence
    version: str | None = None
    dilation_key: bytes | None = None
    role: Role | None = None
    generation: int = 0
    link: SelectedLink | None = None
    current: Generation | None = None  # the latest connecting state's data (introspection)
    peer_extensions: frozenset[str] = frozenset()
    reconnectings: int = 0  # 'reconnecting' messages sent (Follower) or received (Leader)
    stall_timer: IDelayedCall | None = None
    stall_delay: float = GENERATION_RETRY
    #: the generation's connector while it keeps trying direct paths for a relayed link
    upgrader: Connector | None = None
    #: when the current link was selected (or the link last moved to another path)
    selected_at: float | None = None
    #: (Leader) when a direct path last proved to work while a stock peer's link was relayed:
    #: the next generation prefers a direct connection (see ``prefer_direct``)
    direct_proven_at: float | None = None
    prefer_direct: bool = False
    leave_timer: IDelayedCall | None = None
    #: ``stopping``'s deadline: the link is aborted when it fires (reset once it is drained)
    drain_timer: IDelayedCall | None = None
    #: links the wormhole moved away from, still open for what is in flight on them
    retired: set[SelectedLink] = field(default_factory=set)
    early_please: str | None = None
    early_hints: list[Hint] = field(default_factory=list)
    #: fired once the machine reached ``stopped`` (``Manager.when_stopped``)
    stopped: OneShot[None] = field(default_factory=OneShot)
    #: whether a link came in through our port mapping (for the telemetry)
    via_mapping: Callable[[SelectedLink], bool] = lambda link: False
    #: the warm standby beside a direct link (``standby-v1``); None: never kept
    standby: StandbyKeeper | None = None
    #: the peer's hints of the current generation (for the connectors of a moved link)
    peer_hints: list[Hint] = field(default_factory=list)
    #: seconds between PINGs on the link (a promoted standby takes it up)
    ping_interval: float = 30.0

    def send_reconnect(self) -> None:
        self.telemetry.reconnect()
        self.outbox.send(type="reconnect")

    def send_reconnecting(self) -> None:
        self.reconnectings += 1
        self.telemetry.reconnecting()
        self.outbox.send(type="reconnecting")

    def launch(self, events: ManagerEvents, generation: Generation) -> None:
        """Start ``generation``'s connector (and, Leader, watch it for a stall)."""
        assert self.role is not None and self.dilation_key is not None
        self.telemetry.set_role(self.role)
        self.telemetry.set_generation(generation.number)
        settings = self.connector_settings(self.role, self.dilation_key)
        if self.prefer_direct:  # once: the generation after a direct path proved to work
            self.prefer_direct = False
            settings = replace(settings, prefer_direct=True)
        connector = generation.connector = self.new_connector(settings)
        if self.role is LEADER:
            self.watch_generation(events)
        self.launch_connector(connector)

    def stop_connector(self, generation: Generation) -> None:
        self.cancel_stall_timer()
        if generation.connector is not None:
            generation.connector.events.stop()
            generation.connector = None

    def stop_upgrader(self) -> None:
        """The link is going (or gone): no more attempts at a better path for it, and no
        standby beside it."""
        self._stop_upgrade_connector()
        if self.standby is not None:
            self.standby.drop()

    def _stop_upgrade_connector(self) -> None:
        upgrader, self.upgrader = self.upgrader, None
        if upgrader is not None:
            upgrader.events.stop()

    def keep_standby(self, link: SelectedLink) -> None:
        """``link`` carries the wormhole now: beside a direct one, keep a standby (with a
        peer that speaks ``standby-v1``); beside a relayed one, none."""
        if self.standby is None:
            return
        if link.is_direct and STANDBY in self.peer_extensions:
            self.standby.want(link, self.peer_hints)
        else:
            self.standby.drop()

    def use_standby(self) -> None:
        """The link died (or the peer left it for the standby): the standby carries the
        wormhole from now on, in the same generation; a direct path is looked for again."""
        standby = self.standby.take() if self.standby is not None else None
        if standby is None:
            return
        old, since, now = self.link, self.selected_at, self.reactor.seconds()
        self.link, self.selected_at = standby, now
        standby.promote(self.ping_interval)
        self.mux.connection_lost()
        self.mux.connection_made(standby.connection, standby.sent_log)
        standby.announce_move()
        if old is not None:
            old.abort()
        _log.info(
            "moved from {old} to the standby {new}",
            old=old.description if old is not None else "-",
            new=standby.description,
        )
        self.status.connected(self.generation, standby.description)
        after = None if since is None else now - since
        self.telemetry.path_changed(_path(old), _path(standby), after, "standby")
        if PATH_UPGRADE in self.peer_extensions and self.role is not None:
            assert self.dilation_key is not None
            settings = self.connector_settings(self.role, self.dilation_key)
            upgrader = self.new_connector(replace(settings, purpose=Purpose.UPGRADE))
            self._stop_upgrade_connector()
            self.upgrader = upgrader
            upgrader.start()
            upgrader.got_hints([h for h in self.peer_hints if not isinstance(h, RelayV1Hint)])

    def switch_path(self, link: SelectedLink) -> None:
        """Move the wormhole to ``link`` (same generation): L4 replays what is unacknowledged
        on it, the old link is retired (what is in flight on it still arrives)."""
        old = self.link
        now = self.reactor.seconds()
        since = self.selected_at
        self.link, self.selected_at = link, now
        self.mux.connection_made(link.connection, link.sent_log)
        if old is not None:
            old.retire()
            self.retired.add(old)
            _log.info(
                "moved from {old} to {new} (path upgrade)",
                old=old.description,
                new=link.description,
            )
        self.status.connected(self.generation, link.description)
        self.telemetry.path_changed(
            _path(old),
            _path(link),
            None if since is None else now - since,
            "upgrade",
            via_mapping=link.is_direct and self.via_mapping(link),
        )
        if link.is_direct:
            self._stop_upgrade_connector()
        self.keep_standby(link)

    def drop_retired(self) -> None:
        """The wormhole is done: close the links it moved away from now."""
        retired, self.retired = self.retired, set()
        for link in retired:
            link.abort()

    def cancel_leave_timer(self) -> None:
        if self.leave_timer is not None and self.leave_timer.active():
            self.leave_timer.cancel()
        self.leave_timer = None

    def cancel_drain_timer(self) -> None:
        if self.drain_timer is not None and self.drain_timer.active():
            self.drain_timer.cancel()
        self.drain_timer = None

    def watch_generation(self, events: ManagerEvents) -> None:
        self.cancel_stall_timer()
        self.stall_timer = self.reactor.callLater(self.stall_delay, events.check_generation)

    def cancel_stall_timer(self) -> None:
        if self.stall_timer is not None and self.stall_timer.active():
            self.stall_timer.cancel()
        self.stall_timer = None

    def peer_left(self) -> None:
        self.cancel_stall_timer()
        self.cancel_leave_timer()
        self.stop_upgrader()
        self.drop_retired()
        self.absence.stop()
        if self.link is not None:
            self.link.abort()
        self.status.stopped()
        self.mux.stop("the peer closed the wormhole")

    def finish(self) -> None:
        self.stop_upgrader()
        self.drop_retired()
        self.telemetry.session_ended("closed")
        self.absence.stop()
        self.status.stopped()
        self.stopped.fire(None)


def _path(link: SelectedLink | None) -> str:
    """The telemetry path of a link: ``direct`` or ``relay``."""
    return "direct" if link is not None and link.is_direct else "relay"
