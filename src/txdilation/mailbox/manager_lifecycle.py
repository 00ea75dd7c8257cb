"""L1: the Manager's lifecycle: roles, generations, and the DILATE-n rules of stock.

The module-level Automat machine ``manager_machine`` over :class:`ManagerCore`; the facade
(``txdilation.mailbox.manager.Manager``) feeds it inputs::

    waiting -start-> wanting -please-> connecting -connection_made-> connected
    connected -connection_lost-> disconnected (the Leader sends 'reconnect')
    connected -path_upgraded-> connected (the link moved to a direct connection, same generation)
    connected -direct_proven (Leader, peer without path upgrades)-> leaving (sends 'reconnect')
    leaving -connection_lost-> disconnected;  leaving -reconnecting-> connecting
    disconnected -reconnecting (Leader) | reconnect (Follower)-> connecting
    connected -reconnect (Follower)-> abandoning -connection_lost-> connecting
    connecting -generation_stalled (Leader)-> disconnected (the Leader sends 'reconnect')
    connected|abandoning -closing-> peer_leaving -connection_lost-> peer_gone
    waiting|wanting|connecting|disconnected -closing-> peer_gone
    connecting|disconnected|abandoning -peer_absent-> peer_gone
    connected|abandoning|peer_leaving -stop-> stopping -connection_lost-> stopped
    waiting|wanting|connecting|disconnected -stop-> stopped;  peer_gone -stop-> stopped

``connecting`` carries its :class:`Generation` (the number and the Connector), ``stopping`` its
deadline; the selected link lives in the core, because it outlives ``connected`` (it is aborted
in ``abandoning``, drained in ``stopping``, watched in ``peer_leaving``). The states and
transitions are drawn in ``state-diagrams/manager_lifecycle.svg``; ``txdilation.mailbox.manager``
states the invariants.

Every (state, input) pair is a transition or a documented no-op (``wire.machines.complete``):
inputs the peer could send at the wrong time are logged, a link selected outside a generation's
connecting phase is aborted, anything else is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from txdilation.mailbox.absence import PeerAbsence
from txdilation.mailbox.messages import LINK_LOST, Outbox, build_please
from txdilation.mailbox.status import StatusReporter
from txdilation.selection.connector import Connector, ConnectorSettings
from txdilation.selection.hints import Hint
from txdilation.selection.liveness import SILENCE
from txdilation.selection.selected import SelectedLink
from txdilation.settings import Settings
from txdilation.subchannels.multiplexer import Multiplexer
from txdilation.telemetry import Telemetry
from txdilation.wire.machines import complete
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import FOLLOWER, LEADER, Role

if TYPE_CHECKING:  # pragma: no cover
    from txdilation.mailbox.manager import Manager

__all__ = ["Generation", "ManagerCore", "ManagerEvents", "manager_machine"]

CLOSE_TIMEOUT = 5.0
#: seconds a Leader that asked a stock peer for a new generation (to use a direct path) waits
#: for it to drop the relayed link before dropping it itself
LEAVE_TIMEOUT = 10.0
ABORT_AFTER_DISCONNECT = 1.0
GENERATION_RETRY = 1.0
GENERATION_RETRY_MAX = 60.0
MAX_EARLY_HINTS = 64  # hints kept from a peer whose please came before we could start

#: why we drop the selected link when the peer says it is dead
FOLLOWER_REPORT = LinkLoss(
    Cause.PEER_REPORT, "peer report: the Follower says this connection is dead"
)
LEADER_REPORT = LinkLoss(Cause.PEER_REPORT, "peer report: the Leader asked to reconnect")
#: why a Leader drops a stock peer's relayed link it asked to leave (a direct path works)
LEFT_FOR_DIRECT = LinkLoss(
    Cause.PATH_UPGRADE, "the peer did not answer 'reconnect' (leaving for a direct path)"
)

_log = Logger(namespace="txdilation.mailbox.manager_lifecycle")


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

    def drain_timeout(self) -> None:
        "(stopping) the deadline passed."


@dataclass
class Generation:
    """The ``connecting`` state's data: the generation's number and its connector."""

    number: int
    connector: Connector | None = None


@dataclass
class ManagerCore:
    """What every state shares (the machine's core)."""

    owner: Manager
    reactor: Any
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
    #: links the wormhole moved away from, still open for what is in flight on them
    retired: set[SelectedLink] = field(default_factory=set)
    early_please: str | None = None
    early_hints: list[Hint] = field(default_factory=list)
    dilated: bool = False
    stopped: bool = False
    stopped_waiters: list[Deferred[None]] = field(default_factory=list)

    def send_reconnect(self) -> None:
        self.telemetry.reconnect()
        self.outbox.send(type="reconnect")

    def send_reconnecting(self) -> None:
        self.reconnectings += 1
        self.telemetry.reconnecting()
        self.outbox.send(type="reconnecting")

    def launch(self, generation: Generation) -> None:
        assert self.role is not None and self.dilation_key is not None
        self.telemetry.set_role(self.role)
        self.telemetry.set_generation(generation.number)
        settings = self.connector_settings(self.role, self.dilation_key)
        if self.prefer_direct:  # once: the generation after a direct path proved to work
            self.prefer_direct = False
            settings = replace(settings, prefer_direct=True)
        connector = generation.connector = self.owner._new_connector(settings)
        if self.role is LEADER:
            self.watch_generation()
        self.owner._launch_connector(connector)

    def stop_connector(self, generation: Generation) -> None:
        self.cancel_stall_timer()
        if generation.connector is not None:
            generation.connector.events.stop()
            generation.connector = None

    def stop_upgrader(self) -> None:
        """The link is going (or gone): no more attempts at a better path for it."""
        upgrader, self.upgrader = self.upgrader, None
        if upgrader is not None:
            upgrader.events.stop()

    def switch_path(self, link: SelectedLink) -> None:
        """Move the wormhole to ``link`` (same generation): L4 replays what is unacknowledged
        on it, the old link is retired (what is in flight on it still arrives)."""
        old = self.link
        now = self.reactor.seconds()
        since = self.selected_at
        self.link, self.selected_at = link, now
        self.mux.connection_made(link)
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
            _path(old), _path(link), None if since is None else now - since, "upgrade"
        )
        if link.is_direct:
            self.stop_upgrader()

    def drop_retired(self) -> None:
        """The wormhole is done: close the links it moved away from now."""
        retired, self.retired = self.retired, set()
        for link in retired:
            link.abort()

    def cancel_leave_timer(self) -> None:
        if self.leave_timer is not None and self.leave_timer.active():
            self.leave_timer.cancel()
        self.leave_timer = None

    def watch_generation(self) -> None:
        self.cancel_stall_timer()
        self.stall_timer = self.reactor.callLater(
            self.stall_delay, self.owner.events.check_generation
        )

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
        self.stopped = True
        self.status.stopped()
        waiters, self.stopped_waiters = self.stopped_waiters, []
        for d in waiters:
            d.callback(None)


