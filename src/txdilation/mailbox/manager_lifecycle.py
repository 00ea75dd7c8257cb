"""L1: the Manager's lifecycle: roles, generations, and the DILATE-n rules of stock.

The module-level Automat machine ``manager_machine`` over a ``mailbox.manager_core.ManagerCore``
(its inputs ``ManagerEvents`` and ``connecting``'s data ``Generation`` are there too), fed by
the facade ``mailbox.manager.Manager``, which states the invariants; drawn in
``state-diagrams/manager_lifecycle.svg``. The selected link and the timers (stall, leave,
drain) live in the core: the link outlives ``connected``.

"State first, then events" (docs/architecture.md): a state's factory only builds its data, a
timer is started by a transition's behaviour, and where the machine moves on by itself the
behaviour makes the follow-up input first (Automat runs it once the transition is done): each
transition into ``connecting`` begins with ``launch``, so a Follower's 'reconnecting' goes out
before the new hints. Every (state, input) pair is a transition or a documented no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from automat import TypeMachineBuilder
from twisted.logger import Logger

from txdilation.mailbox.dilate_messages import LINK_LOST, build_please
from txdilation.mailbox.manager_core import (
    GENERATION_RETRY,
    GENERATION_RETRY_MAX,
    GENERATION_RETRY_WITH_PEER,
    Generation,
    ManagerCore,
    ManagerEvents,
)
from txdilation.path.liveness import SILENCE
from txdilation.path.selected_link import SelectedLink
from txdilation.selection.hints import Hint
from txdilation.wire.machines import complete
from txdilation.wire.reasons import Cause, LinkLoss
from txdilation.wire.roles import FOLLOWER, LEADER

__all__ = [
    "ABORT_AFTER_DISCONNECT",
    "CLOSE_TIMEOUT",
    "FOLLOWER_REPORT",
    "LEADER_REPORT",
    "LEAVE_TIMEOUT",
    "LEFT_FOR_DIRECT",
    "MAX_EARLY_HINTS",
    "manager_machine",
]

CLOSE_TIMEOUT = 5.0
#: seconds a Leader that asked a stock peer for a new generation (to use a direct path) waits
#: for it to drop the relayed link before dropping it itself
LEAVE_TIMEOUT = 10.0
ABORT_AFTER_DISCONNECT = 1.0
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

_log = Logger()


def _build_manager_machine() -> Callable[[ManagerCore], ManagerEvents]:
    b = TypeMachineBuilder(ManagerEvents, ManagerCore)
    E = ManagerEvents

    def new_generation(events: ManagerEvents, c: ManagerCore, *args: object) -> Generation:
        """``connecting``'s data (built before the transition's behaviour runs, which makes
        the ``launch`` follow-up)."""
        c.generation += 1
        c.current = Generation(c.generation)
        return c.current

    waiting, wanting = b.state("waiting"), b.state("wanting")
    connecting = b.state("connecting", new_generation)
    connected, disconnected, abandoning = (
        b.state("connected"),
        b.state("disconnected"),
        b.state("abandoning"),
    )
    leaving = b.state("leaving")
    peer_leaving, peer_gone = b.state("peer_leaving"), b.state("peer_gone")
    stopping, stopped = b.state("stopping"), b.state("stopped")

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
        events.launch()
        c.role = LEADER if c.my_side > side else FOLLOWER
        c.mux.set_role(c.role)
        c.absence.waiting_for_peer(True)
        c.status.connecting(c.generation)

    @connecting.upon(E.launch).loop()
    def launch(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.launch(events, g)

    @connecting.upon(E.rx_hints).loop()
    def use_hints(events: ManagerEvents, c: ManagerCore, g: Generation, hints: list[Hint]) -> None:
        g.heard_peer = True
        if g.connector is not None:
            g.connector.got_hints(hints)

    @connecting.upon(E.connection_made).to(connected)
    def use_link(events: ManagerEvents, c: ManagerCore, g: Generation, link: SelectedLink) -> None:
        # it closed everything else when it selected, unless it goes on trying direct paths
        # for a relayed link (a peer that speaks path upgrades)
        if g.connector is not None:
            c.peer_hints = list(g.connector.peer_hints)
            if g.connector.upgrading:
                c.upgrader = g.connector
        g.connector = None
        c.link, c.selected_at = link, c.reactor.seconds()
        c.status.connected(g.number, link.description)
        c.mux.connection_made(link.connection, link.sent_log)  # L4 notes writes in its log
        c.mux.dilated()  # (once: later generations change nothing there)
        c.absence.waiting_for_peer(False)
        c.cancel_stall_timer()
        c.stall_delay = GENERATION_RETRY
        c.keep_standby(link)

    @connecting.upon(E.check_generation).loop()
    def check_generation(events: ManagerEvents, c: ManagerCore, g: Generation) -> None:
        c.stall_timer = None
        if g.connector is not None and g.connector.busy:
            c.watch_generation(events)
            return
        _log.info("generation {g} has nothing left in flight: starting another", g=g.number)
        longest = GENERATION_RETRY_WITH_PEER if g.heard_peer else GENERATION_RETRY_MAX
        c.stall_delay = min(2 * c.stall_delay, longest)
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
        c.launch(events, g)

    @connected.upon(E.path_upgraded).loop()
    def move_link(events: ManagerEvents, c: ManagerCore, link: SelectedLink) -> None:
        c.switch_path(link)

    @connected.upon(E.standby_taken).loop()
    def move_to_standby(events: ManagerEvents, c: ManagerCore) -> None:
        c.use_standby()

    @connected.upon(E.rx_hints).loop()
    def hints_for_upgrade(events: ManagerEvents, c: ManagerCore, hints: list[Hint]) -> None:
        """Hints after selection: for the connector looking for a direct path, if any (a
        peer that moves links publishes new addresses after a network change)."""
        c.peer_hints.extend(hints)
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
        events.launch()
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
    @stopping.upon(E.link_silent).loop()
    def give_up_link(events: ManagerEvents, c: ManagerCore) -> None:
        if c.link is not None:
            c.link.fail(SILENCE)

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
        events.launch()
        c.status.connecting(c.generation)

    @disconnected.upon(E.rx_reconnect).to(connecting)
    def follower_reconnects(events: ManagerEvents, c: ManagerCore) -> None:
        events.launch()
        c.send_reconnecting()
        c.status.connecting(c.generation)

    @abandoning.upon(E.connection_lost).to(connecting)
    def follower_reconnects_after_abandon(events: ManagerEvents, c: ManagerCore) -> None:
        events.launch()
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
        c.drain_timer = c.reactor.callLater(CLOSE_TIMEOUT, events.drain_timeout)
        c.mux.when_acknowledged().addCallback(lambda _: events.drained())

    @stopping.upon(E.drained).loop()
    def disconnect(events: ManagerEvents, c: ManagerCore) -> None:
        if c.link is not None:
            c.link.disconnect()
        if c.drain_timer is not None and c.drain_timer.active():
            c.drain_timer.reset(ABORT_AFTER_DISCONNECT)

    @stopping.upon(E.drain_timeout).loop()
    def abort(events: ManagerEvents, c: ManagerCore) -> None:
        if c.link is not None:
            c.link.abort()

    @stopping.upon(E.connection_lost).to(stopped)
    def stopped_after_close(events: ManagerEvents, c: ManagerCore) -> None:
        c.cancel_drain_timer()
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
