"""L3: one generation's race of connection hints, ending in the selection of one connection.

A :class:`Connector` listens (unless told not to, or over Tor) and publishes direct hints
(:class:`~txdilation.selection.advertise.Advertiser`), publishes relay hints, dials the peer's
hints (:class:`~txdilation.selection.dialing.Dialer`: direct, punched, Tor and relay, with the
relay delay), and collects candidates: L2 connections whose KCM exchange reached the point where
they may be selected. This module is the facade, the candidates and the selection policy.

Selection policy (module-level Automat machine ``connector_machine``): the first connection
that works is taken, relayed or not; a better one is moved to later (docs/connectivity.md):
- the Follower takes the first connection on which the Leader's KCM arrived (the wire rule);
- the Leader takes a direct candidate at once, and a relay candidate at once too, unless a
  direct connection is already in its handshake (then the relay is held for at most
  ``direct_grace`` seconds: direct beats relay when both are about to work) or this generation
  prefers a direct path that proved to work (``prefer_direct``: held for
  :data:`PROVEN_GRACE` seconds while a direct connection may still come);
- with a peer that speaks ``path-upgrade-v1`` (``path_upgrade``), a relayed selection is only
  a start: the connector goes on (state ``upgrading``) listening and dialing the peer's direct
  hints in the background (:meth:`Dialer.go_on_in_background`), and the first direct
  connection that works becomes the link: the Leader sends its KCM on it (``select``), the
  Follower takes it when that KCM arrives, and the owner hears ``connector_path_upgraded``;
- with a stock peer the Leader of a relayed link probes the peer's direct hints
  (:class:`~txdilation.selection.probe.ReachabilityProber`), and a direct connection that
  completes after the relay was selected proves a direct path too: the owner hears
  ``direct_path_proven`` (it may start a new generation that prefers it).

Invariants: once a connection is selected for good (direct, or relayed with a peer that cannot
move links) or the connector stops, every other connection, listener and pending attempt is
closed or cancelled, and any connection that completes later is aborted; while upgrading, only
relay connections and dials are; a Tor connector never listens nor upgrades; the selected relay
endpoint, if any, is reported to the owner with the selection, and the selected connection
delivers the records it held right after the owner's ``connector_connection_made`` (or
``connector_path_upgraded``).

Given the session's :class:`~txdilation.telemetry.Telemetry`, every outbound dial (each direct,
Tor or relay hint tried) and every connection our listener accepts is one telemetry attempt,
followed by an :class:`~txdilation.selection.attempts.AttemptLog` (outcomes and durations are
defined there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import Protocol as TypingProtocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from wormhole import ipaddrs
from wormhole._interfaces import IDilationConnector
from zope.interface import implementer

from txdilation.link.connection import DilatedConnectionProtocol
from txdilation.selection.advertise import Advertiser
from txdilation.selection.attempts import Attempt, AttemptLog
from txdilation.selection.connector_settings import (
    DIRECT_GRACE,
    RELAY_DELAY,
    ConnectorSettings,
    IConnectorOwner,
)
from txdilation.selection.dialing import Dialer
from txdilation.selection.hints import Hint, RelayEndpoint, encode_hint, hint_url
from txdilation.selection.probe import ReachabilityProber
from txdilation.selection.relays import RelayUsed, relay_index, relay_transport
from txdilation.selection.upgrade import RetrySchedule
from txdilation.telemetry import Telemetry
from txdilation.wire.contracts import ICandidateOwner
from txdilation.wire.machines import complete
from txdilation.wire.reasons import LinkLoss
from txdilation.wire.roles import LEADER, Role

__all__ = [
    "DIRECT_GRACE",
    "PROVEN_GRACE",
    "RELAY_DELAY",
    "Connector",
    "ConnectorSettings",
    "IConnectorOwner",
    "ipaddrs",
]

_log = Logger(namespace="txdilation.selection.connector")

PROVEN_GRACE = 3.0
"""Seconds a Leader holds a relay candidate, while a direct one may still come, in a generation
started because a direct path proved to work (``prefer_direct``)."""


class ConnectorEvents(TypingProtocol):
    """Inputs of one generation's connector."""

    def listener_ready(self, hints: list[Hint]) -> None:
        """Our listener is up; these direct hints describe it."""

    def hints_received(self, hints: list[Hint]) -> None:
        """The peer published hints."""

    def decisive_candidate(self, connection: DilatedConnectionProtocol) -> None:
        """A direct candidate to select at once."""

    def relay_candidate(self, connection: DilatedConnectionProtocol) -> None:
        """A relayed candidate to select at once, unless a link is selected already."""

    def tentative_candidate(self, connection: DilatedConnectionProtocol) -> None:
        """A relay candidate the Leader holds briefly in case a direct one appears."""

    def tentative_gone(self) -> None:
        """Every held relay candidate closed before the grace period ended."""

    def grace_expired(self) -> None:
        """The grace period for a held relay candidate ended."""

    def stop(self) -> None:
        """Stop this generation: close everything that is not selected."""

    def keep_looking(self) -> None:
        """The relayed link just selected is only a start: look for a direct path."""