def _path(link: SelectedLink | None) -> str:
    """The telemetry path of a link: ``direct`` or ``relay``."""
    return "direct" if link is not None and link.is_direct else "relay"


def _build_manager_machine() -> Callable[[ManagerCore], ManagerEvents]:
    b = TypeMachineBuilder(ManagerEvents, ManagerCore)
    E = ManagerEvents

    def new_generation(events: ManagerEvents, c: ManagerCore, *args: object) -> Generation:
        c.generation += 1
        events.launch()  # runs once this transition (its 'reconnecting', say) is done
        c.current = Generation(c.generation)
        return c.current

    def deadline(events: ManagerEvents, c: ManagerCore) -> IDelayedCall:
        c.mux.when_acknowledged().addCallback(lambda _: events.drained())
        return c.reactor.callLater(CLOSE_TIMEOUT, events.drain_timeout)  # type: ignore[no-any-return]

    waiting, wanting = b.state("waiting"), b.state("wanting")
    connecting = b.state("connecting", new_generation)
    connected, disconnected, abandoning = (
        b.state("connected"),
        b.state("disconnected"),
        b.state("abandoning"),
    )
    leaving = b.state("leaving")
    peer_leaving, peer_gone = b.state("peer_leaving"), b.state("peer_gone")
    stopping, stopped = b.state("stopping", deadline), b.state("stopped")

    @waiting.upon(E.start).to(wanting)
    def send_please(events: ManagerEvents, c: ManagerCore) -> None:
        c.outbox.send(**build_please(c.my_side, c.version))
        early, c.early_please = c.early_please, None
        hints, c.early_hints = c.early_hints, []
        if early is not None:
            events.rx_please(early)
            if hints:
                events.rx_hints(hints)

    @waiting.upon(E.rx_please).loop()
    def remember_please(events: ManagerEvents, c: ManagerCore, side: str) -> None:
        c.early_please = side

    @waiting.upon(E.rx_hints).loop()
    def remember_hints(events: ManagerEvents, c: ManagerCore, hints: list[Hint]) -> None:
        c.early_hints.extend(hints[: max(0, MAX_EARLY_HINTS - len(c.early_hints))])

    @wanting.upon(E.rx_please).to(connecting)  # type: ignore[arg-type]  # (side) -> *args
    def choose_role(events: ManagerEvents, c: ManagerCore, side: str) -> None:
        c.role = LEADER if c.my_side > side else FOLLOWER
        c.mux.set_role(c.role)
        c.absence.waiting_for_peer(True)
        c.status.connecting(c.generation)

    @connecting.upon(E.launch).loop()
    def launch(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.launch(g)

    @connecting.upon(E.rx_hints).loop()
    def use_hints(events: ManagerEvents, c: ManagerCore, g: Generation, hints: list[Hint]) -> None:
        if g.connector is not None:
            g.connector.got_hints(hints)

    @connecting.upon(E.connection_made).to(connected)
    def use_link(events: ManagerEvents, c: ManagerCore, g: Generation, link: SelectedLink) -> None:
        # it closed everything else when it selected, unless it goes on trying direct paths
        # for a relayed link (a peer that speaks path upgrades)
        if g.connector is not None and g.connector.upgrading:
            c.upgrader = g.connector
        g.connector = None
        c.link, c.selected_at = link, c.reactor.seconds()
        c.status.connected(g.number, link.description)
        c.mux.connection_made(link)  # L4 writes through the link (dead-path detection)
        if not c.dilated:
            c.dilated = True
            c.mux.dilated()
        c.absence.waiting_for_peer(False)
        c.cancel_stall_timer()
        c.stall_delay = GENERATION_RETRY

    @connecting.upon(E.check_generation).loop()
    def check_generation(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stall_timer = None
        if g.connector is not None and g.connector.busy:
            c.watch_generation()
            return
        _log.info("generation {g} has nothing left in flight: starting another", g=g.number)
        c.stall_delay = min(2 * c.stall_delay, GENERATION_RETRY_MAX)
        events.generation_stalled()

    @connecting.upon(E.generation_stalled).to(disconnected)
    def leader_restarts_generation(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stop_connector(g)  # then as after a lost link: wait for 'reconnecting'
        c.send_reconnect()

    @connecting.upon(E.rx_reconnect).loop()
    def follower_restarts(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stop_connector(g)  # the Leader lost a link we never saw selected: start afresh
        c.send_reconnecting()
        c.generation += 1
        g.number = c.generation
        c.launch(g)

    @connected.upon(E.path_upgraded).loop()
    def move_link(events: ManagerEvents, c: ManagerCore, link: SelectedLink) -> None:
        c.switch_path(link)

    @connected.upon(E.rx_hints).loop()
    def hints_for_upgrade(events: ManagerEvents, c: ManagerCore, hints: list[Hint]) -> None:
        """Hints after selection: for the connector looking for a direct path, if any (a
        peer that moves links publishes new addresses after a network change)."""
        if c.upgrader is not None:
            c.upgrader.got_hints(hints)

    @connected.upon(E.direct_proven).to(leaving)
    def leave_for_direct(events: ManagerEvents, c: ManagerCore) -> None:
        """A stock peer cannot move a link: start a new generation that prefers the direct
        path, keeping the relayed link until the peer drops it (it does on 'reconnect')."""
        _log.info("a direct connection works: starting a new generation to use it")
        c.direct_proven_at = c.reactor.seconds()
        c.prefer_direct = True
        c.stop_upgrader()
        c.send_reconnect()
        c.leave_timer = c.reactor.callLater(LEAVE_TIMEOUT, events.leave_timeout)

    @leaving.upon(E.leave_timeout).loop()
    def stop_waiting(events: ManagerEvents, c: ManagerCore) -> None:
        c.leave_timer = None
        if c.link is not None:
            c.link.fail(LEFT_FOR_DIRECT)

    @leaving.upon(E.connection_lost).to(disconnected)
    def left(events: ManagerEvents, c: ManagerCore) -> None:
        c.cancel_leave_timer()
        c.status.reconnecting(c.generation)

    @leaving.upon(E.rx_reconnecting).to(connecting)
    def left_early(events: ManagerEvents, c: ManagerCore) -> None:
        """The peer answered before we saw the link end: it dropped it (stock does)."""
        c.cancel_leave_timer()
        if c.link is not None:
            c.link.abort()
        c.status.connecting(c.generation)

    @connected.upon(E.connection_lost).to(disconnected)
    def lost(events: ManagerEvents, c: ManagerCore) -> None:
        c.stop_upgrader()
        c.status.reconnecting(c.generation)
        if c.role is LEADER:
            c.send_reconnect()
        elif LINK_LOST in c.peer_extensions:  # a Leader may never see this link end itself
            c.outbox.send(type="link-lost", generation=c.reconnectings)

    @connected.upon(E.link_silent).loop()
    @leaving.upon(E.link_silent).loop()
    @abandoning.upon(E.link_silent).loop()
    @peer_leaving.upon(E.link_silent).loop()
    def give_up_link(events: ManagerEvents, c: ManagerCore) -> None:
        if c.link is not None:
            c.link.fail(SILENCE)

    @stopping.upon(E.link_silent).loop()
    def give_up_draining(events: ManagerEvents, c: ManagerCore, deadline: IDelayedCall) -> None:
        give_up_link(events, c)

    @connected.upon(E.rx_link_lost).loop()
    def peer_lost_link(events: ManagerEvents, c: ManagerCore, generation: int) -> None:
        if generation != c.reconnectings:
            _log.debug("ignoring 'link-lost' for generation {g}", g=generation)
        elif c.link is not None:
            c.link.fail(FOLLOWER_REPORT)

    @connected.upon(E.rx_reconnect).to(abandoning)
    def abandon(events: ManagerEvents, c: ManagerCore) -> None:
        c.stop_upgrader()
        if c.link is not None:
            c.link.fail(LEADER_REPORT)

    @disconnected.upon(E.rx_reconnecting).to(connecting)
    def leader_reconnects(events: ManagerEvents, c: ManagerCore) -> None:
        c.status.connecting(c.generation)

    @disconnected.upon(E.rx_reconnect).to(connecting)
    def follower_reconnects(events: ManagerEvents, c: ManagerCore) -> None:
        c.send_reconnecting()
        c.status.connecting(c.generation)

    @abandoning.upon(E.connection_lost).to(connecting)
    def follower_reconnects_after_abandon(events: ManagerEvents, c: ManagerCore) -> None:
        c.status.reconnecting(c.generation)
        c.send_reconnecting()
        c.status.connecting(c.generation)

    # --- stopping ---
    @waiting.upon(E.stop).to(stopped)
    @wanting.upon(E.stop).to(stopped)
    @disconnected.upon(E.stop).to(stopped)
    def stop_now(events: ManagerEvents, c: ManagerCore) -> None:
        c.cancel_stall_timer()
        c.mux.stop("wormhole closed")
        c.finish()

    @connecting.upon(E.stop).to(stopped)
    def stop_connecting(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stop_connector(g)
        c.mux.stop("wormhole closed")
        c.finish()

    @connected.upon(E.stop).to(stopping)
    @abandoning.upon(E.stop).to(stopping)
    @peer_leaving.upon(E.stop).to(stopping)
    @leaving.upon(E.stop).to(stopping)
    def drain(events: ManagerEvents, c: ManagerCore) -> None:
        """What was written (a last CLOSE, the last DATA) is acknowledged before the link goes
        (the stopping state's deadline bounds the wait)."""
        c.stop_upgrader()
        c.cancel_leave_timer()

    @stopping.upon(E.drained).loop()
    def disconnect(events: ManagerEvents, c: ManagerCore, deadline: IDelayedCall) -> None:
        if c.link is not None:
            c.link.disconnect()
        if deadline.active():
            deadline.reset(ABORT_AFTER_DISCONNECT)

    @stopping.upon(E.drain_timeout).loop()
    def abort(events: ManagerEvents, c: ManagerCore, deadline: IDelayedCall) -> None:
        if c.link is not None:
            c.link.abort()

    @stopping.upon(E.connection_lost).to(stopped)
    def stopped_after_close(events: ManagerEvents, c: ManagerCore, deadline: IDelayedCall) -> None:
        if deadline.active():
            deadline.cancel()
        c.mux.stop("wormhole closed")
        c.finish()

    @peer_gone.upon(E.stop).to(stopped)
    def stop_after_peer(events: ManagerEvents, c: ManagerCore) -> None:
        c.finish()

    # --- the peer left ('closing', or silent for the peer timeout) ---
    @connected.upon(E.rx_closing).to(peer_leaving)
    @abandoning.upon(E.rx_closing).to(peer_leaving)
    @leaving.upon(E.rx_closing).to(peer_leaving)
    def let_peer_finish(events: ManagerEvents, c: ManagerCore) -> None:
        c.stop_upgrader()
        c.cancel_leave_timer()
        c.absence.stop()  # it drains its last records, then drops the link: no reconnection

    @waiting.upon(E.rx_closing).to(peer_gone)
    @wanting.upon(E.rx_closing).to(peer_gone)
    @disconnected.upon(E.rx_closing).to(peer_gone)
    @peer_leaving.upon(E.connection_lost).to(peer_gone)
    @disconnected.upon(E.peer_absent).to(peer_gone)
    @abandoning.upon(E.peer_absent).to(peer_gone)
    @leaving.upon(E.peer_absent).to(peer_gone)
    def peer_left(events: ManagerEvents, c: ManagerCore) -> None:
        c.peer_left()

    @connecting.upon(E.rx_closing).to(peer_gone)
    @connecting.upon(E.peer_absent).to(peer_gone)
    def peer_left_while_connecting(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stop_connector(g)
        c.peer_left()

    # --- everything else: documented no-ops (logged where the peer could be at fault) ---
    def refuse(event: Callable[..., None]) -> Callable[..., None]:
        if event in (E.connection_made, E.path_upgraded):  # outside their states (defensive)

            def refuse_link(events: ManagerEvents, c: ManagerCore, *args: object) -> None:
                _log.warn("aborting a link selected outside a generation's connecting phase")
                args[-1].abort()  # type: ignore[attr-defined]

            return refuse_link
        why = _PEER_INPUTS.get(event.__name__)

        def ignored(events: ManagerEvents, c: ManagerCore, *args: object) -> None:
            if why:  # expected in a race (hints after selection...): nothing to act on
                _log.debug("ignoring {why}", why=why)

        return ignored

    every: list[Any] = [waiting, wanting, connecting, connected, leaving, disconnected]
    every += [abandoning]
    every += [peer_leaving, peer_gone, stopping, stopped]
    complete(b, every, otherwise=refuse)
    return b.build()


_PEER_INPUTS = {
    "rx_please": "a second 'please'",
    "rx_hints": "hints outside a generation's connecting phase",
    "rx_reconnect": "'reconnect' at this point",
    "rx_reconnecting": "'reconnecting' at this point",
    "rx_closing": "'closing' at this point",
    "rx_link_lost": "'link-lost' at this point",
}
manager_machine = _build_manager_machine()