@implementer(ICandidateOwner, IDilationConnector)
class Connector:
    """One generation of connection attempts; see the module docstring."""

    def __init__(
        self,
        settings: ConnectorSettings,
        *,
        owner: IConnectorOwner,
        reactor: Any,
        telemetry: Telemetry | None = None,
        eventually: Callable[..., object] | None = None,
    ) -> None:
        """
        :param settings: what to do (the same for every generation).
        :param owner: where hints and the selected connection go (the Manager).
        :param reactor: IReactorTCP + IReactorTime (+ a thread pool for address discovery).
        :param telemetry: the session's telemetry; None records no attempts.
        :param eventually: ``eventually(f, *args)`` calls ``f(*args)`` on a later reactor
            turn, in order (stock's ``EventualQueue.eventually``; default: ``callLater(0)``):
            a candidate is taken on the turn after its KCM exchange, as stock takes it.
        """
        self._settings = settings
        self._eventually = (
            eventually if eventually is not None else lambda f, *a: reactor.callLater(0, f, *a)
        )
        self._owner = owner
        self._reactor = reactor
        self._connections: set[DilatedConnectionProtocol] = set()
        self._held: list[DilatedConnectionProtocol] = []
        #: candidates waiting for their turn (_consider); one lost meanwhile is dropped from it
        self._considering: set[DilatedConnectionProtocol] = set()
        self._grace_timer: IDelayedCall | None = None
        self._relay_of: dict[DilatedConnectionProtocol, RelayEndpoint] = {}
        self.selected: DilatedConnectionProtocol | None = None
        self._finished = False  # selected or stopped: no more listeners or attempts
        self._held_since: float | None = None  # when the first relay candidate was held
        self._attempt_log = AttemptLog(telemetry, reactor) if telemetry is not None else None
        self._attempt_of: dict[DilatedConnectionProtocol, Attempt] = {}
        self._advertiser = Advertiser(
            settings,
            reactor,
            attempt_log=self._attempt_log,
            accept=lambda description, attempt: self.build_protocol(
                description, True, None, attempt
            ),
            publish=lambda hints: self.events.listener_ready(hints),
            punched=lambda: None,
            late=lambda: self._close_others(keep=self.selected),
        )
        self._dialer = Dialer(
            settings,
            reactor,
            attempt_log=self._attempt_log,
            build=self.build_protocol,
            bind_port=self._advertiser.punch_port,
            hint_status=lambda status: self._owner.hint_status(status),
            selected=lambda: self.selected is not None,
        )
        self._prober: ReachabilityProber | None = None
        self._peer_hints: list[Hint] = []
        self.looking = False
        """True once a relayed link was selected and this connector looks for a direct path
        for it (upgrading, or probing a stock peer); the owner stops it when the link goes."""
        self.candidates = 0
        """How many connections reached the selectable point before the race ended."""
        self.events: ConnectorEvents = connector_machine(self)

    @classmethod
    def get_connection_abilities(cls) -> list[dict[str, str]]:
        """The ``dilation-abilities`` we advertise in the ``version`` message (as stock)."""
        return [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]

    @property
    def role(self) -> Role:
        return self._settings.role

    @property
    def upgrading(self) -> bool:
        """After selecting a relayed link, this connector goes on looking for a direct path
        (``path-upgrade-v1``, or reachability probes of a stock peer): the owner keeps it
        until the link goes, and stops it then."""
        return self.looking

    @property
    def busy(self) -> bool:
        """Something may still produce a connection: an attempt in progress, a candidate in
        its handshake, relay attempts waiting for their delay, a listener being retried.
        (Our listener alone does not count: the peer may have given up on it.)"""
        retrying = self._advertiser.listen_retry is not None
        return bool(self._dialer.busy or self._connections or self._held or retrying)

    # --- starting, hints ---

    def start(self) -> None:
        """Listen (when allowed), publish relay hints and connect to our own relay."""
        s = self._settings
        if not s.no_listen and s.tor is None:
            self._advertiser.start()
        if s.relay_hints:
            self._owner.send_hints([encode_hint(h) for h in s.relay_hints])
            self._dialer.use_hints(list(s.relay_hints))

    def network_changed(self) -> None:
        """The host's addresses or routes changed while this generation connects (or looks
        for a direct path): direct hints for addresses found now and not published yet go to
        the peer, and background dials start over at once. Nothing before the listener is up,
        nor once the race is over."""
        self._advertiser.network_changed()
        self._dialer.dial_again_now()

    def got_hints(self, hints: list[Hint]) -> None:
        """Hints arrived from the peer (the manager filters stale generations)."""
        self._peer_hints.extend(hints)
        if self._prober is not None:
            self._prober.add(hints)
        self.events.hints_received(hints)

    # --- connections (ICandidateOwner) ---

    def build_protocol(
        self,
        description: str,
        is_direct: bool,
        relay_line: bytes | None,
        attempt: Attempt | None = None,
        relay: RelayEndpoint | None = None,
    ) -> DilatedConnectionProtocol:
        """The L2 protocol for a new TCP connection (``attempt``: its telemetry attempt)."""
        s = self._settings
        p = DilatedConnectionProtocol(
            role=s.role,
            dilation_key=s.dilation_key,
            owner=self,
            description=description,
            is_direct=is_direct,
            relay_line=relay_line,
            clock=self._reactor,
            max_record_size=s.max_record_size,
            handshake_timeout=s.handshake_timeout,
        )
        self._connections.add(p)
        if relay is not None:
            self._relay_of[p] = relay
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.connected(attempt)
            self._attempt_of[p] = attempt
        return p

    def candidate_ready(self, connection: Any) -> None:
        self._advertiser.unauthenticated.discard(connection)
        attempt = self._attempt_of.get(connection)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.ready(attempt)
        if not self._finished:
            self.candidates += 1
        # Taken on the next turn, as stock's connector takes it (through its eventual queue):
        # the Leader's KCM, and so its first records, then go out in the order and the TCP
        # segments stock's would (applications such as fowl's tests depend on that timing).
        self._considering.add(connection)
        self._eventually(self._consider, connection)

    def _consider(self, connection: Any) -> None:
        if connection not in self._considering:  # lost meanwhile
            return
        self._considering.discard(connection)
        if connection.is_direct:
            self.events.decisive_candidate(connection)
        elif self.role is LEADER and self._relay_grace() > 0:
            self.events.tentative_candidate(connection)
        else:
            self.events.relay_candidate(connection)

    def _relay_grace(self) -> float:
        """How long the Leader holds a relay candidate now (0: take it at once)."""
        s = self._settings
        if s.prefer_direct and self._direct_still_possible():
            return PROVEN_GRACE
        if any(c.is_direct for c in self._connections):  # in its handshake: about to work
            return s.direct_grace
        return 0.0

    def _direct_still_possible(self) -> bool:
        """A direct connection may yet complete: we listen, a direct attempt is pending, or a
        direct candidate is in its handshake. (If not, a relay candidate is taken at once:
        holding it would only widen the window in which a flaky link can cut it.)"""
        return bool(
            self._advertiser.listeners
            or self._dialer.direct_outstanding > 0
            or any(c.is_direct for c in self._connections)
        )

    def candidate_failed(self, connection: Any, reason: LinkLoss) -> None:
        self._advertiser.unauthenticated.discard(connection)
        self._considering.discard(connection)
        self._connections.discard(connection)
        self._relay_of.pop(connection, None)
        attempt = self._attempt_of.pop(connection, None)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.closed(attempt, reason)
        _log.debug(
            "candidate {desc} closed: {reason}",
            desc=connection.description,
            reason=reason.message,
            cause=reason.cause.value,
        )
        if connection.is_direct and connection.description.startswith("->"):
            self._dialer.direct_attempt_over()
        if connection in self._held:
            self._held.remove(connection)
            if not self._held:
                self.events.tentative_gone()

    # --- teardown helpers ---

    def _close_others(self, keep: DilatedConnectionProtocol | None) -> None:
        self._finished = True
        if self._attempt_log is not None:
            self._attempt_log.race_over(self._attempt_of.values())
            self._attempt_of.clear()
        self._advertiser.stop_listening()
        self._dialer.cancel_attempts()
        if self._grace_timer is not None and self._grace_timer.active():
            self._grace_timer.cancel()
        self._grace_timer = None
        self._advertiser.cancel_retry()
        self._dialer.cancel_timers()
        for c in {*self._connections, *self._held}:
            if c is not keep:
                c.abort()
        self._connections.clear()
        self._held.clear()
        self._relay_of = {c: r for c, r in self._relay_of.items() if c is keep}

    def _close_relays(self, keep: DilatedConnectionProtocol) -> None:
        """A relayed link was selected and a direct one is still wanted: close every other
        relay connection and dial, keep the listener and the direct dials going."""
        if self._grace_timer is not None and self._grace_timer.active():
            self._grace_timer.cancel()
        self._grace_timer = None
        self._held.clear()
        self._connections.discard(keep)  # the owner's link now: never closed from here
        for c in list(self._connections):
            if not c.is_direct:
                c.abort()
        self._dialer.go_on_in_background(RetrySchedule(self._reactor.seconds()))

    def _moves_later(self, connection: DilatedConnectionProtocol) -> bool:
        """Whether a relayed ``connection`` is only a start: the peer moves links."""
        s = self._settings
        return s.path_upgrade and not connection.is_direct and s.tor is None

    def _probe_later(self, connection: DilatedConnectionProtocol) -> bool:
        """Whether to probe a stock peer's direct hints for a relayed ``connection``."""
        s = self._settings
        return (
            not s.path_upgrade and s.role is LEADER and not connection.is_direct and s.tor is None
        )

    def _proven(self, how: str) -> None:
        _log.info("a direct path to the peer works ({how})", how=how)
        self._owner.direct_path_proven()

    def _select(self, connection: DilatedConnectionProtocol) -> None:
        self.selected = connection
        attempt = self._attempt_of.pop(connection, None)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.selected(attempt)
        if self._moves_later(connection):
            self.looking = True
            self._close_relays(keep=connection)
            self.events.keep_looking()  # runs once this transition is done
        else:
            self._close_others(keep=connection)
            if self._probe_later(connection):
                self.looking = True
                self._prober = ReachabilityProber(
                    self._reactor,
                    self._peer_hints,
                    RetrySchedule(self._reactor.seconds()),
                    self._proven,
                )
                self._prober.start()
        link = self._owner.link_for(connection)
        connection.events.select(link)
        endpoint = self._relay_of.pop(connection, None)
        relay = None
        if endpoint is not None:
            relay = RelayUsed(
                hint_url(endpoint),
                relay_transport(endpoint),
                relay_index(self._settings.relay_hints, endpoint),
            )
        self._owner.connector_connection_made(link, self.candidates, relay)
        connection.deliver_held()

    def _upgrade(self, connection: DilatedConnectionProtocol) -> None:
        """A direct connection works while the link is relayed: it becomes the link (the
        Leader's KCM goes out on it in ``select``; the Follower got it already)."""
        attempt = self._attempt_of.pop(connection, None)
        if attempt is not None and self._attempt_log is not None:
            self._attempt_log.selected(attempt)
        self.looking = False
        self._close_others(keep=connection)
        self.selected = connection
        link = self._owner.link_for(connection)
        connection.events.select(link)
        self._owner.connector_path_upgraded(link)
        connection.deliver_held()

    def stop_looking(self) -> None:
        """(Owner) no direct path is wanted any more: stop probing."""
        if self._prober is not None:
            self._prober.stop()
            self._prober = None


def _build_connector_machine() -> Callable[[Connector], ConnectorEvents]:
    b = TypeMachineBuilder(ConnectorEvents, Connector)
    connecting = b.state("connecting")
    holding = b.state("holding")
    connected = b.state("connected")
    upgrading = b.state("upgrading")
    stopped = b.state("stopped")
    E = ConnectorEvents

    @connecting.upon(E.listener_ready).loop()
    @holding.upon(E.listener_ready).loop()
    @upgrading.upon(E.listener_ready).loop()
    def publish_hints(events: ConnectorEvents, c: Connector, hints: list[Hint]) -> None:
        c._owner.send_hints([encode_hint(h) for h in hints])

    @connecting.upon(E.hints_received).loop()
    @holding.upon(E.hints_received).loop()
    @upgrading.upon(E.hints_received).loop()
    def use_hints(events: ConnectorEvents, c: Connector, hints: list[Hint]) -> None:
        c._dialer.use_hints(hints)

    @connecting.upon(E.decisive_candidate).to(connected)
    @holding.upon(E.decisive_candidate).to(connected)
    @connecting.upon(E.relay_candidate).to(connected)
    @holding.upon(E.relay_candidate).to(connected)
    def select(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        c._select(connection)

    @connecting.upon(E.tentative_candidate).to(holding)
    def hold(events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol) -> None:
        c._held.append(connection)
        c._held_since = c._reactor.seconds()
        c._grace_timer = c._reactor.callLater(c._relay_grace(), events.grace_expired)

    @connected.upon(E.keep_looking).to(upgrading)
    def look_for_direct(events: ConnectorEvents, c: Connector) -> None:
        """The relayed link is the owner's; this connector goes on with direct paths."""

    @upgrading.upon(E.decisive_candidate).to(connected)
    def upgrade(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        c._upgrade(connection)

    @upgrading.upon(E.tentative_candidate).loop()
    @upgrading.upon(E.relay_candidate).loop()
    def refuse_relay(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        connection.abort()  # (never a relay again once one carries the link)

    @holding.upon(E.tentative_candidate).loop()
    def hold_another(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        c._held.append(connection)

    @holding.upon(E.grace_expired).to(connected)
    def select_held(events: ConnectorEvents, c: Connector) -> None:
        c._grace_timer = None
        c._select(c._held[0])

    @holding.upon(E.tentative_gone).to(connecting)
    def release(events: ConnectorEvents, c: Connector) -> None:
        if c._grace_timer is not None and c._grace_timer.active():
            c._grace_timer.cancel()
        c._grace_timer = None

    @connecting.upon(E.stop).to(stopped)
    @holding.upon(E.stop).to(stopped)
    @connected.upon(E.stop).to(stopped)
    @upgrading.upon(E.stop).to(stopped)
    def stop_everything(events: ConnectorEvents, c: Connector) -> None:
        c.looking = False
        c.stop_looking()
        c._close_others(keep=c.selected)

    # Late arrivals after selection are closed at once (stock defect 9); a direct one that
    # completed while a stock peer's link is relayed proves a direct path first.
    @connected.upon(E.decisive_candidate).loop()
    @connected.upon(E.tentative_candidate).loop()
    @connected.upon(E.relay_candidate).loop()
    def drop_late(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        selected = c.selected
        if c.looking and connection.is_direct and selected is not None and not selected.is_direct:
            c._proven(f"{connection.description} completed its handshake")
        connection.abort()

    @stopped.upon(E.decisive_candidate).loop()
    @stopped.upon(E.tentative_candidate).loop()
    @stopped.upon(E.relay_candidate).loop()
    def drop_after_stop(
        events: ConnectorEvents, c: Connector, connection: DilatedConnectionProtocol
    ) -> None:
        connection.abort()

    # Everything else is a documented no-op: hints and listener news after selection or
    # stop, stray timer inputs, a repeated stop.
    every = (connecting, holding, connected, upgrading, stopped)
    complete(b, every, [getattr(E, n) for n in vars(E) if not n.startswith("_")])
    return b.build()


connector_machine = _build_connector_machine()
